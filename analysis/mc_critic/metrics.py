"""Pure math of the critic-vs-Monte-Carlo comparison (numpy only, no scipy).

Every function takes plain sequences and returns floats (or None where a statistic is undefined:
too few points, or no variance on a side), so the results go straight into JSON.

- error: MAE, RMSE, explained variance 1 - Var(MC - V) / Var(MC);
- correlation: Pearson, Spearman (Pearson of average ranks, so ties share their mean rank),
  Kendall's tau-b (ties corrected);
- calibration: equal-width bins of the critic value V on [0, 1]; per bin the mean V and the mean
  MC value; ECE = sum_b n_b / n |mean V_b - mean MC_b|;
- tracking: between consecutive states of one trajectory, the critic's change dV against the MC
  change dMC: their Pearson correlation and the sign agreement;
- ranking: pairwise sign agreement of two score vectors (the action-ranking check);
- the noise floor: the MAE a critic that knew every state's true value would still show against
  M-sample Monte-Carlo values (``perfect_critic_mae``), and the MAE left once the critic's mean
  bias is taken out (``mae_debiased``);
- live states: the same MAE / constant / Pearson / debiased MAE and the noise floor on the states
  some continuation still won (``live_state_metrics``), where a critic that only tells lost states
  from the rest gains nothing.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

SIGN_TOLERANCE = 1e-9
"""Differences at most this large count as 0 (no order) in the sign comparisons."""


def _arrays(xs: Sequence[float], ys: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"need two 1-D sequences of equal length, got shapes {x.shape} and {y.shape}")
    return x, y


def _float(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def mae(values: Sequence[float], targets: Sequence[float]) -> float | None:
    v, t = _arrays(values, targets)
    return _float(np.abs(v - t).mean()) if v.size else None


def rmse(values: Sequence[float], targets: Sequence[float]) -> float | None:
    v, t = _arrays(values, targets)
    return _float(np.sqrt(((v - t) ** 2).mean())) if v.size else None


def explained_variance(values: Sequence[float], targets: Sequence[float]) -> float | None:
    """1 - Var(MC - V) / Var(MC) (population variances); None when the targets do not vary."""
    v, t = _arrays(values, targets)
    if v.size < 2:
        return None
    variance = t.var()
    if variance <= 1e-12:
        return None
    return _float(1.0 - (t - v).var() / variance)


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """None with fewer than two points or a constant side."""
    x, y = _arrays(xs, ys)
    if x.size < 2:
        return None
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = float((dx * dx).sum()), float((dy * dy).sum())
    if sxx <= 1e-24 or syy <= 1e-24:
        return None
    return _float(np.clip((dx * dy).sum() / math.sqrt(sxx * syy), -1.0, 1.0))


def average_ranks(xs: Sequence[float]) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they occupy ([3, 1, 3] -> [2.5, 1, 2.5])."""
    x = np.asarray(xs, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=float)
    start = 0
    while start < x.size:
        end = start
        while end + 1 < x.size and x[order[end + 1]] == x[order[start]]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation of the average ranks."""
    x, y = _arrays(xs, ys)
    return pearson(average_ranks(x), average_ranks(y))


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Kendall's tau-b: (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y)), n0 = n(n-1)/2.
    None when either side is constant (or fewer than two points)."""
    x, y = _arrays(xs, ys)
    if x.size < 2:
        return None
    i, j = np.triu_indices(x.size, k=1)
    sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    untied_x, untied_y = float(np.count_nonzero(sx)), float(np.count_nonzero(sy))
    if untied_x == 0 or untied_y == 0:
        return None
    return _float((sx * sy).sum() / math.sqrt(untied_x * untied_y))


def sign_agreement(dv: Sequence[float], dt: Sequence[float], tolerance: float = SIGN_TOLERANCE) -> tuple[float | None, int]:
    """Among the pairs where the target moved (|dt| > tolerance), the share where the prediction
    moved the same way (a prediction that did not move, |dv| <= tolerance, disagrees).
    Returns (share or None, number of pairs counted)."""
    v, t = _arrays(dv, dt)
    moved = np.abs(t) > tolerance
    counted = int(moved.sum())
    if counted == 0:
        return None, 0
    same = (np.sign(v[moved]) == np.sign(t[moved])) & (np.abs(v[moved]) > tolerance)
    return float(same.mean()), counted


def pairwise_sign_agreement(scores: Sequence[float], targets: Sequence[float]) -> tuple[float | None, int]:
    """Over all pairs i < j of candidates whose targets differ: does the score difference have the
    same sign as the target difference? Returns (share or None, pairs counted)."""
    s, t = _arrays(scores, targets)
    i, j = np.triu_indices(s.size, k=1)
    return sign_agreement(s[i] - s[j], t[i] - t[j])


def calibration(values: Sequence[float], targets: Sequence[float], bins: int = 10) -> dict:
    """Equal-width bins of the values on [0, 1] (bin b holds b/bins <= V < (b+1)/bins, the last
    bin includes 1). Returns {"ece", "bins": [{"lo", "hi", "n", "value_mean", "mc_mean"}]}; empty
    bins have n = 0 and null means; ece is None without any value."""
    v, t = _arrays(values, targets)
    index = np.clip(np.floor(np.clip(v, 0.0, 1.0) * bins).astype(int), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        chosen = index == b
        n = int(chosen.sum())
        row = {"lo": b / bins, "hi": (b + 1) / bins, "n": n, "value_mean": None, "mc_mean": None}
        if n:
            row["value_mean"], row["mc_mean"] = float(v[chosen].mean()), float(t[chosen].mean())
            ece += n / v.size * abs(row["value_mean"] - row["mc_mean"])
        rows.append(row)
    return {"ece": float(ece) if v.size else None, "bins": rows}


def tracking(pairs: Sequence[tuple[float, float, float, float]]) -> dict:
    """``pairs`` of consecutive states (V_a, MC_a, V_b, MC_b), state b after state a on one trajectory.
    Returns the Pearson correlation of dV = V_b - V_a with dMC = MC_b - MC_a, the sign agreement
    (``sign_agreement``) and the counts."""
    if not pairs:
        return {"pairs": 0, "corr": None, "sign_agreement": None, "sign_pairs": 0}
    p = np.asarray(pairs, dtype=float)
    dv, dmc = p[:, 2] - p[:, 0], p[:, 3] - p[:, 1]
    agreement, counted = sign_agreement(dv, dmc)
    return {"pairs": int(len(p)), "corr": pearson(dv, dmc), "sign_agreement": agreement, "sign_pairs": counted}


def value_metrics(values: Sequence[float], targets: Sequence[float], bins: int = 10) -> dict:
    """The headline numbers of one critic on one set of states."""
    v, t = _arrays(values, targets)
    cal = calibration(v, t, bins)
    return {
        "n": int(v.size),
        "mae": mae(v, t),
        "rmse": rmse(v, t),
        "pearson": pearson(v, t),
        "spearman": spearman(v, t),
        "explained_variance": explained_variance(v, t),
        "ece": cal["ece"],
        "value_mean": _float(v.mean()) if v.size else None,
        "mc_mean": _float(t.mean()) if t.size else None,
        # the error left if the critic's mean were moved onto the Monte-Carlo mean: what ranking leaves
        "mae_debiased": mae(v - (v.mean() - t.mean()), t) if v.size else None,
        "calibration": cal["bins"],
    }


def mc_standard_error(wins: Sequence[float], samples: int) -> float | None:
    """RMS over states of the binomial standard error sqrt(p (1 - p) / M) of an MC mean: the error
    that even a perfect critic shows against M-sample Monte-Carlo values."""
    p = np.asarray(wins, dtype=float)
    if not p.size or samples < 1:
        return None
    return _float(np.sqrt((p * (1 - p) / samples).mean()))


PRIOR_STRENGTH_MAX = 1e4
"""Cap on alpha + beta of the states' Beta prior: states whose spread is all Monte-Carlo noise get
a prior this strong (posterior sd about 0.005 around the mean) instead of an infinite one."""
PRIOR_SHAPE_MIN = 0.5
"""Floor on alpha and beta (Jeffreys' prior): states spread as widely as 0/1 values get this one."""


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) = P(p <= x) for p ~ Beta(a, b), by the
    continued fraction of Abramowitz & Stegun 26.5.8 (evaluated by the modified Lentz method),
    on the side of x where it converges fast."""
    if not (a > 0 and b > 0):
        raise ValueError(f"betainc needs a, b > 0 (got {a}, {b})")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - betainc(b, a, 1.0 - x)
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)) - math.log(a)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for j in range(1, 100_000):
        for numerator in (j * (b - j) * x / ((a + 2 * j - 1) * (a + 2 * j)),
                          -(a + j) * (a + b + j) * x / ((a + 2 * j) * (a + 2 * j + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return math.exp(log_front) * f


def expected_abs_deviation(w: float, a: float, b: float) -> float:
    """E|w - p| for p ~ Beta(a, b): with mu = a / (a + b) and E[(w - p)+] = w I_w(a, b) - mu I_w(a + 1, b),
    E|w - p| = mu - w + 2 E[(w - p)+]."""
    mu = a / (a + b)
    return mu - w + 2.0 * (w * betainc(a, b, w) - mu * betainc(a + 1.0, b, w))


def perfect_critic_deviations(wins: Sequence[float], samples: int) -> np.ndarray | None:
    """Per state, E[|w_i - p_i| | k_i]: how far a critic that knew the state's true value p_i is
    expected to be from its M-sample Monte-Carlo value w_i = k_i / M. The p_i get a Beta(alpha, beta)
    prior fitted to the states by moments (mean m of the w_i; their variance s^2 = Var p + E[p (1 - p)] / M,
    so Var p = (s^2 - m (1 - m) / M) / (1 - 1 / M) and alpha + beta = m (1 - m) / Var p - 1, capped at
    PRIOR_STRENGTH_MAX, each shape at least PRIOR_SHAPE_MIN); each state's posterior is
    Beta(alpha + k_i, beta + M - k_i). The prior is fitted on every state given, so a subset's mean
    (the live states') is not fitted on a truncated sample."""
    w = np.asarray(wins, dtype=float)
    if not w.size or samples < 2:
        return None
    mean = float(w.mean())
    spread = mean * (1.0 - mean)
    var_p = (float(w.var()) - spread / samples) / (1.0 - 1.0 / samples)
    strength = spread / var_p - 1.0 if var_p > 0 else math.inf
    strength = min(max(strength, 0.0), PRIOR_STRENGTH_MAX)
    alpha, beta = max(mean * strength, PRIOR_SHAPE_MIN), max((1.0 - mean) * strength, PRIOR_SHAPE_MIN)
    wins_k = np.rint(w * samples)
    return np.array([expected_abs_deviation(k / samples, alpha + k, beta + samples - k) for k in wins_k])


def perfect_critic_mae(wins: Sequence[float], samples: int) -> float | None:
    """The MAE against M-sample Monte-Carlo values of a critic that knew every state's true value:
    the mean of ``perfect_critic_deviations``. Unlike ``mc_standard_error`` it does not take a state
    won in 16 of 16 continuations as certain. A critic cannot be expected to beat this; where it is
    near the constant guess's MAE, no critic can beat the constant by much on these states."""
    deviations = perfect_critic_deviations(wins, samples)
    return None if deviations is None else _float(deviations.mean())


def constant_mae(targets: Sequence[float]) -> float | None:
    """The MAE of guessing the targets' own mean for every state (an oracle constant)."""
    t = np.asarray(targets, dtype=float)
    return mae(t, np.full_like(t, t.mean())) if t.size else None


def live_state_metrics(values: Sequence[float], targets: Sequence[float],
                       perfect_deviations: Sequence[float] | None = None) -> dict:
    """MAE, the constant guess's MAE (the mean Monte-Carlo value of these states), Pearson and the
    MAE without the critic's mean bias on these states, on the states whose Monte-Carlo value is
    above 0. A lost state (no continuation wins) is easy to value and moves the constant far from
    the rest, so a critic can beat the constant over all states by telling lost states apart alone;
    on the live states it must rank the games still open. ``perfect_deviations`` (one per state,
    ``perfect_critic_deviations`` of all states) gives ``perfect_mae``: the floor on these states."""
    v, t = _arrays(values, targets)
    live = t > 0.0
    v, t = v[live], t[live]
    floor = None
    if perfect_deviations is not None:
        d = np.asarray(perfect_deviations, dtype=float)
        if d.shape != live.shape:
            raise ValueError(f"live_state_metrics: {d.size} perfect-critic deviations for {live.size} states")
        floor = _float(d[live].mean()) if t.size else None
    return {
        "n": int(t.size),
        "mae": mae(v, t) if t.size else None,
        "constant_mae": constant_mae(t),
        "pearson": pearson(v, t),
        "mae_debiased": mae(v - (v.mean() - t.mean()), t) if t.size else None,
        "perfect_mae": floor,
    }


def mean_or_none(xs: Sequence[float | None]) -> float | None:
    good = [float(x) for x in xs if x is not None]
    return float(np.mean(good)) if good else None
