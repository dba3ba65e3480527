"""bench/calibration_windows.py: the calibration map refitted offline over other audit windows."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_calibration_windows", ROOT / "bench" / "calibration_windows.py")
windows = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(windows)


def test_intercept_refit_by_hand():
    # estimates 1/2 (logit 0) won 3 times in 4: with no pull, sigmoid(b) = 3/4, so b = log 3 whatever the slope
    pairs = [(0.5, 1.0), (0.5, 1.0), (0.5, 1.0), (0.5, 0.0)]
    assert windows.refit_intercept(pairs, a=2.0, b0=0.0, prior=1e-9) == pytest.approx(math.log(3), abs=1e-6)
    # the pull: one pseudo-audit's weight towards b0 = log 3 leaves it there
    assert windows.refit_intercept(pairs, a=2.0, b0=math.log(3)) == pytest.approx(math.log(3), abs=1e-9)


def write_run(folder: Path, audit_updates: list[tuple[list[float], list[float]]], raw: list[float], mc: list[float],
              audit_weight: float = 1.0) -> Path:
    (folder / "mc_critic").mkdir(parents=True)
    (folder / "config.yaml").write_text(f"audit_weight: {audit_weight}\n")
    (folder / "critic_values.jsonl").write_text("".join(
        json.dumps({"phase": "td", "update": u, "estimate": e, "target": t}) + "\n" for u, (e, t) in enumerate(audit_updates)))
    ids = [f"s{i}" for i in range(len(raw))]
    (folder / "mc_critic" / "states.json").write_text(json.dumps({"key": "k", "states": [{"id": i} for i in ids]}))
    records = [{"kind": "mc", "key": "m", "id": i, "result": {"wins": w, "samples": 16}} for i, w in zip(ids, mc)]
    records += [{"kind": "critic:generative", "key": "c", "id": i, "result": {"value": v, "parsed": 4, "samples": 4}}
                for i, v in zip(ids, raw)]
    # a later rerun with other settings appended its own lines: only the first settings count
    records += [{"kind": "critic:generative", "key": "other", "id": i, "result": {"value": 0.99}} for i in ids]
    (folder / "mc_critic" / "cache.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_every_map_scored_against_the_constant_guess(tmp_path):
    # 10 updates of 8 audits, each at estimate 1/2 and won in half: every window fits the identity map
    # (logit 0 carries no slope information, the pull keeps a = 1; balanced outcomes keep b = 0)
    audit_updates = [([0.5] * 8, [1.0, 0.0] * 4) for _ in range(10)]
    run = write_run(tmp_path / "run", audit_updates, raw=[0.2, 0.4, 0.6, 0.8], mc=[0.25, 0.25, 0.75, 0.75])
    scores = windows.score(run)
    assert set(scores) == set(windows.MAPS)
    # critic MAE mean(.05, .15, .15, .05) = .1 against the constant's .25; no bias
    for ratio, bias in scores.values():
        assert ratio == pytest.approx(0.4) and bias == pytest.approx(0.0, abs=1e-12)
    text = windows.table([run], [scores])
    assert "| last 64 (the run's) | 0.40 | 1/1 | 0.40 | +0.00 |" in text


def test_a_short_window_follows_the_latest_outcomes(tmp_path):
    # 6 updates lost every audit, the last 2 won every one (estimates 1/2 throughout): the last 16 audits
    # say "always won", the 64 mostly "lost", so the short window's map lifts the same raw values higher
    audit_updates = [([0.5] * 8, [0.0] * 8)] * 6 + [([0.5] * 8, [1.0] * 8)] * 2
    run = write_run(tmp_path / "run", audit_updates, raw=[0.5, 0.5], mc=[0.5, 1.0])
    scores = windows.score(run)
    assert scores["last 16"][1] > 0.0 > scores["last 64 (the run's)"][1]  # estimate - MC: above, below
    assert scores["last 128"] == scores["every audit"] == scores["last 64 (the run's)"]  # 64 audits in all


def test_bad_runs_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "critic_values.jsonl").write_text("")
    monkeypatch.setattr(sys, "argv", ["calibration_windows.py", str(tmp_path / "run")])
    with pytest.raises(SystemExit, match="no mc_critic/states.json; run analysis/mc_critic on it first"):
        windows.main()
    mixed = write_run(tmp_path / "mixed", [([0.5] * 8, [1.0, 0.0] * 4)], [0.5], [0.5], audit_weight=0.5)
    monkeypatch.setattr(sys, "argv", ["calibration_windows.py", str(mixed)])
    with pytest.raises(SystemExit, match="audit_weight 0.5 in config.yaml"):
        windows.main()
