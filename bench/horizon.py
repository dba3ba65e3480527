"""Credit against horizon: TEMPO (our defaults and ``--preset reference``), multi-turn GRPO and
Temporal GRPO on chains of V vaults at an equal budget of environment steps.

    .venv/bin/python bench/horizon.py [--vaults 2 4 6] [--seeds 0 1 2 3 4] [--steps-per-vault 750] [--jobs 2]

Scaling with the chain: a game of V vaults holds V key decisions in about 4.5 V rounds, so the
episode length is T = 10 V (30 for the main job's 3 vaults) and the budget of environment steps
per run is ``--steps-per-vault`` x V (warm-up and Monte-Carlo refresh episodes included). Every
run of a seed starts from the same tiny model, bootstrapped on 3-vault games of T = 30
(``--bootstrap-episode-steps 30``), so the chain length is the only thing that changes between
lengths. Held-out success is measured on ``--eval-games`` games before training, about every third
of the budget and at the end.

Writes under ``--out``:

- ``horizon.md``: per chain length and method, final success (mean +- std over seeds), the paired
  per-seed difference against multi-turn GRPO (mean and its standard error), environment steps to
  reach GRPO's final mean, the hollow checks (actor samples, degenerate groups, admissible share)
  and, for TEMPO, the critic's correlation with its targets and the share of environment steps
  spent on the critic-only warm-up and refreshes;
- ``horizon.json``: the same numbers and every evaluation point;
- ``final.png``: final success against chain length per method; ``curves.png``: success against
  environment steps, one panel per chain length;
- with ``--calibrate``, each finished TEMPO run's critic against Monte Carlo (``analysis/mc_critic``
  into the run's ``mc_critic/``): MAE against the constant-guess MAE, ECE, and its mean estimate
  against the Monte-Carlo mean and its own TD targets.

Finished runs are reused as in ``bench/credit.py`` (same settings and bootstrap version).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from credit import REFRESH_CRITIC, build_bootstrap, eval_points, reuse_from, run_slug, run_trainer, steps_to_reach  # noqa: E402

from tempo_plugin.envs.chain import ROUNDS_PER_VAULT  # noqa: E402
from tempo_plugin.estimators import ESTIMATORS, GENERATIVE  # noqa: E402
from tempo_plugin.metrics import MC_REFRESH, read_metrics  # noqa: E402

WARMUP = ["--warmup-updates", "2"]
"""TEMPO's critic-only warm-up, scaled to the budget: 2 updates of 4 games x N = 6 complete episodes
take about a quarter of it, as the default 6 do of bench/credit.py's 5,000 steps on 3 vaults (the
default 6 took three quarters of a 2-vault budget here and left 2 TD updates)."""
EXPECTED = ["--critic-value", "expected", "--value-loss-weight", "0.1", "--critic-epochs", "8"]
"""The expected-value critic as measured in docs/experiments/critic-calibration.md: beta 0.1 keeps the
value cross-entropy's share of a TD update's gradient norm at 0.2-0.6 (beta 1: 0.76-0.99), and 8
critic steps per update move its readout off its prior (1 step barely does), but broke the shared
tiny model's actions on one seed of three at 2 vaults."""
UNCALIBRATED = ["--critic-calibration", "none"]
"""Audited critics as measured before the calibration map (2026-12-06): their committed tables."""
SEPARATE = ["--critic-weights", "separate", "--critic-value", "expected", "--value-loss-weight", "1",
            "--critic-epochs", "8", "--audit-weight", "1", "--mc-refresh-every", "0", *UNCALIBRATED]
"""The expected critic on weights of its own (its training cannot move the actor, so the value
cross-entropy takes its full weight and 8 steps per update, warm-up included), its targets the audits'
outcomes, no refresh."""
METHODS: dict[str, list[str]] = {
    "TEMPO": ["--advantage-estimator", "tempo", *WARMUP, *REFRESH_CRITIC],
    "TEMPO (reference)": ["--advantage-estimator", "tempo", *WARMUP, "--preset", "reference"],
    "TEMPO (audits)": ["--advantage-estimator", "tempo", *WARMUP, "--audit-weight", "1", "--mc-refresh-every", "0",
                       *UNCALIBRATED],
    "TEMPO (calibrated audits)": ["--advantage-estimator", "tempo", *WARMUP, "--audit-weight", "1",
                                  "--mc-refresh-every", "0", "--critic-calibration", "platt"],
    "TEMPO (calibrated audits, expected readout)": ["--advantage-estimator", "tempo", *WARMUP, "--audit-weight", "1",
                                                    "--mc-refresh-every", "0", "--critic-calibration", "platt",
                                                    "--critic-value", "expected-readout"],
    "TEMPO (level-calibrated audits)": ["--advantage-estimator", "tempo", *WARMUP, "--audit-weight", "1",
                                        "--mc-refresh-every", "0", "--critic-calibration", "levels"],
    "TEMPO (level-calibrated audits, expected readout)": ["--advantage-estimator", "tempo", *WARMUP,
                                                          "--audit-weight", "1", "--mc-refresh-every", "0",
                                                          "--critic-calibration", "levels",
                                                          "--critic-value", "expected-readout"],
    "TEMPO (level-calibrated audits, expected readout + boundaries)": ["--advantage-estimator", "tempo", *WARMUP,
                                                                       "--audit-weight", "1", "--mc-refresh-every", "0",
                                                                       "--critic-calibration", "levels",
                                                                       "--critic-value", "expected-readout",
                                                                       "--audit-boundaries"],
    "TEMPO (level-calibrated audits with drift, expected readout)": ["--advantage-estimator", "tempo", *WARMUP,
                                                                     "--audit-weight", "1", "--mc-refresh-every", "0",
                                                                     "--critic-calibration", "levels",
                                                                     "--calibration-drift",
                                                                     "--critic-value", "expected-readout"],
    "TEMPO (calibrated half audits, expected readout)": ["--advantage-estimator", "tempo", *WARMUP, "--audit-weight", "0.5",
                                                         "--mc-refresh-every", "0", "--critic-calibration", "platt",
                                                         "--critic-value", "expected-readout"],
    "TEMPO (calibrated audits + boundaries)": ["--advantage-estimator", "tempo", *WARMUP, "--audit-weight", "1",
                                               "--mc-refresh-every", "0", "--critic-calibration", "platt",
                                               "--audit-boundaries"],
    "TEMPO (calibrated audits, expected readout + boundaries)": ["--advantage-estimator", "tempo", *WARMUP,
                                                                 "--audit-weight", "1", "--mc-refresh-every", "0",
                                                                 "--critic-calibration", "platt",
                                                                 "--critic-value", "expected-readout", "--audit-boundaries"],
    "TEMPO (expected critic)": ["--advantage-estimator", "tempo", *WARMUP, *EXPECTED, *REFRESH_CRITIC],
    "TEMPO (expected + audits)": ["--advantage-estimator", "tempo", *WARMUP, *EXPECTED,
                                  "--audit-weight", "0.5", "--mc-refresh-every", "0", *UNCALIBRATED],
    "TEMPO (separate critic)": ["--advantage-estimator", "tempo", *WARMUP, *SEPARATE],
    "TEMPO (separate critic, lr 3e-4)": ["--advantage-estimator", "tempo", *WARMUP, *SEPARATE,
                                         "--critic-learning-rate", "3e-4"],
    "GRPO (multi-turn)": ["--advantage-estimator", "grpo"],
    "Temporal GRPO": ["--advantage-estimator", "temporal_grpo"],
    "FlashREINFORCE": ["--advantage-estimator", "flash_reinforce"],
    "CoPE": ["--advantage-estimator", "cope"],
    "SPO": ["--advantage-estimator", "spo", "--branches", "1", "--states-per-batch", "48", "--train-games", "96"],
    "LVRL": ["--advantage-estimator", "lvrl"],
}
"""Method -> its trainer arguments (defaults otherwise). SPO as published plays one episode per game
(single-stream), 48 per update like the others' 8 games x 6; its pool of 96 training games is
revisited about three times in a 4-vault budget."""
BASELINE = "GRPO (multi-turn)"
BOOTSTRAP_T = 30
EVALUATIONS = 3
"""Evaluations after the base one, spaced about equally in environment steps."""


def episode_steps(vaults: int) -> int:
    return ROUNDS_PER_VAULT * vaults


def eval_every(method: str, vaults: int, budget: int) -> int:
    """Updates between evaluations so that a run evaluates about EVALUATIONS times: a TD update of
    S = 8 states x N = 6 branches x <= H = 5 rounds takes about 240 steps, an episode update of 8
    games x 6 episodes about 48 x 3 V (a wrong key ends an episode early)."""
    per_update = 240 if "TEMPO" in method else 48 * 3 * vaults
    return max(1, round(budget / EVALUATIONS / per_update))


def trainer_args(method: str, vaults: int, seed: int, args: argparse.Namespace) -> list[str]:
    budget = args.steps_per_vault * vaults
    return [*METHODS[method], "--vaults", str(vaults), "--max-episode-steps", str(episode_steps(vaults)),
            "--bootstrap-episode-steps", str(BOOTSTRAP_T), "--seed", str(seed), "--td-updates", "1000",
            "--max-env-steps", str(budget), "--eval-games", str(args.eval_games),
            "--eval-every", str(eval_every(method, vaults, budget)), *args.extra]


TRAINING_PHASES = ("td", *(e.name for e in ESTIMATORS.values() if e.critic != GENERATIVE))
"""Updates that train the actor: TEMPO's TD updates, and every update of an episode estimator."""


def run_folder(out: Path, method: str, vaults: int, seed: int) -> Path:
    return out / f"v{vaults}" / f"{run_slug(method)}-seed{seed}"


# ---------------------------------------------------------------------------------------- reading

def hollow_checks(run: Path) -> dict[str, float]:
    """What could make a run's result hollow, from its metrics.jsonl: the training updates' actor
    samples (fewest, and how many updates had none), their mean degenerate-group share, the lowest
    admissible-action share; for TEMPO the last-quarter critic correlation with its targets and the
    share of environment steps spent in critic-only updates (warm-up, refreshes)."""
    records = read_metrics(run / "metrics.jsonl")
    training = [r for r in records if r.get("phase") in TRAINING_PHASES]
    critic_only = [r for r in records if r.get("phase") in ("warmup", MC_REFRESH)]
    actor = [r["train/actor_samples"] for r in training if "train/actor_samples" in r]
    steps = sum(r.get("rollout/rounds", 0.0) for r in training + critic_only)
    checks = {
        "actor_samples_min": min(actor) if actor else 0.0,
        "updates_without_actor_samples": float(sum(a == 0 for a in actor)),
        "updates": float(len(training)),
        "degenerate_group_rate": statistics.fmean(r["actor/degenerate_group_rate"] for r in training
                                                  if "actor/degenerate_group_rate" in r) if training else math.nan,
        "admissible_min": min((r["rollout/admissible_action_rate"] for r in training + critic_only
                               if "rollout/admissible_action_rate" in r), default=math.nan),
        "critic_only_step_share": sum(r.get("rollout/rounds", 0.0) for r in critic_only) / steps if steps else math.nan,
    }
    critic = [r["train/critic_samples"] for r in training if "train/critic_samples" in r and r.get("phase") == "td"]
    if critic:
        checks["critic_samples_min"] = min(critic)
    corr = [r["critic/value_corr"] for r in training if "critic/value_corr" in r]
    if corr:
        checks["critic_corr_last_quarter"] = statistics.fmean(corr[-max(1, len(corr) // 4):])
    unfinished = [r["actor/macro_boundary_rate"] for r in training if "actor/macro_boundary_rate" in r]
    if unfinished:  # the share of branches whose endpoint took a value (the critic's, or the gate's fallback)
        checks["endpoints_valued_share"] = statistics.fmean(unfinished)
    ready = [r["critic/ready"] for r in training if "critic/ready" in r]
    if ready:  # the share of TD updates whose endpoints the critic valued (readiness gate open)
        checks["gate_open_share"] = statistics.fmean(ready)
    return checks


CALIBRATION = ["--games", "16", "--mc-samples", "16", "--critic-samples", "4", "--action-states", "0"]
"""analysis/mc_critic settings of the end-of-run calibration: the states of one episode of the
final actor on each of 16 held-out games, each valued by 16 Monte-Carlo continuations (the standard
error of one state's Monte-Carlo value is then at most 0.125)."""


def calibrate(run: Path, threads: int) -> None:
    """The critic of a finished TEMPO run against Monte Carlo (``run/mc_critic/summary.json``)."""
    if (run / "mc_critic" / "summary.json").is_file():
        return
    print(f"calibrating {run} against Monte Carlo ...", flush=True)
    with open(run.parent / f"{run.name}.mc_critic.log", "w") as log:
        subprocess.run([sys.executable, "-m", "analysis.mc_critic", str(run), *CALIBRATION, "--out", str(run / "mc_critic")],
                       cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)})


def calibration(run: Path) -> dict[str, float] | None:
    """MAE, constant-guess MAE, ECE, Pearson, mean estimate and Monte-Carlo mean of a calibrated run;
    and, from its metrics, the last quarter of TD updates' mean critic estimate and TD target."""
    path = run / "mc_critic" / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    critic = summary["critics"]["generative"]
    td = [r for r in read_metrics(run / "metrics.jsonl") if r.get("phase") == "td"]
    last = td[-max(1, len(td) // 4):]
    return {
        "mae": critic["mae"], "constant_mae": summary["constant_baseline_mae"], "ece": critic["ece"],
        "perfect_mae": summary.get("perfect_critic_mae"),  # these two are None in summaries written before them
        "live_ratio": _live_ratio(critic.get("live")),
        "live_floor_ratio": _live_ratio(critic.get("live"), "perfect_mae"),  # None before the live floor was measured
        "pearson": critic["pearson"] if critic["pearson"] is not None else math.nan,
        "estimate_mean": critic["value_mean"], "mc_mean": summary["mc_mean"],
        "td_estimate_mean": statistics.fmean(r["critic/mean_estimate_mean"] for r in last if "critic/mean_estimate_mean" in r),
        "td_target_mean": statistics.fmean(r["critic/value_target_mean"] for r in last if "critic/value_target_mean" in r),
    }


def _live_ratio(live: dict | None, key: str = "mae") -> float | None:
    """On the live states (Monte-Carlo value above 0): a critic's MAE (or, with ``key`` perfect_mae,
    a perfect critic's) over the constant guess's."""
    if not live or live.get(key) is None or not live["constant_mae"]:
        return None
    return live[key] / live["constant_mae"]


def standard_error(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def summarise(out: Path, vaults_list: list[int], all_seeds: list[int], methods: list[str]) -> dict:
    summary: dict = {"lengths": {}}
    for vaults in vaults_list:
        # the seeds every method has finished at this length (a benchmark still running reports those)
        seeds = [s for s in all_seeds if all((run_folder(out, m, vaults, s) / "summary.json").is_file() for m in methods)]
        if not seeds:
            continue
        points = {m: {s: eval_points(run_folder(out, m, vaults, s)) for s in seeds} for m in methods}
        final = {m: [points[m][s][-1][1] for s in seeds] for m in methods}
        base_final = statistics.fmean(final[BASELINE]) if BASELINE in final else math.nan
        length = {}
        for m in methods:
            diffs = [f - g for f, g in zip(final[m], final[BASELINE])] if BASELINE in final else []
            reach = [steps_to_reach(points[m][s], base_final) for s in seeds]
            checks = [hollow_checks(run_folder(out, m, vaults, s)) for s in seeds]
            calibrations = [calibration(run_folder(out, m, vaults, s)) for s in seeds]
            length[m] = {
                "base": [points[m][s][0][1] for s in seeds], "final": final[m], "diff_vs_grpo": diffs,
                "steps_to_grpo_final": reach, "checks": checks, "calibration": calibrations,
                "points": {str(s): points[m][s] for s in seeds},
            }
        summary["lengths"][str(vaults)] = {"grpo_final_mean": base_final, "seeds": seeds, "methods": length}
    return summary


def fmt(values: list[float], digits: int = 3) -> str:
    good = [v for v in values if v is not None and not math.isnan(v)]
    if not good:
        return "-"
    if len(good) == 1:
        return f"{good[0]:.{digits}f}"
    return f"{statistics.fmean(good):.{digits}f} +- {statistics.stdev(good):.{digits}f}"


def table(summary: dict, args: argparse.Namespace) -> str:
    finished = "; ".join(f"V = {v}: {len(x['seeds'])}" for v, x in summary["lengths"].items())
    lines = [
        f"Held-out success on {args.eval_games} games, seeds {', '.join(map(str, args.seeds))} "
        f"(runs finished per chain length: {finished}), "
        f"{args.steps_per_vault} environment steps per vault (T = 10 V; env steps: the mean a run took, the update that "
        f"crosses the budget finishes). final: mean +- std over seeds; "
        f"vs GRPO: mean of the paired per-seed differences +- its standard error; steps to GRPO: seeds that "
        f"reached GRPO's final mean, and their mean environment steps; hollow checks: fewest actor samples in an "
        f"update (updates with none), mean degenerate-group share, lowest admissible share; critic: last-quarter "
        f"correlation with its TD targets; critic-only: share of environment steps in warm-up and refreshes.",
        "",
        "| V | method | env steps | base | final | final per seed | vs GRPO | steps to GRPO | actor samples min (none) "
        "| degenerate | admissible min | critic corr | critic-only steps |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for vaults, length in summary["lengths"].items():
        for m, r in length["methods"].items():
            checks = r["checks"]
            diffs = r["diff_vs_grpo"]
            vs = "-" if m == BASELINE or not diffs else f"{statistics.fmean(diffs):+.3f} +- {standard_error(diffs):.3f}"
            reached = [x for x in r["steps_to_grpo_final"] if x is not None]
            steps = f"{len(reached)}/{len(r['steps_to_grpo_final'])}" + (f", {statistics.fmean(reached):.0f}" if reached else "")
            actor = f"{min(c['actor_samples_min'] for c in checks):.0f} ({sum(c['updates_without_actor_samples'] for c in checks):.0f})"
            corr = fmt([c.get("critic_corr_last_quarter", math.nan) for c in checks], 2)
            share = fmt([c["critic_only_step_share"] for c in checks], 2) if "TEMPO" in m else "-"
            lines.append(
                f"| {vaults} | {m} | {statistics.fmean(p[-1][0] for p in r['points'].values()):.0f} | {fmt(r['base'])} | {fmt(r['final'])} | {' / '.join(f'{v:.3f}' for v in r['final'])} "
                f"| {vs} | {steps} | {actor} | {fmt([c['degenerate_group_rate'] for c in checks], 2)} "
                f"| {min(c['admissible_min'] for c in checks):.2f} | {corr if 'TEMPO' in m else '-'} | {share} |"
            )
    calibrated = [(v, m, [c for c in r["calibration"] if c]) for v, length in summary["lengths"].items()
                  for m, r in length["methods"].items() if any(r["calibration"])]
    if calibrated:
        lines += [
            "",
            "The critic at the end of each TEMPO run against Monte Carlo (analysis/mc_critic, "
            f"{' '.join(CALIBRATION)}; mean +- std over the seeds calibrated): MAE against the MAE of guessing "
            "the states' Monte-Carlo mean, ECE, Pearson, the critic's mean estimate against the Monte-Carlo mean "
            "on those states, and over the last quarter of TD updates its mean estimate and mean TD target.",
            "",
            "MAE / constant: per seed; perfect / constant: per seed, the MAE a critic that knew every state's true "
            "value would show against these Monte-Carlo values (their noise floor), over the constant's; live: per "
            "seed, MAE / constant on the states some continuation still won (a critic that only tells lost states "
            "apart gains nothing there); live perfect: per seed, a perfect critic's MAE / constant on those states; beats "
            "constant: seeds whose MAE is below the constant guess's; collapsed: "
            "seeds whose mean estimate is below 0.1 where the Monte-Carlo mean is above 0.2; critic samples min: "
            "the fewest critic training samples in a TD update, over the seeds.",
            "",
            "| V | method | seeds | MAE | constant-guess MAE | MAE / constant | perfect / constant | live | live perfect | beats constant "
            "| ECE | Pearson | estimate mean | MC mean | collapsed | TD estimate mean | TD target mean | critic samples min |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for v, m, cals in calibrated:
            cell = lambda key: fmt([c[key] for c in cals], 3)  # noqa: E731
            ratios = " / ".join(f"{c['mae'] / c['constant_mae']:.2f}" if c["constant_mae"] > 0 else "-" for c in cals)
            floors = " / ".join(f"{c['perfect_mae'] / c['constant_mae']:.2f}" if c["perfect_mae"] is not None
                                and c["constant_mae"] > 0 else "-" for c in cals)
            live, live_floor = (" / ".join(f"{c[key]:.2f}" if c.get(key) is not None else "-" for c in cals)
                                for key in ("live_ratio", "live_floor_ratio"))
            beats = sum(c["mae"] < c["constant_mae"] for c in cals)
            collapsed = sum(c["estimate_mean"] < 0.1 and c["mc_mean"] > 0.2 for c in cals)
            critic_min = min((c.get("critic_samples_min", math.nan) for c in summary["lengths"][v]["methods"][m]["checks"]),
                             default=math.nan)
            lines.append(f"| {v} | {m} | {len(cals)} | {cell('mae')} | {cell('constant_mae')} | {ratios} | {floors} | {live} "
                         f"| {live_floor} | {beats}/{len(cals)} "
                         f"| {cell('ece')} | {fmt([c['pearson'] for c in cals], 2)} | {cell('estimate_mean')} | {cell('mc_mean')} "
                         f"| {collapsed}/{len(cals)} | {cell('td_estimate_mean')} | {cell('td_target_mean')} | {critic_min:.0f} |")
    return "\n".join(lines)


def plot(summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted(summary["lengths"], key=int)
    if not lengths:
        return
    methods = list(summary["lengths"][lengths[0]]["methods"])
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for m in methods:
        finals = [summary["lengths"][v]["methods"][m]["final"] for v in lengths]
        means = [statistics.fmean(f) for f in finals]
        errors = [standard_error(f) for f in finals]
        ax.errorbar([int(v) for v in lengths], means, yerr=errors, marker="o", capsize=3, label=m)
    ax.set_xlabel("vaults in the chain (V)")
    ax.set_ylabel("final held-out success")
    ax.set_xticks([int(v) for v in lengths])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("equal environment steps per vault; mean +- s.e. over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "final.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(lengths), figsize=(4.2 * len(lengths), 3.6), squeeze=False)
    for ax, v in zip(axes[0], lengths):
        for m in methods:
            by_seed = list(summary["lengths"][v]["methods"][m]["points"].values())
            count = min(len(p) for p in by_seed)
            steps = [statistics.fmean(p[i][0] for p in by_seed) for i in range(count)]
            ax.plot(steps, [statistics.fmean(p[i][1] for p in by_seed) for i in range(count)], marker="o",
                    markersize=3, label=m)
        ax.set_title(f"V = {v}", fontsize=9)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out success (mean over seeds)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vaults", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps-per-vault", type=int, default=750, help="environment steps per run = this x V")
    parser.add_argument("--eval-games", type=int, default=64)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--out", default="bench/results/horizon")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, each with cores/jobs torch threads")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the table and plots from finished runs")
    parser.add_argument("--reuse", type=Path, help="a benchmark folder (--out of an earlier study) whose finished runs "
                                                   "with the same settings are copied in (their results) rather than rerun")
    parser.add_argument("--calibrate", action="store_true",
                        help="also measure each finished TEMPO run's critic against Monte Carlo (analysis/mc_critic)")
    parser.add_argument("extra", nargs="*", help="more trainer arguments for every run (after --)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        locks = {seed: threading.Lock() for seed in args.seeds}

        def run(job: tuple[str, int, int]) -> Path:
            method, vaults, seed = job
            with locks[seed]:  # one bootstrap per seed, shared by every chain length and method, built once
                build_bootstrap(seed, ["--max-episode-steps", str(BOOTSTRAP_T)], {**os.environ, "OMP_NUM_THREADS": str(threads)})
            folder = run_folder(out, method, vaults, seed)
            folder.parent.mkdir(parents=True, exist_ok=True)
            arguments = trainer_args(method, vaults, seed, args)
            source = run_folder(args.reuse, method, vaults, seed) if args.reuse else None
            if source and reuse_from(source, folder, arguments):
                print(f"V={vaults} {method} seed {seed}: copied the finished run {source}", flush=True)
                return folder
            return run_trainer(f"V={vaults} {method} seed {seed}", folder, arguments, threads)

        jobs = [(m, v, s) for s in args.seeds for v in args.vaults for m in args.methods]  # whole seeds first
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(run, jobs))
    if args.calibrate:
        runs = [run_folder(out, m, v, s) for s in args.seeds for v in args.vaults for m in args.methods
                if "TEMPO" in m and (run_folder(out, m, v, s) / "summary.json").is_file()]
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda run: calibrate(run, threads), runs))
    summary = summarise(out, args.vaults, args.seeds, args.methods)
    summary.update(steps_per_vault=args.steps_per_vault, eval_games=args.eval_games, seeds=args.seeds)
    text = table(summary, args)
    (out / "horizon.md").write_text(text + "\n")
    (out / "horizon.json").write_text(json.dumps(summary, indent=1))
    plot(summary, out)
    print(text)
    print(f"written: {out}/horizon.md, horizon.json, final.png, curves.png")


if __name__ == "__main__":
    main()
