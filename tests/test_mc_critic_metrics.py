"""analysis/mc_critic/metrics.py (and the ranking helpers of report.py) on hand-computed values."""

import math

import numpy as np
import pytest

from analysis.mc_critic import metrics as m
from analysis.mc_critic.report import _top1


def test_average_ranks_share_ties():
    assert m.average_ranks([3, 1, 3]).tolist() == [2.5, 1.0, 2.5]
    assert m.average_ranks([5, 5, 5, 1]).tolist() == [3.0, 3.0, 3.0, 1.0]


def test_spearman_with_ties():
    # ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4]; deviations [-1.5, 0, 0, 1.5] and [-1.5, .5, -.5, 1.5]
    # -> sum dx dy = 4.5, sum dx^2 = 4.5, sum dy^2 = 5 -> 4.5 / sqrt(22.5) = 3 / sqrt(10)
    assert m.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10))
    assert m.spearman([1, 2, 3], [10, 20, 1000]) == pytest.approx(1.0)  # monotone, not linear
    assert m.spearman([1, 1, 1], [1, 2, 3]) is None  # constant side
    assert m.spearman([1], [2]) is None


def test_kendall_tau_b():
    # pairs of [1,2,2,3] x [1,3,2,4]: 5 concordant, 0 discordant, 1 tied in x -> 5 / sqrt(5 * 6)
    assert m.kendall_tau([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(5 / math.sqrt(30))
    # [1,2,3] x [1,3,2]: 2 concordant, 1 discordant -> 1/3
    assert m.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert m.kendall_tau([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    assert m.kendall_tau([1, 2], [5, 5]) is None


def test_error_metrics_and_explained_variance():
    values, targets = [0.1, 0.3, 0.6, 0.8], [0.0, 1.0, 1.0, 0.0]
    assert m.mae(values, targets) == pytest.approx((0.1 + 0.7 + 0.4 + 0.8) / 4)
    assert m.rmse(values, targets) == pytest.approx(math.sqrt((0.01 + 0.49 + 0.16 + 0.64) / 4))
    # residuals [-.1, .7, .4, -.8], mean .05, variance 1.29 / 4; Var(MC) = .25 -> 1 - 1.29
    assert m.explained_variance(values, targets) == pytest.approx(1 - 1.29)
    assert m.explained_variance([0.2, 1.2, 1.2, 0.2], targets) == pytest.approx(1.0)  # a constant offset
    assert m.explained_variance([0.1, 0.2], [0.5, 0.5]) is None  # MC does not vary
    assert m.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)


def test_calibration_two_bins_by_hand():
    # bin [0, .5): V .1, .3 (mean .2), MC 0, 1 (mean .5); bin [.5, 1]: V .6, .8 (.7), MC 1, 0 (.5)
    # ECE = 2/4 |.2 - .5| + 2/4 |.7 - .5| = .15 + .1
    cal = m.calibration([0.1, 0.3, 0.6, 0.8], [0.0, 1.0, 1.0, 0.0], bins=2)
    assert cal["ece"] == pytest.approx(0.25)
    assert [b["n"] for b in cal["bins"]] == [2, 2]
    assert cal["bins"][0]["value_mean"] == pytest.approx(0.2) and cal["bins"][0]["mc_mean"] == pytest.approx(0.5)
    # edges: 0.5 opens the upper bin, 1.0 stays in the last one; empty bins have no means
    cal = m.calibration([0.5, 1.0], [1.0, 1.0], bins=10)
    assert [b["n"] for b in cal["bins"]] == [0, 0, 0, 0, 0, 1, 0, 0, 0, 1]
    assert cal["bins"][0]["value_mean"] is None
    assert cal["ece"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.0)


def test_tracking_by_hand():
    pairs = [(0.2, 0.1, 0.5, 0.6), (0.5, 0.6, 0.4, 0.9), (0.4, 0.9, 0.4, 0.9), (0.3, 0.5, 0.1, 0.2)]
    # dV = [.3, -.1, 0, -.2], dMC = [.5, .3, 0, -.3]: MC moved in 3 pairs, the critic agrees in 2
    result = m.tracking(pairs)
    assert result["pairs"] == 4 and result["sign_pairs"] == 3
    assert result["sign_agreement"] == pytest.approx(2 / 3)
    # deviations from the means (0, .125): sum dxdy = .18, sum dx^2 = .14, sum dy^2 = .3675
    assert result["corr"] == pytest.approx(0.18 / math.sqrt(0.14 * 0.3675))
    assert m.tracking([]) == {"pairs": 0, "corr": None, "sign_agreement": None, "sign_pairs": 0}


def test_sign_agreement_counts_a_flat_critic_as_wrong():
    assert m.sign_agreement([0.0, 0.1], [0.2, 0.1]) == (0.5, 2)
    assert m.sign_agreement([0.3], [0.0]) == (None, 0)


def test_pairwise_sign_agreement_and_top1():
    scores, targets = [0.2, 0.5, 0.5], [0.0, 1.0, 0.5]
    # (0,1): -.3 vs -1 agree; (0,2): -.3 vs -.5 agree; (1,2): 0 vs .5 -> a tie in the critic disagrees
    assert m.pairwise_sign_agreement(scores, targets) == (pytest.approx(2 / 3), 3)
    # the critic's top is shared by candidates 1 (MC best) and 2 (not): half the credit
    assert _top1(np.array(scores), np.array(targets)) == 0.5
    assert _top1(np.array([0.9, 0.1]), np.array([0.5, 0.5])) == 1.0  # MC tie: either pick is right


def test_value_metrics_and_mc_noise():
    block = m.value_metrics([0.1, 0.3, 0.6, 0.8], [0.0, 1.0, 1.0, 0.0])
    assert block["n"] == 4 and block["ece"] == pytest.approx(m.calibration([0.1, 0.3, 0.6, 0.8], [0, 1, 1, 0])["ece"])
    assert len(block["calibration"]) == 10
    # p = .5 and 0 with M = 4: sqrt(mean(.25 / 4, 0)) = sqrt(1/32)
    assert m.mc_standard_error([0.5, 0.0], 4) == pytest.approx(math.sqrt(1 / 32))
    assert m.mean_or_none([None, 1.0, 3.0]) == 2.0 and m.mean_or_none([None]) is None
    # a critic 0.1 above every target: MAE 0.1, none of it left once its mean bias is taken out
    shifted = m.value_metrics([0.2, 0.5, 0.9], [0.1, 0.4, 0.8])
    assert shifted["mae"] == pytest.approx(0.1) and shifted["mae_debiased"] == pytest.approx(0.0, abs=1e-12)


def test_live_states_leave_out_the_lost_ones():
    # four lost states valued right and two live states valued in reverse: over all six the critic
    # beats the constant (MAE 1/6 against 2/9, the constant 1/6), on the live ones it does not (.5 against .25)
    values, targets = [0.0] * 4 + [0.75, 0.25], [0.0] * 4 + [0.25, 0.75]
    assert m.mae(values, targets) == pytest.approx(1 / 6) and m.mae(targets, [1 / 6] * 6) == pytest.approx(2 / 9)
    live = m.live_state_metrics(values, targets)
    assert live["n"] == 2 and live["mae"] == 0.5 and live["constant_mae"] == 0.25
    assert live["pearson"] == pytest.approx(-1.0) and live["mae_debiased"] == pytest.approx(0.5)  # no mean bias to take out
    assert live["perfect_mae"] is None  # no floor given
    assert m.live_state_metrics([0.3], [0.0]) == {"n": 0, "mae": None, "constant_mae": None, "pearson": None,
                                                  "mae_debiased": None, "perfect_mae": None}


def test_live_states_debiased_mae_and_floor_by_hand():
    # the live states read 0.1 high: MAE 0.1, none once the bias is out; the floor is the mean of the
    # live states' own deviations (0.3 and 0.5), the lost states' (0.01, 0.02) left out
    live = m.live_state_metrics([0.0, 0.0, 0.35, 0.85], [0.0, 0.0, 0.25, 0.75], [0.01, 0.02, 0.3, 0.5])
    assert live["mae"] == pytest.approx(0.1) and live["mae_debiased"] == pytest.approx(0.0, abs=1e-12)
    assert live["perfect_mae"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="3 perfect-critic deviations for 4 states"):
        m.live_state_metrics([0.0, 0.0, 0.35, 0.85], [0.0, 0.0, 0.25, 0.75], [0.1, 0.2, 0.3])


def test_perfect_critic_deviations_per_state():
    # 0/1 states at M = 16: every state's deviation is 1/34 (the floor by hand below), so the
    # live half's mean is 1/34 too; the deviations' mean is the floor
    deviations = m.perfect_critic_deviations([0.0, 1.0, 0.0, 1.0], 16)
    assert deviations.tolist() == pytest.approx([1 / 34] * 4)
    spread = [0.0, 0.25, 0.5, 0.5, 0.75, 1.0]
    assert float(m.perfect_critic_deviations(spread, 16).mean()) == pytest.approx(m.perfect_critic_mae(spread, 16))
    assert m.perfect_critic_deviations([], 16) is None
    assert m.constant_mae([0.0, 0.5, 1.0]) == pytest.approx(1 / 3) and m.constant_mae([]) is None


def test_incomplete_beta_against_closed_forms():
    assert m.betainc(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert m.betainc(3, 1, 0.5) == pytest.approx(0.5 ** 3)  # I_x(a, 1) = x^a
    assert m.betainc(1, 4, 0.2) == pytest.approx(1 - 0.8 ** 4)  # I_x(1, b) = 1 - (1 - x)^b
    assert m.betainc(2.5, 2.5, 0.5) == pytest.approx(0.5)  # symmetric
    assert (m.betainc(2, 3, 0.0), m.betainc(2, 3, 1.0)) == (0.0, 1.0)
    with pytest.raises(ValueError, match="a, b > 0"):
        m.betainc(0, 1, 0.5)
    # E|1/2 - p| for p ~ Beta(2, 2): 2 * int_0^1/2 (1/2 - p) 6 p (1 - p) dp = 12 / 64 = 3/16
    assert m.expected_abs_deviation(0.5, 2, 2) == pytest.approx(3 / 16)
    # at w = 1: E|1 - p| = 1 - mean = b / (a + b)
    assert m.expected_abs_deviation(1.0, 3, 1) == pytest.approx(1 / 4)


def test_perfect_critic_mae_by_hand():
    # 0/16 and 16/16 states: Var p = (1/4 - 1/64) / (15/16) = 1/4, so alpha + beta = 0 -> both shapes at the
    # Jeffreys floor 1/2; a state won 16 of 16 has posterior Beta(16.5, 0.5): E|1 - p| = 0.5 / 17
    assert m.perfect_critic_mae([0.0, 1.0, 0.0, 1.0], 16) == pytest.approx(1 / 34)
    # 1/4 and 3/4 with M = 4: the spread is all binomial noise (Var p = 0), so the prior pins p near the
    # mean 1/2 (strength capped at 1e4) and each state is 1/4 away from it: a perfect critic ties the constant
    assert m.perfect_critic_mae([0.25, 0.75], 4) == pytest.approx(0.25, abs=1e-3)
    assert m.mae([0.25, 0.75], [0.5, 0.5]) == 0.25
    # more continuations shrink the floor on the same spread of states
    spread = [0.0, 0.25, 0.5, 0.75, 1.0]
    assert m.perfect_critic_mae(spread, 64) < m.perfect_critic_mae(spread, 16) < m.perfect_critic_mae(spread, 4)
    assert m.perfect_critic_mae([], 16) is None and m.perfect_critic_mae([0.5], 1) is None
