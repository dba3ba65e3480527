"""TEMPO (with and without the prefix importance correction), multi-turn GRPO and Temporal GRPO on
the built-in chain of vaults at an equal budget of environment steps.

    .venv/bin/python bench/credit.py [--seeds 0 1 2] [--env-steps 5000] [--eval-games 64] [--jobs 2] [--out bench/results/credit]

For each method and seed it runs ``python -m tempo_plugin.train`` (the same tiny bootstrapped model
per seed for both methods) until the rollouts have taken ``--env-steps`` environment steps (warm-up
episodes included), measuring held-out success on ``--eval-games`` games every ``--eval-every``
updates. It then writes, under ``--out``:

- ``credit.png``: held-out success against environment steps, mean over seeds with the min-max band;
- ``credit.md``: base, final and peak success (mean +- std over seeds, and each seed's final), the
  environment steps each method needed to reach GRPO's mean final and mean peak success (first
  evaluation at or above it, per seed);
- ``credit.json``: the same numbers, and every evaluation point.

Runs that already finished (a ``summary.json`` in their folder) are not recomputed, so an
interrupted benchmark continues where it stopped; a finished run is reused only if it was made with
the same settings (its trainer arguments resolved, defaults included) and the same tiny-model
bootstrap version (``bench_key.json`` in its folder), otherwise it runs again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tempo_plugin.metrics import ENV_STEPS, SUCCESS_RATE, mean_std, read_metrics  # noqa: E402
from tempo_plugin.embedded.model import TINY_VERSION  # noqa: E402
from tempo_plugin.config import TempoConfig, parse_config  # noqa: E402

REFRESH_CRITIC = ["--audit-weight", "0", "--mc-refresh-every", "4"]
"""TEMPO's critic as it was the default until audits replaced it (2026-12-06): TD targets, a
Monte-Carlo refresh after every 4th TD update. The committed tables of credit.py and horizon.py
were made with it, so their "TEMPO" keeps it."""
METHODS: dict[str, list[str]] = {
    "TEMPO": ["--advantage-estimator", "tempo", *REFRESH_CRITIC, "--eval-every", "6"],
    "TEMPO + prefix IS": ["--advantage-estimator", "tempo", *REFRESH_CRITIC, "--prefix-is-clip", "2.0", "--eval-every", "6"],
    "GRPO (multi-turn)": ["--advantage-estimator", "grpo", "--eval-every", "3"],
    "Temporal GRPO": ["--advantage-estimator", "temporal_grpo", "--eval-every", "3"],
}
"""Method -> its trainer arguments (defaults otherwise). Evaluations are spaced about equally in
environment steps: a GRPO update plays S games x N complete episodes, about twice a TD update's steps."""


BUILD_BOOTSTRAP = (
    "import sys\n"
    "from tempo_plugin.embedded.model import load_policy, resolve_device\n"
    "from tempo_plugin.config import parse_config\n"
    "load_policy(parse_config(['--seed', *sys.argv[1:]]), resolve_device('cpu'))\n"
)
"""Builds (or finds) the cached bootstrapped tiny model of a seed, so parallel runs do not race to build it."""


def build_bootstrap(seed: int, trainer_args: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
    """The tiny model of ``seed`` (with ``trainer_args``' bootstrap settings) built in a process of
    its own before the runs that share it start (BUILD_BOOTSTRAP)."""
    subprocess.run([sys.executable, "-c", BUILD_BOOTSTRAP, str(seed), *trainer_args], cwd=ROOT, check=True, env=env)


def run_slug(name: str) -> str:
    """A method's folder name: "TEMPO + prefix IS" -> "tempo-prefix-is"."""
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


RUN_KEY_FILE = "bench_key.json"


def run_key(trainer_args: Sequence[str], tiny_version: int = TINY_VERSION) -> dict:
    """What a finished run must have been made with to be reused: every setting its trainer
    arguments resolve to (defaults included, so a changed default reruns it) and the tiny model's
    bootstrap version (a new bootstrap changes every run while the settings stay)."""
    return {"settings": parse_config(list(trainer_args)).to_dict(), "tiny_version": tiny_version}


def record_key(out: Path, key: dict) -> None:
    """Write ``key`` into the run folder ``out`` (created if needed), before the run starts."""
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_KEY_FILE).write_text(json.dumps(key, indent=1))


def made_with(out: Path, key: dict) -> bool:
    """Whether the run folder ``out`` was made with ``key``. A setting its recorded key lacks was
    added after the run, which then ran as its default does: it matches the default."""
    key_file = out / RUN_KEY_FILE
    if not key_file.is_file():
        return False
    recorded = json.loads(key_file.read_text())
    defaults = TempoConfig().to_dict()
    settings = {name: value for name, value in key["settings"].items()
                if name in recorded.get("settings", {}) or value != defaults.get(name)}
    return recorded == {**key, "settings": settings}


def reusable(out: Path, key: dict) -> bool:
    """A finished run (``summary.json``) made with ``key``."""
    return (out / "summary.json").is_file() and made_with(out, key)


def resumable(out: Path, key: dict) -> bool:
    """An interrupted run made with ``key`` that saved a checkpoint: ``--resume`` continues it."""
    return not (out / "summary.json").is_file() and (out / "checkpoints" / "latest" / "progress.json").is_file() \
        and made_with(out, key)


REUSED_FILES = ("metrics.jsonl", "summary.json", "config.yaml", "critic_values.jsonl", RUN_KEY_FILE)
"""What the benchmarks read of a finished run (its Monte-Carlo measurement, mc_critic/, too)."""


def reuse_from(source: Path, out: Path, trainer_args: Sequence[str]) -> bool:
    """Copy a finished run made with ``trainer_args`` from ``source`` into ``out`` (its results, not
    its checkpoints) unless ``out`` holds one already; whether it copied one."""
    key = run_key(trainer_args)
    if reusable(out, key) or not reusable(source, key):
        return False
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in REUSED_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
    if (source / "mc_critic").is_dir():
        shutil.copytree(source / "mc_critic", out / "mc_critic")
    return True


def run_trainer(label: str, out: Path, trainer_args: list[str], threads: int) -> Path:
    """Train into ``out`` with ``trainer_args`` (its log beside it), unless a finished run made with
    the same key is there already; an interrupted one with the same key continues from its last
    checkpoint (``--resume``)."""
    command = [sys.executable, "-m", "tempo_plugin.train", *trainer_args, "--out", str(out)]
    key = run_key(trainer_args)
    if reusable(out, key):
        print(f"{label}: done before, reading {out}", flush=True)
        return out
    resume = resumable(out, key)
    if resume:
        command.append("--resume")
        print(f"{label}: {out} was interrupted; continuing it from its last checkpoint", flush=True)
    else:
        if out.exists():
            # interrupted before its first checkpoint, or made with other arguments or another bootstrap
            print(f"{label}: {out} is unfinished or from other settings; running it again", flush=True)
            shutil.rmtree(out)
        record_key(out, key)
    print(f"{label}: {' '.join(command[1:])}", flush=True)
    tic = time.perf_counter()
    with open(out.parent / f"{out.name}.log", "a" if resume else "w") as log:
        subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    print(f"{label}: {time.perf_counter() - tic:.0f} s", flush=True)
    return out


def run_one(name: str, seed: int, args: argparse.Namespace) -> Path:
    out = Path(args.out) / f"{run_slug(name)}-seed{seed}"
    trainer_args = [*METHODS[name], "--seed", str(seed), "--td-updates", "1000", "--max-env-steps", str(args.env_steps),
                    "--eval-games", str(args.eval_games), *args.extra]
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    return run_trainer(f"{name} seed {seed}", out, trainer_args, threads)


def eval_points(run: Path) -> list[tuple[float, float]]:
    """(environment steps, held-out success) of every evaluation of a run, base first."""
    return [(r.get(ENV_STEPS) or 0.0, r[SUCCESS_RATE]) for r in read_metrics(run / "metrics.jsonl") if r.get("phase") == "eval"]


def steps_to_reach(points: list[tuple[float, float]], level: float) -> float | None:
    return next((steps for steps, rate in points[1:] if rate >= level), None)


def report(runs: dict[str, dict[int, Path]], args: argparse.Namespace) -> None:
    out = Path(args.out)
    points = {m: {s: eval_points(p) for s, p in by_seed.items()} for m, by_seed in runs.items()}
    grpo = next(m for m in points if m.startswith("GRPO"))
    grpo_final = statistics.fmean(p[-1][1] for p in points[grpo].values())
    grpo_peak = statistics.fmean(max(rate for _, rate in p[1:]) for p in points[grpo].values())
    rows, summary = [], {"env_steps_budget": args.env_steps, "eval_games": args.eval_games, "grpo_final_mean": grpo_final,
                         "grpo_peak_mean": grpo_peak, "methods": {}}

    def reach_cell(reach: list[float | None]) -> str:
        reached = [r for r in reach if r is not None]
        return f"{len(reached)}/{len(reach)} seeds, {(statistics.fmean(reached) if reached else float('nan')):.0f}"

    for method, by_seed in points.items():
        base = [p[0][1] for p in by_seed.values()]
        final = [p[-1][1] for p in by_seed.values()]
        peak = [max(rate for _, rate in p[1:]) for p in by_seed.values()]
        reach = [steps_to_reach(p, grpo_final) for p in by_seed.values()]
        reach_peak = [steps_to_reach(p, grpo_peak) for p in by_seed.values()]
        rows.append(
            f"| {method} | {mean_std(base)} | {mean_std(final)} | {mean_std([f - b for f, b in zip(final, base)])} | "
            + " / ".join(f"{v:.3f}" for v in final)
            + f" | {mean_std(peak)} | {reach_cell(reach)} | {reach_cell(reach_peak)} |"
        )
        summary["methods"][method] = {"base": base, "final": final, "peak": peak, "steps_to_grpo_final": reach,
                                       "steps_to_grpo_peak": reach_peak, "points": {str(s): p for s, p in by_seed.items()}}
    seeds = " / ".join(str(s) for s in next(iter(runs.values())))
    table = "\n".join([
        f"Held-out success on {args.eval_games} games, {args.env_steps} environment steps per run, seeds {seeds} "
        f"(mean +- std over seeds; per-seed finals in seed order; peak = best evaluation after the base; "
        f"env steps = mean over the seeds that reached the level, first evaluation at or above it).",
        "",
        f"| method | base | final | final - base | final per seed | peak | env steps to GRPO's final mean ({grpo_final:.3f}) "
        f"| env steps to GRPO's peak mean ({grpo_peak:.3f}) |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])
    (out / "credit.md").write_text(table + "\n")
    (out / "credit.json").write_text(json.dumps(summary, indent=2))
    plot(points, out / "credit.png", args)
    print(table)
    print(f"written: {out}/credit.md, credit.json, credit.png")


def plot(points: dict[str, dict[int, list[tuple[float, float]]]], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for method, by_seed in points.items():
        count = min(len(p) for p in by_seed.values())  # evaluations every run of the method has
        steps = [statistics.fmean(p[i][0] for p in by_seed.values()) for i in range(count)]
        rates = [[p[i][1] for p in by_seed.values()] for i in range(count)]
        line, = ax.plot(steps, [statistics.fmean(r) for r in rates], marker="o", markersize=3, label=method)
        ax.fill_between(steps, [min(r) for r in rates], [max(r) for r in rates], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("environment steps (training rollouts)")
    ax.set_ylabel(f"held-out success ({args.eval_games} games)")
    ax.set_title(f"chain of vaults, tiny model, seeds {', '.join(map(str, args.seeds))} (mean, min-max)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--env-steps", type=int, default=5000, help="environment steps per run (the equal budget)")
    parser.add_argument("--eval-games", type=int, default=64)
    parser.add_argument("--out", default="bench/results/credit")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time, each with cores/jobs torch threads (the tiny model gains little from a second thread)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (default: cores / jobs)")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the table and plot from finished runs")
    parser.add_argument("extra", nargs="*", help="more trainer arguments for every run (after --)")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[int, Path]] = {m: {} for m in args.methods}
    for seed in args.seeds:
        for method in args.methods:
            if args.report_only:
                runs[method][seed] = Path(args.out) / f"{run_slug(method)}-seed{seed}"
    if not args.report_only:
        for seed in args.seeds:  # one bootstrap per seed, built before runs share it
            build_bootstrap(seed, args.extra)
        jobs = [(method, seed) for seed in args.seeds for method in args.methods]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for (method, seed), out in zip(jobs, pool.map(lambda job: run_one(*job, args), jobs)):
                runs[method][seed] = out
    report(runs, args)


if __name__ == "__main__":
    main()
