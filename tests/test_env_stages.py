"""Temporal GRPO milestones of TextWorld and ALFWorld: the subgoals of the winning plan from the start.

Fixture games (the same calls as tests/test_env_textworld.py and tests/test_env_alfworld.py), their
start plans and, below each command, ``stages_completed`` after it (0 before the first):

TextWorld game 0: go south, go east, drop butterfly                     1 stage   0 0 1
TextWorld game 1: go east, take key, unlock box with key               2 stages  0 1 2
ALFWorld game 0 (put a mug in cabinet): go to diningtable 1, take mug 1 from diningtable 1,
    go to cabinet 1, open cabinet 1, move mug 1 to cabinet 1            3 stages  0 1 1 2 3
ALFWorld game 1 (put a clean apple in fridge): go to countertop 1, take apple 1 from countertop 1,
    go to sinkbasin 1, clean apple 1 with sinkbasin 1, go to fridge 1, open fridge 1,
    move apple 1 to fridge 1                                            4 stages  0 1 1 2 2 3 4
"""

from __future__ import annotations

import math
import pickle
from typing import Sequence

import pytest
from tests.extras import import_extra

from tempo_plugin.config import TempoConfig
from tempo_plugin.envs.alfworld import ALFWorldEnv
from tempo_plugin.envs.base import has_stages, plan_stage_count, plan_stages_completed, plan_subgoals
from tempo_plugin.envs.textworld import TextWorldEnv
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams

TEXTWORLD_PLANS = {
    0: (["go south", "go east", "drop butterfly"], 1, [0, 0, 0, 1]),
    1: (["go east", "take key", "unlock box with key"], 2, [0, 0, 1, 2]),
}
ALFWORLD_PLANS = {
    0: (["go to diningtable 1", "take mug 1 from diningtable 1", "go to cabinet 1", "open cabinet 1",
         "move mug 1 to cabinet 1"], 3, [0, 0, 1, 1, 2, 3]),
    1: (["go to countertop 1", "take apple 1 from countertop 1", "go to sinkbasin 1",
         "clean apple 1 with sinkbasin 1", "go to fridge 1", "open fridge 1", "move apple 1 to fridge 1"],
        4, [0, 0, 1, 1, 2, 2, 3, 4]),
}


@pytest.fixture(scope="module")
def textworld_dir(tmp_path_factory) -> str:
    import_extra("textworld", "textworld")
    from tempo_plugin.envs.textworld import make_games

    directory = tmp_path_factory.mktemp("textworld_games")
    make_games(directory, count=2, seed=0)
    return str(directory)


@pytest.fixture(scope="module")
def alfworld_dir(tmp_path_factory) -> str:
    import_extra("alfworld", "alfworld")
    import_extra("alfworld", "fast_downward")
    from tempo_plugin.envs.alfworld import make_fixture_games

    out = tmp_path_factory.mktemp("alfworld_games")
    make_fixture_games(out)
    return str(out)


@pytest.fixture(params=["textworld", "alfworld"])
def game(request):
    """(env, seed -> (start plan, stage count, stages along the plan)) for each environment."""
    if request.param == "textworld":
        return TextWorldEnv(request.getfixturevalue("textworld_dir")), TEXTWORLD_PLANS
    return ALFWorldEnv(request.getfixturevalue("alfworld_dir")), ALFWORLD_PLANS


def test_the_rule():
    plan = ["go east", "look", "examine box", "inventory", "take key", "go to fridge 1", "Open Fridge 1"]
    assert plan_subgoals(plan) == ["take key", "Open Fridge 1"]
    assert plan_stage_count(plan) == 2
    assert plan_stage_count(["go east"]) == plan_stage_count(None) == 1  # the win is the only milestone
    assert [plan_stages_completed(2, False, p) for p in (plan, ["open fridge 1"], ["go west"])] == [0, 1, 1]
    assert plan_stages_completed(1, False, ["go east"]) == 0  # at most stage_count - 1 until won
    assert plan_stages_completed(2, False, plan * 2) == 0  # more subgoals left than at the start
    assert plan_stages_completed(2, False, None) == plan_stages_completed(2, False, []) == 0  # no way to win
    assert plan_stages_completed(2, True, None) == 2


@pytest.mark.parametrize("seed", [0, 1])
def test_the_expert_reaches_each_milestone_in_turn(game, seed):
    env, plans = game
    plan, count, expected = plans[seed]
    env.reset(seed)
    assert env.stage_count == count and env.stages_completed() == 0
    played, seen = [], [env.stages_completed()]
    while not env.done:
        played.append(env.expert_action())
        result = env.step(played[-1])
        seen.append(env.stages_completed())
        assert seen[-1] == count if result.won else seen[-1] < count  # the last one exactly on the win
    assert env.won and played == plan and seen == expected


def test_textworld_moves_and_rejected_commands_are_no_progress(textworld_dir):
    env = TextWorldEnv(textworld_dir)
    env.reset(1)
    for action, stages in [("dance wildly", 0), ("go east", 0), ("take key", 1), ("go west", 1),
                           ("fly to the moon", 1), ("look", 1), ("go east", 1),
                           ("drop key", 0)]:  # undone: "take key" is back in the plan
        result = env.step(action)
        assert result.info["admissible"] == (action not in ("dance wildly", "fly to the moon"))
        assert env.stages_completed() == stages, action


def test_alfworld_moves_and_rejected_commands_are_no_progress(alfworld_dir):
    env = ALFWorldEnv(alfworld_dir)
    env.reset(1)  # put a clean apple in fridge
    for action, stages in [("fly to the moon", 0), ("go to microwave 1", 0), ("open microwave 1", 0),
                           ("look", 0), ("go to countertop 1", 0), ("take apple 1 from countertop 1", 1),
                           ("go to microwave 1", 1), ("inventory", 1), ("fly to the moon", 1)]:
        env.step(action)
        assert env.stages_completed() == stages, action


def test_textworld_snapshot_keeps_the_milestones(textworld_dir):
    env = TextWorldEnv(textworld_dir)
    env.reset(1)
    env.step("go east")
    env.step("take key")
    snap = env.snapshot()
    env.step(env.expert_action())
    assert env.won and env.stages_completed() == 2
    env.restore(snap)
    assert env.stages_completed() == 1 and not env.won
    other = TextWorldEnv(textworld_dir)
    other.reset(0)
    assert other.stage_count == 1
    other.restore(pickle.loads(pickle.dumps(snap)))
    assert other.stage_count == 2 and other.stages_completed() == 1


def test_alfworld_replay_keeps_the_milestones(alfworld_dir):
    history = ["go to countertop 1", "take apple 1 from countertop 1", "go to sinkbasin 1",
               "clean apple 1 with sinkbasin 1"]
    env = ALFWorldEnv(alfworld_dir)
    env.reset(1)
    for action in history:
        env.step(action)
    assert env.stages_completed() == 2
    while not env.done:
        env.step(env.expert_action())
    assert env.stages_completed() == 4
    for replayed in (env, ALFWorldEnv(alfworld_dir)):
        replayed.reset(0)
        replayed.reset(1)
        for action in history:
            replayed.step(action)
        assert replayed.stage_count == 4 and replayed.stages_completed() == 2


def test_out_of_steps_keeps_the_progress(textworld_dir):
    env = TextWorldEnv(textworld_dir, max_steps=2)
    env.reset(1)
    env.step("go east")
    env.step("take key")
    assert env.done and not env.won and env.stages_completed() == 1


@pytest.mark.parametrize("name", ["textworld", "alfworld"])
def test_temporal_grpo_accepts_textworld_and_alfworld(name):
    assert has_stages(TextWorldEnv) and has_stages(ALFWorldEnv)
    cfg = TempoConfig(advantage_estimator="temporal_grpo", env=name).validate()
    assert cfg.env == name and cfg.advantage_estimator == "temporal_grpo"


class ScriptedTextWorld:
    """Game 1, two episodes: episode 0 plays the start plan, episode 1 only looks around."""

    PLAN = TEXTWORLD_PLANS[1][0]

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls = 0

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        actions = [self.PLAN[self.calls], "look"] if len(requests) == 2 else ["look"]
        self.calls += 1
        out = []
        for action in actions:
            reply = f"<action>{action}</action>"
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.im_end]
            out.append(Completion(ids, [-0.25] * len(ids), reply, "stop"))
        return out


def test_stage_update_on_textworld(textworld_dir, tokenizer, protocol):
    """outcomes: episode 0 [1 1] (round 1 takes the key, round 2 wins), episode 1 [0 0].
    stage 1 (both): R = [1, 0] -> A = +1, -1; stage 2 (episode 0 only): 0.
    rounds: episode 0: go east, take key +1, unlock 0; episode 1: 5 looks -1 each."""
    from tempo_plugin.updates.rollout import TempoRollout

    cfg = TempoConfig(advantage_estimator="temporal_grpo", env="textworld", branches=2, states_per_batch=1,
                      macro_rounds=5, max_episode_steps=5).validate()
    rollout = TempoRollout(cfg, ScriptedTextWorld(tokenizer), protocol, make_env=lambda: TextWorldEnv(textworld_dir, max_steps=5))
    batch = rollout.stage_update(0, [1])
    per_round = [[s.advantages[i] for i, m in enumerate(s.loss_mask) if m and not s.loss_mask[i - 1]]
                 for s in batch.samples]
    one = 0.5 / (0.5 + 1e-6)
    assert len(per_round) == 2
    assert per_round[0] == pytest.approx([one, one, 0.0]) and per_round[1] == pytest.approx([-one] * 5)
    assert [s.reward for s in batch.samples] == [1.0, 0.0]
    assert batch.metrics["stages/completed_mean"] == 1.0 and batch.metrics["rollout/success_rate"] == 0.5
    assert math.isclose(batch.metrics["stages/entered_mean"], 1.5)
