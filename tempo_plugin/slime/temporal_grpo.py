"""slime hooks for Temporal GRPO (docs/algorithms.md section 3; math in ``tempo_plugin.algorithms.temporal_grpo``).

Used with ``--rollout-function-path tempo_plugin.slime.rollout.generate_temporal_grpo_rollout``
and ``--advantage-estimator grpo`` (no critic; slime's PPO-clip policy loss), two hooks:

``--custom-reward-post-process-path tempo_plugin.slime.temporal_grpo.post_process``
    Runs in the RolloutManager (``RolloutManager._post_process_rewards``, called by
    ``_convert_samples_to_train_data``). Returns ``raw_rewards`` = the episode returns (slime keeps
    them as ``raw_reward`` and logs them) and ``rewards`` = for each sample the list of its
    per-response-token advantages, which slime hands to the actor's ``rollout_data["rewards"]``
    untouched (``_split_train_data_by_dp`` partitions it per data-parallel rank and does not
    tensorise it). A sample without those advantages (another rollout function) is refused.

``--custom-advantage-function-path tempo_plugin.slime.temporal_grpo.advantages``
    Runs on the actor, on the last pipeline stage, after ``rollout_data["kl"]`` is set. Sets
    ``rollout_data["advantages"]`` = ``rollout_data["returns"]`` = the per-token advantages in the
    rank's context-parallel layout, and replaces the per-token reward lists by one number per
    sample for slime's logging (below).

Formulas, for one game's N episodes i = 1..N and its milestones (stages) k = 1..K, with R_ik = 1
if episode i completed stage k, V_ik = 1 if it entered stage k (V_i1 = 1, V_ik = prod_{j<k} R_ij):

    n_k = sum_i V_ik,   mu_k = (1/n_k) sum_i V_ik R_ik,   sigma_k^2 = (1/n_k) sum_i V_ik (R_ik - mu_k)^2
    A_ik = V_ik (R_ik - mu_k) / (sigma_k + eps)           (0 for every i when n_k < 2 or sigma_k = 0)
    round r of episode i works on stage(r) = min(#{k : c_ik < r}, K - 1)   (c_ik: the round completing k)
    a_t  = A_{i, stage(r)} - c 1[round r's action was not accepted]   on every token t the policy sampled
           in round r,   a_t = 0 on context tokens (observations, turn tokens)

with c = ``invalid_action_penalty``. ``TempoRollout.stage_update`` computes a_t for the whole
episode; an episode whose a_t are all ~0 is left out (a padding sample takes its place), so every
rollout has S x N samples.

Data path. ``generate_temporal_grpo_rollout`` puts a_t for the response tokens (one per response
token, aligned with ``loss_mask``) in ``sample.metadata[samples.TOKEN_ADVANTAGES]`` and the episode
return in ``sample.reward``; :func:`post_process` moves the lists into slime's ``rewards``; on the
actor :func:`advantages` turns each list into a tensor and slices it to the rank's context-parallel
chunk with slime's own ``slice_log_prob_with_cp`` (exactly as slime slices ``rollout_log_probs`` when
the actor receives its data), checking the result against ``kl[i]``. Returns = advantages, as in
slime's GRPO; the KL enters through ``--use-kl-loss`` only (slime's GRPO does not apply
``--kl-coef`` to advantages either). ``--normalize-advantages`` would whiten the stage advantages
once more: the recipes leave it off.

Context parallelism. slime splits each packed sequence into 2 * cp_size equal chunks and CP rank r
holds chunks r and 2 * cp_size - 1 - r; per-response-token tensors are indexed by the logit position
prompt_length - 1 + j of response token j, so the rank holds the j whose position falls in its two
chunks, first chunk first (``tppo.local_response_indices`` is the pure version the tests compare
with slime's). Every CP rank of a data-parallel rank receives the same full-length lists and slices
its own part. Loss masks stay full length.

Logging. After the advantage hook slime's ``log_rollout_data`` sums every per-sample list in
``rollout_data`` that it does not skip, ``rewards`` included; a list of lists would stop it
(``sum`` of lists). :func:`advantages` therefore replaces ``rollout_data["rewards"][i]`` by the
sample's mean advantage over its trained tokens (0 for padding), computed on the full response so
every CP rank logs the same value: ``rollout/rewards`` is that mean over the rollout, and
``rollout/raw_reward`` the mean episode return.

Nothing here imports torch or slime at module import: the RolloutManager imports
:func:`post_process` (slime imports torch there anyway, the tests check the module stays light).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tempo_plugin.slime.reward import scalar_reward
from tempo_plugin.slime.samples import TOKEN_ADVANTAGES
from tempo_plugin.config import ConfigError

ROLLOUT_FUNCTION = "tempo_plugin.slime.rollout.generate_temporal_grpo_rollout"
POST_PROCESS = "tempo_plugin.slime.temporal_grpo.post_process"


# --------------------------------------------------------------------------------------------------
# Reward post-process (RolloutManager)


def token_advantages(sample: Any, position: int) -> list[float]:
    """The per-response-token advantages a Temporal GRPO sample carries; ConfigError (one line) if none."""
    metadata = getattr(sample, "metadata", None) or {}
    values = metadata.get(TOKEN_ADVANTAGES)
    if values is None:
        raise ConfigError(
            f"sample {position} (index {getattr(sample, 'index', None)}) carries no per-token advantages "
            f"(metadata[{TOKEN_ADVANTAGES!r}]): {POST_PROCESS} needs --rollout-function-path {ROLLOUT_FUNCTION}"
        )
    values = [float(v) for v in values]
    if len(values) != sample.response_length:
        raise ValueError(
            f"sample {position} (index {getattr(sample, 'index', None)}) has {len(values)} per-token advantages "
            f"for {sample.response_length} response tokens"
        )
    return values


def post_process(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[list[float]]]:
    """slime ``--custom-reward-post-process-path`` hook: (episode returns, per-token advantage lists)."""
    rewards = [token_advantages(s, i) for i, s in enumerate(samples)]
    raw = [scalar_reward(s, args) for s in samples]
    return raw, rewards


# --------------------------------------------------------------------------------------------------
# Advantage hook (actor)


def fill_advantages(rollout_data: dict, slice_: Callable[[Any, int, int], Any]) -> None:
    """Set advantages and returns from the per-token reward lists, in the CP-local layout.

    ``slice_(full, total_length, response_length)`` maps a full-response tensor to this rank's part
    (slime's ``slice_log_prob_with_cp`` at run time). Each result must have the shape of ``kl[i]``.
    Replaces ``rollout_data["rewards"]`` by each sample's mean advantage over its trained tokens.
    """
    import torch

    rewards = rollout_data["rewards"]
    kl = rollout_data["kl"]
    total_lengths, response_lengths = rollout_data["total_lengths"], rollout_data["response_lengths"]
    loss_masks = rollout_data["loss_masks"]
    if len(rewards) != len(kl):
        raise RuntimeError(f"{len(rewards)} reward lists for {len(kl)} samples")
    advs, means = [], []
    with torch.no_grad():
        for i, local_kl in enumerate(kl):
            total, resp = int(total_lengths[i]), int(response_lengths[i])
            full = torch.as_tensor(rewards[i], dtype=torch.float32, device=local_kl.device)
            if full.dim() != 1:
                raise RuntimeError(
                    f"sample {i}: the reward is a number, not per-token advantages: Temporal GRPO's advantage hook "
                    f"needs --custom-reward-post-process-path {POST_PROCESS}"
                )
            if full.numel() != resp:
                raise RuntimeError(f"sample {i}: {full.numel()} per-token advantages for {resp} response tokens")
            local = slice_(full, total, resp)
            if local.shape != local_kl.shape:
                raise RuntimeError(f"sample {i}: advantages {tuple(local.shape)} but kl {tuple(local_kl.shape)}")
            advs.append(local)
            mask = loss_masks[i].to(device=full.device, dtype=full.dtype)
            means.append((full * mask).sum() / mask.sum().clamp_min(1.0))
    rollout_data["advantages"] = advs
    rollout_data["returns"] = list(advs)
    rollout_data["rewards"] = torch.stack(means).tolist() if means else []


def advantages(args: Any, rollout_data: dict) -> None:
    """slime ``--custom-advantage-function-path`` hook: the per-token advantages, CP-sliced by slime."""
    from slime.backends.megatron_utils.cp_utils import slice_log_prob_with_cp

    fill_advantages(rollout_data, slice_log_prob_with_cp)
