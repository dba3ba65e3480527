"""analysis/mc_critic: forced actions, Monte-Carlo ground truth, the resumable cache and a tiny
end-to-end run on the vault chain (random-init tiny model, short limits)."""

import json
import shutil

import pytest
import yaml

from tempo_plugin.config import TempoConfig
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.rollout.engine import Branch, RolloutLimits, fresh_state, run_branches
from tempo_plugin.rollout.protocol import format_action
from tempo_plugin.rollout.sampler import Completion, SamplingParams
from tempo_plugin.states.restore import restore_env

from analysis.mc_critic import cli, ground_truth
from analysis.mc_critic.cache import ResultCache, measured_values, settings_key, weights_identity
from analysis.mc_critic.states import State, action_children, force_action, macro_id, restored_env

GAME = 2_000_000_003


pytestmark = pytest.mark.usefixtures("one_thread")


class ScriptedSampler:
    """Answers every request with ``<action>{action}</action>`` + end-of-turn, as an actor would."""

    def __init__(self, protocol, action):
        self.protocol, self.action = protocol, action

    def generate(self, requests, params, seed):
        ids = self.protocol.encode(format_action(self.action)) + [self.protocol.tokenizer.eos_token_id]
        return [Completion(list(ids), [0.0] * len(ids), self.protocol.decode(ids), "stop") for _ in requests]


def make_env():
    return VaultChainEnv(max_steps=30)


def key_room(protocol):
    env = make_env()
    state = fresh_state(env, GAME, protocol)
    keys = env.admissible_actions()
    right = env.expert_action()
    return state, right, next(k for k in keys if k != right)


def walk_expert(state, protocol, until):
    """Force the privileged plan's action until ``until(env)`` holds."""
    while not until(env := restored_env(make_env, state, "auto")):
        state, _ = force_action(state, env.expert_action(), make_env, protocol)
    return state


def test_forced_action_builds_the_engine_round(protocol):
    state, _, wrong = key_room(protocol)
    child, record = force_action(state, wrong, make_env, protocol)
    # the same round through the engine, from an actor whose completion is exactly the action
    env = make_env()
    restore_env(env, state)
    branch = Branch.from_state(state, env, 0)
    limits = RolloutLimits(horizon=1, max_episode_steps=30, max_trajectory_tokens=2048, max_assistant_tokens=12)
    run_branches([branch], ScriptedSampler(protocol, wrong), protocol, SamplingParams(), limits, seed=0)
    assert child == branch.state_after(1, state.macro_index, state.policy_version)
    assert child.action_history == (wrong,) and child.round_index == 1 and record.admissible
    # it restores exactly, and the game knows the wrong key can no longer win
    restored = restored_env(make_env, child, "replay")
    assert restored.observation == child.observation and not restored.winnable()
    assert "Plan: none" in child.privileged_info


def test_wrong_key_gives_zero_monte_carlo_wins(protocol, tiny_model, tokenizer):
    from tempo_plugin.samplers.local import LocalSampler
    from tempo_plugin.updates.rollout import TempoRollout

    state, right, wrong = key_room(protocol)
    cfg = TempoConfig(max_episode_steps=15, macro_rounds=5, max_assistant_tokens=6)
    rollout = TempoRollout(cfg, LocalSampler(tiny_model, tokenizer), protocol, make_env)
    children = []
    for action in (wrong, right):
        macro, _ = force_action(state, action, make_env, protocol)
        children.append(State(id=macro_id(macro), trajectory="t", order=0, position=1, macro=macro))
    results = dict((s.id, r) for s, r in ground_truth.agent_mc(rollout, children, samples=3, seed=0, rows=4))
    assert results[children[0].id] == {"wins": 0.0, "samples": 3}  # the wrong key seals the vault: never won
    # the expert actor wins from the right key (an actor that always plays the privileged plan)
    expert = walk_expert(children[1].macro, protocol, lambda env: env.done)
    assert restored_env(make_env, expert, "auto").won


def test_monte_carlo_batches_fit_the_token_budget(protocol, tiny_model, tokenizer, monkeypatch):
    """Batches hold at most `rows` branches and rows x (longest prefix + answer cap) <= batch_tokens,
    so the sampler never splits a call (and keeps its KV cache from round to round)."""
    from tempo_plugin.samplers.local import LocalSampler
    from tempo_plugin.updates.rollout import TempoRollout

    cfg = TempoConfig(max_episode_steps=15, macro_rounds=5, max_assistant_tokens=3)
    budget = 300  # about 3 rows of a fresh game's prompt: the token budget binds before the 4 rows
    sampler = LocalSampler(tiny_model, tokenizer, max_batch_tokens=budget)
    rollout = TempoRollout(cfg, sampler, protocol, make_env)
    states = []
    for game in range(3):
        macro = fresh_state(make_env(), GAME + game, protocol)
        states.append(State(id=macro_id(macro), trajectory=str(game), order=0, position=0, macro=macro))
    sizes = []
    real = ground_truth.run_branches

    def spy(branches, *args, **kwargs):
        sizes.append((len(branches), max(len(b.tokens) for b in branches)))
        return real(branches, *args, **kwargs)

    monkeypatch.setattr(ground_truth, "run_branches", spy)
    results = list(ground_truth.agent_mc(rollout, states, samples=5, seed=0, rows=4, batch_tokens=budget))
    assert sorted(s.id for s, _ in results) == sorted(s.id for s in states)
    assert all(r["samples"] == 5 and r["wins"] == 0.0 for _, r in results)
    assert sum(n for n, _ in sizes) == 15 and len(sizes) > 3
    assert all(n <= 4 and n * (width + 3) <= budget for n, width in sizes)
    assert sampler.reused_calls > 0  # no call was split: the cache carried over between rounds


def test_action_children_terminal_outcomes(protocol):
    state, _, wrong = key_room(protocol)
    vaults = len(restored_env(make_env, state, "auto").game.vaults)
    # at the door of the last vault with the right key: "open vault" wins at once
    door = walk_expert(state, protocol, lambda e: e.stage == vaults - 1 and "open vault" in e.admissible_actions())
    parent = State(id=macro_id(door), trajectory="t", order=0, position=door.round_index, macro=door)
    cfg = TempoConfig()
    children = action_children([parent], make_env, protocol, cfg, max_states=1, candidates=4, seed=0)
    by_action = {c.action: c for c in children}
    assert set(by_action) == {"open vault", "south", "wait"} and all(c.parent == parent.id for c in children)
    assert by_action["open vault"].terminal and by_action["open vault"].outcome == 1.0
    assert not by_action["wait"].terminal and by_action["wait"].outcome is None
    # the first vault's door with a wrong key: "open vault" loses at once
    taken, _ = force_action(state, wrong, make_env, protocol)
    while "open vault" not in restored_env(make_env, taken, "auto").admissible_actions():
        taken, _ = force_action(taken, "north", make_env, protocol)
    lost, record = force_action(taken, "open vault", make_env, protocol)
    assert record.done and not record.won
    # candidates are capped (a seeded choice) and need >= 2 admissible actions
    room = State(id=macro_id(state), trajectory="t", order=0, position=0, macro=state)
    assert len(action_children([room], make_env, protocol, cfg, max_states=1, candidates=2, seed=0)) == 2
    assert action_children([room], make_env, protocol, cfg, max_states=0, candidates=4, seed=0) == []


def test_weights_identity_follows_the_weights_not_the_folder(tmp_path):
    run = tmp_path / "run" / "checkpoints" / "latest"
    run.mkdir(parents=True)
    (run / "model.safetensors").write_bytes(b"weights v1")
    (run / "config.json").write_text("{}")
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "run", moved)  # a copy: new path, new modification times
    assert weights_identity(run) == weights_identity(moved / "checkpoints" / "latest")
    (run / "model.safetensors").write_bytes(b"weights v2")  # a new checkpoint saved there
    assert weights_identity(run) != weights_identity(moved / "checkpoints" / "latest")
    # no weight files: known by the folder itself
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert weights_identity(tmp_path / "a") != weights_identity(tmp_path / "b")


def test_result_cache_round_trip_and_truncated_line(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = ResultCache(path)
    key = settings_key(samples=4, seed=0)
    cache.put("mc", key, "a1", {"wins": 0.5})
    cache.put("critic:generative", key, "a1", {"value": 0.25})
    cache.close()
    with open(path, "a") as f:
        f.write('{"kind": "mc", "key": "')  # a run killed mid-write
    again = ResultCache(path)
    assert len(again) == 2 and again.get("mc", key, "a1") == {"wins": 0.5}
    assert not again.has("mc", settings_key(samples=8, seed=0), "a1")  # other settings: recomputed
    again.put("mc", key, "a2", {"wins": 1.0})
    again.close()
    assert ResultCache(path).get("mc", key, "a2") == {"wins": 1.0}  # written on a fresh line
    # a rerun with other settings appends its own lines: the offline studies read the first settings only
    later = ResultCache(path)
    later.put("mc", settings_key(samples=8, seed=0), "a1", {"wins": 0.0})
    later.put("critic:generative", key, "a3", {"value": None})  # unanswered: left out
    later.close()
    assert measured_values(path) == ({"a1": 0.5, "a2": 1.0}, {"a1": 0.25})


# -- end to end ------------------------------------------------------------------------------------------


@pytest.fixture()
def run_dir(tmp_path, tiny_model, tokenizer):
    """A model directory with a run config: the vault chain with short limits."""
    path = tmp_path / "run"
    tiny_model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    cfg = TempoConfig(max_episode_steps=15, macro_rounds=5, max_assistant_tokens=4, critic_max_tokens=4,
                      max_trajectory_tokens=1024)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    return path


def tiny_args(run_dir, out, *extra):
    return [str(run_dir), "--out", str(out), "--games", "2", "--mc-samples", "2", "--critic-samples", "2",
            "--action-states", "1", "--candidate-actions", "2", *extra]


def test_end_to_end_and_resume(run_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    calls = []
    real = ground_truth.agent_mc

    finished = []

    def interrupted(rollout, states, *args, **kwargs):
        calls.append([s.id for s in states])
        for i, item in enumerate(real(rollout, states, *args, **kwargs)):
            if i == 2:
                raise KeyboardInterrupt
            finished.append(item[0].id)
            yield item

    monkeypatch.setattr(ground_truth, "agent_mc", interrupted)
    assert cli.main(tiny_args(run_dir, out)) == 130
    assert "rerun the same command" in capsys.readouterr().err
    lines = [json.loads(line) for line in (out / "cache.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "mc" for r in lines) == 2
    assert sum(r["kind"] == "critic:generative" for r in lines) == len(calls[0])  # the critics went first

    def counted(rollout, states, *args, **kwargs):
        calls.append([s.id for s in states])
        yield from real(rollout, states, *args, **kwargs)

    monkeypatch.setattr(ground_truth, "agent_mc", counted)
    assert cli.main(tiny_args(run_dir, out, "--critic-model", str(run_dir))) == 0
    # the rerun rolls out only the states the first run did not finish
    assert sorted(calls[1]) == sorted(set(calls[0]) - set(finished)) and len(finished) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["critics"]) == {"generative", "generative:run"}
    critic = summary["critics"]["generative"]
    assert summary["states_measured"] == summary["states"] == critic["n"] + critic["unanswered"] > 0
    assert {"mae", "rmse", "pearson", "spearman", "explained_variance", "ece", "by_position", "tracking",
            "action_ranking", "live", "mae_debiased"} <= set(critic)
    assert critic["live"]["n"] <= critic["n"]
    assert summary["action_states"] == 1 and critic["action_ranking"]["states"] == 1
    assert [r["position"] for r in critic["by_position"]] == sorted({r["position"] for r in critic["by_position"]})
    for name in ("calibration.png", "scatter.png", "error_vs_position.png", "tracking.png", "action_ranking.png"):
        assert (out / name).stat().st_size > 1000
    assert "| generative |" in (out / "summary.md").read_text()
    assert 0.0 <= summary["perfect_critic_mae"] <= 0.5 and "a perfect critic's expected MAE" in (out / "summary.md").read_text()

    # a third run finds everything in the cache: no rollouts, the same numbers
    assert cli.main(tiny_args(run_dir, out, "--critic-model", str(run_dir))) == 0
    assert calls[2] == []
    again = json.loads((out / "summary.json").read_text())
    assert again["critics"]["generative"]["mae"] == critic["mae"]


def test_user_errors_are_one_line(tmp_path, run_dir, capsys):
    for argv, needle in (
        ([str(tmp_path / "missing")], "no such directory"),
        ([str(run_dir), "--mc-samples", "0"], "--mc-samples must be >= 1"),
        ([str(run_dir), "--games", "x"], "--games"),
        ([str(run_dir), "--critic-model", str(tmp_path / "nope")], "nope: no such directory"),
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1 and "Traceback" not in err
