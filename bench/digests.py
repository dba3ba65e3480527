"""Fixed-seed fingerprints of each estimator: does a change of the code's shape change behaviour?

    .venv/bin/python bench/digests.py --out /tmp/digests-before      # on the old commit
    .venv/bin/python bench/digests.py --out /tmp/digests-after --compare /tmp/digests-before/digests.json

Runs ``python -m tempo_plugin.train`` for a few updates of each estimator (TEMPO with a warm-up, TD
updates and a Monte-Carlo refresh; multi-turn GRPO; Temporal GRPO; TPPO on the letters task), one
torch thread each so the arithmetic is the same from run to run, and writes ``digests.json``:

- ``weights``: sha256 over the saved safetensors files (the policy; TPPO's critic too);
- ``metrics``: sha256 over metrics.jsonl (and TEMPO's value pairs) with the wall-clock entries
  (``time/*``, ``throughput/*``) left out.

With ``--compare`` it prints each estimator's digests beside the old ones and exits 1 on a mismatch.
The tiny model's bootstrap is cached (``~/.cache/tempo_plugin``), so the first call builds it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tempo_plugin.metrics import VALUE_PAIRS_FILE  # noqa: E402

SHORT = ["--eval-games", "0", "--states-per-batch", "2", "--seed", "0"]
RUNS: dict[str, list[str]] = {
    "tempo": ["--advantage-estimator", "tempo", "--warmup-updates", "1", "--td-updates", "2",
              "--mc-refresh-every", "1", "--branches", "2", "--critic-samples", "2", *SHORT],
    "grpo": ["--advantage-estimator", "grpo", "--td-updates", "2", "--branches", "4", *SHORT],
    "temporal_grpo": ["--advantage-estimator", "temporal_grpo", "--td-updates", "2", "--branches", "4", *SHORT],
    "tppo": ["--advantage-estimator", "tppo", "--task", "letters", "--bootstrap-steps", "300", "--branches", "4",
             "--warmup-updates", "1", "--td-updates", "2", "--max-assistant-tokens", "12", *SHORT],
}
"""Estimator -> its trainer arguments: a few updates each, every phase of the estimator reached."""

WALL_CLOCK = ("time/", "throughput/")


def weights_digest(out: Path) -> str:
    files = sorted(p for p in out.rglob("*.safetensors") if ".old" not in p.parts and ".tmp" not in p.parts)
    if not files:
        raise SystemExit(f"no safetensors file under {out}: the run saved no weights")
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(out)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def metrics_digest(out: Path) -> str:
    digest = hashlib.sha256()
    for name in ("metrics.jsonl", VALUE_PAIRS_FILE):
        path = out / name
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            record = {k: v for k, v in json.loads(line).items() if not k.startswith(WALL_CLOCK)}
            digest.update(json.dumps(record, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def run(name: str, args: list[str], out: Path) -> dict[str, str]:
    folder = out / name
    if (folder / "summary.json").is_file():
        print(f"{name}: done before, reading {folder}", flush=True)
    else:
        print(f"{name}: python -m tempo_plugin.train {' '.join(args)}", flush=True)
        with open(out / f"{name}.log", "w") as log:
            subprocess.run([sys.executable, "-m", "tempo_plugin.train", *args, "--out", str(folder)], cwd=ROOT,
                           stdout=log, stderr=subprocess.STDOUT, check=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    return {"weights": weights_digest(folder), "metrics": metrics_digest(folder)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--compare", type=Path, help="a digests.json of an earlier call")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    digests = {name: run(name, RUNS[name], args.out) for name in args.only}
    (args.out / "digests.json").write_text(json.dumps(digests, indent=2))
    old = json.loads(args.compare.read_text()) if args.compare else {}
    same = True
    for name, now in digests.items():
        before = old.get(name)
        verdict = "" if before is None else ("  same" if before == now else f"  DIFFERENT (before {before})")
        same &= before in (None, now)
        print(f"{name:14s} weights {now['weights']}  metrics {now['metrics']}{verdict}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
