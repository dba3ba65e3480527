"""The README's main job (``bash scripts/tiny/tempo.sh``: 3 vaults, 6 warm-up + 28 TD updates) per
seed and critic variant, each run's critic measured against Monte Carlo afterwards.

    .venv/bin/python bench/main_job.py [--variants "TEMPO (default: calibrated audits)" ...] [--seeds 0 1 2] [--jobs 2]

The main job's bar: held-out success (64 games) gains at least 0.15 on every seed, the actor trains
in every TD update, and its critic beats the constant guess against Monte Carlo (``analysis/mc_critic``
with bench/horizon.py's CALIBRATION: 16 held-out games x 16 continuations, the states of one episode
of the final actor; the constant guess is those states' Monte-Carlo mean). Writes ``main_job.md``
and ``main_job.json`` under ``--out``; finished runs and calibrations are reused (bench/credit.py's
run keys), so an interrupted benchmark continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from credit import REFRESH_CRITIC, build_bootstrap, run_slug, run_trainer  # noqa: E402
from horizon import CALIBRATION, SEPARATE, UNCALIBRATED, calibrate, calibration, fmt, hollow_checks  # noqa: E402

from tempo_plugin.metrics import SUCCESS_RATE, read_metrics  # noqa: E402

VARIANTS: dict[str, list[str]] = {
    "TEMPO (refresh, no audits)": REFRESH_CRITIC,
    "TEMPO (audits, uncalibrated)": UNCALIBRATED,
    "TEMPO (default: calibrated audits)": [],
    "TEMPO (separate critic)": [*SEPARATE, "--critic-learning-rate", "3e-4"],
    "TEMPO (4 policy epochs)": ["--policy-epochs", "4"],
    "TEMPO (calibrated audits, expected readout)": ["--critic-value", "expected-readout"],
}
"""Variant -> its trainer arguments beside the main job's defaults: the default critic until
2026-12-06 (TD targets and a Monte-Carlo refresh), audits without and with today's calibration map,
the expected critic on weights of its own (uncalibrated), and the sampled critic valued by its
expected readout."""
BAR = 0.15


def run_folder(out: Path, variant: str, seed: int) -> Path:
    return out / f"{run_slug(variant)}-seed{seed}"


def run_one(variant: str, seed: int, out: Path, threads: int) -> Path:
    run = run_trainer(f"{variant} seed {seed}", run_folder(out, variant, seed),
                      [*VARIANTS[variant], "--seed", str(seed)], threads)
    calibrate(run, threads)
    return run


def seconds(run: Path) -> float:
    """The update loop's seconds (training updates and refreshes) from metrics.jsonl."""
    return sum(r.get("time/update", 0.0) for r in read_metrics(run / "metrics.jsonl"))


def row(run: Path) -> dict:
    evals = [r[SUCCESS_RATE] for r in read_metrics(run / "metrics.jsonl") if r.get("phase") == "eval"]
    return {"base": evals[0], "final": evals[-1], "checks": hollow_checks(run), "calibration": calibration(run),
            "update_seconds": seconds(run)}


def table(rows: dict[str, dict[int, dict]]) -> str:
    lines = [
        "Held-out success on 64 games base -> final; the actor's fewest samples in a TD update; the critic "
        f"against Monte Carlo ({' '.join(CALIBRATION)}): MAE / constant-guess MAE, ECE, Pearson, mean estimate "
        "- Monte-Carlo mean; critic-only: share of environment steps in warm-up and refreshes.",
        "",
        "| variant | seed | success | change | actor samples min | critic MAE / constant | ECE | Pearson "
        "| estimate - MC | critic-only steps | update loop s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, by_seed in rows.items():
        for seed, r in sorted(by_seed.items()):
            c, k = r["calibration"], r["checks"]
            critic = (f"{c['mae']:.3f} / {c['constant_mae']:.3f} = {c['mae'] / c['constant_mae']:.2f} | {c['ece']:.3f} "
                      f"| {c['pearson']:.2f} | {c['estimate_mean'] - c['mc_mean']:+.3f}") if c else "- | - | - | -"
            lines.append(f"| {variant} | {seed} | {r['base']:.3f} -> {r['final']:.3f} | {r['final'] - r['base']:+.3f} "
                         f"| {k['actor_samples_min']:.0f} | {critic} | {k['critic_only_step_share']:.2f} "
                         f"| {r['update_seconds']:.0f} |")
        done = list(by_seed.values())
        cals = [r["calibration"] for r in done if r["calibration"]]
        gains = [r["final"] - r["base"] for r in done]
        lines.append(
            f"| {variant} | mean | {fmt([r['base'] for r in done])} -> {fmt([r['final'] for r in done])} | {fmt(gains)} "
            f"| bar {sum(g >= BAR for g in gains)}/{len(gains)} | beats constant {sum(c['mae'] < c['constant_mae'] for c in cals)}/{len(cals)} "
            f"| {fmt([c['ece'] for c in cals])} | {fmt([c['pearson'] for c in cals], 2)} "
            f"| {fmt([c['estimate_mean'] - c['mc_mean'] for c in cals])} | {fmt([r['checks']['critic_only_step_share'] for r in done], 2)} | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="bench/results/main-job")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, each with cores/jobs torch threads")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the table from finished runs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        for seed in args.seeds:  # one bootstrap per seed, built before the variants' runs share it
            build_bootstrap(seed)
        with ThreadPoolExecutor(args.jobs) as pool:
            for future in [pool.submit(run_one, v, s, out, threads) for v in args.variants for s in args.seeds]:
                future.result()
    rows = {v: {s: row(run_folder(out, v, s)) for s in args.seeds if (run_folder(out, v, s) / "summary.json").is_file()}
            for v in args.variants}
    (out / "main_job.json").write_text(json.dumps(rows, indent=1))
    text = table({v: r for v, r in rows.items() if r})
    (out / "main_job.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
