"""The expected-value critic (--critic-value expected): its readout, its two-hot targets, the value
cross-entropy in the trainer, audits and the readiness gate, with hand-computed expectations."""

import math

import pytest
import torch

from tempo_plugin.algorithms.losses import value_cross_entropy
from tempo_plugin.algorithms.tempo import Calibration, brier_scores, critic_target
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.critic import format_value, parse_value
from tempo_plugin.critic.readout import VALUE_GRID, answer_distribution, expected_value, two_hot, value_answer_texts
from tempo_plugin.embedded.multi_turn import critic_collapsed
from tempo_plugin.embedded.trainer import PolicyTrainer
from tempo_plugin.updates.tempo import AUDITS_KEPT, AUDITS_MIN, AuditWindow
from tempo_plugin.rollout.samples import VALUE, make_sample
from tempo_plugin.samplers.local import LocalSampler


@pytest.mark.parametrize("target, expected", [
    (0.4167, [(41, 0.33), (42, 0.67)]),
    (0.29, [(29, 1.0)]),  # 0.29 * 100 is 28.999999999999996 in floats: still the grid point
    (1.0, [(100, 1.0)]),
    (0.0, [(0, 1.0)]),
    (0.995, [(99, 0.5), (100, 0.5)]),
    (1.7, [(100, 1.0)]),  # clamped
    (-0.2, [(0, 1.0)]),
])
def test_two_hot_has_the_target_as_its_mean(target, expected):
    got = two_hot(target)
    assert [j for j, _ in got] == [j for j, _ in expected]
    assert [w for _, w in got] == pytest.approx([w for _, w in expected])
    assert sum(w for _, w in got) == pytest.approx(1.0)
    assert sum(VALUE_GRID[j] * w for j, w in got) == pytest.approx(min(1.0, max(0.0, target)))


def test_the_grid_is_every_answer_the_critic_is_taught():
    texts = value_answer_texts()
    assert len(texts) == 101 and texts[0] == "<value>0.00</value>" and texts[42] == "<value>0.42</value>"
    assert [parse_value(t) for t in texts] == pytest.approx(list(VALUE_GRID))
    assert texts == [format_value(v) for v in VALUE_GRID]


def test_expected_value_by_hand():
    assert expected_value([0.0] * 101) == pytest.approx(0.5)  # uniform over 0.00 .. 1.00
    one_hot = [-1e9] * 101
    one_hot[42] = 0.0
    assert expected_value(one_hot) == pytest.approx(0.42)
    # two answers, likelihoods 1 : 3 (log-likelihoods differ by log 3): 0.25 x 0.10 + 0.75 x 0.30 = 0.25
    two = [-1e9] * 101
    two[10], two[30] = -5.0, -5.0 + math.log(3)
    assert answer_distribution(two)[30] == pytest.approx(0.75)
    assert expected_value(two) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="101 answer log-likelihoods"):
        expected_value([0.0] * 100)


def test_the_tiny_tokenizer_writes_every_answer_in_digits(tokenizer):
    """The tiny tokenizer isolates digits: <value> 0 . 4 2 </value>, six tokens for every answer,
    which differ only in the three digit tokens; the readout enumerates all 101 answers whole, so a
    tokenizer that merged digits would be scored just as right."""
    encoded = [tokenizer.encode(t, add_special_tokens=False) for t in value_answer_texts()]
    assert {len(e) for e in encoded} == {6}
    assert tokenizer.convert_ids_to_tokens(encoded[42])[1:5] == ["0", ".", "4", "2"]
    assert len({tuple(e) for e in encoded}) == 101


def test_answer_logprobs_are_the_answers_token_logprobs_summed(tiny_model, tokenizer):
    sampler = LocalSampler(tiny_model, tokenizer)
    prompt = tokenizer.encode("Task: open the vault\nProbability of eventually winning?", add_special_tokens=False)
    answers = [tokenizer.encode(t, add_special_tokens=False) for t in value_answer_texts()[:5]]
    got = sampler.answer_logprobs(prompt, answers)
    full = sampler.prompt_logprobs([prompt + a for a in answers], temperature=1.0)
    assert got == pytest.approx([sum(row[len(prompt):]) for row in full], abs=1e-4)


def test_prefix_levels_by_hand():
    from tempo_plugin.samplers.local import prefix_levels

    # [5] ends where [5, 6] goes on; [8] is one token: nothing continues it
    assert prefix_levels([[5, 6, 7], [5], [5, 6], [8], [5, 9]]) == [[()], [(5,)], [(5, 6)]]
    assert prefix_levels([[1, 2], [3, 4]]) == [[()], [(1,), (3,)]]
    assert prefix_levels([]) == []


@pytest.mark.parametrize("lead", [" ", "Keys: 3. "])
def test_the_trie_walk_scores_every_value_answer_as_whole_rows_do(tiny_model, tokenizer, lead):
    """All 101 answers (they share their tag and digits: with the lead " " the trie feeds 118
    tokens, not 707) against the same answers scored as whole rows (the path answers without shared
    prefixes take)."""
    from tempo_plugin.samplers.local import prefix_levels

    sampler = LocalSampler(tiny_model, tokenizer)
    prompt = tokenizer.encode("Task: open the vault\nProbability of eventually winning?", add_special_tokens=False)
    answers = [tokenizer.encode(lead + t, add_special_tokens=False) for t in value_answer_texts()]
    levels = prefix_levels(answers)
    assert 2 * sum(len(level) for level in levels[1:]) <= sum(len(a) for a in answers)
    walked = sampler.answer_logprobs(prompt, answers)
    assert walked == pytest.approx(sampler.whole_answers(prompt, answers), abs=1e-4)
    full = sampler.prompt_logprobs([prompt + a for a in answers], temperature=1.0)
    assert walked == pytest.approx([sum(row[len(prompt):]) for row in full], abs=1e-4)


@pytest.mark.parametrize("attention, path", [("sdpa", "trie"), ("eager", "trie"), ("flash_attention_2", "whole")])
def test_the_trie_runs_only_on_an_attention_that_takes_a_4d_mask(tiny_model, tokenizer, attention, path):
    from types import SimpleNamespace

    sampler = LocalSampler(tiny_model, tokenizer)
    sampler.model = SimpleNamespace(config=SimpleNamespace(_attn_implementation=attention))
    sampler._trie_answers = lambda prompt, answers, levels: "trie"
    sampler.whole_answers = lambda prompt, answers: "whole"
    answers = [tokenizer.encode(" " + t, add_special_tokens=False) for t in value_answer_texts()]
    assert sampler.answer_logprobs([1, 2, 3], answers) == path


def test_answers_that_end_inside_others_are_scored_to_their_own_end(tiny_model, tokenizer):
    sampler = LocalSampler(tiny_model, tokenizer)
    prompt = tokenizer.encode("Task: open the vault", add_special_tokens=False)
    stem = tokenizer.encode("<value>0.4", add_special_tokens=False)
    answers = [stem, stem + stem[-1:], stem[:2], stem + stem[:1]]
    full = sampler.prompt_logprobs([prompt + a for a in answers], temperature=1.0)
    assert sampler.answer_logprobs(prompt, answers) == pytest.approx([sum(r[len(prompt):]) for r in full], abs=1e-4)


def test_value_cross_entropy_by_hand():
    logprobs = torch.tensor([[-9.0, -1.0, -2.0, 0.0], [-9.0, -0.5, -0.5, -3.0]])
    weights = torch.tensor([[0.0, 0.5, 0.5, 0.0], [0.0, 2.0, 2.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0]])
    # row 0: -(0.5 x -1 + 0.5 x -2) = 1.5; row 1: -(2 x -0.5 + 2 x -0.5) = 2.0
    assert value_cross_entropy(logprobs, weights, mask).tolist() == pytest.approx([1.5, 2.0])


def test_the_trainer_fits_the_two_hot_answer(tiny_model, tokenizer, one_thread):
    """VALUE samples train by cross-entropy, without a ratio: the logged value loss is
    -sum_j w_j log pi(a_j | x) / (samples), and steps on it move the readout towards the target."""
    torch.manual_seed(0)
    sampler = LocalSampler(tiny_model, tokenizer)
    prompt = tokenizer.encode("Round 3 of 30. Probability of eventually winning?", add_special_tokens=False)
    answers = [tokenizer.encode(t, add_special_tokens=False) for t in value_answer_texts()]
    samples = [make_sample(prompt + answers[j], [0] * len(prompt) + [1] * len(answers[j]), [0.0] * (len(prompt) + len(answers[j])),
                           w, VALUE, 0, 0.8) for j, w in two_hot(0.8)]
    assert len(samples) == 1 and samples[0].role == VALUE
    before = sampler.answer_logprobs(prompt, answers)
    optimizer = torch.optim.AdamW([p for p in tiny_model.parameters() if p.requires_grad], lr=3e-3)
    trainer = PolicyTrainer(tiny_model, optimizer, tokenizer.pad_token_id)
    metrics = trainer.step(samples)
    assert metrics["train/value_loss"] == pytest.approx(-before[80], rel=1e-4)
    assert metrics["train/loss_tokens"] == 0.0  # no sampled token: nothing for the policy loss
    assert metrics["train/value_grad_share"] == 1.0
    for _ in range(30):
        trainer.step(samples)
    after = sampler.answer_logprobs(prompt, answers)
    assert after[80] > before[80] + 1.0
    assert abs(expected_value(after) - 0.8) < abs(expected_value(before) - 0.8)


def test_critic_target_mixes_td_and_audit():
    assert critic_target(0.6, 1.0, 0.5) == pytest.approx(0.8)
    assert critic_target(0.6, 0.0, 1.0) == 0.0  # audits alone
    assert critic_target(0.6, None, 1.0) == 0.6  # no audit outcome: G(s)
    assert critic_target(0.6, 1.0, 0.0) == 0.6


def test_brier_scores_by_hand():
    scores = brier_scores([(0.8, 1.0), (0.2, 0.0), (0.5, 1.0), (0.5, 0.0)])
    # zbar = 0.5; B_critic = (0.04 + 0.04 + 0.25 + 0.25) / 4 = 0.145; B_const = 0.25
    assert (scores.base_rate, scores.critic, scores.constant) == pytest.approx((0.5, 0.145, 0.25))
    assert scores.skill == pytest.approx(1 - 0.145 / 0.25)
    assert brier_scores([(0.3, 1.0), (0.9, 1.0)]).skill == 0.0  # outcomes all alike: no guess beats another


def test_the_readiness_gate_opens_only_for_a_critic_that_beats_the_constant():
    cfg = TempoConfig(audit_weight=1.0)
    window = AuditWindow()
    window.add([(0.9, 1.0), (0.1, 0.0)] * ((AUDITS_MIN - 2) // 2), Calibration())
    gate = window.gate(cfg)
    assert not gate.ready and gate.scores is None and gate.fallback == pytest.approx(0.5)  # too few audits yet
    window.add([(0.9, 1.0), (0.1, 0.0)], Calibration())
    gate = window.gate(cfg)
    assert gate.ready and gate.scores.skill == pytest.approx(1 - 0.01 / 0.25)
    # a collapsed critic: 0.0 everywhere where a quarter of the audits win
    collapsed = AuditWindow()
    collapsed.add([(0.0, 1.0)] + [(0.0, 0.0)] * 3 + [(0.0, 1.0)] + [(0.0, 0.0)] * 3 + [(0.0, 0.0), (0.0, 1.0)] * 4,
                  Calibration())
    gate = collapsed.gate(cfg)
    assert not gate.ready and gate.fallback == pytest.approx(6 / 16)
    assert gate.scores.critic == pytest.approx(6 / 16) and gate.scores.constant == pytest.approx(6 / 16 * 10 / 16)
    assert collapsed.gate(TempoConfig(audit_weight=1.0, readiness_gate=False)).ready
    window.add([(0.5, 1.0)] * (2 * AUDITS_KEPT), Calibration())
    assert len(window.rows) == AUDITS_KEPT and set(window.rows) == {(0.5, 0.5, 1.0, None, None)}


def test_collapse_is_judged_on_values():
    assert critic_collapsed({"critic/degenerate_group_rate": 0.95})
    assert critic_collapsed({"critic/degenerate_group_rate": 0.0, "critic/estimate_std": 0.005, "critic/value_target_std": 0.3})
    assert not critic_collapsed({"critic/degenerate_group_rate": 0.0, "critic/estimate_std": 0.005, "critic/value_target_std": 0.05})
    assert not critic_collapsed({"critic/degenerate_group_rate": 0.5, "critic/estimate_std": 0.2, "critic/value_target_std": 0.3})


def test_settings_of_the_expected_critic_are_checked():
    TempoConfig(critic_value="expected", critic_prompt="reference").validate()  # reads out after the reasoning
    with pytest.raises(ConfigError, match=r"--audit-weight must be in \[0, 1\]"):
        TempoConfig(audit_weight=1.5).validate()
    with pytest.raises(ConfigError, match="--value-loss-weight must be > 0"):
        TempoConfig(value_loss_weight=0.0).validate()


def test_a_run_with_the_expected_critic_and_audits(tmp_path):
    """Every TD update trains the critic (two-hot answers, whatever the readout), plays one audit per
    start state to the end, counts the audits' rounds as environment steps, and keeps the audit
    window across a resume."""
    import json

    from tempo_plugin.metrics import read_metrics
    from tempo_plugin.train import main

    out = tmp_path / "run"
    common = ["--bootstrap-steps", "3", "--warmup-updates", "1", "--warmup-games-per-batch", "1", "--branches", "2",
              "--critic-samples", "2", "--states-per-batch", "2", "--eval-games", "0", "--max-assistant-tokens", "8",
              "--vaults", "1", "--max-episode-steps", "15", "--critic-value", "expected", "--audit-weight", "1", "--mc-refresh-every", "0",
              "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert main(common + ["--td-updates", "2"]) == 0
    records = read_metrics(out / "metrics.jsonl")
    td = [r for r in records if r["phase"] == "td"]
    assert len(td) == 2
    for r in td:
        assert r["train/critic_samples"] >= 2  # one or two answers per valued start state
        assert r["train/value_loss"] > 0
        assert r["audit/branches"] == 2.0 and r["audit/rounds"] >= 2
        assert r["critic/degenerate_group_rate"] == 0.0 and r["critic/parse_failure_rate"] == 0.0
        assert r["critic/ready"] in (0.0, 1.0) and "critic/value_target_std" in r
    warmup = [r for r in records if r["phase"] == "warmup"][0]
    steps = [warmup["rollout/rounds"], *(r["rollout/rounds"] for r in td)]
    assert td[-1]["rollout/env_steps_total"] == sum(steps)
    assert all(r["rollout/rounds"] >= r["audit/rounds"] + 2 for r in td)  # branches' and audits' rounds
    audits = json.loads((out / "checkpoints" / "latest" / "progress.json").read_text())["audits"]
    # the warm-up's valued states and each TD update's audited start states, in order, all (estimate,
    # calibrated estimate, outcome, milestones left of one vault's 2, the update that played it: the
    # warm-up's 0, then TD updates 1 and 2); fewer than AUDITS_MIN audits: the map is still the identity
    assert len(audits) >= 4 and all(len(p) == 5 and 0 <= p[0] == p[1] <= 1 and p[2] in (0.0, 1.0) and p[3] in (1, 2)
                                    for p in audits)
    assert {p[4] for p in audits} == {0, 1, 2} and [p[4] for p in audits] == sorted(p[4] for p in audits)
    assert main(common + ["--td-updates", "3", "--resume"]) == 0
    resumed = json.loads((out / "checkpoints" / "latest" / "progress.json").read_text())["audits"]
    assert resumed[: len(audits)] == audits and len(resumed) > len(audits)


def test_a_run_with_the_expected_readout_of_a_sampled_critic(tmp_path):
    """--critic-value expected-readout: the critic trains as sampled (no value cross-entropy), and
    the estimates it gives are readouts: the mean of K = 2 written values lies on a 0.005 grid, a
    readout almost never does."""
    import json

    from tempo_plugin.metrics import read_metrics
    from tempo_plugin.train import main

    out = tmp_path / "run"
    assert main(["--bootstrap-steps", "3", "--warmup-updates", "1", "--warmup-games-per-batch", "1", "--branches", "2",
                 "--critic-samples", "2", "--states-per-batch", "2", "--eval-games", "0", "--max-assistant-tokens", "8",
                 "--vaults", "1", "--max-episode-steps", "15", "--critic-value", "expected-readout", "--td-updates", "2",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 0
    td = [r for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "td"]
    assert len(td) == 2 and all("train/value_loss" not in r for r in td)
    estimates = [e for line in (out / "critic_values.jsonl").read_text().splitlines()
                 for e in json.loads(line)["estimate"]]
    assert estimates and all(0.0 <= e <= 1.0 for e in estimates)
    assert any(abs(200 * e - round(200 * e)) > 1e-6 for e in estimates)


def test_the_value_loss_adds_its_gradient_to_the_policy_loss(tiny_model, tokenizer, one_thread):
    """A step on actor and VALUE samples together follows the gradient of the policy loss plus the
    value cross-entropy: the same parameters as the sum computed by hand, and the value share of
    the gradient norm strictly between 0 and 1."""
    import copy

    from tempo_plugin.logprobs import token_logprobs
    from tempo_plugin.rollout.samples import ACTOR

    prompt = tokenizer.encode("Task: open the vault", add_special_tokens=False)
    action = tokenizer.encode("<action>go east</action>", add_special_tokens=False)
    answer = tokenizer.encode("<value>0.30</value>", add_special_tokens=False)
    mask_a = [0] * len(prompt) + [1] * len(action)
    with torch.no_grad():
        ids = torch.tensor([prompt + action])
        old = token_logprobs(tiny_model, ids, torch.ones_like(ids), 1.0)[0].tolist()
    actor = make_sample(prompt + action, mask_a, [lp if m else 0.0 for lp, m in zip(old, mask_a)], 0.7, ACTOR, 0, 1.0)
    value = make_sample(prompt + answer, [0] * len(prompt) + [1] * len(answer), [0.0] * (len(prompt) + len(answer)),
                        0.5, VALUE, 1, 0.3)
    by_hand = copy.deepcopy(tiny_model)
    params = [p for p in tiny_model.parameters() if p.requires_grad]
    trainer = PolicyTrainer(tiny_model, torch.optim.SGD(params, lr=0.1), tokenizer.pad_token_id, grad_clip=1e9)
    metrics = trainer.step([actor, value])
    assert 0.0 < metrics["train/value_grad_share"] < 1.0
    # by hand: at ratio 1 the clipped loss is -A x mean log pi over the action tokens; the value
    # sample's is -w x sum log pi over the answer's tokens; each / 2 samples
    lp_a = token_logprobs(by_hand, torch.tensor([prompt + action]), torch.ones(1, len(prompt) + len(action), dtype=torch.long), 1.0)[0]
    lp_v = token_logprobs(by_hand, torch.tensor([prompt + answer]), torch.ones(1, len(prompt) + len(answer), dtype=torch.long), 1.0)[0]
    loss = (-0.7 * lp_a[len(prompt):].mean() - 0.5 * lp_v[len(prompt):].sum()) / 2
    loss.backward()
    with torch.no_grad():
        for p in by_hand.parameters():
            if p.grad is not None:
                p -= 0.1 * p.grad
    for mine, theirs in zip(tiny_model.parameters(), by_hand.parameters()):
        assert torch.allclose(mine, theirs, atol=1e-5)


def test_the_expected_critic_takes_its_epochs_in_the_warm_up_too():
    from tempo_plugin.embedded.multi_turn import critic_epochs
    from tempo_plugin.updates.schedule import TD, WARMUP

    assert critic_epochs(TempoConfig(critic_epochs=5), TD) == 5
    assert critic_epochs(TempoConfig(critic_epochs=5), WARMUP) == 1  # the sampled critic: one warm-up step
    assert critic_epochs(TempoConfig(critic_epochs=5, critic_value="expected"), WARMUP) == 5
    assert critic_epochs(TempoConfig(critic_epochs=5, critic_value="expected-readout"), WARMUP) == 1  # trained as sampled


class _ChunkProtocol:
    """A stand-in protocol whose tokens are whole strings, so a test can split ``<value>`` at will."""

    def __init__(self, chunks):
        self.vocab = {c: i for i, c in enumerate(dict.fromkeys(chunks))}
        self.stop_token_ids = (len(self.vocab),)

    def ids(self, chunks):
        return [self.vocab[c] for c in chunks]

    def decode(self, ids):
        words = {i: c for c, i in self.vocab.items()}
        return "".join(words.get(i, "") for i in ids)


@pytest.mark.parametrize("chunks, reasoning, lead", [
    (["Keys", ": 3. ", "<value>", "0", ".", "4", "</value>"], ["Keys", ": 3. "], ""),  # the tag one token (tiny)
    (["Keys", ": 3.", " <", "value", ">", "0", ".", "4"], ["Keys", ": 3."], " "),  # split, a space before it
    (["<value>", "0", ".", "9"], [], ""),  # answered at once
    (["Keys", ": 3", "."], ["Keys", ": 3", "."], " "),  # cut off before any tag: all of it
])
def test_the_reasoning_ends_where_the_value_tag_starts(chunks, reasoning, lead):
    from tempo_plugin.updates.critic_calls import CriticCalls
    from tempo_plugin.rollout.sampler import Completion

    protocol = _ChunkProtocol(chunks)
    calls = CriticCalls.__new__(CriticCalls)  # value_cut reads the protocol only
    calls.protocol = protocol
    ids = protocol.ids(chunks)
    completion = Completion(ids, [0.0] * len(ids), "".join(chunks), "length")
    assert calls.value_cut(completion) == (protocol.ids(reasoning), lead)
    stopped = Completion(ids + [protocol.stop_token_ids[0]], [0.0] * (len(ids) + 1), "".join(chunks), "stop")
    assert calls.value_cut(stopped) == (protocol.ids(reasoning), lead)  # the stop token is never reasoning


def test_extra_critic_steps_repeat_the_value_cross_entropy_only():
    from tempo_plugin.embedded.multi_turn import train_step
    from tempo_plugin.rollout.samples import ACTOR, CRITIC

    class Recorder:
        def __init__(self):
            self.steps = []

        def step(self, samples):
            self.steps.append(sorted(s.role for s in samples))
            return {"train/loss": 0.0}

    def sample(role):
        return make_sample([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], 0.5, role, 0, 0.0)

    expected = [sample(ACTOR), sample(CRITIC), sample(VALUE), sample(VALUE)]
    recorder = Recorder()
    train_step(recorder, expected, critic_epochs=3)
    assert recorder.steps == [["actor", "critic", "value", "value"], ["value", "value"], ["value", "value"]]
    recorder = Recorder()
    train_step(recorder, [sample(ACTOR), sample(CRITIC)], critic_epochs=2)  # the sampled critic
    assert recorder.steps == [["actor", "critic"], ["critic"]]
