"""The Monte-Carlo refresh of the critic (--mc-refresh-every): when it runs, and what a run logs for it."""

from __future__ import annotations

import pytest

from tempo_plugin.config import TempoConfig
from tempo_plugin.metrics import ENV_STEPS, MC_REFRESH, read_metrics
from tempo_plugin.rollout.samples import CRITIC
from tempo_plugin.updates.tempo import mc_refresh_due
from tempo_plugin.train import main
from tests.test_start_states import config, waiting_rollout
from tests.test_train_smoke import SMALL


def test_refresh_follows_every_mth_td_update_by_hand():
    cfg = TempoConfig(warmup_updates=6, td_updates=28, mc_refresh_every=4)
    # TD updates are 6..33; the 4th, 8th, ... of them are updates 9, 13, ..., 33: 7 refreshes
    assert [u for u in range(cfg.total_updates) if mc_refresh_due(cfg, u)] == [9, 13, 17, 21, 25, 29, 33]
    every_one = TempoConfig(warmup_updates=2, td_updates=3, mc_refresh_every=1)
    assert [u for u in range(every_one.total_updates) if mc_refresh_due(every_one, u)] == [2, 3, 4]
    never = TempoConfig(warmup_updates=2, td_updates=3, mc_refresh_every=0)
    assert not any(mc_refresh_due(never, u) for u in range(never.total_updates))
    longer = TempoConfig(warmup_updates=0, td_updates=5, mc_refresh_every=7)  # fewer TD updates than M
    assert not any(mc_refresh_due(longer, u) for u in range(longer.total_updates))


def test_a_run_logs_each_refresh_after_its_td_update(tmp_path):
    out = tmp_path / "run"
    args = SMALL + ["--warmup-updates", "0", "--td-updates", "2", "--mc-refresh-every", "2", "--eval-games", "0",
                    "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert main(args) == 0
    records = read_metrics(out / "metrics.jsonl")
    assert [(r["phase"], r["update"]) for r in records] == [("td", 0), ("td", 1), (MC_REFRESH, 1)]
    td, refresh = records[1], records[2]
    # critic only: complete episodes of --warmup-games-per-batch (1) fresh game x N = 2 branches
    assert refresh["train/actor_samples"] == 0.0
    assert refresh["warmup/boundary_states"] >= 1.0
    # its environment steps count towards the run's total, after those of its TD update
    assert refresh[ENV_STEPS] == td[ENV_STEPS] + refresh["rollout/rounds"]
    assert refresh["rollout/rounds"] > 0
    # the 3-step bootstrap's critic rarely parses, so this file may well be empty here (it was when
    # written): test_warm_up_value_pairs_by_hand below pins the pairs a refresh logs
    values = read_metrics(out / "critic_values.jsonl")
    for r in values:
        if r["phase"] == MC_REFRESH:
            # Monte-Carlo targets: an episode's outcome, or at round 0 the mean of the N = 2 outcomes
            assert set(r["target"]) <= {0.0, 0.5, 1.0}


def test_warm_up_value_pairs_by_hand(tokenizer, protocol):
    """What a refresh logs to critic_values.jsonl: per valued state, the mean of its parsed critic
    answers and its Monte-Carlo target (the trainer's small runs above parse no critic answer)."""
    cfg = config(warmup_games_per_batch=1)
    rollout, sampler = waiting_rollout(tokenizer, protocol, cfg)
    batch = rollout.warmup_update(0, [100])
    # a policy that only waits loses both episodes at T = 30: 1 round-0 state + 2 x 5 boundary states
    # (rounds 5, 10, ..., 25), all with target 0; K = 2 answers each, cycling 0.50, 0.20, 0.90
    assert sampler.counts[CRITIC] == 2 * 11
    cycle = [(0.50 + 0.20) / 2, (0.90 + 0.50) / 2, (0.20 + 0.90) / 2]
    assert [t for _, t in batch.value_pairs] == [0.0] * 11
    assert [e for e, _ in batch.value_pairs] == pytest.approx([cycle[i % 3] for i in range(11)])
