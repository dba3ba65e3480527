"""Does another audit window for the calibration map make the final critic a better estimate? Offline.

For finished TEMPO runs with the calibration map (``--critic-calibration platt``) that were measured
against Monte Carlo (``run/mc_critic``, as ``bench/horizon.py --calibrate`` does), the map is refitted
on the run's audits (``critic_values.jsonl``: every (raw estimate, target) pair, in update order; with
``--audit-weight 1``, the default, a target is its audit's outcome),
applied to the final critic's raw values on the Monte-Carlo states, and scored as MAE over the MAE of
the constant guess (the states' Monte-Carlo mean). No model runs: the raw values come from the
measurement's cache.

    .venv/bin/python bench/calibration_windows.py bench/results/critic-readout/v4/tempo-*-seed? [--out F.md]

Maps: the run's own (the last 64 audits, ``AUDITS_KEPT``), the last 16, 32 and 128 audits,
every audit (a TD update audits 8 start states), and two timescales (the slope a from the last
64 audits, the intercept b refitted on the last 16 or 24 with a fixed, penalised towards the
64-audit b by the same one-audit prior).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Callable, Sequence

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.mc_critic.cache import measured_values  # noqa: E402
from tempo_plugin.algorithms.tempo import CALIBRATION_PRIOR, Calibration, _logit, _sigmoid, fit_calibration  # noqa: E402
from tempo_plugin.metrics import VALUE_PAIRS_FILE  # noqa: E402
from tempo_plugin.updates.tempo import AUDITS_KEPT  # noqa: E402

Audit = tuple[float, float, int]
"""(raw estimate, outcome, update) of one audit."""


def audits(run: Path) -> list[Audit]:
    pairs: list[Audit] = []
    for line in (run / VALUE_PAIRS_FILE).read_text().splitlines():
        record = json.loads(line)
        pairs += [(e, t, record["update"]) for e, t in zip(record["estimate"], record["target"])]
    return pairs


def monte_carlo_states(run: Path) -> tuple[list[float], list[float]]:
    """(raw critic value, Monte-Carlo value) of every measured state the critic answered."""
    folder = run / "mc_critic"
    ids = [s["id"] for s in json.loads((folder / "states.json").read_text())["states"]]
    mc, raw = measured_values(folder / "cache.jsonl")
    kept = [i for i in ids if i in mc and i in raw]
    return [raw[i] for i in kept], [mc[i] for i in kept]


def refit_intercept(pairs: Sequence[tuple[float, float]], a: float, b0: float, prior: float = CALIBRATION_PRIOR) -> float:
    """argmin_b prior (b - b0)^2 / 2 + sum_i [log(1 + e^(a x_i + b)) - z_i (a x_i + b)], x_i = logit(e_i),
    by Newton's method (the objective is strictly convex in b)."""
    xs = [_logit(e) for e, _ in pairs]
    b = b0
    for _ in range(100):
        p = [_sigmoid(a * x + b) for x in xs]
        gradient = prior * (b - b0) + sum(pi - z for pi, (_, z) in zip(p, pairs))
        curvature = prior + sum(pi * (1 - pi) for pi in p)
        step = gradient / curvature
        b -= step
        if abs(step) < 1e-12:
            break
    return b


def last(n: int) -> Callable[[list[Audit]], Calibration]:
    return lambda pairs: fit_calibration([(e, t) for e, t, _ in pairs[-n:]])


def two_timescales(intercept_audits: int) -> Callable[[list[Audit]], Calibration]:
    def fit(pairs: list[Audit]) -> Calibration:
        slow = fit_calibration([(e, t) for e, t, _ in pairs[-AUDITS_KEPT:]])
        return Calibration(slow.a, refit_intercept([(e, t) for e, t, _ in pairs[-intercept_audits:]], slow.a, slow.b))
    return fit


MAPS: dict[str, Callable[[list[Audit]], Calibration]] = {
    f"last {AUDITS_KEPT} (the run's)": last(AUDITS_KEPT),
    "last 16": last(16), "last 32": last(32), "last 128": last(128), "every audit": last(10**9),
    "a from 64, b from 16": two_timescales(16), "a from 64, b from 24": two_timescales(24),
}


def score(run: Path) -> dict[str, tuple[float, float]]:
    """Per map: (MAE / constant-guess MAE, mean estimate - Monte-Carlo mean)."""
    raw, mc = monte_carlo_states(run)
    mean_mc = statistics.fmean(mc)
    constant = statistics.fmean(abs(t - mean_mc) for t in mc)
    pairs = audits(run)
    out = {}
    for name, fit in MAPS.items():
        cal = fit(pairs)
        values = [cal(v) for v in raw]
        out[name] = (statistics.fmean(abs(v - t) for v, t in zip(values, mc)) / constant,
                     statistics.fmean(values) - mean_mc)
    return out


def table(runs: Sequence[Path], scores: Sequence[dict[str, tuple[float, float]]]) -> str:
    lines = ["| map | MAE / constant per run | at most 0.85 | mean | estimate - MC per run |", "|---|---|---|---|---|"]
    for name in MAPS:
        ratios = [s[name][0] for s in scores]
        lines.append(f"| {name} | {' / '.join(f'{r:.2f}' for r in ratios)} | {sum(r <= 0.85 for r in ratios)}/{len(ratios)} "
                     f"| {statistics.fmean(ratios):.2f} | {' / '.join(f'{s[name][1]:+.2f}' for s in scores)} |")
    return "Runs: " + ", ".join(str(r) for r in runs) + "\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished TEMPO run folders with mc_critic/ inside")
    parser.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = parser.parse_args()
    for run in args.runs:
        missing = [p for p in (VALUE_PAIRS_FILE, "mc_critic/states.json", "mc_critic/cache.jsonl") if not (run / p).is_file()]
        if missing:
            raise SystemExit(f"{run}: no {missing[0]}; run analysis/mc_critic on it first (bench/horizon.py --calibrate)")
        weight = yaml.safe_load((run / "config.yaml").read_text()).get("audit_weight")
        if weight != 1:
            raise SystemExit(f"{run}: audit_weight {weight} in config.yaml; the map is refitted on audit outcomes, "
                             "which the critic's targets are only with --audit-weight 1")
    scores = [score(run) for run in args.runs]
    text = table(args.runs, scores)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
