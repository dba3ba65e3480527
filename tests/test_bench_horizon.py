"""bench/horizon.py: how a run scales with the chain, and the hollow checks it reads from a run's metrics."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
_spec = importlib.util.spec_from_file_location("bench_horizon", ROOT / "bench" / "horizon.py")
horizon = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(horizon)


def test_episode_length_and_budget_scale_with_the_chain():
    args = argparse.Namespace(steps_per_vault=750, eval_games=64, extra=[])
    argv = horizon.trainer_args("GRPO (multi-turn)", 4, 3, args)
    value = lambda flag: argv[argv.index(flag) + 1]  # noqa: E731
    assert (value("--vaults"), value("--max-episode-steps"), value("--max-env-steps")) == ("4", "40", "3000")
    assert (value("--bootstrap-episode-steps"), value("--seed"), value("--eval-games")) == ("30", "3", "64")
    # 3000 steps / 3 evaluations / (48 episodes x 3 x 4 steps) = 1.7 -> every 2 updates
    assert value("--eval-every") == "2"
    reference = horizon.trainer_args("TEMPO (reference)", 6, 0, args)
    assert reference[reference.index("--preset") + 1] == "reference"
    assert reference[reference.index("--max-env-steps") + 1] == "4500"


def write_run(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_hollow_checks_by_hand(tmp_path):
    run = write_run(tmp_path / "tempo", [
        {"phase": "eval", "update": -1, "eval/success_rate": 0.5},
        {"phase": "warmup", "update": 0, "rollout/rounds": 100.0, "rollout/admissible_action_rate": 0.9,
         "train/actor_samples": 0.0},
        {"phase": "td", "update": 1, "rollout/rounds": 200.0, "train/actor_samples": 12.0,
         "actor/degenerate_group_rate": 0.25, "rollout/admissible_action_rate": 0.8, "critic/value_corr": 0.2,
         "actor/macro_boundary_rate": 0.5, "critic/ready": 0.0},
        {"phase": "td", "update": 2, "rollout/rounds": 150.0, "train/actor_samples": 0.0,
         "actor/degenerate_group_rate": 0.75, "rollout/admissible_action_rate": 0.95, "critic/value_corr": 0.6,
         "actor/macro_boundary_rate": 0.0, "critic/ready": 1.0},
        {"phase": "mc_refresh", "update": 2, "rollout/rounds": 50.0, "rollout/admissible_action_rate": 0.7},
    ])
    checks = horizon.hollow_checks(run)
    assert checks["actor_samples_min"] == 0.0 and checks["updates_without_actor_samples"] == 1.0
    assert checks["updates"] == 2.0
    assert checks["degenerate_group_rate"] == pytest.approx(0.5)
    assert checks["admissible_min"] == pytest.approx(0.7)
    assert checks["critic_only_step_share"] == pytest.approx(150 / 500)
    assert checks["critic_corr_last_quarter"] == pytest.approx(0.6)  # the last quarter of 2 updates: the last one
    # the critic's part: half the branches of update 1 and none of update 2 left an endpoint to value;
    # the gate was open in one of the two TD updates
    assert checks["endpoints_valued_share"] == pytest.approx(0.25)
    assert checks["gate_open_share"] == pytest.approx(0.5)
    grpo = horizon.hollow_checks(write_run(tmp_path / "grpo", [
        {"phase": "grpo", "update": 1, "rollout/rounds": 80.0, "train/actor_samples": 16.0, "actor/degenerate_group_rate": 0.0}]))
    assert "endpoints_valued_share" not in grpo and "gate_open_share" not in grpo


def test_calibration_reads_the_noise_floor_and_the_live_states_and_tolerates_older_summaries(tmp_path):
    records = [{"phase": "td", "update": u, "critic/mean_estimate_mean": 0.2 * u, "critic/value_target_mean": 0.5}
               for u in (1, 2, 3, 4)]
    run = write_run(tmp_path / "tempo", records)
    assert horizon.calibration(run) is None  # not measured against Monte Carlo
    summary = {"constant_baseline_mae": 0.2, "mc_mean": 0.6, "perfect_critic_mae": 0.05,
               "critics": {"generative": {"mae": 0.15, "ece": 0.1, "pearson": None, "value_mean": 0.55,
                                          "live": {"n": 3, "mae": 0.3, "constant_mae": 0.2, "pearson": 0.1,
                                                   "perfect_mae": 0.16}}}}
    (run / "mc_critic").mkdir()
    (run / "mc_critic" / "summary.json").write_text(json.dumps(summary))
    got = horizon.calibration(run)
    assert (got["mae"], got["constant_mae"], got["perfect_mae"]) == (0.15, 0.2, 0.05)
    assert got["live_ratio"] == pytest.approx(1.5)  # .3 / .2 on the live states
    assert got["live_floor_ratio"] == pytest.approx(0.8)  # a perfect critic's .16 / .2 there
    assert got["td_estimate_mean"] == pytest.approx(0.8) and got["td_target_mean"] == 0.5  # the last quarter: update 4
    del summary["perfect_critic_mae"], summary["critics"]["generative"]["live"]  # written before these were measured
    (run / "mc_critic" / "summary.json").write_text(json.dumps(summary))
    got = horizon.calibration(run)
    assert got["perfect_mae"] is None and got["live_ratio"] is None and got["live_floor_ratio"] is None
