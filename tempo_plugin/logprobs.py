"""Log-probabilities of tokens under a causal language model: what the sampler records, the trainer
and the warm start recompute with gradients, and the GPU check compares.

``token_logprobs`` runs a prefix that every row of a batch shares once, as a key/value cache that
each row's remainder attends to (the same log-probs and gradients, less work), and computes the
logits of the scored positions only, in chunks recomputed in the backward pass where the model's
logits are its output layer of its last hidden state.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.utils.checkpoint


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
    (``embedded.model.set_activation_checkpointing``)."""
    return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


def shareable_prefix(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, first: int) -> int:
    """``prefix_run_once``, or 0 under gradients through checkpointed layers: they write no
    key/value cache, so no prefix can be shared."""
    if torch.is_grad_enabled() and checkpointed(model):
        return 0
    return prefix_run_once(input_ids, attention, first)


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


def picked_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                    centre_samples: int = 0) -> torch.Tensor:
    """[B, n] log-prob of ``targets`` under ``head(hidden) / temperature`` (``head`` None: ``hidden`` are the logits).
    ``centre_samples`` K > 0: [B, n, 2], the log-prob and the mean log-prob of K tokens u_k drawn
    from the same distribution at each position (without gradient through the draw; torch's global
    generator, whose state a checkpointed recompute restores)."""
    logits = hidden if head is None else head(hidden)
    log_dist = torch.log_softmax(logits.float() / temperature, dim=-1)
    picked = log_dist.gather(-1, targets[..., None]).squeeze(-1)
    if centre_samples <= 0:
        return picked
    with torch.no_grad():
        flat = log_dist.detach().exp().reshape(-1, log_dist.shape[-1])
        draws = torch.multinomial(flat, centre_samples, replacement=True).reshape(*targets.shape, centre_samples)
    return torch.stack([picked, log_dist.gather(-1, draws).mean(dim=-1)], dim=-1)


def chunked_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                     centre_samples: int = 0) -> torch.Tensor:
    """``picked_logprobs`` over chunks of positions of at most LOGIT_CHUNK_ELEMENTS logits each; with
    gradients, a chunk's logits are computed again in the backward pass instead of kept."""
    rows, positions = targets.shape
    size = max(1, LOGIT_CHUNK_ELEMENTS // max(1, rows * head.weight.shape[0]))
    if size >= positions:
        return picked_logprobs(head, hidden, targets, temperature, centre_samples)
    pieces = []
    for start in range(0, positions, size):
        chunk = (head, hidden[:, start:start + size], targets[:, start:start + size], temperature, centre_samples)
        pieces.append(torch.utils.checkpoint.checkpoint(picked_logprobs, *chunk, use_reentrant=False)
                      if torch.is_grad_enabled() else picked_logprobs(*chunk))
    return torch.cat(pieces, dim=1)


def token_logprobs(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, temperature: float,
                   first: int = 1, shared: int | None = None, centre_samples: int = 0) -> torch.Tensor:
    """[B, T] log-prob of token t given tokens < t, for t >= ``first`` (earlier columns are 0);
    with ``centre_samples`` K > 0, [B, T, 2]: beside it the mean log-prob of K tokens drawn at the
    same position (score centering, ``picked_logprobs``).

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
    if shared is None:
        shared = shareable_prefix(model, input_ids, attention, first)
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
        picked = picked_logprobs(None, output.logits[:, -keep:-1, :], targets, temperature, centre_samples)
    else:
        picked = chunked_logprobs(head, output.last_hidden_state[:, -keep:-1, :], targets, temperature, centre_samples)
    leading = torch.zeros((input_ids.shape[0], first, *picked.shape[2:]), dtype=picked.dtype, device=picked.device)
    return torch.cat([leading, picked], dim=1)
