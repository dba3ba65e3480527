"""Every optimiser step slime cuts from a TEMPO rollout trains actor and critic samples together, in
the rollout's proportion, as the embedded runtime's one joint step does.

slime gives a sample without ``rollout_id`` a rollout id of its own, counting up in list order
(``RolloutManager._convert_samples_to_train_data``), and its real ``build_dp_schedule`` cuts the ids
into steps of ``--global-batch-size`` in that order. The samples come from ``slime_groups``, as the
rollout function hands them to slime.
"""

from types import SimpleNamespace

import pytest
from tests.extras import skip_module_without_slime

skip_module_without_slime()

from tempo_plugin.slime.samples import PADDING, slime_groups, step_order  # noqa: E402
from tempo_plugin.rollout.samples import ACTOR, CRITIC, make_sample  # noqa: E402


def td_samples(states: int, branches: int, critic_samples: int, dropped=(), no_critic=(), short_actor=None):
    """A TD update's training samples in the order ``td_update`` emits them (critic groups, then
    actor groups). ``dropped``: start states whose group was dropped (no samples at all);
    ``no_critic``: states whose critic group was degenerate; ``short_actor``: {state: actor samples
    kept} for groups where some branches had advantage 0."""
    short_actor = short_actor or {}
    critic, actor = [], []
    for g in range(states):
        if g in dropped:
            continue
        if g not in no_critic:
            critic += [make_sample([1] * (6 + k), [0, 0, 0] + [1] * (3 + k), [0.0] * (6 + k), 0.1 * (k - 1), CRITIC, g, 0.0)
                       for k in range(critic_samples)]
        actor += [make_sample([2] * (20 + n), [0] * 10 + [1] * (10 + n), [0.0] * (20 + n), 0.2 * (n - 1), ACTOR, g, 1.0)
                  for n in range(short_actor.get(g, branches))]
    return critic + actor


def slime_step_roles(samples, count: int, global_batch_size: int, dp_size: int, sample_cls) -> list[dict[str, int]]:
    """The roles of the samples in each optimiser step of slime's real schedule."""
    from slime.utils.dp_schedule import build_dp_schedule

    flat = [s for unit in slime_groups(samples, count, sample_cls, lambda ids: "", pad_token_id=0) for s in unit]
    assert len(flat) == count and all(getattr(s, "rollout_id", None) is None for s in flat)
    args = SimpleNamespace(use_dynamic_batch_size=True, max_tokens_per_gpu=9216, micro_batch_size=None,
                           balance_data=False, balance_by_flops=False)
    config = {"dp_size": dp_size, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}
    partitions, mbs_indices, num_mbs, _ = build_dp_schedule(
        args, config, [len(s.tokens) for s in flat], global_batch_size=global_batch_size,
        rollout_indices=list(range(len(flat))),  # no rollout_id: one fresh id per sample, in list order
    )
    steps = [{ACTOR: 0, CRITIC: 0, PADDING: 0} for _ in num_mbs]
    for rank in range(dp_size):
        first = 0
        for step, k in enumerate(num_mbs):
            for mbs in mbs_indices[rank][first:first + k]:
                for i in mbs:
                    steps[step][flat[partitions[rank][i]].metadata["tempo_role"]] += 1
            first += k
    return steps


RECIPE = dict(states=32, branches=8, critic_samples=8)  # scripts/qwen3-{4B,8B}/tempo.sh and tempo.yaml


@pytest.mark.parametrize("case", [
    dict(RECIPE, gbs=256, dp=4),  # the recipes: a TD rollout of 32 x (8 + 8) = 512 samples is 2 steps
    dict(RECIPE, gbs=256, dp=4, dropped=(3, 7, 11, 30), no_critic=(5, 9, 31), short_actor={13: 6, 0: 2}),
    dict(RECIPE, gbs=128, dp=4, dropped=tuple(range(0, 32, 3)), no_critic=(1, 2)),  # 4 steps, a third dropped
    dict(states=2, branches=2, critic_samples=2, gbs=4, dp=1),  # test_slime_rollout's sizes
    dict(states=2, branches=2, critic_samples=4, gbs=4, dp=1),  # the CPU end-to-end run's: 3 steps
])
def test_each_step_holds_actor_and_critic_in_the_rollouts_proportion(case, slime_types):
    samples = td_samples(case["states"], case["branches"], case["critic_samples"], case.get("dropped", ()),
                         case.get("no_critic", ()), case.get("short_actor"))
    count = case["states"] * (case["branches"] + case["critic_samples"])
    steps = slime_step_roles(samples, count, case["gbs"], case["dp"], slime_types.Sample)
    assert len(steps) == count // case["gbs"]
    totals = {role: sum(step[role] for step in steps) for role in (ACTOR, CRITIC, PADDING)}
    assert totals == {ACTOR: sum(s.role == ACTOR for s in samples), CRITIC: sum(s.role == CRITIC for s in samples),
                      PADDING: count - len(samples)}
    # each role within one sample of its share of the step (an actor group is N samples, a critic group K)
    for step in steps:
        for role in (ACTOR, CRITIC, PADDING):
            assert abs(step[role] - totals[role] / len(steps)) <= 1, steps
        assert step[ACTOR] >= 1 and step[CRITIC] >= 1  # every case has at least 4/3 of each per step


def test_step_order_by_hand():
    # N = 9; position k takes the stream with the largest k T_s - 9 placed_s: k = 1: 4, 3, 2 -> a;
    # k = 2: -1, 6, 4 -> b; k = 3: 3, 0, 6 -> c; k = 4: 7, 3, -1 -> a; k = 5: 2, 6, 1 -> b; ...
    order = step_order([["a1", "a2", "a3", "a4"], ["b1", "b2", "b3"], ["c1", "c2"]])
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3", "c2", "b3", "a4"]
    assert step_order([[], ["x"]]) == ["x"]


def test_two_short_streams_of_equal_length_do_not_leave_a_step_to_the_long_one():
    """A TD rollout of the CPU end-to-end run: 2 actor samples, 8 critic samples, 2 padding, cut into
    3 steps of 4. Sorting by each item's share put actor and padding side by side and gave the
    middle step 4 critic samples (2.67 is the share)."""
    order = step_order([["a"] * 2, ["c"] * 8, ["p"] * 2])
    steps = [order[i:i + 4] for i in range(0, 12, 4)]
    assert steps == [["c", "a", "c", "c"], ["p", "c", "c", "a"], ["c", "c", "p", "c"]]
    for role, total in (("a", 2), ("c", 8), ("p", 2)):
        assert all(abs(step.count(role) - total / 3) <= 1 for step in steps)


def test_runs_of_one_group_are_lists_and_indices_count_up_in_list_order(slime_types):
    # actor samples of groups 0, 0, 2, 2, 4, 4 (keys 1/12, 3/12, ...), critic 1, 1, 3, 3 (1/8, 3/8, ...),
    # padding 5, 5 (1/4, 3/4): sorted, ties by stream, then cut into runs of one group_index
    samples = td_samples(3, 2, 2, no_critic=(2,))
    groups = slime_groups(samples, 12, slime_types.Sample, lambda ids: "", pad_token_id=0, first_index=24)
    assert [s.index for unit in groups for s in unit] == list(range(24, 36))
    assert [[s.group_index for s in unit] for unit in groups] == [
        [0], [1], [0], [5], [1], [2, 2], [3], [4], [5], [3], [4]]
    assert [unit[0].metadata["tempo_role"] for unit in groups] == [
        "actor", "critic", "actor", "padding", "critic", "actor", "critic", "actor", "padding", "critic", "actor"]
