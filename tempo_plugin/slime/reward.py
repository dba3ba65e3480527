"""slime hook ``--custom-reward-post-process-path tempo_plugin.slime.reward.post_process``.

slime's built-in normalisation groups samples by position (groups of ``n_samples_per_prompt``, or
the whole batch when the count differs), which cannot express TEMPO's groups: N actor branches per
start state and K critic samples per start state, of different sizes. This hook centres each
sample's scalar reward within its ``group_index`` (mean only, no std division, as TEMPO specifies):

    A_i = r_i - (1 / |g|) sum_{j in g} r_j        for every sample i of group g

and keeps the raw rewards for slime's logging. A sample without ``group_index`` falls back to
slime's positional grouping: index // n_samples_per_prompt.

TEMPO's rollout hands slime each sample's advantage as its reward (``samples.from_train_sample``:
the update's A_n or A_k, with the invalid-action penalty, the normalisations and the prefix
importance weight already in), and those sum to 0 within every group, so here the centring changes
nothing but rounding; what the hook is needed for is keeping slime's own normalisation, which
groups by position and divides by a std, off them.
"""

from __future__ import annotations

from typing import Any, Sequence


def scalar_reward(sample: Any, args: Any) -> float:
    """The sample's reward as a float (a dict reward is read at ``args.reward_key``)."""
    reward = sample.reward
    if isinstance(reward, dict):
        key = getattr(args, "reward_key", None)
        if key is None or key not in reward:
            raise ValueError(f"sample reward is a dict {sorted(reward)} but --reward-key is {key!r}")
        reward = reward[key]
    if reward is None:
        raise ValueError("sample has no reward: the rollout function must set sample.reward")
    return float(reward)


def post_process(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    group_size = max(1, int(getattr(args, "n_samples_per_prompt", 1) or 1))
    raw = [scalar_reward(s, args) for s in samples]
    keys = [
        ("group", s.group_index) if getattr(s, "group_index", None) is not None else ("position", i // group_size)
        for i, s in enumerate(samples)
    ]
    totals: dict[Any, list[float]] = {}
    for key, reward in zip(keys, raw):
        total = totals.setdefault(key, [0.0, 0])
        total[0] += reward
        total[1] += 1
    centred = [reward - totals[key][0] / totals[key][1] for key, reward in zip(keys, raw)]
    return raw, centred
