"""Tests for the prefix importance-sampling correction (tempo_plugin.algorithms.importance).

Every expectation is worked out by hand in the comments.
"""

from __future__ import annotations

import math

import pytest
import torch

from tempo_plugin.algorithms.importance import (
    ImportanceStats,
    importance_stats,
    policy_staleness,
    prefix_weights,
    self_normalise,
    stale_mask,
)


def f64(values):
    return torch.tensor(values, dtype=torch.float64)


def approx_list(values):
    return pytest.approx(values, abs=1e-12)


def one_line_value_error(fn, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


# ---------------------------------------------------------------------------------- prefix_weights

# Log ratios log w = [0, ln 0.5, ln 3, ln 10] on top of arbitrary old sums L_old = [-1, -2, -3, -4].
L_OLD = [-1.0, -2.0, -3.0, -4.0]
LOG_RATIOS = [0.0, math.log(0.5), math.log(3.0), math.log(10.0)]
L_CUR = [o + r for o, r in zip(L_OLD, LOG_RATIOS)]


def test_weights_are_truncated_at_c():
    w = prefix_weights(f64(L_CUR), f64(L_OLD), clip=2.0)
    # w = exp(log w) = [1, 0.5, 3, 10]; min(w, 2) = [1, 0.5, 2, 2]
    assert w.tolist() == approx_list([1.0, 0.5, 2.0, 2.0])
    # the truncated ones are exactly C, not a rounding of exp(ln C)
    assert w[2].item() == 2.0 and w[3].item() == 2.0
    assert w.dtype == torch.float64


def test_default_clip_is_two_and_weights_below_c_pass_through():
    # log w = [ln 1.5, ln 0.25] -> w = [1.5, 0.25], both below C = 2: unchanged
    w = prefix_weights(f64([math.log(1.5) - 7.0, math.log(0.25) - 7.0]), f64([-7.0, -7.0]))
    assert w.tolist() == approx_list([1.5, 0.25])


def test_a_larger_clip_truncates_less():
    w = prefix_weights(f64(L_CUR), f64(L_OLD), clip=5.0)
    # min([1, 0.5, 3, 10], 5) = [1, 0.5, 3, 5]
    assert w.tolist() == approx_list([1.0, 0.5, 3.0, 5.0])


def test_fresh_state_has_weight_exactly_one():
    # fresh state: L_old = 0, L_cur = 0 -> log w = 0 -> w = exp(0) = 1 exactly
    w = prefix_weights(torch.zeros(3), torch.zeros(3))
    assert torch.equal(w, torch.ones(3))
    # an unchanged policy (L_cur = L_old, any value) also gives log w = 0 -> w = 1 exactly
    same = prefix_weights(f64([-1234.5, -0.25]), f64([-1234.5, -0.25]))
    assert torch.equal(same, torch.ones(2, dtype=torch.float64))


def test_huge_log_ratio_gives_c_not_inf_or_nan():
    # log w = 1e4 - 0 would be exp(1e4) = inf; truncated it is C = 2. log w = -1e4 underflows to 0.
    for dtype in (torch.float32, torch.float64):
        w = prefix_weights(torch.tensor([1e4, -1e4, 0.0], dtype=dtype), torch.zeros(3, dtype=dtype), clip=2.0)
        assert torch.isfinite(w).all()
        assert w.tolist() == [2.0, 0.0, 1.0]
        assert w.dtype == dtype


def test_float32_inputs_keep_their_dtype():
    w = prefix_weights(torch.tensor([-3.0, -5.0]), torch.tensor([-3.0, -4.0]))
    # log w = [0, -1] -> w = [1, e^-1 = 0.36787944...]
    assert w.dtype == torch.float32
    assert w.tolist() == pytest.approx([1.0, math.exp(-1.0)], rel=1e-6)


def test_empty_batch_gives_empty_weights():
    w = prefix_weights(torch.zeros(0), torch.zeros(0))
    assert w.shape == (0,)


@pytest.mark.parametrize(
    "cur, old, clip",
    [
        (torch.zeros(3), torch.zeros(4), 2.0),  # shape mismatch
        (torch.zeros(2, 2), torch.zeros(2, 2), 2.0),  # 2-D
        (torch.tensor(0.0), torch.tensor(0.0), 2.0),  # 0-D
        (torch.zeros(2), torch.zeros(2), 0.0),  # C = 0
        (torch.zeros(2), torch.zeros(2), -1.0),  # C < 0
        (torch.zeros(2), torch.zeros(2), math.nan),  # C = nan
        (torch.zeros(2), torch.zeros(2), math.inf),  # C = inf
        (torch.tensor([0.0, math.nan]), torch.zeros(2), 2.0),  # nan in L_cur
        (torch.zeros(2), torch.tensor([-math.inf, 0.0]), 2.0),  # -inf in L_old
    ],
)
def test_prefix_weights_rejects_bad_input(cur, old, clip):
    one_line_value_error(prefix_weights, cur, old, clip)


# ---------------------------------------------------------------------------------- self_normalise


def test_self_normalise_divides_by_the_batch_mean():
    # mean([2, 2, 1, 3]) = 8 / 4 = 2 -> [1, 1, 0.5, 1.5], whose mean is 1
    w = self_normalise(f64([2.0, 2.0, 1.0, 3.0]))
    assert w.tolist() == approx_list([1.0, 1.0, 0.5, 1.5])


def test_self_normalise_of_truncated_weights():
    # [1, 0.5, 2, 2]: mean = 5.5 / 4 = 1.375 -> [1/1.375, 0.5/1.375, 2/1.375, 2/1.375]
    #               = [8/11, 4/11, 16/11, 16/11]
    w = self_normalise(prefix_weights(f64(L_CUR), f64(L_OLD)))
    assert w.tolist() == approx_list([8 / 11, 4 / 11, 16 / 11, 16 / 11])


def test_self_normalise_edge_cases():
    assert self_normalise(torch.zeros(0)).shape == (0,)
    # all-zero weights: mean 0, returned unchanged (no nan)
    assert torch.equal(self_normalise(torch.zeros(3)), torch.zeros(3))
    one_line_value_error(self_normalise, torch.tensor([1.0, -0.5]))
    one_line_value_error(self_normalise, torch.tensor([1.0, math.inf]))
    one_line_value_error(self_normalise, torch.ones(2, 2))


# ---------------------------------------------------------------------------------- staleness


def test_staleness_and_mask():
    versions = [5, 3, 5, 0]
    # current 5: d = [5-5, 5-3, 5-5, 5-0] = [0, 2, 0, 5]
    assert policy_staleness(versions, 5).tolist() == [0, 2, 0, 5]
    # S_max = 2: keep d <= 2 -> [T, T, T, F]
    assert stale_mask(versions, 5, 2).tolist() == [True, True, True, False]
    # S_max = 0: only the current version -> [T, F, T, F]
    assert stale_mask(torch.tensor(versions), 5, 0).tolist() == [True, False, True, False]
    # S_max = None: no cap
    assert stale_mask(versions, 5, None).tolist() == [True, True, True, True]
    assert stale_mask(versions, 5, 2).dtype == torch.bool
    assert stale_mask([], 5, 2).shape == (0,)


def test_staleness_rejects_bad_input():
    one_line_value_error(stale_mask, [1, 2], 5, -1)  # negative cap (None is "no cap")
    one_line_value_error(stale_mask, [6], 5, 2)  # version newer than current
    one_line_value_error(stale_mask, [[1, 2]], 5, 2)  # 2-D
    one_line_value_error(policy_staleness, [1.5], 5)  # not integers


# ---------------------------------------------------------------------------------- importance_stats


def test_ess_hand_example():
    # w = [1, 1, 2, 0]: sum w = 4, sum w^2 = 1 + 1 + 4 + 0 = 6, n = 4 -> ess = 4^2 / (4 * 6) = 16/24 = 2/3
    s = importance_stats(torch.zeros(4), torch.zeros(4), f64([1.0, 1.0, 2.0, 0.0]), 2.0, [0, 0, 0, 0])
    assert s.ess == pytest.approx(2 / 3, abs=1e-12)


def test_ess_is_one_for_equal_weights_and_scale_free():
    s = importance_stats(torch.zeros(3), torch.zeros(3), f64([0.7, 0.7, 0.7]), 2.0, [0, 0, 0])
    # (3 * 0.7)^2 / (3 * 3 * 0.49) = 4.41 / 4.41 = 1
    assert s.ess == pytest.approx(1.0, abs=1e-12)
    # [2, 2, 1, 3]: (8)^2 / (4 * (4+4+1+9)) = 64 / 72 = 8/9; self-normalised [1, 1, .5, 1.5]:
    # (4)^2 / (4 * (1+1+.25+2.25)) = 16 / 18 = 8/9
    raw = f64([2.0, 2.0, 1.0, 3.0])
    for w in (raw, self_normalise(raw)):
        s = importance_stats(torch.zeros(4), torch.zeros(4), w, 2.0, [0, 0, 0, 0])
        assert s.ess == pytest.approx(8 / 9, abs=1e-12)


def test_stats_on_the_truncation_example():
    w = prefix_weights(f64(L_CUR), f64(L_OLD), clip=2.0)  # [1, 0.5, 2, 2]
    s = importance_stats(f64(L_CUR), f64(L_OLD), w, 2.0, [0, 2, 0, 5])
    assert isinstance(s, ImportanceStats)
    # log_w_mean = (0 + ln 0.5 + ln 3 + ln 10) / 4 = ln(0.5 * 3 * 10) / 4 = ln(15) / 4
    assert s.log_w_mean == pytest.approx(math.log(15.0) / 4, abs=1e-12)
    # log_w_max = ln 10 (the raw ratio, not ln C)
    assert s.log_w_max == pytest.approx(math.log(10.0), abs=1e-12)
    # raw w = [1, 0.5, 3, 10]; w > 2 for 3 and 10 -> clip_frac = 2/4 = 0.5
    assert s.clip_frac == 0.5
    # ess on [1, 0.5, 2, 2]: sum = 5.5, sum sq = 1 + 0.25 + 4 + 4 = 9.25 -> 30.25 / (4 * 9.25) = 30.25 / 37
    assert s.ess == pytest.approx(30.25 / 37, abs=1e-12)
    # staleness mean = (0 + 2 + 0 + 5) / 4 = 7/4 = 1.75
    assert s.staleness_mean == 1.75


def test_clip_frac_counts_strictly_above_c():
    # log w = [ln 1.9, ln 2.1, ln 4] with C = 2: above C are 2.1 and 4 -> 2/3
    s = importance_stats(
        f64([math.log(1.9), math.log(2.1), math.log(4.0)]), torch.zeros(3), f64([1.9, 2.0, 2.0]), 2.0, [1, 1, 1]
    )
    assert s.clip_frac == pytest.approx(2 / 3, abs=1e-12)
    assert s.staleness_mean == 1.0


def test_stats_of_fresh_states():
    # all fresh: log w = 0 -> mean 0, max 0, nothing clipped, w = 1 everywhere -> ess 1
    w = prefix_weights(torch.zeros(5), torch.zeros(5))
    s = importance_stats(torch.zeros(5), torch.zeros(5), w, 2.0, torch.zeros(5, dtype=torch.int64))
    assert s == ImportanceStats(log_w_mean=0.0, log_w_max=0.0, clip_frac=0.0, ess=1.0, staleness_mean=0.0)


def test_stats_of_an_empty_batch_and_all_zero_weights():
    s = importance_stats(torch.zeros(0), torch.zeros(0), torch.zeros(0), 2.0, [])
    assert s == ImportanceStats(log_w_mean=0.0, log_w_max=0.0, clip_frac=0.0, ess=1.0, staleness_mean=0.0)
    # sum w^2 = 0: no effective sample
    z = importance_stats(torch.zeros(2), torch.zeros(2), torch.zeros(2), 2.0, [0, 0])
    assert z.ess == 0.0


def test_stats_reject_bad_input():
    z = torch.zeros(2)
    one_line_value_error(importance_stats, z, z, torch.ones(3), 2.0, [0, 0])  # weights length
    one_line_value_error(importance_stats, z, z, torch.ones(2), 2.0, [0])  # staleness length
    one_line_value_error(importance_stats, z, torch.zeros(3), torch.ones(2), 2.0, [0, 0])  # log-prob shapes
    one_line_value_error(importance_stats, z, z, torch.ones(2), 0.0, [0, 0])  # C = 0
    one_line_value_error(importance_stats, z, z, torch.tensor([1.0, -1.0]), 2.0, [0, 0])  # negative weight
    one_line_value_error(importance_stats, z, z, torch.ones(2), 2.0, [0, -1])  # negative staleness
    one_line_value_error(importance_stats, torch.tensor([math.nan, 0.0]), z, torch.ones(2), 2.0, [0, 0])
