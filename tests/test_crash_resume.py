"""A run killed at any point continues with --resume: at most one update lost, and the resumed run's
later metrics equal an uninterrupted run's (same seed, CPU).

Each run is a subprocess; a killed run dies by ``os._exit`` at a chosen point (a stand-in for
kill -9: no cleanup, no flush of anything not yet written), injected by patching from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tempo_plugin.metrics import read_metrics

RUN = [
    "--bootstrap-steps", "2", "--warmup-updates", "1", "--warmup-games-per-batch", "1", "--td-updates", "3",
    "--branches", "2", "--critic-samples", "2", "--endpoint-samples", "1", "--states-per-batch", "2",
    "--fresh-share", "0", "--eval-games", "2", "--max-assistant-tokens", "6", "--critic-max-tokens", "6",
    "--save-every", "1",
]

# Runs the trainer with a kill injected at the KILL_WHERE point of the KILL_AT-th occurrence.
LAUNCHER = r"""
import os, pathlib, sys
where, at = os.environ.get("KILL_WHERE", ""), int(os.environ.get("KILL_AT", "0"))
count = [0]

def hit():
    count[0] += 1
    if count[0] == at:
        os._exit(137)

import tempo_plugin.train as train
from tempo_plugin.metrics import MetricsLog
from tempo_plugin.states.store import StateStore
if where == "between_renames":  # inside save_checkpoint: latest moved to latest.old, latest.tmp not yet in place
    rename = pathlib.Path.rename
    def patched(self, target):
        if self.name == "latest.tmp":
            hit()
        return rename(self, target)
    pathlib.Path.rename = patched
elif where == "writing_checkpoint":  # inside save_checkpoint: the weights written, the state store not
    save = StateStore.save
    def patched(self, path):
        hit()
        return save(self, path)
    StateStore.save = patched
elif where == "after_logging":  # an update's metrics are logged, its checkpoint not yet written
    log = MetricsLog.log
    def patched(self, record):
        log(self, record)
        if record.get("phase") in ("warmup", "td"):
            hit()
    MetricsLog.log = patched
sys.exit(train.main(sys.argv[1:]))
"""

VOLATILE = ("time/", "throughput/")  # wall-clock measurements differ between any two runs


def launch(out: Path, cache: Path, *extra: str, where: str = "", at: int = 0) -> int:
    env = {**os.environ, "KILL_WHERE": where, "KILL_AT": str(at)}
    args = [sys.executable, "-c", LAUNCHER, *RUN, "--cache-dir", str(cache), "--out", str(out), *extra]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600).returncode


def comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in records]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    cache = root / "cache"
    assert launch(root / "uninterrupted", cache) == 0
    return cache, read_metrics(root / "uninterrupted" / "metrics.jsonl")


@pytest.mark.parametrize("where, at, resumes_at", [
    ("after_logging", 3, 2),  # update 2 logged, not saved: it is redone
    ("between_renames", 3, 2),  # update 2's checkpoint half swapped in: update 1's (in latest.old) is used
    ("writing_checkpoint", 2, 1),  # update 1's checkpoint half written: update 0's is used
])
def test_killed_run_resumes_to_the_uninterrupted_metrics(reference, tmp_path, where, at, resumes_at):
    cache, expected = reference
    out = tmp_path / "run"
    assert launch(out, cache, where=where, at=at) == 137
    checkpoints = out / "checkpoints"
    progress_files = [p for p in (checkpoints / "latest" / "progress.json", checkpoints / "latest.old" / "progress.json") if p.is_file()]
    assert [json.loads(p.read_text())["next_update"] for p in progress_files] == [resumes_at]
    logged = [r["update"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] in ("warmup", "td")]
    assert max(logged) + 1 - resumes_at <= 1  # at most one logged update is not in the checkpoint: lost

    assert launch(out, cache, "--resume") == 0
    got = read_metrics(out / "metrics.jsonl")
    assert [(r["phase"], r["update"]) for r in got] == [(r["phase"], r["update"]) for r in expected]
    assert comparable(got) == comparable(expected)
    assert not (checkpoints / "latest.old").exists() and not (checkpoints / "latest.tmp").exists()


def test_resume_refuses_changed_settings_naming_them(reference, tmp_path):
    cache, _ = reference
    out = tmp_path / "run"
    assert launch(out, cache, where="after_logging", at=2) == 137
    result = subprocess.run([sys.executable, "-m", "tempo_plugin.train", *RUN, "--cache-dir", str(cache), "--out", str(out),
                             "--resume", "--branches", "3", "--critic-samples", "4"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --resume: the settings differ from {out}/config.yaml in --branches, --critic-samples; "
        "resume with the same settings, or pass --allow-config-change"]
    saved = (out / "config.yaml").read_text()
    assert "branches: 2" in saved  # config.yaml is not overwritten by a refused resume
    # a longer run is not a changed setting
    assert launch(out, cache, "--resume", "--td-updates", "4") == 0
    assert [r["update"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "td"] == [1, 2, 3, 4]
