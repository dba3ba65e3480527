"""TPPO, PPO, GRPO and the survey's PPO variants (BPCO, EasyPPO, SAO) on the tiny letters task at an
equal number of sampled responses.

    .venv/bin/python bench/single_turn.py [--seeds 0 1 2] [--methods TPPO PPO GRPO BPCO EasyPPO SAO] [--jobs 2 --threads 1]

Every run is ``bash scripts/tiny/tppo.sh --advantage-estimator <method> --seed N`` (the same
settings and the same tiny bootstrapped model per seed for every method). The critic methods sample
``--warmup-updates`` critic-only batches and then ``--td-updates`` joint ones; GRPO has no critic, so
it gets ``--td-updates`` = their sum, and SAO answers each problem once with S x N problems per update:
every method samples the same number of responses (the numbers are read from the script, one
place). It then writes, under ``--out``:

- ``single_turn.png``: training accuracy (the batch's share of right answers, over its S x N responses,
  smoothed over 5 updates) and the critic's explained variance against sampled responses, mean over
  seeds with the min-max band; the held-out accuracy before and after as markers;
- ``single_turn.md``: held-out accuracy before and after (mean +- std over seeds, each seed's final),
  the critic's explained variance and the training accuracy over the last quarter of updates, and
  the training time per run;
- ``single_turn.json``: the same numbers per seed.

Runs that already finished (a ``summary.json`` in their folder) are not recomputed, so an
interrupted benchmark continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tempo_plugin.metrics import last_quarter_mean, mean_std, read_metrics  # noqa: E402

SCRIPT = ROOT / "scripts" / "tiny" / "tppo.sh"
METHODS = {"TPPO": "tppo", "PPO": "ppo", "GRPO": "grpo", "BPCO": "bpco", "EasyPPO": "easyppo", "SAO": "sao"}
ACCURACY = "eval/accuracy"
EV = "critic/explained_variance"
TRAIN_ACCURACY = "rollout/accuracy"
SMOOTH = 5


def script_setting(flag: str) -> int:
    """An integer setting of scripts/tiny/tppo.sh (``--flag N`` in its argument list)."""
    match = re.search(rf"^\s*{re.escape(flag)}\s+(\d+)", SCRIPT.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"{SCRIPT} sets no {flag}: the benchmark needs it to equalise the samples")
    return int(match.group(1))


def method_args(method: str) -> list[str]:
    args = ["--advantage-estimator", METHODS[method]]
    if METHODS[method] == "grpo":  # no critic, no warm-up: the critic-only batches become actor updates
        args += ["--warmup-updates", "0", "--td-updates", str(script_setting("--warmup-updates") + script_setting("--td-updates"))]
    if METHODS[method] == "sao":  # one response per problem, as many problems: the same responses per update
        args += ["--branches", "1", "--states-per-batch", str(script_setting("--states-per-batch") * script_setting("--branches"))]
    return args


def run_one(method: str, seed: int, args: argparse.Namespace) -> Path:
    out = Path(args.out) / f"{method.lower()}-seed{seed}"
    if (out / "summary.json").is_file():
        print(f"{method} seed {seed}: done before, reading {out}", flush=True)
        return out
    if out.exists():
        shutil.rmtree(out)  # an interrupted run: start it again
    command = ["bash", str(SCRIPT), *method_args(method), "--seed", str(seed), "--out", str(out), *args.extra]
    print(f"{method} seed {seed}: {' '.join(command[1:])}", flush=True)
    tic = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)} if args.threads else None
    with open(out.parent / f"{out.name}.log", "w") as log:
        subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True, env=env)
    wall = time.perf_counter() - tic
    (out / "bench_wall.json").write_text(json.dumps({"wall_seconds": wall}) + "\n")
    print(f"{method} seed {seed}: {wall:.0f} s", flush=True)
    return out


def curve(records: list[dict], key: str) -> list[tuple[float, float]]:
    """(responses sampled so far, value) after every update that logged ``key``."""
    points, sampled = [], 0
    for r in records:
        if r.get("phase") not in ("warmup", "train"):
            continue
        sampled += r["responses"]
        if r.get(key) is not None:
            points.append((sampled, r[key]))
    return points


def run_numbers(run: Path) -> dict:
    records = read_metrics(run / "metrics.jsonl")
    per_update = _responses_per_update(run)
    for r in records:
        r["responses"] = per_update
    evals = [r[ACCURACY] for r in records if r.get("phase") == "eval"]
    wall = run / "bench_wall.json"
    return {
        "base": evals[0], "final": evals[-1],
        "ev_last_quarter": last_quarter_mean(records, EV),
        "train_accuracy_last_quarter": last_quarter_mean(records, TRAIN_ACCURACY),
        "train_seconds": sum(r.get("time/update", 0.0) for r in records),
        "wall_seconds": json.loads(wall.read_text())["wall_seconds"] if wall.is_file() else None,
        "samples": sum(r["responses"] for r in records if r.get("phase") in ("warmup", "train")),
        "per_update": per_update,
        "accuracy_curve": curve(records, TRAIN_ACCURACY),
        "ev_curve": curve(records, EV),
    }


def _responses_per_update(run: Path) -> int:
    """S x N of a run, from its config.yaml (``states_per_batch`` and ``branches``)."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    return int(config["states_per_batch"]) * int(config["branches"])


def report(runs: dict[str, dict[int, Path]], args: argparse.Namespace) -> None:
    out = Path(args.out)
    numbers = {m: {s: run_numbers(p) for s, p in by_seed.items()} for m, by_seed in runs.items()}
    rows, summary = [], {"methods": {}}
    for method, by_seed in numbers.items():
        n = list(by_seed.values())
        base, final = [x["base"] for x in n], [x["final"] for x in n]
        walls = [x["wall_seconds"] for x in n if x["wall_seconds"] is not None]
        rows.append(
            f"| {method} | {n[0]['samples']} | {mean_std(base)} | {mean_std(final)} | {mean_std([f - b for f, b in zip(final, base)])} | "
            + " / ".join(f"{v:.3f}" for v in final)
            + f" | {mean_std([x['ev_last_quarter'] for x in n])} | {mean_std([x['train_accuracy_last_quarter'] for x in n])}"
            + f" | {statistics.fmean(x['train_seconds'] for x in n):.0f} | {f'{statistics.fmean(walls):.0f}' if walls else '-'} |"
        )
        summary["methods"][method] = {str(s): {k: v for k, v in x.items()} for s, x in by_seed.items()}
    seeds = " / ".join(str(s) for s in next(iter(runs.values())))
    eval_games = _eval_games(next(iter(next(iter(runs.values())).values())))
    table = "\n".join([
        f"Letters task, tiny model, `bash scripts/tiny/tppo.sh` settings, seeds {seeds}: held-out accuracy on {eval_games} "
        f"problems before (base) and after (final) training, mean +- std over seeds (per-seed finals in seed order); "
        f"critic explained variance and training accuracy: mean over the last quarter of updates, then mean +- std over "
        f"seeds; train s: the updates alone, wall s: the whole run (bootstrap from the cache, evaluations).",
        "",
        "| method | responses sampled | base | final | final - base | final per seed | critic EV, last quarter "
        "| training accuracy, last quarter | train s | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ])
    (out / "single_turn.md").write_text(table + "\n")
    (out / "single_turn.json").write_text(json.dumps(summary, indent=2))
    plot(numbers, out / "single_turn.png", args)
    print(table)
    print(f"written: {out}/single_turn.md, single_turn.json, single_turn.png")


def _eval_games(run: Path) -> int:
    import yaml

    return int(yaml.safe_load((run / "config.yaml").read_text())["eval_games"])


def smooth(values: list[float], window: int = SMOOTH) -> list[float]:
    """Trailing moving average (the first points average what there is)."""
    return [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def band(curves: list[list[tuple[float, float]]], window: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, mean, min, max over seeds of the smoothed curves, on the points every seed has."""
    count = min(len(c) for c in curves)
    xs = [statistics.fmean(c[i][0] for c in curves) for i in range(count)]
    ys = [smooth([y for _, y in c[:count]], window) for c in curves]
    columns = list(zip(*ys))
    return xs, [statistics.fmean(c) for c in columns], [min(c) for c in columns], [max(c) for c in columns]


def plot(numbers: dict[str, dict[int, dict]], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.0))
    for method, by_seed in numbers.items():
        n = list(by_seed.values())
        xs, mean, low, high = band([x["accuracy_curve"] for x in n], SMOOTH)
        line, = left.plot(xs, mean, label=method)
        left.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)
        samples = statistics.fmean(x["samples"] for x in n)
        left.errorbar([0, samples], [statistics.fmean(x["base"] for x in n), statistics.fmean(x["final"] for x in n)],
                      yerr=[[statistics.fmean(x["base"] for x in n) - min(x["base"] for x in n),
                             statistics.fmean(x["final"] for x in n) - min(x["final"] for x in n)],
                            [max(x["base"] for x in n) - statistics.fmean(x["base"] for x in n),
                             max(x["final"] for x in n) - statistics.fmean(x["final"] for x in n)]],
                      fmt="o", color=line.get_color(), markersize=4, capsize=3)
        if all(x["ev_curve"] for x in n):
            xs, mean, low, high = band([x["ev_curve"] for x in n], SMOOTH)
            right.plot(xs, mean, label=method, color=line.get_color())
            right.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)
    warmup = script_setting("--warmup-updates")
    per_update = statistics.fmean(x["per_update"] for by_seed in numbers.values() for x in by_seed.values())
    for ax in (left, right):
        ax.axvline(warmup * per_update, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("responses sampled (training rollouts)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    left.set_ylabel(f"accuracy (lines: training batches, smoothed over {SMOOTH} updates;\ndots: held-out, before and after)", fontsize=8)
    right.set_ylabel("critic explained variance (smoothed)", fontsize=8)
    right.set_title(f"dotted: end of the critic-only warm-up ({warmup} updates)", fontsize=8)
    seeds = ", ".join(map(str, args.seeds))
    left.set_title(f"letters task, tiny model, seeds {seeds} (mean, min-max)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--out", default="bench/results/single_turn")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (2 with --threads 1 on 2 cores)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (OMP_NUM_THREADS; default: the trainer's)")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the table and plot from finished runs")
    parser.add_argument("extra", nargs="*", help="more trainer arguments for every run (after --)")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    # Method-major order: with --jobs 2 the first two runs are two seeds (each builds its own cached
    # bootstrap), and a seed's later runs start after its first one has finished bootstrapping.
    order = [(method, seed) for method in args.methods for seed in args.seeds]
    runs: dict[str, dict[int, Path]] = {m: {} for m in args.methods}
    if args.report_only:
        for method, seed in order:
            runs[method][seed] = Path(args.out) / f"{method.lower()}-seed{seed}"
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {(method, seed): pool.submit(run_one, method, seed, args) for method, seed in order}
        for (method, seed), future in futures.items():
            runs[method][seed] = future.result()
    report(runs, args)


if __name__ == "__main__":
    main()
