"""Tests for Temporal GRPO's stage-conditioned advantages (tempo_plugin.algorithms.temporal_grpo).

Every expectation is worked out by hand in the comments.
"""

from __future__ import annotations

import math

import pytest
import torch

from tempo_plugin.algorithms.temporal_grpo import (
    participation_from_outcomes,
    round_advantages,
    stage_advantages,
    stage_of_rounds,
)

EPS = 1e-6


def assert_rows(actual: torch.Tensor, expected: list[list[float]]) -> None:
    rows = actual.tolist()
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        assert row == pytest.approx(want, abs=1e-12)


def one_line_value_error(fn, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


# ---------------------------------------------------------------------------------- stage_advantages

# 4 rollouts x 3 stages of a linear chain. Rollout 0 completed every stage (task success),
# rollouts 1-3 completed only stage 1.
OUTCOMES = [
    [1, 1, 1],
    [1, 0, 0],
    [1, 0, 0],
    [1, 0, 0],
]
# V_{i,1} = 1; V_{i,2} = R_{i,1} = 1 for all; V_{i,3} = R_{i,1} R_{i,2} = [1, 0, 0, 0]
PARTICIPATION = [
    [1, 1, 1],
    [1, 1, 0],
    [1, 1, 0],
    [1, 1, 0],
]


def test_hand_example_with_zero_spread_normal_and_single_participant_stages():
    adv = stage_advantages(OUTCOMES, PARTICIPATION, eps=EPS)
    # stage 1: 4 participants, all succeeded: mu = 1, sigma = 0 -> degenerate, all 0
    # stage 2: 4 participants, R = [1, 0, 0, 0]: mu = 1/4,
    #   sigma^2 = (1/4) [(3/4)^2 + 3 (1/4)^2] = (1/4)(9/16 + 3/16) = 3/16 -> sigma = sqrt(3)/4
    #   A = (1 - 1/4)/(sqrt(3)/4 + eps) for rollout 0, (0 - 1/4)/(sqrt(3)/4 + eps) for rollouts 1-3
    #   (without eps: 3/sqrt(3) = sqrt(3) and -1/sqrt(3))
    # stage 3: a single participant (rollout 0) -> n_3 = 1 < 2 -> all 0
    s = math.sqrt(3) / 4
    hi, lo = 0.75 / (s + EPS), -0.25 / (s + EPS)
    expected = [
        [0.0, hi, 0.0],
        [0.0, lo, 0.0],
        [0.0, lo, 0.0],
        [0.0, lo, 0.0],
    ]
    assert adv.shape == (4, 3)
    assert adv.dtype == torch.float64
    assert_rows(adv, expected)
    assert hi == pytest.approx(math.sqrt(3), rel=1e-5) and lo == pytest.approx(-1 / math.sqrt(3), rel=1e-5)


def test_hand_example_with_half_successes_and_non_participants():
    outcomes = [
        [1, 1, 0],
        [1, 0, 0],
        [0, 0, 0],
        [0, 0, 0],
    ]
    participation = [
        [1, 1, 1],
        [1, 1, 0],
        [1, 0, 0],
        [1, 0, 0],
    ]
    adv = stage_advantages(outcomes, participation)
    # stage 1: R = [1, 1, 0, 0], all participate: mu = 0.5, sigma = sqrt((4 * 0.25) / 4) = 0.5
    #   A = +-0.5 / (0.5 + 1e-6) = +-1 / (1 + 2e-6)
    # stage 2: participants 0, 1 with R = [1, 0]: mu = 0.5, sigma = 0.5 -> A = +-0.5/(0.5 + 1e-6);
    #   rollouts 2, 3 did not enter stage 2 -> 0 (not -0.5/..., as they would be if counted as failures)
    # stage 3: only rollout 0 entered it -> single participant -> 0
    a = 0.5 / (0.5 + EPS)
    expected = [
        [a, a, 0.0],
        [a, -a, 0.0],
        [-a, 0.0, 0.0],
        [-a, 0.0, 0.0],
    ]
    assert_rows(adv, expected)


def test_eps_zero_gives_exact_standard_scores():
    # R = [1, 1, 0, 0] over 4 participants: mu = 0.5, sigma = 0.5 -> A = +-0.5 / 0.5 = +-1 exactly
    adv = stage_advantages([[1], [1], [0], [0]], [[1], [1], [1], [1]], eps=0.0)
    assert adv.tolist() == [[1.0], [1.0], [-1.0], [-1.0]]


def test_all_participants_failing_is_degenerate_too():
    # stage 2: participants 0, 1 both failed: mu = 0, sigma = 0 -> 0
    adv = stage_advantages([[1, 0], [1, 0], [0, 0]], [[1, 1], [1, 1], [1, 0]], eps=0.0)
    # stage 1: R = [1, 1, 0]: mu = 2/3, sigma = sqrt((2 (1/3)^2 + (2/3)^2) / 3) = sqrt((2/9 + 4/9)/3)
    #   = sqrt(2/9) = sqrt(2)/3 -> A = (1/3)/(sqrt(2)/3) = 1/sqrt(2) and (-2/3)/(sqrt(2)/3) = -sqrt(2)
    r2 = math.sqrt(2)
    assert_rows(adv, [[1 / r2, 0.0], [1 / r2, 0.0], [-r2, 0.0]])


def test_tensors_lists_and_bools_agree():
    from_lists = stage_advantages(OUTCOMES, PARTICIPATION)
    from_ints = stage_advantages(torch.tensor(OUTCOMES), torch.tensor(PARTICIPATION))
    from_bools = stage_advantages(torch.tensor(OUTCOMES).bool(), torch.tensor(PARTICIPATION).bool())
    assert torch.equal(from_lists, from_ints) and torch.equal(from_lists, from_bools)


def test_empty_group_gives_empty_advantages():
    assert stage_advantages(torch.zeros(0, 3), torch.zeros(0, 3)).shape == (0, 3)


@pytest.mark.parametrize(
    "outcomes, participation, eps",
    [
        ([[1, 0]], [[1, 1], [1, 0]], EPS),  # shapes differ
        ([1, 0], [1, 1], EPS),  # 1-D
        ([[1, 2]], [[1, 1]], EPS),  # entry not 0/1
        ([[1, 0.5]], [[1, 1]], EPS),  # entry not 0/1
        ([[1, 1]], [[1, 0]], EPS),  # outcome 1 where not participating
        ([[1, 0], [1]], [[1, 1], [1, 1]], EPS),  # ragged
        ([[1, 0]], [[1, 1]], -1.0),  # eps < 0
        ([[1, 0]], [[1, 1]], math.nan),  # eps nan
    ],
)
def test_stage_advantages_rejects_bad_input(outcomes, participation, eps):
    one_line_value_error(stage_advantages, outcomes, participation, eps)


# ---------------------------------------------------------------------------------- participation


def test_participation_from_outcomes_on_a_linear_chain():
    outcomes = [
        [1, 1, 1],  # completed everything: entered all three
        [1, 0, 0],  # entered 1 and 2 (completed 1), not 3
        [0, 0, 0],  # entered only stage 1
        [1, 1, 0],  # entered all three, failed the last
    ]
    # V_{i,1} = 1; V_{i,2} = R_{i,1}; V_{i,3} = R_{i,1} R_{i,2}
    expected = [
        [1, 1, 1],
        [1, 1, 0],
        [1, 0, 0],
        [1, 1, 1],
    ]
    v = participation_from_outcomes(outcomes)
    assert v.tolist() == expected
    assert v.dtype == torch.int64
    assert participation_from_outcomes(OUTCOMES).tolist() == PARTICIPATION
    # and it feeds stage_advantages directly
    assert torch.equal(stage_advantages(OUTCOMES, participation_from_outcomes(OUTCOMES)),
                       stage_advantages(OUTCOMES, PARTICIPATION))


def test_participation_edge_cases_and_errors():
    assert participation_from_outcomes(torch.zeros(2, 0)).shape == (2, 0)
    assert participation_from_outcomes([[0], [1]]).tolist() == [[1], [1]]
    one_line_value_error(participation_from_outcomes, [[0, 1, 0]])  # stage 2 completed without stage 1
    one_line_value_error(participation_from_outcomes, [[1, 0, 1]])  # stage 3 completed without stage 2
    one_line_value_error(participation_from_outcomes, [1, 0])  # 1-D


# ---------------------------------------------------------------------------------- stage_of_rounds


def test_no_stage_completed_puts_every_round_in_stage_zero():
    # nothing completed: all rounds work on the first stage
    assert stage_of_rounds([None, None, None], 4) == [0, 0, 0, 0]


def test_some_stages_completed():
    # stage 0 completed by round 1's action: rounds 0, 1 -> stage 0; rounds 2..4 work on stage 1
    assert stage_of_rounds([1, None, None], 5) == [0, 0, 1, 1, 1]
    # stages 0 and 1 completed at rounds 0 and 3: round 0 -> 0; rounds 1..3 -> 1; round 4 -> 2
    assert stage_of_rounds([0, 3, None], 5) == [0, 1, 1, 1, 2]


def test_all_stages_completed():
    # c = [0, 2, 4] over 5 rounds: (-1, 0] -> 0, (0, 2] -> 1, (2, 4] -> 2
    assert stage_of_rounds([0, 2, 4], 5) == [0, 1, 1, 2, 2]


def test_rounds_after_the_final_stage_go_to_the_last_stage():
    # c = [0, 1, 2], 5 rounds: rounds 3, 4 come after task success -> last stage 2
    assert stage_of_rounds([0, 1, 2], 5) == [0, 1, 2, 2, 2]


def test_one_round_completing_two_stages_leaves_the_later_one_empty():
    # c = [1, 1, 3]: round 1 completes stages 0 and 1. Intervals (-1, 1] -> 0, (1, 1] = {} -> 1,
    # (1, 3] -> 2
    assert stage_of_rounds([1, 1, 3], 4) == [0, 0, 2, 2]


def test_stage_of_rounds_edge_cases():
    assert stage_of_rounds([None], 0) == []
    assert stage_of_rounds([None], 3) == [0, 0, 0]
    # a single-stage chain (the stage is task success) completed at round 2 of 3
    assert stage_of_rounds([2], 3) == [0, 0, 0]


@pytest.mark.parametrize(
    "completions, num_rounds",
    [
        ([2, 1, None], 4),  # decreasing
        ([None, 1, None], 4),  # completed after an uncompleted stage
        ([0, None, 2], 4),  # completed after an uncompleted stage
        ([4, None], 4),  # round outside 0..3
        ([-1, None], 4),  # negative round
        ([1.0, None], 4),  # not an int
        ([True, None], 4),  # bool is not a round index
        ([], 4),  # no stage
        ([None], -1),  # negative number of rounds
    ],
)
def test_stage_of_rounds_rejects_bad_input(completions, num_rounds):
    one_line_value_error(stage_of_rounds, completions, num_rounds)


# ---------------------------------------------------------------------------------- round_advantages


def test_round_advantages_copy_the_stage_advantage():
    # stages [0, 0, 1, 1, 1] with stage advantages [0.5, -1, 0] -> [0.5, 0.5, -1, -1, -1]
    assert round_advantages([0, 0, 1, 1, 1], [0.5, -1.0, 0.0]) == [0.5, 0.5, -1.0, -1.0, -1.0]
    assert round_advantages([], [0.5]) == []


def test_rounds_of_the_hand_example_end_to_end():
    adv = stage_advantages(OUTCOMES, PARTICIPATION, eps=0.0)
    # eps = 0: stage-2 advantages are sqrt(3) (rollout 0) and -1/sqrt(3) (rollouts 1-3); stages 1, 3 are 0
    # rollout 0 completed stages at rounds 1, 3, 4 of 5: stages [0, 0, 1, 1, 2]
    stages0 = stage_of_rounds([1, 3, 4], 5)
    assert stages0 == [0, 0, 1, 1, 2]
    r3 = math.sqrt(3)
    assert round_advantages(stages0, adv[0]) == pytest.approx([0.0, 0.0, r3, r3, 0.0], abs=1e-12)
    # rollout 1 completed stage 1 at round 2 of 4, then worked on stage 2: stages [0, 0, 0, 1]
    stages1 = stage_of_rounds([2, None, None], 4)
    assert stages1 == [0, 0, 0, 1]
    assert round_advantages(stages1, adv[1]) == pytest.approx([0.0, 0.0, 0.0, -1 / r3], abs=1e-12)


def test_round_advantages_rejects_bad_input():
    one_line_value_error(round_advantages, [0, 3], [0.1, 0.2, 0.3])  # stage 3 of 3 stages
    one_line_value_error(round_advantages, [-1], [0.1])  # negative stage
    one_line_value_error(round_advantages, [0], [[0.1, 0.2]])  # 2-D row
