"""The reward post-process hook on plain objects shaped like slime's Sample (slime not needed)."""

from types import SimpleNamespace

import pytest
from tests.extras import SLIME_REASON

from tempo_plugin.slime.reward import post_process


def sample(reward, group_index=None):
    return SimpleNamespace(reward=reward, group_index=group_index)


def test_centres_within_group_index_whatever_the_group_sizes():
    args = SimpleNamespace(n_samples_per_prompt=4, reward_key=None)
    # actor group 0 (N=3 returns) and critic group 1 (K=2 rewards), interleaved on purpose
    samples = [sample(1.0, 0), sample(-0.2, 1), sample(0.5, 0), sample(-0.6, 1), sample(0.0, 0)]
    raw, centred = post_process(args, samples)
    assert raw == [1.0, -0.2, 0.5, -0.6, 0.0]
    # group 0 mean = 1.5/3 = 0.5; group 1 mean = -0.8/2 = -0.4; no std division
    assert centred == pytest.approx([0.5, 0.2, 0.0, -0.2, -0.5])


def test_plain_samples_fall_back_to_positional_groups_and_dict_rewards():
    args = SimpleNamespace(n_samples_per_prompt=2, reward_key="score")
    samples = [sample({"score": 1.0}), sample({"score": 0.0}), sample({"score": 3.0}), sample({"score": 3.0})]
    raw, centred = post_process(args, samples)
    assert raw == [1.0, 0.0, 3.0, 3.0]
    assert centred == pytest.approx([0.5, -0.5, 0.0, 0.0])
    with pytest.raises(ValueError, match="reward-key"):
        post_process(SimpleNamespace(n_samples_per_prompt=2, reward_key="other"), samples)
    with pytest.raises(ValueError, match="no reward"):
        post_process(args, [sample(None)])



def test_with_slimes_own_sample_class():
    types = pytest.importorskip("slime.utils.types", reason=SLIME_REASON)
    args = SimpleNamespace(n_samples_per_prompt=2, reward_key=None)
    samples = [types.Sample(index=i, reward=r, group_index=g) for i, (r, g) in enumerate([(1.0, 7), (0.0, 7), (0.4, 8)])]
    raw, centred = post_process(args, samples)
    assert raw == [1.0, 0.0, 0.4]
    assert centred == pytest.approx([0.5, -0.5, 0.0])  # group 7 mean 0.5; group 8 alone
