"""--wandb with WANDB_MODE=offline: a run folder holding the run's metrics and config, no network."""

import json
import struct
import time
from pathlib import Path

import pytest
from tests.extras import import_extra

from tempo_plugin.metrics import read_metrics
from tempo_plugin.train import main

import_extra("wandb", "wandb")

BLOCK = 32768
HEADER = 7  # ":W&B", a 2-byte magic and a version byte; every record has a 7-byte header too
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def offline_records(path: Path) -> list:
    """The protobuf records of a ``run-<id>.wandb`` file (LevelDB log layout: 32 KiB blocks of
    records with a checksum, a 2-byte length and a type; FIRST/MIDDLE/LAST pieces joined)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # block trailer: padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        piece = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        pending += piece
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def finished_records(path: Path, timeout_s: float = 60.0) -> list:
    """The run file's records once wandb's writer (a process of its own) has written its exit record:
    on a loaded machine the file can still be growing when ``finish`` has returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = offline_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def test_offline_wandb_run_holds_the_metrics_and_config(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # any network attempt would fail
    out = tmp_path / "run"
    argv = ["--bootstrap-steps", "2", "--warmup-updates", "1", "--warmup-games-per-batch", "1", "--td-updates", "1",
            "--branches", "2", "--critic-samples", "2", "--endpoint-samples", "1", "--states-per-batch", "1",
            "--eval-games", "1", "--max-assistant-tokens", "6", "--critic-max-tokens", "6",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--wandb", "--wandb-project", "tests"]
    assert main(argv) == 0

    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    run_id = (out / "wandb_run_id").read_text().strip()
    records = finished_records(runs[0] / f"run-{run_id}.wandb")
    kinds = [r.WhichOneof("record_type") for r in records]

    config = {}  # the run record carries the config given to wandb.init; config records later changes
    for r in records:
        kind = r.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = r.run.config.update if kind == "run" else r.config.update
            config.update({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    assert config["td_updates"] == 1 and config["wandb_project"] == "tests" and config["env"] == "vaults"

    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    logged = read_metrics(out / "metrics.jsonl")
    # every metrics.jsonl line is one wandb history row with the same names and values
    assert len([h for h in history if "update" in h]) == len(logged)
    for line, row in zip(logged, [h for h in history if "update" in h]):
        numeric = {k: v for k, v in line.items() if isinstance(v, (int, float)) and v is not None}
        for key, value in numeric.items():
            assert row[key] == pytest.approx(value), key
        assert "phase" not in row
    assert any(k.startswith("curves") for h in history for k in h)  # the curves PNG, logged at the end
    assert "exit" in kinds  # the run was finished cleanly
