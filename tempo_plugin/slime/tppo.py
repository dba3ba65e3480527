"""slime hooks for TPPO, tracking-value PPO (docs/algorithms.md section 2; math in ``tempo_plugin.algorithms.tppo``).

Two hooks, both for ``--advantage-estimator ppo`` (which gives slime its critic):

``--custom-megatron-init-path tempo_plugin.slime.tppo.init``
    Runs on every train rank of the actor and of the critic, before the model is built. It rebinds
    ``slime.backends.megatron_utils.loss.value_loss_function`` (a module global that slime's loss
    dispatcher looks up on every call; the critic always trains with ``loss_type = "value_loss"``)
    to :func:`value_loss`, and makes the critic's head bias-free and zero-initialised (see
    :func:`init`). On the actor these globals are never used, so patching there is harmless.

``--custom-advantage-function-path tempo_plugin.slime.tppo.advantages``
    Runs on the actor (slime clears this path for the critic when ``--megatron-config-path`` is
    used), on the last pipeline stage, after ``rollout_data["kl"]`` is set. It sets
    ``rollout_data["advantages"]`` and ``rollout_data["returns"]``.

Formulas, for one sample with response tokens t = 1..T, head outputs f_t (slime's ``get_values``:
the scalar head at the position before each response token), loss mask m_t and terminal reward
R in [0, 1]:

    z_t = sum_{i<=t} m_i f_i,   V_t = sigmoid(z_t)                       (value reconstruction)
    critic loss   l_t = BCEWithLogits(z_t, R),  per-sample mean over m_t  (slime's sum_of_sample_mean)
    rewards       r_t = -kl_coef KL_t, plus R at t = T
    GAE           delta_t = r_t + gamma V_{t+1} - V_t  (V_{T+1} = 0),  A_t = delta_t + gamma lambd A_{t+1}
    returns       ret_t = A_t + V_t

With gamma = lambd = 1 (and kl_coef = 0), A_t = R - V_t; with lambd = 0, A_t = V_{t+1} - V_t and
A_T = R - V_T.

Where the critic's target comes from. slime's batch for the loss carries no rewards, only
``returns``. slime forces kl_coef = 0 in the critic and runs its built-in PPO GAE there on the raw
head outputs; with the critic's gamma = lambd = 1 the GAE telescopes to returns_t = R for every token
(whatever the values). :func:`value_loss` therefore uses ``batch["returns"]`` as the per-token BCE
target and refuses to run unless the critic's args have gamma = lambd = 1 and every return lies in
[0, 1] (up to float rounding, then clipped). Set them with the critic's ``--megatron-config-path``
overrides ``gamma: 1`` and ``lambd: 1``. The actor keeps its own gamma / lambd for :func:`advantages`.

Context parallelism. slime splits each packed sequence into 2 * cp_size equal chunks (the last one
padded) and CP rank r holds chunks r and 2 * cp_size - 1 - r. Per-response-token tensors (values,
log-probs, kl, advantages, returns) are indexed by the logit position p = prompt_length - 1 + j
of response token j, so rank r holds the response indices j whose p falls inside its two chunks
(clipped to [prompt_length - 1, total_length - 1)), first chunk first. Loss masks stay full length.
The cumulative sum needs the whole response, so both hooks gather f to full length, compute on
the full response, and slice back to the local layout. :func:`value_loss` slices the per-token
losses back to the local chunk *before* slime's ``sum_of_sample_mean``: the gather is slime's
differentiable ``all_gather_with_cp`` (an all-reduce whose backward all-reduces the gradients), so
the CP ranks' local losses add up to exactly the full per-sample mean, and each f receives the
gradient of that total, which is what slime's CP loss scaling expects. Each sample also adds
``0 * sum(f_full)`` to the loss so that every CP rank runs the backward all-reduce of every sample,
even a rank that holds none of that sample's response tokens.

:func:`local_response_indices`, :func:`slice_local` and :func:`gather_full` are pure versions of that
layout (tests compare them with slime's); at runtime the hooks call slime's own CP functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tempo_plugin.algorithms.tppo import accumulated_logits, gae, reconstruct_values

logger = logging.getLogger(__name__)

RETURN_TOLERANCE = 1e-2
"""How far outside [0, 1] (and how far from constant) the critic's returns may stray through float
rounding of slime's GAE before :func:`value_loss` reports a misconfigured critic."""

_CRITIC_CONFIG_HINT = "set gamma: 1 and lambd: 1 in the critic's overrides of --megatron-config-path"

_patched_once = False


# --------------------------------------------------------------------------------------------------
# Pure zig-zag context-parallel layout (no slime, no process group)


def local_response_indices(total_length: int, response_length: int, cp_size: int, cp_rank: int) -> list[int]:
    """Indices into the full response of the per-token entries CP rank ``cp_rank`` holds, in its order."""
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank {cp_rank} outside [0, {cp_size})")
    if not 0 <= response_length <= total_length:
        raise ValueError(f"response_length {response_length} outside [0, total_length {total_length}]")
    if cp_size == 1:
        return list(range(response_length))
    prompt_length = total_length - response_length
    if response_length and prompt_length < 1:
        raise ValueError("a response needs at least one prompt token before it (values sit one position earlier)")
    chunk = -(-total_length // (2 * cp_size))
    first_logit, end_logit = prompt_length - 1, total_length - 1
    indices: list[int] = []
    for k in (cp_rank, 2 * cp_size - 1 - cp_rank):
        lo, hi = max(k * chunk, first_logit), min((k + 1) * chunk, end_logit)
        indices.extend(p - first_logit for p in range(lo, hi))
    return indices


def slice_local(full: torch.Tensor, total_length: int, response_length: int, cp_size: int, cp_rank: int) -> torch.Tensor:
    """The CP-local part of a full-response tensor (first dimension = response tokens)."""
    if full.shape[0] != response_length:
        raise ValueError(f"expected {response_length} response entries, got {full.shape[0]}")
    index = torch.tensor(
        local_response_indices(total_length, response_length, cp_size, cp_rank), dtype=torch.long, device=full.device
    )
    return full.index_select(0, index)


def gather_full(local_chunks_per_rank: Sequence[torch.Tensor], total_length: int, response_length: int) -> torch.Tensor:
    """Reassemble a full-response tensor from every CP rank's local part (rank order)."""
    cp_size = len(local_chunks_per_rank)
    if cp_size == 0:
        raise ValueError("need at least one rank's chunk")
    first = local_chunks_per_rank[0]
    full = first.new_zeros((response_length, *first.shape[1:]))
    for rank, local in enumerate(local_chunks_per_rank):
        index = local_response_indices(total_length, response_length, cp_size, rank)
        if local.shape[0] != len(index):
            raise ValueError(f"rank {rank} should hold {len(index)} entries, got {local.shape[0]}")
        full[torch.tensor(index, dtype=torch.long, device=full.device)] = local
    return full


# --------------------------------------------------------------------------------------------------
# Advantages


def sample_advantages(
    local_values: torch.Tensor,
    loss_mask: torch.Tensor,
    reward: float,
    gamma: float,
    lambd: float,
    *,
    gather: Callable[[torch.Tensor], torch.Tensor],
    slice_: Callable[[torch.Tensor], torch.Tensor],
    local_kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TPPO advantages and returns of one sample, in the CP-local layout of ``local_values``.

    ``gather`` maps a CP-local per-token tensor to the full response, ``slice_`` maps back; the
    loss mask is full length. V = sigmoid(cumsum(m f)) on the full response; r_t = -kl_coef KL_t
    plus R on the last response token; (A, ret) = gae(r, V, gamma, lambd); both sliced back.
    """
    reward = float(reward)
    if not 0.0 <= reward <= 1.0:
        raise ValueError(f"TPPO needs terminal rewards in [0, 1], got {reward}")
    full_values = gather(local_values.detach().float())
    mask = loss_mask.to(device=full_values.device, dtype=full_values.dtype)
    values = reconstruct_values(full_values, mask)
    rewards = torch.zeros_like(values)
    if local_kl is not None and kl_coef != 0.0:
        rewards = rewards - kl_coef * gather(local_kl.detach().to(values.dtype))
    if rewards.numel():
        rewards[-1] += reward
    adv, ret = gae(rewards, values, gamma, lambd)
    return slice_(adv), slice_(ret)


def advantages(args: Any, rollout_data: dict) -> None:
    """slime ``--custom-advantage-function-path`` hook: TPPO values -> GAE, CP-aware."""
    values = rollout_data.get("values")
    if values is None:
        raise RuntimeError(
            "TPPO advantages need critic values but rollout_data has none (it ran in the critic?): "
            "pass --megatron-config-path with the critic overrides (gamma: 1, lambd: 1), which also "
            "stops slime from running this hook in the critic"
        )
    from slime.backends.megatron_utils.cp_utils import all_gather_with_cp, slice_log_prob_with_cp

    total_lengths = rollout_data["total_lengths"]
    response_lengths = rollout_data["response_lengths"]
    kl = rollout_data.get("kl")
    kl_coef = float(getattr(args, "kl_coef", 0.0) or 0.0)
    advs, rets = [], []
    with torch.no_grad():
        for i, local_values in enumerate(values):
            total, resp = int(total_lengths[i]), int(response_lengths[i])
            adv, ret = sample_advantages(
                local_values,
                rollout_data["loss_masks"][i],
                rollout_data["rewards"][i],
                args.gamma,
                args.lambd,
                gather=lambda t, total=total, resp=resp: all_gather_with_cp(t, total, resp),
                slice_=lambda t, total=total, resp=resp: slice_log_prob_with_cp(t, total, resp),
                local_kl=None if kl is None else kl[i],
                kl_coef=kl_coef,
            )
            if kl is not None and adv.shape != kl[i].shape:
                raise RuntimeError(f"sample {i}: advantages {tuple(adv.shape)} but kl {tuple(kl[i].shape)}")
            advs.append(adv.to(local_values.device))
            rets.append(ret.to(local_values.device))
    rollout_data["advantages"] = advs
    rollout_data["returns"] = rets


# --------------------------------------------------------------------------------------------------
# Critic loss


def _check_critic_args(args: Any) -> None:
    gamma, lambd = getattr(args, "gamma", 1.0), getattr(args, "lambd", 1.0)
    if gamma != 1.0 or lambd != 1.0:
        raise ValueError(
            f"TPPO's critic reads its BCE target R from slime's returns, which equal R only with "
            f"gamma = lambd = 1 (critic has gamma={gamma}, lambd={lambd}): {_CRITIC_CONFIG_HINT}"
        )


def _targets(returns: torch.Tensor) -> torch.Tensor:
    if returns.numel():
        low, high = float(returns.min()), float(returns.max())
        if low < -RETURN_TOLERANCE or high > 1.0 + RETURN_TOLERANCE or high - low > RETURN_TOLERANCE:
            raise ValueError(
                f"TPPO's critic expects returns equal to the terminal reward R in [0, 1] on every token, got "
                f"values in [{low:.4g}, {high:.4g}]: {_CRITIC_CONFIG_HINT}, and keep rewards in [0, 1]"
            )
    return returns.detach().float().clamp(0.0, 1.0)


def value_loss(
    args: Any,
    batch: dict,
    logits: torch.Tensor,
    sum_of_sample_mean: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TPPO critic loss with slime's value-loss signature: BCE(cumsum f, R), per-sample token mean."""
    from slime.backends.megatron_utils.cp_utils import all_gather_with_cp, slice_log_prob_with_cp
    from slime.backends.megatron_utils.loss import get_values

    _check_critic_args(args)
    total_lengths, response_lengths = batch["total_lengths"], batch["response_lengths"]
    _, out = get_values(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=total_lengths,
        response_lengths=response_lengths,
    )
    per_token, local_z, keep_graph = [], [], []
    for i, f_local in enumerate(out["values"]):
        total, resp = int(total_lengths[i]), int(response_lengths[i])
        f_full = all_gather_with_cp(f_local.flatten(), total, resp)
        z_full = accumulated_logits(f_full, batch["loss_masks"][i].to(device=f_full.device, dtype=f_full.dtype))
        z = slice_log_prob_with_cp(z_full, total, resp)
        target = _targets(batch["returns"][i].to(z.device))
        if target.shape != z.shape:
            raise RuntimeError(f"sample {i}: returns {tuple(target.shape)} but local values {tuple(z.shape)}")
        per_token.append(F.binary_cross_entropy_with_logits(z, target, reduction="none"))
        local_z.append(z.detach())
        keep_graph.append(f_full.sum())
    losses = torch.cat(per_token) if per_token else logits.new_zeros(0)
    loss = sum_of_sample_mean(losses)
    loss = loss + 0.0 * (sum(keep_graph) if keep_graph else logits.sum())
    value_mean = sum_of_sample_mean(torch.sigmoid(torch.cat(local_z))) if local_z else logits.new_zeros(())
    return loss, {
        "value_loss": loss.clone().detach(),
        "tppo_value_mean": torch.as_tensor(value_mean, device=logits.device).clone().detach(),
    }


# --------------------------------------------------------------------------------------------------
# Init hook


def zero_critic_head(layer: torch.nn.Linear) -> torch.nn.Linear:
    """Zero the critic head's weight and drop its bias: f_t = 0, so V_t = sigmoid(0) = 1/2 for every
    prefix at the start, and no per-token bias b makes z_t drift by t * b."""
    with torch.no_grad():
        layer.weight.zero_()
    layer.bias = None
    return layer


def _zero_head_class(base: type) -> type:
    """A subclass of slime's ``LinearForLastLayer`` built bias-free with a zero weight."""

    class ZeroCriticHead(base):  # type: ignore[misc, valid-type]
        def __init__(self, input_size: int, output_size: int, *, config: Any, bias: bool = True) -> None:
            super().__init__(input_size, output_size, config=config, bias=False)
            zero_critic_head(self)

    ZeroCriticHead.__qualname__ = f"{__name__}.ZeroCriticHead"
    return ZeroCriticHead


def _reinitialize_to_zero(args: Any, model: Any) -> None:
    """Stands in for slime's ``_reinitialize_critic_output_layer`` (run when the loaded checkpoint,
    e.g. REF_CKPT, has no critic head): zero instead of N(0, init_method_std)."""
    import slime.backends.megatron_utils.model as slime_model

    for _chunk, layer in slime_model._iter_critic_output_layers(model):
        with torch.no_grad():
            layer.weight.zero_()
            if layer.bias is not None:
                layer.bias.zero_()


def patch_critic_head() -> None:
    """Make slime build (and re-draw) the critic head bias-free with a zero weight.

    slime builds the head as ``model_provider.LinearForLastLayer(..., bias=True)`` with N(0, 0.02)
    weights, and draws it again (``model._reinitialize_critic_output_layer``) after loading a
    checkpoint without one (REF_CKPT). Both are module globals slime looks up when it calls them, so
    rebinding them before the model is built takes effect."""
    import slime.backends.megatron_utils.model as slime_model
    import slime.backends.megatron_utils.model_provider as slime_provider

    if not getattr(slime_provider.LinearForLastLayer, "_tempo_zero_head", False):
        head = _zero_head_class(slime_provider.LinearForLastLayer)
        head._tempo_zero_head = True
        slime_provider.LinearForLastLayer = head
    slime_model._reinitialize_critic_output_layer = _reinitialize_to_zero


def init(args: Any) -> None:
    """slime ``--custom-megatron-init-path`` hook (runs before the models are built): routes the
    critic's value loss to :func:`value_loss` and the critic head to :func:`patch_critic_head`."""
    global _patched_once
    import slime.backends.megatron_utils.loss as slime_loss

    patch_critic_head()
    previous = slime_loss.value_loss_function
    if previous is value_loss:
        return
    slime_loss.value_loss_function = value_loss
    if not _patched_once:
        _patched_once = True
        logger.info(
            "TPPO: replaced %s.value_loss_function (%s.%s) with %s.value_loss; critic head bias-free, zero init",
            slime_loss.__name__,
            getattr(previous, "__module__", "?"),
            getattr(previous, "__qualname__", repr(previous)),
            __name__,
        )
