"""Tests for the TEMPO training signals (tempo_plugin.algorithms.tempo) on plain Python lists."""

from __future__ import annotations

import math

import pytest

from tempo_plugin.algorithms.grpo import GRPO_STD_EPSILON, grpo_advantages
from tempo_plugin.algorithms.tempo import ADVANTAGE_EPSILON, actor_signals, batch_normalised, critic_signals


def approx_list(values):
    return pytest.approx(values, abs=1e-12)


# ---------------------------------------------------------------------------------- actor signals


def test_terminal_branches_bootstrap_zero_whatever_their_endpoint_value():
    s = actor_signals([1, 0, 0, 0], [0.9, 0.5, 0.2, 0.7], [True, False, False, True])
    # terminal branches 0 and 3 ignore V (0.9, 0.7): R = [1+0, 0+0.5, 0+0.2, 0+0] = [1, 0.5, 0.2, 0]
    assert s.returns == approx_list([1.0, 0.5, 0.2, 0.0])
    # G = (1 + 0.5 + 0.2 + 0) / 4 = 1.7 / 4 = 0.425
    assert s.value_target == pytest.approx(0.425, abs=1e-12)
    # A = R - G = [0.575, 0.075, -0.225, -0.425]
    assert s.advantages == approx_list([0.575, 0.075, -0.225, -0.425])
    assert s.degenerate is False


def test_non_terminal_branch_adds_its_endpoint_value_to_its_reward():
    s = actor_signals([0.5, 0.0], [0.25, 0.75], [False, False])
    # R = [0.5 + 0.25, 0 + 0.75] = [0.75, 0.75] -> G = 0.75, A = [0, 0]: degenerate
    assert s.returns == approx_list([0.75, 0.75])
    assert s.value_target == pytest.approx(0.75)
    assert s.advantages == approx_list([0.0, 0.0])
    assert s.degenerate is True


def test_advantages_are_mean_centred_without_std_division():
    s = actor_signals([3, 0, 0], [None, 0.0, 0.0], [True, True, True])
    # R = [3, 0, 0], G = 1, A = [2, -1, -1]; population std of R is sqrt((4+1+1)/3) = sqrt(2) != 1,
    # so a std-normalised advantage would be [1.414.., -0.707.., -0.707..] instead.
    assert s.value_target == pytest.approx(1.0)
    assert s.advantages == approx_list([2.0, -1.0, -1.0])
    assert sum(s.advantages) == pytest.approx(0.0, abs=1e-12)


def test_small_spread_is_not_scaled_up():
    s = actor_signals([0, 0], [0.1, 0.3], [False, False])
    # R = [0.1, 0.3], G = 0.2, A = [-0.1, 0.1] (std 0.1: a normalised version would give [-1, 1])
    assert s.advantages == approx_list([-0.1, 0.1])


def test_degenerate_group_when_all_returns_equal():
    s = actor_signals([0, 0, 0], [0.4, 0.4, 0.4], [False, False, False])
    # R = [0.4, 0.4, 0.4] -> A = [0, 0, 0]
    assert s.degenerate is True
    assert all(abs(a) <= ADVANTAGE_EPSILON for a in s.advantages)
    # terminal winners with different (ignored) endpoint values: R = [1, 1] -> degenerate too
    assert actor_signals([1, 1], [0.3, 0.9], [True, True]).degenerate is True


def test_zero_reward_value_std_is_population_std_over_non_terminal_zero_reward_branches():
    s = actor_signals([1, 0, 0, 0], [0.9, 0.5, 0.2, 0.7], [True, False, False, True])
    # eligible: branches 1 and 2 (non-terminal, r = 0): V = [0.5, 0.2], mean 0.35,
    # population std = sqrt((0.15^2 + 0.15^2) / 2) = 0.15 (a sample std would be 0.212..)
    assert s.zero_reward_value_std == pytest.approx(0.15, abs=1e-12)

    s = actor_signals([0, 0, 0, 0.5], [0.2, 0.8, 0.9, 0.1], [False, False, True, False])
    # branch 2 is terminal, branch 3 has r != 0: V = [0.2, 0.8] -> std 0.3
    assert s.zero_reward_value_std == pytest.approx(0.3, abs=1e-12)

    s = actor_signals([0, 0, 0], [0.0, 0.3, 0.6], [False, False, False])
    # V = [0, 0.3, 0.6], mean 0.3, population std = sqrt((0.09 + 0 + 0.09) / 3) = sqrt(0.06)
    assert s.zero_reward_value_std == pytest.approx(math.sqrt(0.06), abs=1e-12)


def test_zero_reward_value_std_is_zero_with_fewer_than_two_eligible_branches():
    # only branch 0 is non-terminal with r = 0
    assert actor_signals([0, 1], [0.5, 0.9], [False, False]).zero_reward_value_std == 0.0
    # no eligible branch at all
    assert actor_signals([0, 0], [0.5, 0.9], [True, True]).zero_reward_value_std == 0.0


def test_none_endpoint_value_on_non_terminal_branch_counts_as_zero():
    s = actor_signals([0, 0], [None, 0.6], [False, False])
    # R = [0 + 0, 0 + 0.6] = [0, 0.6], G = 0.3, A = [-0.3, 0.3]
    assert s.returns == approx_list([0.0, 0.6])
    assert s.value_target == pytest.approx(0.3)
    assert s.advantages == approx_list([-0.3, 0.3])
    # V used for the gap metric = [0, 0.6] -> population std 0.3
    assert s.zero_reward_value_std == pytest.approx(0.3, abs=1e-12)


@pytest.mark.parametrize(
    "rewards, values, terminal",
    [
        ([], [], []),
        ([0, 0], [0.5], [False, False]),
        ([0, 0], [0.5, 0.5], [False]),
        ([0], [0.5, 0.5], [False, False]),
    ],
)
def test_actor_signals_rejects_empty_or_mismatched_inputs(rewards, values, terminal):
    with pytest.raises(ValueError):
        actor_signals(rewards, values, terminal)


# --------------------------------------------------------------------------------- critic signals


def test_critic_parse_failure_has_error_one_and_reward_minus_one():
    s = critic_signals([None, 0.5], 0.5)
    # errors: None -> 1, |0.5 - 0.5| = 0; rewards [-1, 0]; mean -0.5; A = [-0.5, 0.5]
    assert s.errors == approx_list([1.0, 0.0])
    assert s.rewards == approx_list([-1.0, 0.0])
    assert s.advantages == approx_list([-0.5, 0.5])
    assert s.parse_failures == 1
    assert s.degenerate is False


def test_critic_r_max_scales_errors():
    one = critic_signals([0.2, 0.9], 0.6, r_max=1.0)
    two = critic_signals([0.2, 0.9], 0.6, r_max=2.0)
    # r_max = 1: e = [|0.2-0.6|, |0.9-0.6|] = [0.4, 0.3]; r = [-0.4, -0.3]; mean -0.35; A = [-0.05, 0.05]
    assert one.errors == approx_list([0.4, 0.3])
    assert one.advantages == approx_list([-0.05, 0.05])
    # r_max = 2 halves them: e = [0.2, 0.15]; r = [-0.2, -0.15]; mean -0.175; A = [-0.025, 0.025]
    assert two.errors == approx_list([0.2, 0.15])
    assert two.rewards == approx_list([-0.2, -0.15])
    assert two.advantages == approx_list([-0.025, 0.025])
    # a parse failure stays at error 1 whatever r_max
    assert critic_signals([None, 0.6], 0.6, r_max=2.0).errors == approx_list([1.0, 0.0])


def test_critic_advantages_are_centred_rewards():
    s = critic_signals([0.1, 0.4, 0.7, None], 0.4)
    # e = [0.3, 0, 0.3, 1]; r = [-0.3, 0, -0.3, -1]; mean = -1.6 / 4 = -0.4
    # A = r + 0.4 = [0.1, 0.4, 0.1, -0.6]
    assert s.errors == approx_list([0.3, 0.0, 0.3, 1.0])
    assert s.rewards == approx_list([-0.3, 0.0, -0.3, -1.0])
    assert s.advantages == approx_list([0.1, 0.4, 0.1, -0.6])
    assert s.parse_failures == 1
    assert s.degenerate is False


def test_critic_degenerate_when_all_estimates_equal():
    s = critic_signals([0.3, 0.3, 0.3], 0.9)
    # e = [0.6, 0.6, 0.6] -> A = [0, 0, 0]
    assert s.errors == approx_list([0.6, 0.6, 0.6])
    assert s.degenerate is True
    assert s.parse_failures == 0
    # every sample failed to parse: r = [-1, -1, -1] -> degenerate, 3 failures
    s = critic_signals([None, None, None], 0.2)
    assert s.degenerate is True
    assert s.parse_failures == 3
    assert s.rewards == approx_list([-1.0, -1.0, -1.0])


def test_critic_parse_failures_counts_none_only():
    s = critic_signals([None, 0.0, None, 1.0, 0.5], 0.5)
    # 0.0 and 1.0 are valid estimates, only the two None count
    assert s.parse_failures == 2
    # e = [1, 0.5, 1, 0.5, 0]
    assert s.errors == approx_list([1.0, 0.5, 1.0, 0.5, 0.0])


@pytest.mark.parametrize("r_max", [0.0, -1.0, float("nan")])
def test_critic_rejects_non_positive_r_max(r_max):
    with pytest.raises(ValueError):
        critic_signals([0.1, 0.2], 0.5, r_max=r_max)


def test_critic_rejects_empty_estimates():
    with pytest.raises(ValueError):
        critic_signals([], 0.5)


# ------------------------------------------------------------------------ critic reward "squared"


def test_critic_squared_reward_by_hand():
    s = critic_signals([0.2, 0.9, None], 0.6, reward="squared")
    # e = [0.4, 0.3, 1] (a parse failure stays at 1); r = -e^2 = [-0.16, -0.09, -1]
    # mean r = -1.25 / 3; A = r + 1.25/3 = [0.77/3, 0.98/3, -1.75/3]
    assert s.errors == approx_list([0.4, 0.3, 1.0])
    assert s.rewards == approx_list([-0.16, -0.09, -1.0])
    assert s.advantages == approx_list([0.77 / 3, 0.98 / 3, -1.75 / 3])
    assert sum(s.advantages) == pytest.approx(0.0, abs=1e-12)
    assert s.parse_failures == 1 and s.degenerate is False
    # the same estimates under "abs": r = [-0.4, -0.3, -1], mean -1.7/3, A = [0.5/3, 0.8/3, -1.3/3]
    a = critic_signals([0.2, 0.9, None], 0.6, reward="abs")
    assert a.errors == s.errors
    assert a.rewards == approx_list([-0.4, -0.3, -1.0])
    assert a.advantages == approx_list([0.5 / 3, 0.8 / 3, -1.3 / 3])
    # "abs" is the default
    assert critic_signals([0.2, 0.9, None], 0.6) == a


def test_critic_squared_reward_scales_with_r_max_squared():
    s = critic_signals([0.2, 0.9], 0.6, r_max=2.0, reward="squared")
    # e = [0.4/2, 0.3/2] = [0.2, 0.15]; r = [-0.04, -0.0225] = -(V - G)^2 / R_max^2; mean -0.03125
    assert s.errors == approx_list([0.2, 0.15])
    assert s.rewards == approx_list([-0.04, -0.0225])
    assert s.advantages == approx_list([-0.00875, 0.00875])
    # a parse failure keeps reward -1 whatever r_max: r = [-1, -0], A = [-0.5, 0.5]
    f = critic_signals([None, 0.6], 0.6, r_max=2.0, reward="squared")
    assert f.rewards == approx_list([-1.0, 0.0])
    assert f.advantages == approx_list([-0.5, 0.5])


def test_critic_squared_degenerate_when_errors_are_equal():
    # |0.2 - 0.5| = |0.8 - 0.5| = 0.3: equal squared rewards -0.09 -> A = [0, 0]
    s = critic_signals([0.2, 0.8], 0.5, reward="squared")
    assert s.rewards == approx_list([-0.09, -0.09])
    assert s.degenerate is True


@pytest.mark.parametrize("reward", ["", "ABS", "square", "huber", None])
def test_critic_rejects_unknown_reward_names(reward):
    with pytest.raises(ValueError, match="critic reward"):
        critic_signals([0.1, 0.2], 0.5, reward=reward)


def mean_reward(constant: float, targets, reward: str) -> float:
    """Mean critic reward of always answering ``constant`` over the outcomes ``targets``."""
    return sum(critic_signals([constant], t, reward=reward).rewards[0] for t in targets) / len(targets)


def test_best_constant_is_the_median_under_abs_and_the_mean_under_squared():
    targets = [0.0, 0.0, 0.0, 1.0]  # success rate 1/4: median 0, mean 0.25
    # abs: c = 0 -> -(0 + 0 + 0 + 1)/4 = -0.25; c = 0.25 -> -(3 x 0.25 + 0.75)/4 = -0.375
    assert mean_reward(0.0, targets, "abs") == pytest.approx(-0.25, abs=1e-12)
    assert mean_reward(0.25, targets, "abs") == pytest.approx(-0.375, abs=1e-12)
    # squared: c = 0 -> -(1)/4 = -0.25; c = 0.25 -> -(3 x 0.0625 + 0.5625)/4 = -0.1875
    assert mean_reward(0.0, targets, "squared") == pytest.approx(-0.25, abs=1e-12)
    assert mean_reward(0.25, targets, "squared") == pytest.approx(-0.1875, abs=1e-12)
    # over a grid of constants 0, 0.05, ..., 1 the best is exactly the median / the mean
    grid = [i / 20 for i in range(21)]
    assert max(grid, key=lambda c: mean_reward(c, targets, "abs")) == 0.0
    assert max(grid, key=lambda c: mean_reward(c, targets, "squared")) == 0.25


# ------------------------------------------------------------------------------------ GRPO advantages


def test_grpo_advantages_by_hand():
    eps = GRPO_STD_EPSILON
    assert eps == 1e-6
    a = grpo_advantages([1, 0, 0, 1, 0.5, 0.5, 0.5, 0.5], group_size=4)
    # group 1: mean 0.5, population std 0.5 -> A = +-0.5 / (0.5 + eps)
    # group 2: all equal, std 0 -> A = 0 (the epsilon avoids a division by zero)
    u = 0.5 / (0.5 + eps)
    assert a == approx_list([u, -u, -u, u, 0.0, 0.0, 0.0, 0.0])
    assert 0.999997 < u < 1.0
    # R = [3, 0, 0]: mean 1, population std sqrt((4 + 1 + 1)/3) = sqrt(2) (a sample std would be sqrt(3))
    b = grpo_advantages([3.0, 0.0, 0.0], group_size=3)
    d = math.sqrt(2) + eps
    assert b == approx_list([2 / d, -1 / d, -1 / d])
    # group_size 1: every group is degenerate
    assert grpo_advantages([0.0, 1.0], group_size=1) == [0.0, 0.0]


@pytest.mark.parametrize(("count", "group_size"), [(5, 2), (3, 4), (4, 0), (4, -2)])
def test_grpo_advantages_reject_lengths_not_divisible_by_the_group(count, group_size):
    with pytest.raises(ValueError, match=f"{count} rewards do not split into groups of {group_size}"):
        grpo_advantages([0.0] * count, group_size)


def test_invalid_action_penalty_shapes_actor_advantages_not_the_critic_target():
    # rewards 0, 0, 1, 0; values 0.5, None (-> 0), -, 0.2; terminal F, F, T, F
    # R = 0.5, 0, 1, 0.2 -> G = 1.7 / 4 = 0.425 (the critic's target, penalties ignored)
    # penalties 0, 0.2, 0, 0.1 -> shaped 0.5, -0.2, 1, 0.1, mean 0.35 -> A = 0.15, -0.55, 0.65, -0.25
    s = actor_signals([0.0, 0.0, 1.0, 0.0], [0.5, None, 0.9, 0.2], [False, False, True, False], [0.0, 0.2, 0.0, 0.1])
    assert s.returns == pytest.approx([0.5, 0.0, 1.0, 0.2])
    assert s.value_target == pytest.approx(0.425)
    assert s.advantages == pytest.approx([0.15, -0.55, 0.65, -0.25])
    assert not s.degenerate
    # equal penalties change nothing; no penalties is the method as specified
    same = actor_signals([0.0, 1.0], [0.3, None], [False, True], [0.1, 0.1])
    assert same.advantages == pytest.approx(actor_signals([0.0, 1.0], [0.3, None], [False, True]).advantages)
    # a group the environment cannot tell apart is no longer degenerate when one branch wasted rounds
    flat = actor_signals([0.0, 0.0], [0.4, 0.4], [False, False], [0.0, 0.3])
    assert flat.advantages == pytest.approx([0.15, -0.15]) and not flat.degenerate
    with pytest.raises(ValueError, match="one penalty per branch"):
        actor_signals([0.0, 0.0], [0.4, 0.4], [False, False], [0.1])


def test_batch_normalised_divides_by_the_population_std():
    # mean 0, sigma = sqrt((0.09 + 3 x 0.01) / 4) = sqrt(0.03) = 0.173205
    assert batch_normalised([0.3, -0.1, -0.1, -0.1]) == pytest.approx([1.732051, -0.577350, -0.577350, -0.577350], abs=1e-6)
    # the mean is not removed: [0.5, 0.1] has sigma 0.2 -> [2.5, 0.5]
    assert batch_normalised([0.5, 0.1]) == pytest.approx([2.5, 0.5])


def test_batch_normalised_leaves_equal_advantages_alone():
    assert batch_normalised([0.0, 0.0, 0.0]) == [0.0, 0.0, 0.0]
    assert batch_normalised([0.2]) == [0.2]


def test_critic_scale_is_s_over_sigma_and_1_when_off_or_flat():
    from tempo_plugin.algorithms.tempo import critic_scale

    assert critic_scale(0.25, 0.5) == 2.0  # 0.5 / 0.25
    assert critic_scale(0.25, 0.0) == 1.0  # s = 0: the method as specified
    assert critic_scale(0.0, 0.5) == 1.0  # every advantage 0: nothing to rescale
