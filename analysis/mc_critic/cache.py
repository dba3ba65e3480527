"""The resumable result cache: one JSON line per finished (kind, settings, state), appended and
flushed as soon as it is computed, so an interrupted run loses at most the batch in flight.

``kind`` is ``mc`` (Monte-Carlo ground truth) or ``critic:<name>``; ``key`` hashes every setting the
result depends on (the model's weights, M or K, the seed, the run's generation
settings), so a rerun with the same settings skips the state and a rerun with other settings (or
after the run saved new weights) computes it afresh beside the old lines. A truncated last line
(a run killed mid-write) is ignored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def settings_key(**settings: Any) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def weights_identity(directory: str | Path) -> str:
    """The names, sizes and SHA-1 of a directory's weight files: changes when a run saves a new
    checkpoint there, and survives moving or copying the run folder. A directory without weight
    files is known by its resolved path."""
    path = Path(directory).resolve()
    files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".pt") and p.is_file()) \
        if path.is_dir() else []
    if not files:
        return str(path)
    digest = hashlib.sha1()
    for file in files:
        digest.update(f"{file.name}:{file.stat().st_size}:".encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def measured_values(path: str | Path) -> tuple[dict[str, float], dict[str, float]]:
    """(Monte-Carlo value, the generative critic's raw value) per state id in a cache file, each kind
    under the first settings it was measured with (a later rerun with other settings appends lines
    under its own key). For offline studies of a finished measurement (``bench/``)."""
    mc: dict[str, float] = {}
    raw: dict[str, float] = {}
    first_key: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
            kind, key, state_id, result = record["kind"], record["key"], record["id"], record["result"]
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by an interrupted write
        if first_key.setdefault(kind, key) != key or not result:
            continue
        if kind == "mc" and result.get("wins") is not None:
            mc[state_id] = result["wins"]
        elif kind == "critic:generative" and result.get("value") is not None:
            raw[state_id] = result["value"]
    return mc, raw


class ResultCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._results: dict[tuple[str, str, str], dict] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    self._results[(record["kind"], record["key"], record["id"])] = record["result"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by an interrupted write
        self._file = None

    def __len__(self) -> int:
        return len(self._results)

    def get(self, kind: str, key: str, state_id: str) -> dict | None:
        return self._results.get((kind, key, state_id))

    def has(self, kind: str, key: str, state_id: str) -> bool:
        return (kind, key, state_id) in self._results

    def put(self, kind: str, key: str, state_id: str, result: dict) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            needs_newline = self.path.is_file() and self.path.stat().st_size > 0 \
                and not self.path.read_bytes().endswith(b"\n")
            self._file = open(self.path, "a", encoding="utf-8")
            if needs_newline:
                self._file.write("\n")  # after a truncated line, start a fresh one
        self._results[(kind, key, state_id)] = result
        self._file.write(json.dumps({"kind": kind, "key": key, "id": state_id, "result": result}) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
