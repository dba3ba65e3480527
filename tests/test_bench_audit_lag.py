"""bench/audit_lag.py: audits, the final actor on the store's states and on its own, per milestones left."""

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_audit_lag", ROOT / "bench" / "audit_lag.py")
lag = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = lag
_spec.loader.exec_module(lag)


def test_gaps_weigh_each_count_by_its_audits_and_its_on_policy_states_by_hand():
    rows = [
        (3, [1.0, 0.0], [0.75], [0.5, 1.0]),  # store .75: - audits .5 = +.25 (2 audits), - on-policy .75 = 0 (2)
        (5, [0.0, 0.0, 1.0, 0.0], [0.5, 0.75], [0.5]),  # store .625: - .25 = +.375 (4 audits), - .5 = +.125 (1)
        (6, [1.0], [], [0.2]),  # no stored state measured: left out
        (8, [0.0], [], [0.4]),
    ]
    store_minus_audits, store_minus_on_policy = lag.gaps(rows)
    assert store_minus_audits == pytest.approx((2 * 0.25 + 4 * 0.375) / 6)
    assert store_minus_on_policy == pytest.approx((2 * 0.0 + 1 * 0.125) / 3)
    assert lag.gaps([(8, [0.0], [], [0.4])]) is None
    assert lag.gaps([(3, [], [0.5], [0.4])]) is None  # no audit at the counts measured


def test_table_lists_each_count_and_the_pooled_gaps():
    rows = [(3, [1.0, 0.0], [0.75], [0.5, 1.0]), (8, [0.0], [], [0.4])]
    args = argparse.Namespace(mc_samples=16, states=8, seed=0)
    text = lag.table([Path("run")], [rows], args)
    assert "| 3 | 2: 0.50 | 1: 0.75 | 2: 0.75 |" in text and "| 8 | 1: 0.00 | - | 1: 0.40 |" in text
    assert "store - audits +0.25 (by audits), store - on-policy +0.00 (by on-policy states)" in text
    assert "Mean over 1 runs: store - audits +0.250, store - on-policy +0.000" in text


def test_a_run_whose_audits_have_no_levels_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(lag, "last_audits", lambda run: [[0.3, 0.3, 1.0]])  # a row from before levels
    with pytest.raises(SystemExit, match="no milestones left"):
        lag.lag_rows(tmp_path, states=2, samples=2, seed=0)
