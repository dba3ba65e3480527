"""TEMPO training signals (docs/algorithms.md section 1.4).

For one start state s with branches n = 1..N, each branch rolled out for at most H rounds:

    r_n  = segment reward of branch n (environment reward collected inside the macro-step)
    V_n  = 0 if branch n is terminal, else the critic's value of its endpoint
    R_n  = r_n + V_n                      branch return (truncated tail filled by the critic)
    G(s) = (1/N) sum_n R_n                TD target for V(s)
    A_n  = R_n - G(s)                     actor advantage (mean-centred, no std division)

With an invalid-action penalty c > 0 (our addition, ``--invalid-action-penalty``) and u_n the
number of actions of branch n the environment did not accept:

    A_n  = (R_n - c u_n) - (1/N) sum_m (R_m - c u_m)     the critic's target G(s) is unchanged

so the critic keeps estimating the probability of winning, and only the actor is told that a
wasted round is worse than its expected value. Without it, an unaccepted action in a key room is a
free "pass": the state and its value stay while a wrong key loses, so the policy drifts to text
the game does not accept (docs/experiments/actor-advantages.md, "Invalid actions").

For the critic at s with K sampled estimates V_k (None = the completion did not parse):

    e_k  = |V_k - G| / R_max              estimation error, 1 for a parse failure
    r_k  = -e_k                           critic reward "abs" (the method as specified)
    r_k  = -e_k^2                         critic reward "squared" = -(V_k - G)^2 / R_max^2
    A_k  = r_k - (1/K) sum_j r_j          critic advantage (mean-centred, no std division)

A parse failure gets r_k = -1, the worst reward of either kind. Over the states a critic cannot
tell apart, the expected "abs" reward is maximised by the *median* of G and the "squared" one by
its *mean*: with 0/1 outcomes and a success rate below 1/2 the median is 0, so "abs" pushes an
undiscriminating critic to answer 0 everywhere, while "squared" pushes it to the success rate.

With ``--normalise-advantages`` (our addition) the actor advantages of one TD update, all its
branches b of all its kept groups together, are divided by their standard deviation:

    A_b <- A_b / sigma,   sigma = sqrt((1/B) sum_b (A_b - mean_b A_b)^2)    (unchanged if sigma = 0)

PPO's usual advantage normalisation. It keeps the ratios between groups (a branch that loses a
0.9 value still counts nine times one that loses 0.1) but not the scale: A_n = R_n - G(s) is as
large as the values, so a weak policy, whose values are small, otherwise takes small steps
(multi-turn GRPO divides by a per-game std and does not have this problem).

With ``--critic-advantage-std`` s > 0 (our addition) the critic advantages of one TD update, all K
samples of all its kept start states together, are rescaled to std s:

    A_k <- s A_k / sigma_c,   sigma_c = population std of those advantages   (unchanged if sigma_c = 0)

Actor and critic are one model trained in one step, so their advantage scales set their shares of
each step: the actor's normalised advantages have std 1, the critic's as specified about 0.2-0.3.

With audits (``--audit-weight`` lambda > 0, our addition): each start state s also plays one branch
to the episode's end, with outcome z(s) in {0, 1}, a Monte-Carlo sample of V(s). The critic is
trained towards

    G_crit(s) = (1 - lambda) G(s) + lambda z(s)          (lambda = 1: audits alone)

while the actor keeps A_n = R_n - G(s). The readiness gate compares the critic's Brier score on the
last audits (estimate e_i, outcome z_i, i = 1..m) with the constant guess zbar = mean_i z_i:

    B_critic = (1/m) sum_i (e_i - z_i)^2,   B_const = (1/m) sum_i (zbar - z_i)^2
    skill    = 1 - B_critic / B_const      (ready: m >= AUDITS_MIN and skill > 0)

A critic that is not ready does not value endpoints: V_n = zbar for every non-terminal branch.

With ``--audit-boundaries`` (our addition) every state s' an audit passes at a macro-step boundary
before its end is audited by the same outcome, z(s') = z(s), and trained towards it: a Monte-Carlo
sample of V(s') under the current policy that costs no environment step.

With ``--critic-calibration platt`` (our addition; needs audits) every value the critic gives is
passed through a map fitted on the last audits (Platt scaling, a logistic regression in the
value's logit):

    V_cal = sigmoid(a logit(V) + b)          logit(V) with V clipped to [v_min, 1 - v_min]
    (a, b) = argmin_{a, b}  -sum_i [z_i log V_cal(e_i) + (1 - z_i) log(1 - V_cal(e_i))]
                            + (rho / 2) ((a - 1)^2 + b^2)

then a is clipped to [0, a_max] and the rest refitted at that a. a = 0 is the constant guess sigmoid(b),
so a critic that cannot tell states apart falls back to the audits' rate, and b removes a shift
of the whole critic (its outcomes lagging an improving actor). The gate then scores the calibrated
estimate each audit got from the map of the audits before it (prequential), never a map fitted
on that audit's own outcome.

With ``--critic-calibration levels`` the map also has one intercept per level L, the count of the
environment's milestones left at the state (Temporal GRPO's stages; audit i's start state has L_i):

    V_cal = sigmoid(a logit(V) + b + c_L)    c_L = 0 for a level none of the audits has
    (a, b, c) = argmin  -sum_i [z_i log V_cal(e_i, L_i) + (1 - z_i) log(1 - V_cal(e_i, L_i))]
                        + (rho / 2) ((a - 1)^2 + b^2) + (rho_L / 2) sum_L c_L^2

so progress the critic does not value (a held key, an opened vault) is valued by the audits'
outcomes at that level, and what it does tell apart (a lost game) keeps its slope a.

With ``--calibration-drift`` (our addition) the fit also has a drift d of the outcomes per TD update:
audit i was played in update u_i, u* is the newest update among the audits, and

    (a, b, c, d) = argmin  -sum_i [z_i log p_i + (1 - z_i) log(1 - p_i)] + the penalties above + (rho_d / 2) d^2
    p_i = sigmoid(a logit(e_i) + b + c_{L_i} + d (u_i - u*))

The map is read at u*, where the drift term is 0: V_cal = sigmoid(a logit(V) + b + c_L) as above,
but b is the outcome rate of the newest update's actor rather than the window's average, which
lags an actor that improves while the window fills.

A group is degenerate when every |A| <= ADVANTAGE_EPSILON: it carries no learning signal and
contributes no training sample. In the warm-up phase G is the Monte-Carlo return of the complete
trajectory through s (1 if it was eventually won, else 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import numpy as np

from tempo_plugin.algorithms.stats import population_std

ADVANTAGE_EPSILON = 1e-12


@dataclass(frozen=True)
class ActorSignals:
    returns: list[float]
    value_target: float
    advantages: list[float]
    degenerate: bool
    zero_reward_value_std: float


@dataclass(frozen=True)
class CriticSignals:
    rewards: list[float]
    advantages: list[float]
    errors: list[float]
    degenerate: bool
    parse_failures: int


def actor_signals(
    segment_rewards: Sequence[float],
    endpoint_values: Sequence[float | None],
    terminal: Sequence[bool],
    penalties: Sequence[float] | None = None,
) -> ActorSignals:
    """R_n = r_n + (0 if terminal_n else V_n); G = mean R_n; A_n = (R_n - p_n) - mean_m (R_m - p_m)
    with p_n = ``penalties[n]`` (c u_n; 0 when None). ``returns`` are the R_n.

    ``zero_reward_value_std`` is the population std of V_n over the non-terminal branches with
    r_n = 0 (0 when fewer than two): branches the environment cannot tell apart but the critic can
    (metric ``actor/value_gap_zero_reward``). An endpoint value of None on a non-terminal branch
    (no critic sample parsed) counts as 0.
    """
    n = len(segment_rewards)
    if n == 0 or len(endpoint_values) != n or len(terminal) != n:
        raise ValueError(
            f"actor_signals needs N >= 1 branches with equal lengths, got rewards={n}, "
            f"values={len(endpoint_values)}, terminal={len(terminal)}"
        )
    if penalties is not None and len(penalties) != n:
        raise ValueError(f"actor_signals needs one penalty per branch, got {len(penalties)} for {n}")
    bootstrap = [0.0 if t or v is None else float(v) for v, t in zip(endpoint_values, terminal)]
    returns = [float(r) + v for r, v in zip(segment_rewards, bootstrap)]
    value_target = sum(returns) / n
    shaped = [ret - float(p) for ret, p in zip(returns, penalties)] if penalties is not None else returns
    shaped_mean = sum(shaped) / n
    advantages = [x - shaped_mean for x in shaped]
    degenerate = all(abs(a) <= ADVANTAGE_EPSILON for a in advantages)
    zero_reward_values = [
        v for r, v, t in zip(segment_rewards, bootstrap, terminal) if not t and float(r) == 0.0
    ]
    return ActorSignals(
        returns=returns,
        value_target=value_target,
        advantages=advantages,
        degenerate=degenerate,
        zero_reward_value_std=population_std(zero_reward_values),
    )


def batch_normalised(advantages: Sequence[float]) -> list[float]:
    """A_b / sigma with sigma the population std of ``advantages`` (returned unchanged if sigma is 0)."""
    sigma = population_std(advantages)
    if sigma <= ADVANTAGE_EPSILON:
        return [float(a) for a in advantages]
    return [float(a) / sigma for a in advantages]


def critic_scale(sigma: float, std: float) -> float:
    """The factor s / sigma_c of ``--critic-advantage-std`` s, with sigma_c the population std of the
    update's critic advantages; 1 when s = 0 (the method as specified) or sigma_c = 0."""
    return std / sigma if std > 0 and sigma > ADVANTAGE_EPSILON else 1.0


CRITIC_REWARDS = ("abs", "squared")


def critic_signals(
    estimates: Sequence[float | None], value_target: float, r_max: float = 1.0, reward: str = "abs"
) -> CriticSignals:
    """e_k = |V_k - G| / R_max (1 if V_k is None); r_k = -e_k ("abs") or -e_k^2 ("squared");
    A_k = r_k - mean_j r_j."""
    if len(estimates) == 0:
        raise ValueError("critic_signals needs K >= 1 estimates")
    if not r_max > 0:
        raise ValueError(f"r_max must be > 0 (--r-max), got {r_max}")
    if reward not in CRITIC_REWARDS:
        raise ValueError(f"critic reward must be one of {CRITIC_REWARDS} (--critic-reward), got {reward!r}")
    errors = [1.0 if v is None else abs(float(v) - value_target) / r_max for v in estimates]
    rewards = [-e if reward == "abs" else -e * e for e in errors]
    mean_reward = sum(rewards) / len(rewards)
    advantages = [r - mean_reward for r in rewards]
    return CriticSignals(
        rewards=rewards,
        advantages=advantages,
        errors=errors,
        degenerate=all(abs(a) <= ADVANTAGE_EPSILON for a in advantages),
        parse_failures=sum(v is None for v in estimates),
    )


def critic_target(td_target: float, audit: float | None, audit_weight: float) -> float:
    """G_crit = (1 - lambda) G + lambda z; G where the state has no audit outcome z (None)."""
    if audit is None or audit_weight <= 0:
        return td_target
    return (1.0 - audit_weight) * td_target + audit_weight * audit


@dataclass(frozen=True)
class BrierScores:
    critic: float  # B_critic
    constant: float  # B_const
    base_rate: float  # zbar

    @property
    def skill(self) -> float:
        """1 - B_critic / B_const (0 when the outcomes do not vary, so no guess beats another)."""
        return 1.0 - self.critic / self.constant if self.constant > 0 else 0.0


def brier_scores(pairs: Sequence[tuple[float, float]]) -> BrierScores:
    """Brier scores of (estimate e_i, outcome z_i) pairs, and of the constant guess zbar."""
    if not pairs:
        raise ValueError("brier_scores needs at least one (estimate, outcome) pair")
    base = sum(z for _, z in pairs) / len(pairs)
    critic = sum((e - z) ** 2 for e, z in pairs) / len(pairs)
    constant = sum((base - z) ** 2 for _, z in pairs) / len(pairs)
    return BrierScores(critic, constant, base)


CALIBRATION_PRIOR = 1.0  # rho: pulls (a, b) towards the identity map (1, 0), as one pseudo-audit would
CALIBRATION_LEVEL_PRIOR = 0.5  # rho_L: pulls each c_L towards 0, about as much as 2 audits at a rate of 1/2 would
CALIBRATION_DRIFT_PRIOR = 2.0  # rho_d: pulls the drift per TD update towards 0 (a window without a trend keeps d = 0)
CALIBRATION_SLOPE_MAX = 4.0  # a_max: a window the critic separates perfectly would send a to infinity
CALIBRATION_VALUE_MIN = 0.01  # v_min: the smallest value step of the critic's answers (0.00..1.00)


@dataclass(frozen=True)
class Calibration:
    """The map V -> sigmoid(a logit(V) + b + c_L) at a state with L milestones left; the identity
    (a = 1, b = 0, no c) returns V unchanged. A level without an intercept (unknown, or not among
    the audits the map was fitted on) has c_L = 0."""

    a: float = 1.0
    b: float = 0.0
    levels: tuple[tuple[int, float], ...] = ()  # (L, c_L), --critic-calibration levels
    drift: float = 0.0  # d, --calibration-drift: fitted, reported, not applied (the map is read at u*)

    def __call__(self, value: float, level: int | None = None) -> float:
        c = dict(self.levels).get(level, 0.0) if level is not None else 0.0
        if self.a == 1.0 and self.b == 0.0 and c == 0.0:
            return value
        return _sigmoid(self.a * _logit(value) + self.b + c)


def fit_calibration(pairs: Sequence[tuple[float, float]], prior: float = CALIBRATION_PRIOR,
                    levels: Sequence[int | None] | None = None,
                    level_prior: float = CALIBRATION_LEVEL_PRIOR, ages: Sequence[float] | None = None,
                    drift_prior: float = CALIBRATION_DRIFT_PRIOR) -> Calibration:
    """(a, b) of the docstring's penalised logistic regression on (estimate e_i, outcome z_i) pairs
    (outcomes in [0, 1]); with ``levels`` (each pair's L_i, None where unknown) also one c_L per
    level among them; with ``ages`` (each pair's u_i - u*, in TD updates) also the drift d. By
    Newton's method with step halving: the penalty keeps the problem strictly convex, and halving a
    step until the objective falls keeps Newton from overshooting (estimates at the floor, logit
    -4.6 for all, sent a full-step Newton to a = 4, b = -33)."""
    import numpy as np  # here, not at the top: slime's hook modules import this file and stay light

    if not pairs:
        raise ValueError("fit_calibration needs at least one (estimate, outcome) pair")
    if prior <= 0 or level_prior <= 0 or drift_prior <= 0:
        raise ValueError(f"fit_calibration needs positive priors (got {prior}, {level_prior}, {drift_prior})")
    if levels is not None and len(levels) != len(pairs):
        raise ValueError(f"fit_calibration got {len(levels)} levels for {len(pairs)} pairs")
    if ages is not None and len(ages) != len(pairs):
        raise ValueError(f"fit_calibration got {len(ages)} ages for {len(pairs)} pairs")
    known = sorted({lv for lv in levels or () if lv is not None})
    column = {lv: 2 + j for j, lv in enumerate(known)}
    drift = 2 + len(known) if ages is not None else None
    rows = np.zeros((len(pairs), 2 + len(known) + (ages is not None)))  # r_i: (logit e_i, 1, one-hot L_i[, u_i - u*])
    rows[:, 0] = [_logit(e) for e, _ in pairs]
    rows[:, 1] = 1.0
    for i, lv in enumerate(levels or ()):
        if lv is not None:
            rows[i, column[lv]] = 1.0
    if drift is not None:
        rows[:, drift] = [float(age) for age in ages]
    zs = np.array([float(z) for _, z in pairs])
    penalty = np.array([prior, prior] + [level_prior] * len(known) + [drift_prior] * (drift is not None))
    centre = np.zeros(len(penalty))
    centre[0] = 1.0  # the identity map
    theta = _penalised_logistic(rows, zs, penalty, centre, centre.copy(), free=np.ones(len(penalty), bool))
    if not 0.0 <= theta[0] <= CALIBRATION_SLOPE_MAX:  # the rest refitted at the clipped slope
        theta[0] = min(max(theta[0], 0.0), CALIBRATION_SLOPE_MAX)
        free = np.ones(len(penalty), bool)
        free[0] = False
        theta = _penalised_logistic(rows, zs, penalty, centre, theta, free)
    return Calibration(float(theta[0]), float(theta[1]), tuple((lv, float(theta[column[lv]])) for lv in known),
                       0.0 if drift is None else float(theta[drift]))


def _penalised_logistic(rows: np.ndarray, zs: np.ndarray, penalty: np.ndarray, centre: np.ndarray,
                        theta: np.ndarray, free: np.ndarray) -> np.ndarray:
    """argmin over theta[free] of sum_i [log(1 + e^(r_i theta)) - z_i r_i theta]
    + sum_j penalty_j (theta_j - centre_j)^2 / 2, from ``theta``, by damped Newton."""
    import numpy as np

    def objective(t: np.ndarray) -> float:
        s = rows @ t
        return float(np.sum(np.logaddexp(0.0, s) - zs * s) + np.sum(penalty * (t - centre) ** 2) / 2)

    theta = theta.astype(float)
    sub = rows[:, free]
    for _ in range(100):
        p = 0.5 * (1.0 + np.tanh((rows @ theta) / 2))  # sigmoid, without overflow at large |r_i theta|
        grad = sub.T @ (p - zs) + (penalty * (theta - centre))[free]
        hess = (sub * (p * (1.0 - p))[:, None]).T @ sub + np.diag(penalty[free])
        step = np.zeros_like(theta)
        step[free] = np.linalg.solve(hess, grad)
        if np.sum(np.abs(step)) < 1e-12:
            break
        now, t = objective(theta), 1.0
        while t > 1e-12 and objective(theta - t * step) > now + 1e-12 * abs(now):  # rounding is no rise
            t /= 2
        theta = theta - t * step
    return theta


def _logit(value: float) -> float:
    v = min(max(value, CALIBRATION_VALUE_MIN), 1.0 - CALIBRATION_VALUE_MIN)
    return math.log(v / (1.0 - v))


def _sigmoid(t: float) -> float:
    if t >= 0:
        return 1.0 / (1.0 + math.exp(-t))
    e = math.exp(t)
    return e / (1.0 + e)
