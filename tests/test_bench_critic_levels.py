"""bench/critic_levels.py: the final critic per number of milestones left, against Monte Carlo."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from tempo_plugin.envs import eval_env_factory

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_critic_levels", ROOT / "bench" / "critic_levels.py")
levels = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = levels  # its dataclass looks its module up while the module loads
_spec.loader.exec_module(levels)

def M(left: int, mc: float, critic: float, floor: float, raw: float = 0.5) -> levels.Measured:
    return levels.Measured(left, mc, critic, floor, raw)


def test_levels_model_leaves_each_state_out_by_hand():
    live = [M(1, 1.0, 0.65, 0.05), M(1, 0.8, 0.65, 0.05), M(3, 0.5, 0.65, 0.05), M(5, 0.3, 0.65, 0.05)]
    # the two states 1 left value each other; a state alone at its level takes the other live states' mean
    assert levels.levels_model(live) == pytest.approx([0.8, 1.0, (1.0 + 0.8 + 0.3) / 3, (1.0 + 0.8 + 0.5) / 3])


def test_score_on_the_live_states_by_hand():
    rows = [M(1, 1.0, 0.65, 0.05), M(1, 0.8, 0.65, 0.05), M(3, 0.5, 0.65, 0.05), M(5, 0.3, 0.65, 0.05),
            M(8, 0.0, 0.9, 0.01)]  # a lost state: left out of every number
    got = levels.score(rows)
    # live mean 0.65, constant MAE mean(.35, .15, .15, .35) = .25; the critic says .65 everywhere: 1.0
    assert got["live"] == 4 and got["critic"] == pytest.approx(1.0)
    # the levels model: |.8 - 1| + |1 - .8| + |.7 - .5| + |.7667 - .3| = 1.0667 over 4, / .25
    assert got["levels_model"] == pytest.approx((0.2 + 0.2 + 0.2 + (2.3 / 3 - 0.3)) / 4 / 0.25)
    assert got["floor"] == pytest.approx(0.2)  # .05 / .25
    assert got["levels"] == {1: (2, pytest.approx(0.9), 0.65), 3: (1, 0.5, 0.65), 5: (1, 0.3, 0.65)}
    text = levels.table([Path("run")], [got])
    assert "| run | 4 | 1.00 | 1.07 | 0.20 |" in text and "| run | 2: 0.90 / 0.65 | 1: 0.50 / 0.65 | 1: 0.30 / 0.65 |" in text
    assert levels.score([M(1, 0.5, 0.5, 0.1)]) == {"live": 1}  # too few live states to score


def test_milestones_left_replays_a_game():
    make_env = eval_env_factory("vaults", 40, vaults=2)
    env = make_env()
    env.reset(7)
    right, wrong = env.vault.correct, next(k for k in env.vault.keys if k != env.vault.correct)
    start = {"env_seed": 7, "action_history": []}
    assert levels.milestones_left(make_env, start) == (4, True)  # two vaults: key and door each
    assert levels.milestones_left(make_env, {**start, "action_history": [f"take {right}"]}) == (3, True)
    assert levels.milestones_left(make_env, {**start, "action_history": [f"take {wrong}"]}) == (4, False)


def test_bad_runs_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "run" / "mc_critic").mkdir(parents=True)
    (tmp_path / "run" / "mc_critic" / "states.json").write_text(json.dumps({"states": []}))
    monkeypatch.setattr(sys, "argv", ["critic_levels.py", str(tmp_path / "run")])
    with pytest.raises(SystemExit, match="no mc_critic/summary.json; run analysis/mc_critic on it first"):
        levels.main()


def test_level_table_shrinks_each_level_towards_the_mean_by_hand():
    # live audits: level 1 won 2 of 2, level 5 won 0 of 2; mean 1/2; 2 pseudo-audits at 1/2 each
    table, overall = levels.level_table([(1, 1.0), (1, 1.0), (5, 0.0), (5, 0.0)])
    assert overall == 0.5 and table == {1: pytest.approx(3 / 4), 5: pytest.approx(1 / 4)}
    assert levels.level_table([(1, 1.0), (5, 0.0)], shrink=0.0)[0] == {1: 1.0, 5: 0.0}


def test_simulated_audits_approach_the_levels_of_monte_carlo():
    rows = [M(1, 1.0, 0.5, 0.0)] * 4 + [M(3, 0.5, 0.5, 0.0)] * 4 + [M(8, 0.0, 0.5, 0.0)] * 2
    # live mean .75, constant MAE .25; a table that knew both levels would make no error: 2,000 audits
    # come within .025 of it, 8 audits (about 6 live ones) do not
    many, few = levels.simulated_audits(rows, 2000, draws=5), levels.simulated_audits(rows, 8, draws=50)
    assert many < 0.1 < few
    assert levels.simulated_audits([M(1, 0.0, 0.5, 0.0)], 8) is None  # no live state
    assert levels.simulated_audits([M(1, 0.5, 0.5, 0.0)] * 3, 8) is None  # live states all alike: no constant to beat


def test_refit_maps_compares_platt_and_levels_on_one_window_by_hand():
    """The critic says 0.5 everywhere (logit 0); audits at 1 milestone left win 8 of 10, at 3 left 2
    of 10. Platt can only give 0.5 (b = 0 by symmetry): the states' MC 0.8 and 0.2 are 0.3 off, as
    the constant 0.5 is. The levels map gives level 1 sigmoid(c) where the penalised stationarity
    10 sigmoid(c) - 8 + rho_L c = 0 holds (b = 0 and c_3 = -c by symmetry)."""
    audits = [[0.5, 0.5, 1.0, 1]] * 8 + [[0.5, 0.5, 0.0, 1]] * 2 + [[0.5, 0.5, 1.0, 3]] * 2 + [[0.5, 0.5, 0.0, 3]] * 8
    rows = [M(1, 0.8, 0.5, 0.0), M(3, 0.2, 0.5, 0.0)]
    got = levels.refit_maps(audits, rows)
    assert got["platt"] == pytest.approx((1.0, 1.0, 0.0), abs=1e-9)
    for name, rho in (("levels (rho_L 0.5)", 0.5), ("levels (rho_L 8)", 8.0)):
        lo, hi = 0.0, 2.0
        for _ in range(100):  # bisection on the stationarity condition
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if 10 / (1 + math.exp(-mid)) - 8 + rho * mid < 0 else (lo, mid)
        error = 0.8 - 1 / (1 + math.exp(-lo))
        assert got[name] == pytest.approx((error / 0.3, error / 0.3, 0.0), abs=1e-7)
    assert got["levels (rho_L 0.5)"][0] < got["levels (rho_L 8)"][0] < 1.0  # less pull, closer to the levels
    assert "| run | 1.00 / 1.00 / " in levels.refit_table([Path("run")], [got])  # bias +-0.00 by rounding
    with pytest.raises(SystemExit, match="carry no milestones left"):
        levels.refit_maps([[0.5, 0.5, 1.0]] * 4, rows)
