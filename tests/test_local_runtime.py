"""The embedded runtime: sampler log-probs agree with the trainer's, the trainer step moves them."""

import copy
import math

import pytest
import torch

from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.embedded.trainer import PolicyTrainer
from tempo_plugin.logprobs import token_logprobs
from tempo_plugin.rollout.batches import collate
from tempo_plugin.rollout.sampler import Request, SamplingParams
from tempo_plugin.rollout.samples import ACTOR, make_sample


def _requests(tokenizer):
    texts = ["Hall 3 of 17. You hold the red key.", "Key room.", "Actions: north, south, wait and more text here"]
    return [Request(tokenizer.encode(t), max_new_tokens=n) for t, n in zip(texts, (6, 9, 4))]


def test_sampler_logprobs_match_trainer_logprobs_under_left_padding(tiny_model, tokenizer):
    sampler = LocalSampler(tiny_model, tokenizer)
    requests = _requests(tokenizer)
    completions = sampler.generate(requests, SamplingParams(stop_token_ids=()), seed=3)
    for request, completion in zip(requests, completions):
        assert len(completion.token_ids) == request.max_new_tokens  # no stop tokens: runs to the budget
        assert completion.finish_reason == "length"
        full = torch.tensor([list(request.prompt_ids) + completion.token_ids])
        with torch.no_grad():
            reference = token_logprobs(tiny_model, full, torch.ones_like(full), 1.0)[0, len(request.prompt_ids):]
        assert torch.allclose(reference, torch.tensor(completion.logprobs), atol=1e-4)


def test_sampler_is_deterministic_per_seed_and_stops_on_stop_tokens(tiny_model, tokenizer):
    sampler = LocalSampler(tiny_model, tokenizer)
    requests = _requests(tokenizer)
    first = sampler.generate(requests, SamplingParams(), seed=11)
    again = sampler.generate(requests, SamplingParams(), seed=11)
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    # make the first sampled token of request 0 a stop token: that completion ends right there
    stop = first[0].token_ids[0]
    stopped = sampler.generate(requests, SamplingParams(stop_token_ids=(stop,)), seed=11)
    assert stopped[0].token_ids == [stop] and stopped[0].finish_reason == "stop"


def test_trainer_step_raises_logprob_of_positive_advantage_tokens(tiny_model, tokenizer):
    prompt = tokenizer.encode("Hall 1 of 14. You hold the blue key. Actions: north, wait")
    target = tokenizer.encode("<action>north</action>")
    tokens = prompt + target
    mask = [0] * len(prompt) + [1] * len(target)
    batch = collate([make_sample(tokens, mask, [0.0] * len(tokens), 1.0, ACTOR, 0, 1.0)], 0, torch.device("cpu"))
    with torch.no_grad():
        before = token_logprobs(tiny_model, batch["input_ids"], batch["attention"], 1.0)[0, len(prompt):]
    sample = make_sample(tokens, mask, [0.0] * len(prompt) + before.tolist(), 1.0, ACTOR, 0, 1.0)
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=1e-3)
    trainer = PolicyTrainer(tiny_model, optimizer, pad_id=0)
    metrics = trainer.step([sample])
    # ratio is exactly 1 at the first step, so the loss is -mean(A) = -1
    assert metrics["train/loss"] == pytest.approx(-1.0, abs=1e-4)
    assert metrics["train/sampler_logprob_abs_diff"] < 1e-4
    with torch.no_grad():
        after = token_logprobs(tiny_model, batch["input_ids"], batch["attention"], 1.0)[0, len(prompt):]
    assert after.sum() > before.sum()
    assert math.isfinite(metrics["train/grad_norm"])


def test_trainer_with_no_samples_skips_the_step(tiny_model):
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=1e-3)
    before = [p.clone() for p in tiny_model.parameters()]
    metrics = PolicyTrainer(tiny_model, optimizer, pad_id=0).step([])
    assert metrics["train/skipped"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_model.parameters()))


def test_kept_cache_extension_gives_the_same_logprobs_as_a_fresh_prefill(tiny_model, tokenizer):
    sampler = LocalSampler(tiny_model, tokenizer)
    params = SamplingParams(stop_token_ids=(tokenizer.eos_token_id,))
    requests = _requests(tokenizer)
    sequences = [list(r.prompt_ids) for r in requests]
    for round_no in range(3):
        # branches in a different order each round; each prompt extends its previous sequence
        order = [2, 0, 1] if round_no % 2 else [0, 1, 2]
        batch = [Request(sequences[i], max_new_tokens=5) for i in order]
        completions = sampler.generate(batch, params, seed=round_no)
        for i, completion in zip(order, completions):
            prompt = sequences[i]
            full = torch.tensor([prompt + completion.token_ids])
            with torch.no_grad():
                reference = token_logprobs(tiny_model, full, torch.ones_like(full), 1.0)[0, len(prompt):]
            assert torch.allclose(reference, torch.tensor(completion.logprobs), atol=1e-4)
            sequences[i] = prompt + completion.token_ids + tokenizer.encode(f" observation {round_no} {i}")
    assert sampler.reused_calls == 2
    # a request that extends no kept row falls back to a fresh prefill
    sampler.generate([Request(tokenizer.encode("unrelated"), 3)], params, seed=9)
    assert sampler.reused_calls == 2


def test_kept_cache_is_not_reused_after_the_weights_change(tiny_model, tokenizer):
    model = copy.deepcopy(tiny_model)
    sampler = LocalSampler(model, tokenizer)
    params = SamplingParams(stop_token_ids=(tokenizer.eos_token_id,))
    prompt = tokenizer.encode("Hall 1 of 3. A door leads north.", add_special_tokens=False)
    first = sampler.generate([Request(prompt, 4)], params, seed=0)[0]
    extended = prompt + first.token_ids + tokenizer.encode(" You see a key.", add_special_tokens=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.tensor([prompt])).logits.sum().backward()
    optimizer.step()  # a training step between two rounds of one rollout
    second = sampler.generate([Request(extended, 4)], params, seed=1)[0]
    assert sampler.reused_calls == 0  # the old keys/values were not extended
    full = torch.tensor([extended + second.token_ids])
    with torch.no_grad():
        reference = token_logprobs(model, full, torch.ones_like(full), 1.0)[0, len(extended):]
    assert torch.allclose(reference, torch.tensor(second.logprobs), atol=1e-4)
    third = extended + second.token_ids + tokenizer.encode(" It is dark.", add_special_tokens=False)
    sampler.generate([Request(third, 4)], params, seed=2)
    assert sampler.reused_calls == 1  # unchanged weights: extended as before


def test_token_logprobs_from_a_first_column_match_the_full_computation(tiny_model):
    from tempo_plugin.rollout.batches import first_loss_column

    torch.manual_seed(1)
    ids = torch.randint(5, 200, (2, 12))
    att = torch.ones_like(ids)
    full = token_logprobs(tiny_model, ids, att, 1.0)
    part = token_logprobs(tiny_model, ids, att, 1.0, first=7)
    assert part.shape == full.shape
    assert torch.equal(part[:, :7], torch.zeros(2, 7))
    assert torch.allclose(part[:, 7:], full[:, 7:], atol=1e-5)
    mask = torch.zeros(2, 12)
    mask[1, 9:] = 1
    mask[0, 8:] = 1
    assert first_loss_column(mask) == 8
    assert first_loss_column(torch.zeros(2, 12)) == 1


def test_identical_prompts_are_prefilled_once_and_share_an_equal_cache(tiny_model, tokenizer):
    p = tokenizer.encode("Hall 2 of 3. You hold the gold key.", add_special_tokens=False)
    q = tokenizer.encode("Key room. A sign shows a moon.", add_special_tokens=False)
    requests = [Request(p, 4), Request(q, 4), Request(p, 4), Request(p, 4)]
    sampler = LocalSampler(tiny_model, tokenizer)
    with torch.no_grad():
        shared_logits, shared_cache, shared_attention = sampler._prefill_fresh(requests)
        naive_logits, naive_cache, naive_attention = sampler._prefill_rows(requests)
    assert (sampler.prompt_tokens, sampler.prefill_tokens) == (3 * len(p) + len(q), len(p) + len(q))
    assert torch.equal(shared_attention, naive_attention)
    assert torch.allclose(shared_logits, naive_logits, atol=1e-5)
    for layer_shared, layer_naive in zip(shared_cache.layers, naive_cache.layers):
        mask = naive_attention.bool()[:, None, :, None]  # padded positions hold nothing that is read
        assert torch.allclose(layer_shared.keys * mask, layer_naive.keys * mask, atol=1e-5)
        assert torch.allclose(layer_shared.values * mask, layer_naive.values * mask, atol=1e-5)
    # and generation from them gives every branch its own sample
    completions = sampler.generate(requests, SamplingParams(1.0, 1.0, ()), seed=3)
    assert len(completions) == 4 and all(len(c.token_ids) == 4 for c in completions)


def test_shared_prefix_length_counts_columns_every_row_holds_with_the_same_token():
    from tempo_plugin.logprobs import shared_prefix_length

    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 5, 0]])
    assert shared_prefix_length(ids, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])) == 2
    same = torch.tensor([[1, 2, 0], [1, 2, 0]])
    assert shared_prefix_length(same, torch.tensor([[1, 1, 0], [1, 1, 0]])) == 2  # padding is not shared
    assert shared_prefix_length(ids[:1], torch.ones(1, 4)) == 0  # one row: nothing to share


def _embedding_input_shapes(model):
    shapes = []
    handle = model.get_input_embeddings().register_forward_pre_hook(lambda _, args: shapes.append(tuple(args[0].shape)))
    return shapes, handle


def test_rows_sharing_a_prefix_get_the_logprobs_and_gradients_of_running_each_row_alone(tiny_model):
    import copy

    model = copy.deepcopy(tiny_model)
    torch.manual_seed(3)
    prefix = torch.randint(5, 200, (10,))
    lengths = [16, 13, 18]
    rows = [torch.cat([prefix, torch.randint(5, 200, (n - 10,))]) for n in lengths]
    ids = torch.zeros(3, 18, dtype=torch.long)
    att = torch.zeros(3, 18, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)], att[i, : len(row)] = row, 1
    shapes, handle = _embedding_input_shapes(model)
    batched = token_logprobs(model, ids, att, 0.7, first=11)
    handle.remove()
    assert shapes == [(1, 10), (3, 8)]  # the prefix ran once, for one row
    valid = torch.zeros(3, 18)
    for i, n in enumerate(lengths):
        valid[i, 11:n] = 1
    (batched * valid).sum().backward()
    packed_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    alone_total = 0.0
    for i, row in enumerate(rows):
        alone = token_logprobs(model, row[None], torch.ones(1, len(row), dtype=torch.long), 0.7, first=11)
        assert torch.allclose(batched[i, 11 : len(row)], alone[0, 11:], atol=1e-5)
        alone_total = alone_total + alone[0, 11:].sum()
    alone_total.backward()
    for packed, alone in zip(packed_grads, (p.grad for p in model.parameters())):
        assert torch.allclose(packed, alone, atol=1e-5, rtol=1e-4)


def test_the_shared_prefix_stops_before_the_first_scored_token(tiny_model):
    torch.manual_seed(4)
    prefix = torch.randint(5, 200, (10,))
    ids = torch.stack([torch.cat([prefix, torch.randint(5, 200, (4,))]) for _ in range(2)])
    shapes, handle = _embedding_input_shapes(tiny_model)
    with torch.no_grad():
        batched = token_logprobs(tiny_model, ids, torch.ones_like(ids), 1.0, first=6)
        alone = torch.cat([token_logprobs(tiny_model, row[None], torch.ones(1, 14, dtype=torch.long), 1.0, first=6) for row in ids])
    handle.remove()
    assert shapes[:2] == [(1, 5), (2, 9)]  # token 6 is predicted from position 5, so only 0..4 are cached
    assert torch.allclose(batched, alone, atol=1e-5)


def _sample(tokens, first_trained):
    return make_sample(tokens, [0] * first_trained + [1] * (len(tokens) - first_trained), [0.0] * len(tokens), 1.0, ACTOR, 0, 0.0)


def test_micro_batches_keep_samples_with_one_prompt_together_and_sort_the_rest_by_length():
    from tempo_plugin.rollout.batches import micro_batches

    a1, a2 = _sample([1, 2, 3, 7, 8], 3), _sample([1, 2, 3, 9], 3)  # prompt [1, 2, 3]
    b, c = _sample([1, 2, 4, 5, 6, 7], 3), _sample([5, 6], 1)  # prompts of their own
    assert micro_batches([a1, b, a2, c], 100) == [[a2, a1], [c, b]]
    assert micro_batches([a1, b, a2, c], 8) == [[a2], [a1], [c], [b]]  # 2 x 5 and 2 x 6 padded tokens exceed 8


def test_a_step_on_samples_sharing_prompts_has_the_gradient_of_the_mean_per_sample_loss(tiny_model):
    import copy

    from tempo_plugin.algorithms.losses import clipped_policy_loss

    model = copy.deepcopy(tiny_model)
    torch.manual_seed(5)
    prompt = torch.randint(5, 200, (9,)).tolist()
    samples = [
        make_sample(prompt + torch.randint(5, 200, (n,)).tolist(), [0] * 9 + [1] * n, [0.0] * 9 + [-7.0] * n, adv, ACTOR, 0, 0.0)
        for n, adv in ((4, 1.0), (6, -0.5), (3, 0.25))
    ] + [_sample(torch.randint(5, 200, (12,)).tolist(), 4)]
    trainer = PolicyTrainer(model, torch.optim.SGD(model.parameters(), lr=0.0), pad_id=0, grad_clip=1e9)
    trainer.step(samples)
    stepped = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for s in samples:
        t = collate([s], 0, torch.device("cpu"))
        lp = token_logprobs(model, t["input_ids"], t["attention"], 1.0)
        (clipped_policy_loss(lp, t["old_logprobs"], t["advantages"], t["loss_mask"]).loss / len(samples)).backward()
    for a, b in zip(stepped, (p.grad for p in model.parameters())):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_the_gradient_through_a_shared_prefix_is_the_same_bits_every_time_with_two_threads(tiny_model):
    import copy

    model = copy.deepcopy(tiny_model)
    torch.manual_seed(6)
    prefix = torch.randint(5, 200, (40,))
    ids = torch.stack([torch.cat([prefix, torch.randint(5, 200, (6,))]) for _ in range(16)])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(4):
            model.zero_grad()
            token_logprobs(model, ids, torch.ones_like(ids), 1.0, first=41).sum().backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(g, grads[0]) for g in grads[1:])


def test_a_checkpointed_step_trains_as_the_plain_one_without_sharing_the_prefix(tiny_model, one_thread):
    """--activation-checkpointing: the same loss, gradient norm and updated weights as keeping the
    activations; the rows' common prefix runs once per row (3 x 18 model tokens, not 10 + 3 x 8)."""
    import copy

    from tempo_plugin.config import TempoConfig
    from tempo_plugin.embedded.run_folder import policy_trainer

    class Tokens:
        pad_token_id = 0

    torch.manual_seed(3)
    prefix = torch.randint(5, 200, (10,)).tolist()
    samples = [_sample(prefix + torch.randint(5, 200, (8,)).tolist(), 11) for _ in range(3)]
    results = []
    for checkpointing in (False, True):
        model = copy.deepcopy(tiny_model)
        cfg = TempoConfig(activation_checkpointing=checkpointing, freeze_embeddings=False)
        trainer = policy_trainer(cfg, model, Tokens(), learning_rate=1e-2)
        metrics = trainer.step(samples)
        results.append((metrics, [p.grad.clone() for p in model.parameters()], model))
    (plain, plain_grads, _), (checkpointed, checkpointed_grads, model) = results
    assert plain["train/model_tokens"] == 10 + 3 * 8 and checkpointed["train/model_tokens"] == 3 * 18
    assert checkpointed["train/loss"] == pytest.approx(plain["train/loss"], abs=1e-6)
    assert checkpointed["train/grad_norm"] == pytest.approx(plain["train/grad_norm"], rel=1e-4) and plain["train/grad_norm"] > 0
    for a, b in zip(plain_grads, checkpointed_grads):  # the clipped gradients the optimiser stepped with
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())  # every decoder layer


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_logits_in_checkpointed_chunks_give_the_models_own_logprobs_and_gradients(tiny_model, monkeypatch, shared_prefix):
    """Chunks of 3 positions (3 rows x 3 positions x the vocabulary each) against the model's own
    logits (``logits_to_keep``, one piece): the same log-probs and gradients."""
    import copy

    import tempo_plugin.logprobs as logprobs_module

    torch.manual_seed(5)
    prefix = torch.randint(5, 200, (6,))
    ids = torch.stack([torch.cat([prefix if shared_prefix else torch.randint(5, 200, (6,)), torch.randint(5, 200, (10,))])
                       for _ in range(3)])
    results = []
    for chunk_elements in (3 * 3 * len(tiny_model.get_output_embeddings().weight), None):
        model = copy.deepcopy(tiny_model)
        if chunk_elements is None:  # the model's own logits: no split into decoder and output layer
            monkeypatch.setattr(logprobs_module, "split_head", lambda m: (m, None))
        else:
            monkeypatch.setattr(logprobs_module, "LOGIT_CHUNK_ELEMENTS", chunk_elements)
        logprobs = token_logprobs(model, ids, torch.ones_like(ids), 0.7, first=5)
        (logprobs * torch.linspace(-1, 1, ids.shape[1])).sum().backward()
        results.append((logprobs.detach(), [p.grad for p in model.parameters()]))
        monkeypatch.undo()
    (chunked, chunked_grads), (whole, whole_grads) = results
    assert torch.all(whole[:, :5] == 0) and torch.all(whole[:, 5:] < 0)
    assert torch.allclose(chunked, whole, atol=1e-5)
    for a, b in zip(chunked_grads, whole_grads):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-5, rtol=1e-4))


def test_a_model_that_scales_its_logits_keeps_its_own_logits(tiny_model):
    import copy

    from tempo_plugin.logprobs import split_head

    decoder, head = split_head(tiny_model)
    assert decoder is tiny_model.get_decoder() and head is tiny_model.get_output_embeddings()
    capped = copy.deepcopy(tiny_model)
    capped.config.final_logit_softcapping = 30.0
    assert split_head(capped) == (capped, None)


def test_warm_start_micro_batches_give_the_gradient_of_each_part_at_once(tiny_model):
    """backward_role_losses in micro-batches of at most 20 padded tokens (one or two demonstrations
    each) against each part at once: the same loss and gradients (each part's mean NLL)."""
    import copy

    from tempo_plugin.tiny.bootstrap import Demo, backward_role_losses

    torch.manual_seed(8)
    demos = [Demo(torch.randint(5, 200, (n,)).tolist(), [0] * 4 + [1] * (n - 4)) for n in (9, 12, 7, 10)]
    parts = [demos[:3], demos[3:]]
    results = []
    for budget in (None, 20):
        model = copy.deepcopy(tiny_model)
        loss = backward_role_losses(model, parts, 0, torch.device("cpu"), tokens_per_micro_batch=budget)
        results.append((loss, [p.grad for p in model.parameters()]))
    (whole, whole_grads), (chunked, chunked_grads) = results
    assert chunked == pytest.approx(whole, rel=1e-6)
    for a, b in zip(whole_grads, chunked_grads):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-6, rtol=1e-4))


def test_a_checkpointed_model_runs_every_row_in_full_under_gradients(tiny_model):
    """Checkpointed layers write no key/value cache, so token_logprobs shares no prefix while it
    records gradients (and still does without them); the log-probs are the same."""
    import copy

    from tempo_plugin.embedded.model import set_activation_checkpointing
    from tempo_plugin.logprobs import checkpointed

    model = copy.deepcopy(tiny_model)
    torch.manual_seed(9)
    prefix = torch.randint(5, 200, (10,))
    ids = torch.stack([torch.cat([prefix, torch.randint(5, 200, (4,))]) for _ in range(2)])
    with torch.no_grad():
        plain = token_logprobs(model, ids, torch.ones_like(ids), 1.0, first=11)
    set_activation_checkpointing(model, True)
    model.train()
    assert checkpointed(model)
    shapes, handle = _embedding_input_shapes(model)
    with_grad = token_logprobs(model, ids, torch.ones_like(ids), 1.0, first=11)
    with torch.no_grad():
        token_logprobs(model, ids, torch.ones_like(ids), 1.0, first=11)
    handle.remove()
    assert shapes == [(2, 14), (1, 10), (2, 4)]  # in full under gradients; the prefix once without
    assert torch.allclose(with_grad.detach(), plain, atol=1e-5)
    set_activation_checkpointing(model, False)
    assert not checkpointed(model)


# -- --sampler-dtype ---------------------------------------------------------------------------------

def test_a_bfloat16_sampling_copy_follows_the_trained_weights_and_samples_close_to_float32(tokenizer, tiny_model):
    from tempo_plugin.embedded.model import refresh_sampling_copy, sampling_copy

    assert sampling_copy(tiny_model, "float32") is tiny_model
    mirror = sampling_copy(tiny_model, "bfloat16")
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in mirror.parameters())
    with torch.no_grad():  # a training step moves the float32 weights ...
        for p in tiny_model.parameters():
            p.add_(0.01)
    before = next(mirror.parameters()).clone()
    refresh_sampling_copy(mirror, tiny_model)  # ... and the copy follows, rounded to bfloat16
    for copied, source in zip(mirror.parameters(), tiny_model.parameters()):
        assert torch.equal(copied, source.detach().to(torch.bfloat16))
    assert not torch.equal(before, next(mirror.parameters()))
    prompt = tokenizer.encode("Task: open the vault", add_special_tokens=False)
    completion = LocalSampler(mirror, tokenizer).generate([Request(prompt, 12)], SamplingParams(), seed=0)[0]
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        exact = token_logprobs(tiny_model, ids, torch.ones_like(ids), 1.0, first=len(prompt))[0, len(prompt):]
    diff = (exact - torch.tensor(completion.logprobs)).abs()
    assert 0 < float(diff.max()) < 0.5  # bfloat16 rounding, not another distribution


def test_the_sampler_dtype_is_checked_and_refused_on_slime():
    with pytest.raises(ConfigError, match="--sampler-dtype must be one of float32, bfloat16"):
        TempoConfig(sampler_dtype="float16").validate()
    from tempo_plugin.slime.settings import NOT_ON_SLIME
    assert "sampler_dtype" in NOT_ON_SLIME
