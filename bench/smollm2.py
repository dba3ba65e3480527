"""SmolLM2-135M-Instruct: TEMPO (TD critic, calibrated audits, fresh starts), multi-turn GRPO and Temporal GRPO at
an equal budget of environment steps, from one shared warm start (issue 39's comparison).

    .venv/bin/python bench/smollm2.py [--vaults 1] [--seeds 0 1 2] [--env-steps 2400] [--eval-games 128]
                                      [--methods ...] [--no-critic] [--out bench/results/smollm2]

Every run is ``scripts/smollm2-135m/common.sh``'s recipe (its ``SMOLLM2_ARGS``: the warm start, LoRA,
the memory settings, 4 games x 4 branches or episodes) with the method's own flags, ``--vaults``,
``--max-env-steps`` (warm-up episodes and audits count), ``--eval-games`` held-out games before and
after, and ``--warm-start-seed 0``: every seed starts from the same warm-started weights, so seeds
differ in RL only. A finished run made with the same settings is read again, not rerun (as in
bench/horizon.py); an interrupted one continues from its last checkpoint. Each finished TEMPO run's
critic is then measured against Monte Carlo (``analysis/mc_critic``, 16 held-out games x 16 continuations:
``horizon.CALIBRATION``). The rows already in ``smollm2.json`` stay in the table unless a run here
replaces them (run folders are not committed, so earlier machines' runs live only there).

Writes ``smollm2.md`` and ``smollm2.json`` under ``--out``: per method the held-out success before
and after per seed, the change, how many seeds gained at least 0.10, the hollow checks (fewest
actor samples in an update, mean degenerate-group share; for TEMPO the share of branches whose
endpoint took a value and the share of TD updates with the readiness gate open: the critic's part),
the environment steps, and the critic against Monte Carlo.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from credit import eval_points, run_slug, run_trainer  # noqa: E402
from horizon import calibrate, calibration, hollow_checks  # noqa: E402

GAIN = 0.10  # the goal's gain in held-out success


def recipe(array: str) -> list[str]:
    """A flag array of scripts/smollm2-135m/common.sh, the one place the recipes' settings live."""
    listed = subprocess.run(["bash", "-c", f'source scripts/smollm2-135m/common.sh && printf "%s\\n" "${{{array}[@]}}"'],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    return listed.stdout.split()


TEMPO = ["--advantage-estimator", "tempo", *recipe("SMOLLM2_TEMPO_ARGS")]
"""The recipe's TEMPO flags, read once; every TEMPO variant below adds its own after them."""
SHORT_STEPS = [*TEMPO, "--macro-rounds", "3", "--audit-boundaries"]

METHODS: dict[str, list[str]] = {
    "TEMPO (TD critic)": [*TEMPO, "--audit-weight", "0", "--critic-calibration", "none"],
    # the recipe before it took every start state fresh: 3 of 4 start states from the store
    "TEMPO (calibrated audits)": [*TEMPO, "--fresh-share", "0.25"],
    "TEMPO (fresh starts)": TEMPO,
    # issue 38's readout: the value is the expectation over the critic's own <value> distribution, trained by
    # cross-entropy towards a two-hot target, so that no agreement of samples can lock it (seed 1's sampled critic did)
    "TEMPO (fresh starts, expected critic)": [*TEMPO, "--critic-value", "expected"],
    # macro-steps shorter than a won game (4-6 rounds), so that the critic values most endpoints, and the
    # states audits pass at those boundaries audit it (the fresh start states alone all look alike)
    "TEMPO (3-round macro-steps)": SHORT_STEPS,
    # the same with the critic valuing every endpoint: a closed gate gave every unfinished branch one value
    "TEMPO (3-round macro-steps, no gate)": [*SHORT_STEPS, "--readiness-gate", "false"],
    "GRPO (multi-turn)": ["--advantage-estimator", "grpo"],
    "Temporal GRPO": ["--advantage-estimator", "temporal_grpo"],
}
"""Method -> its flags after the recipe's SMOLLM2_ARGS (the TD critic: the recipe before audits)."""


def trainer_args(method: str, seed: int, args: argparse.Namespace) -> list[str]:
    return [*recipe("SMOLLM2_ARGS"), *METHODS[method], "--vaults", str(args.vaults), "--seed", str(seed),
            "--warm-start-seed", "0", "--td-updates", "1000", "--max-env-steps", str(args.env_steps),
            "--eval-games", str(args.eval_games), "--eval-every", "1000"]


def summarise(runs: dict[str, dict[int, Path]]) -> dict:
    summary: dict[str, dict] = {}
    for method, by_seed in runs.items():
        rows = {}
        for seed, run in sorted(by_seed.items()):
            points = eval_points(run)
            rows[seed] = {"base": points[0][1], "final": points[-1][1], "env_steps": points[-1][0],
                          **hollow_checks(run), "critic": calibration(run)}
        summary[method] = rows
    return summary


TABLE_SETTINGS = ("vaults", "env_steps", "eval_games")
"""The settings every row of one table shares (recorded in ``smollm2.json``; seeds and methods are its rows)."""


def merge(recorded: dict, settings: dict, measured: dict, args: argparse.Namespace) -> dict:
    """The committed summary's rows with the runs measured now over them. Run folders are not committed,
    so rows of runs made on another machine live only in ``smollm2.json``: kept where that file was made with
    the same vaults, environment steps and held-out games (its seeds arrive as strings from JSON); otherwise
    they are replaced, and a line says so."""
    same = all(settings.get(key) == getattr(args, key) for key in TABLE_SETTINGS)
    if recorded and not same:
        print(f"smollm2.json's rows ({', '.join(recorded)}) were measured with "
              f"{ {key: settings.get(key) for key in TABLE_SETTINGS} }, not these settings: replaced by this run's "
              "(git checkout bench/results/smollm2 brings them back; --out DIR keeps them apart)", flush=True)
    merged = {method: {int(seed): row for seed, row in rows.items()} for method, rows in recorded.items()} if same else {}
    for method, rows in measured.items():
        merged.setdefault(method, {}).update(rows)
    return {method: dict(sorted(rows.items())) for method, rows in merged.items()}


def share(rows: dict, seeds: list[int], check: str) -> str:
    """A TEMPO hollow check's mean over the seeds ('-' for a method without it)."""
    values = [rows[s][check] for s in seeds if check in rows[s]]
    return f"{statistics.fmean(values):.2f}" if values else "-"


def table(summary: dict, args: argparse.Namespace) -> str:
    lines = [f"SmolLM2-135M-Instruct, {args.vaults} vaults, {args.env_steps} environment steps, held-out success on "
             f"{args.eval_games} games before and after, one warm start (--warm-start-seed 0) for every seed.", "",
             "| method | seeds | env steps | base | final per seed | change per seed | change mean | gained >= 0.10 "
             "| actor samples min | degenerate groups | endpoints valued | gate open | critic MAE / constant "
             "| critic estimate - MC |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for method, rows in summary.items():
        seeds = sorted(rows)
        changes = [rows[s]["final"] - rows[s]["base"] for s in seeds]
        finals = [rows[s]["final"] for s in seeds]
        critics = [rows[s]["critic"] for s in seeds if rows[s]["critic"]]
        critic_cells = ("-", "-") if not critics else (
            " / ".join(f"{c['mae'] / c['constant_mae']:.2f}" for c in critics),
            " / ".join(f"{c['estimate_mean'] - c['mc_mean']:+.3f}" for c in critics))
        lines.append(
            f"| {method} | {', '.join(map(str, seeds))} | {statistics.fmean(rows[s]['env_steps'] for s in seeds):.0f} "
            f"| {statistics.fmean(rows[s]['base'] for s in seeds):.3f} "
            f"| {' / '.join(f'{f:.3f}' for f in finals)} "
            f"| {' / '.join(f'{c:+.3f}' for c in changes)} | {statistics.fmean(changes):+.3f} "
            f"| {sum(c >= GAIN - 1e-9 for c in changes)}/{len(seeds)} "
            f"| {min(rows[s]['actor_samples_min'] for s in seeds):.0f} "
            f"| {statistics.fmean(rows[s]['degenerate_group_rate'] for s in seeds):.2f} "
            f"| {share(rows, seeds, 'endpoints_valued_share')} | {share(rows, seeds, 'gate_open_share')} "
            f"| {critic_cells[0]} | {critic_cells[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vaults", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--env-steps", type=int, default=2400)
    parser.add_argument("--eval-games", type=int, default=128)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--no-critic", action="store_true", help="skip the Monte-Carlo measurement of the critics")
    parser.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--out", default="bench/results/smollm2")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the table from the runs that finished")
    args = parser.parse_args()
    if args.vaults < 1 or args.env_steps < 1 or args.eval_games < 1:
        parser.error("--vaults, --env-steps and --eval-games must be >= 1")
    out = Path(args.out).resolve()
    runs: dict[str, dict[int, Path]] = {m: {} for m in args.methods}
    for seed in args.seeds:
        for method in args.methods:
            folder = out / f"v{args.vaults}" / f"{run_slug(method)}-seed{seed}"
            if args.report_only:
                if (folder / "summary.json").is_file():
                    runs[method][seed] = folder
                continue
            runs[method][seed] = run_trainer(f"{method} seed {seed}", folder, trainer_args(method, seed, args),
                                             args.threads)
            if "TEMPO" in method and not args.no_critic:
                calibrate(folder, args.threads)
    recorded = json.loads((out / "smollm2.json").read_text()) if (out / "smollm2.json").is_file() else {}
    summary = merge(recorded.get("summary", {}), recorded.get("settings", {}),
                    summarise({method: by_seed for method, by_seed in runs.items() if by_seed}), args)
    (out / "smollm2.json").write_text(json.dumps({"settings": {key: getattr(args, key) for key in TABLE_SETTINGS}, "summary": summary}, indent=1, default=str))
    text = table(summary, args)
    (out / "smollm2.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
