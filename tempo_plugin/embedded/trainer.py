"""One optimiser step on a list of TrainSamples with the clipped policy-gradient loss.

Samples are packed into right-padded micro-batches (at most ``tokens_per_micro_batch`` padded
tokens each); each micro-batch's loss is weighted by its share of the samples, so the accumulated
gradient equals that of the mean over all samples. Then the gradient norm is clipped and AdamW
steps once.

Samples that share a prompt (the N branches of one start state, the K critic samples of one
state) go into the same micro-batch, and ``token_logprobs`` runs a prefix that every row of a batch
shares once, as a key/value cache that each row's remainder attends to. The prefix carries no loss,
so log-probs and gradients are those of running every row in full; only the work shrinks (a TD
update of the default tiny run: about 3x fewer tokens through the model).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import torch
import torch.utils.checkpoint

from tempo_plugin.algorithms.losses import clipped_policy_loss, importance_sampling_loss, value_cross_entropy
from tempo_plugin.rollout.samples import VALUE, TrainSample

T = TypeVar("T")


def cache_argument(model: Any) -> str:
    """The keyword a model's forward takes its key/value cache by (``past_key_values`` for Hugging
    Face models); the returned output carries the updated cache under the same name. A peft wrapper
    (LoRA) passes keywords on to its base model, whose forward decides."""
    base = getattr(model, "get_base_model", None)
    forward = base().forward if callable(base) else model.forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def shared_prefix_length(input_ids: torch.Tensor, attention: torch.Tensor) -> int:
    """How many leading columns every row holds, with the same token (0 for a single row)."""
    if input_ids.shape[0] < 2:
        return 0
    same = ((input_ids == input_ids[:1]) & (attention > 0)).all(dim=0)
    differs = torch.nonzero(~same)
    return int(differs[0]) if len(differs) else input_ids.shape[1]


def prefix_run_once(input_ids: torch.Tensor, attention: torch.Tensor, first: int) -> int:
    """The columns ``token_logprobs`` runs once for all rows: the shared prefix, up to the
    position that predicts token ``first``."""
    return min(shared_prefix_length(input_ids, attention), max(1, first) - 1)


def expand_cache_row(cache: Any, rows: int) -> None:
    """Turn a one-row key/value cache into ``rows`` identical rows, in place, as expanded views: their
    backward sums the rows' gradients in a fixed order, where an index copy's backward accumulates in
    an order that depends on the threads (training was then not reproducible with 2 threads)."""
    layers = getattr(cache, "layers", None)
    if layers is None:  # a cache without per-layer tensors: copy the row
        cache.batch_repeat_interleave(rows)
        return
    for layer in layers:
        layer.keys = layer.keys.expand(rows, *layer.keys.shape[1:])
        layer.values = layer.values.expand(rows, *layer.values.shape[1:])


def checkpointed(model: Any) -> bool:
    """Whether the model's layers recompute their activations in the backward pass
    (``set_activation_checkpointing``)."""
    return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


def set_activation_checkpointing(model: Any, on: bool) -> None:
    """--activation-checkpointing: each layer's activations recomputed in the backward pass, not kept.
    Non-reentrant, so that frozen embeddings' outputs need no requires_grad; transformers 5 names
    it activation_checkpointing_enable, 4.x gradient_checkpointing_enable."""
    if not on:
        disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
        disable()
    elif hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Config fields of models whose logits are more than their output layer of the last hidden state."""
LOGIT_CHUNK_ELEMENTS = 2**24
"""Logits computed at a time (64 MiB in float32): SmolLM2's 49,152-wide vocabulary over a 2,048-token
row would otherwise hold 0.4 GB a copy, several copies through the softmax and its gradient."""


def split_head(model: Any) -> tuple[Any, Any]:
    """(decoder, output layer) of a model whose logits are ``output_layer(decoder(...).last_hidden_state)``;
    (model, None) for any other (one that scales or caps its logits, or does not say how it splits)."""
    if any(getattr(getattr(model, "config", None), name, None) for name in SCALED_LOGITS):
        return model, None
    try:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return model, None
    if decoder is None or head is None or decoder is model or not hasattr(head, "weight"):
        return model, None
    return decoder, head


def picked_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """[B, n] log-prob of ``targets`` under ``head(hidden) / temperature`` (``head`` None: ``hidden`` are the logits)."""
    logits = hidden if head is None else head(hidden)
    log_dist = torch.log_softmax(logits.float() / temperature, dim=-1)
    return log_dist.gather(-1, targets[..., None]).squeeze(-1)


def chunked_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """``picked_logprobs`` over chunks of positions of at most LOGIT_CHUNK_ELEMENTS logits each; with
    gradients, a chunk's logits are computed again in the backward pass instead of kept."""
    rows, positions = targets.shape
    size = max(1, LOGIT_CHUNK_ELEMENTS // max(1, rows * head.weight.shape[0]))
    if size >= positions:
        return picked_logprobs(head, hidden, targets, temperature)
    pieces = []
    for start in range(0, positions, size):
        chunk = (head, hidden[:, start:start + size], targets[:, start:start + size], temperature)
        pieces.append(torch.utils.checkpoint.checkpoint(picked_logprobs, *chunk, use_reentrant=False)
                      if torch.is_grad_enabled() else picked_logprobs(*chunk))
    return torch.cat(pieces, dim=1)


def token_logprobs(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, temperature: float,
                   first: int = 1, shared: int | None = None) -> torch.Tensor:
    """[B, T] log-prob of token t given tokens < t, for t >= ``first`` (earlier columns are 0).

    Only the logits that predict tokens ``first`` .. T-1 are computed, in chunks
    (``chunked_logprobs``) where the model's logits are its output layer of its last hidden state
    (``split_head``), else by the model's ``logits_to_keep``: a training sample's long context needs
    hidden states, not logits.
    Rows are right-padded. When they share their first c <= first - 1 tokens (c > 0), those run
    once, for one row, and the rest of every row attends to their keys/values: the same log-probs
    and gradients, less work. ``shared``: ``prefix_run_once`` of these arguments, when the caller
    has it already."""
    first = max(1, min(first, input_ids.shape[1]))
    keep = input_ids.shape[1] - first + 1
    if shared is None:  # a checkpointed layer writes no key/value cache: no prefix can be shared
        shared = 0 if torch.is_grad_enabled() and checkpointed(model) else prefix_run_once(input_ids, attention, first)
    decoder, head = split_head(model)
    to_keep = {} if head is not None else {"logits_to_keep": keep}
    if shared > 0:
        cache_arg = cache_argument(model)
        prefix = decoder(input_ids=input_ids[:1, :shared], attention_mask=attention[:1, :shared], use_cache=True,
                         **({} if head is not None else {"logits_to_keep": 1}))
        cache = getattr(prefix, cache_arg)
        expand_cache_row(cache, input_ids.shape[0])
        positions = torch.arange(shared, input_ids.shape[1], device=input_ids.device).expand(input_ids.shape[0], -1)
        output = decoder(input_ids=input_ids[:, shared:], attention_mask=attention, position_ids=positions,
                         use_cache=True, **to_keep, **{cache_arg: cache})
    else:
        output = decoder(input_ids=input_ids, attention_mask=attention, use_cache=False, **to_keep)
    targets = input_ids[:, first:]
    if head is None:
        picked = picked_logprobs(None, output.logits[:, -keep:-1, :], targets, temperature)
    else:
        picked = chunked_logprobs(head, output.last_hidden_state[:, -keep:-1, :], targets, temperature)
    return torch.cat([torch.zeros_like(input_ids[:, :first], dtype=picked.dtype), picked], dim=1)


def grad_norm_of(grads: Sequence[torch.Tensor]) -> float:
    """The L2 norm of a list of gradient tensors taken together."""
    return float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads))) if grads else 0.0


def first_loss_column(loss_mask: torch.Tensor) -> int:
    """The first column any row trains on (1 when none does)."""
    columns = torch.nonzero(loss_mask.sum(dim=0) > 0)
    return int(columns[0]) if len(columns) else 1


def chunk_by_token_budget(items: Sequence[T], length: Callable[[T], int], tokens_per_chunk: int) -> list[list[T]]:
    """Consecutive chunks, in order, whose padded size (count x longest item) fits the budget; an
    item longer than the budget gets a chunk of its own."""
    chunks: list[list[T]] = []
    current: list[T] = []
    width = 0
    for item in items:
        size = length(item)
        if current and (len(current) + 1) * max(width, size) > tokens_per_chunk:
            chunks.append(current)
            current, width = [], 0
        current.append(item)
        width = max(width, size)
    if current:
        chunks.append(current)
    return chunks


def micro_batches(samples: Sequence[TrainSample], tokens_per_micro_batch: int) -> list[list[TrainSample]]:
    """Training micro-batches, chunked by the token budget: each group of samples with the same
    prompt (context before the first trained token) on its own, so ``token_logprobs`` runs that
    prompt once; then the samples whose prompt no other has, sorted by length (less padding)."""
    def length(sample: TrainSample) -> int:
        return len(sample.tokens)

    by_prompt: dict[tuple[int, ...], list[TrainSample]] = {}
    for sample in samples:
        by_prompt.setdefault(tuple(sample.tokens[: sample.prompt_length]), []).append(sample)
    groups = [group for group in by_prompt.values() if len(group) > 1]
    alone = [group[0] for group in by_prompt.values() if len(group) == 1]
    return [batch for group in groups + [alone] if group
            for batch in chunk_by_token_budget(sorted(group, key=length), length, tokens_per_micro_batch)]


def pad_rows(rows: Sequence[Sequence[float]], value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[len(rows), longest row] tensor, each row left-aligned and padded with ``value``."""
    out = torch.full((len(rows), max(len(row) for row in rows)), value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out.to(device)


def collate(samples: Sequence[TrainSample], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {
        "input_ids": pad_rows([s.tokens for s in samples], pad_id, torch.long, device),
        "attention": pad_rows([[1] * len(s.tokens) for s in samples], 0, torch.long, device),
        "loss_mask": pad_rows([s.loss_mask for s in samples], 0, torch.float32, device),
        "old_logprobs": pad_rows([s.old_logprobs for s in samples], 0.0, torch.float32, device),
        "advantages": pad_rows([s.advantages for s in samples], 0.0, torch.float32, device),
        "is_value": torch.tensor([s.role == VALUE for s in samples], dtype=torch.bool, device=device),
    }


@dataclass
class PolicyTrainer:
    model: Any
    optimizer: torch.optim.Optimizer
    pad_id: int
    temperature: float = 1.0
    eps_clip: float = 0.2
    eps_clip_high: float = 0.2
    grad_clip: float = 1.0
    tokens_per_micro_batch: int = 16384
    policy_loss: str = "ppo"  # or importance_sampling: unclipped, summed over tokens (config.py)
    share_prefix: bool = True  # run a micro-batch's common prefix once (not with checkpointed layers: they cache nothing)

    def step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """Accumulate the loss over all samples, clip, step. No samples: no step, empty metrics."""
        if not samples:
            return {"train/loss": 0.0, "train/skipped": 1.0}
        device = next(self.model.parameters()).device
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = len(samples)
        loss_sum = clip_sum = kl_sum = logprob_gap = value_loss_sum = 0.0
        trained = [p for p in self.model.parameters() if p.requires_grad]
        value_grad_sum = [torch.zeros_like(p) for p in trained] if any(s.role == VALUE for s in samples) else []
        gap_count = model_tokens = 0
        for batch in micro_batches(samples, self.tokens_per_micro_batch):
            tensors = collate(batch, self.pad_id, device)
            first = first_loss_column(tensors["loss_mask"])
            shared = prefix_run_once(tensors["input_ids"], tensors["attention"], first) if self.share_prefix else 0
            logprobs = token_logprobs(self.model, tensors["input_ids"], tensors["attention"], self.temperature, first,
                                      shared)
            model_tokens += sum(len(s.tokens) for s in batch) - (len(batch) - 1) * shared
            # value cross-entropy rows (VALUE samples) and policy-gradient rows share the forward pass
            is_value = tensors["is_value"]
            values = int(is_value.sum())
            policy_mask = tensors["loss_mask"] * (~is_value)[:, None].to(tensors["loss_mask"].dtype)
            if self.policy_loss == "importance_sampling":
                out = importance_sampling_loss(logprobs, tensors["old_logprobs"], tensors["advantages"], policy_mask)
                share = 1.0  # a sum over all samples' tokens: micro-batches add up
            else:
                out = clipped_policy_loss(
                    logprobs, tensors["old_logprobs"], tensors["advantages"], policy_mask,
                    self.eps_clip, self.eps_clip_high,
                )
                share = (len(batch) - values) / total  # a mean over samples
            policy_loss = out.loss * share
            loss = policy_loss.detach()
            if values:
                # the value cross-entropy's gradient kept apart until the step, so that its share of
                # the gradient norm can be reported (train/value_grad_share)
                value_loss = value_cross_entropy(logprobs, tensors["advantages"], tensors["loss_mask"])[is_value].sum() / total
                value_grads = torch.autograd.grad(value_loss, trained, retain_graph=True, allow_unused=True)
                for acc, grad in zip(value_grad_sum, value_grads):
                    if grad is not None:
                        acc.add_(grad)
                value_loss_sum += value_loss.item()
                loss = loss + value_loss.detach()
            if len(batch) > values:
                policy_loss.backward()
            weight = (len(batch) - values) / total
            loss_sum += loss.item()
            clip_sum += out.clip_fraction.item() * weight
            kl_sum += out.approx_kl.item() * weight
            mask = policy_mask > 0  # sampled tokens only: a VALUE answer has no sampler log-prob
            logprob_gap += (logprobs.detach() - tensors["old_logprobs"]).abs()[mask].sum().item()
            gap_count += int(mask.sum().item())
        value_norm = policy_norm = 0.0
        if value_grad_sum:
            policy_norm = grad_norm_of([p.grad for p in trained if p.grad is not None])
            value_norm = grad_norm_of(value_grad_sum)
            for param, acc in zip(trained, value_grad_sum):
                param.grad = acc if param.grad is None else param.grad + acc
        grad_norm = torch.nn.utils.clip_grad_norm_(trained, self.grad_clip)
        self.optimizer.step()
        self.model.eval()
        return {
            "train/loss": loss_sum,
            "train/value_loss": value_loss_sum,  # the value cross-entropy's share of train/loss
            # |g_value| / (|g_value| + |g_policy|), before clipping: the critic's share of the step
            "train/value_grad_share": value_norm / (value_norm + policy_norm) if value_norm + policy_norm > 0 else 0.0,
            "train/clip_fraction": clip_sum,
            "train/approx_kl": kl_sum,
            "train/grad_norm": float(grad_norm),
            "train/sampler_logprob_abs_diff": logprob_gap / max(gap_count, 1),
            "train/loss_tokens": float(gap_count),
            "train/tokens": float(sum(len(s.tokens) for s in samples)),
            "train/model_tokens": float(model_tokens),  # those run through the model: a shared prefix once
        }
