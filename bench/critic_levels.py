"""Where a critic's error on the live states comes from: its values per number of milestones left. Offline.

For finished TEMPO runs measured against Monte Carlo (``run/mc_critic``, as ``bench/horizon.py
--calibrate`` does), every measured state is replayed on its held-out game (its seed and actions) to
read how many of the game's milestones are left (``stage_count - stages_completed()``, Temporal
GRPO's stages; in the vault chain two per vault: the right key held, the vault open) and whether a
plan can still win (``winnable()``). On the live states (Monte-Carlo value above 0) it prints, per
number of milestones left, the Monte-Carlo mean and the critic's mean value (through the run's
calibration map, as ``analysis/mc_critic`` measures it), and scores as MAE over the constant
guess's on the live states:

- the critic;
- the levels model: each state valued by the Monte-Carlo mean of the *other* live states with as
  many milestones left (leave-one-out; the live mean where it is alone). It knows nothing but that
  count, so it says how much of the live states' spread a critic could capture from it;
- the noise floor: a critic that knew every state's true value (``perfect_critic_deviations``).

No model runs: the critic's values and the Monte-Carlo values come from the measurement's cache.

``--simulate-audits M ...`` adds an idealised sample-size check (no critic): M audits drawn from the
measured states with replacement, each one outcome drawn at the state's Monte-Carlo value, and a
table of the mean outcome per count of milestones left (live audits only, shrunk towards their mean
by SHRINK pseudo-audits), scored on the live states; the mean MAE / constant over DRAWS draws. Could
M outcomes teach the levels, if a critic used them per level?

``--refit-maps`` refits calibration maps on each run's last audit window (its checkpoint): platt and
``--critic-calibration levels`` at several rho_L, scored on the same measured states, so that maps
are compared on one critic and one window (runs that differ also differ in their final policy).

    .venv/bin/python bench/critic_levels.py bench/results/critic-live/v4/tempo-*-seed? [--out F.md]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.mc_critic.cache import measured_values  # noqa: E402
from analysis.mc_critic.metrics import constant_mae, perfect_critic_deviations  # noqa: E402
from tempo_plugin.algorithms.tempo import CALIBRATION_LEVEL_PRIOR, fit_calibration  # noqa: E402
from tempo_plugin.config import TempoConfig  # noqa: E402
from tempo_plugin.embedded.run_folder import checkpoint_calibration  # noqa: E402
from tempo_plugin.envs import base, eval_env_factory  # noqa: E402
from tempo_plugin.runs import resolve_run  # noqa: E402

SHRINK = 2.0
"""Pseudo-audits at the live audits' mean outcome added to every level of the simulated table."""
DRAWS = 200
"""Simulated audit sets per M."""
MAPS: dict[str, float | None] = {"platt": None, f"levels (rho_L {CALIBRATION_LEVEL_PRIOR:g})": CALIBRATION_LEVEL_PRIOR,
                                 "levels (rho_L 2)": 2.0, "levels (rho_L 8)": 8.0}
"""--refit-maps: name -> rho_L of the per-level intercepts (None: platt, no levels)."""


@dataclass(frozen=True)
class Measured:
    """One measured state: milestones left, Monte-Carlo value, critic value (through the run's map), floor, raw value."""

    left: int
    mc: float
    critic: float
    floor: float
    raw: float  # the critic's value before the run's map


def milestones_left(make_env, macro: dict) -> tuple[int, bool]:
    """(milestones left, winnable) of a state, replayed from its game seed and actions."""
    env = make_env()
    env.reset(macro["env_seed"])
    for action in macro["action_history"]:
        env.step(action)
    return base.milestones_left(env), env.winnable()


def measured_states(run: Path) -> list[Measured]:
    ref = resolve_run(run)
    cfg = ref.config or TempoConfig()
    make_env = eval_env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data, cfg.vaults, cfg.eval_split)
    probe = make_env()
    if not hasattr(probe, "stages_completed"):
        raise SystemExit(f"{run}: environment {cfg.env!r} has no milestones (stages_completed); "
                         "this breakdown needs one that has (--env vaults or chain)")
    calibration = checkpoint_calibration(ref.model_dir, cfg)
    folder = run / "mc_critic"
    mc, raw = measured_values(folder / "cache.jsonl")
    states = [s for s in json.loads((folder / "states.json").read_text())["states"] if s["id"] in mc and s["id"] in raw]
    samples = json.loads((folder / "summary.json").read_text())["settings"]["mc_samples"]
    floor = perfect_critic_deviations([mc[s["id"]] for s in states], samples)
    rows = []
    for state, deviation in zip(states, floor if floor is not None else []):
        left, winnable = milestones_left(make_env, state["macro"])
        if mc[state["id"]] > 0 and not winnable:
            raise SystemExit(f"{run}: state {state['id']} replays as lost but won {mc[state['id']]:.2f} of its "
                             "continuations; its game or actions do not match the measurement")
        rows.append(Measured(left, mc[state["id"]], calibration(raw[state["id"]], left), float(deviation), raw[state["id"]]))
    return rows


def last_audits(run: Path) -> list[list]:
    """The audit window a run's checkpoint keeps (``Progress.audits``)."""
    path = resolve_run(run).model_dir / "progress.json"
    if not path.is_file():
        raise SystemExit(f"{run}: no {path}; --refit-maps needs the run's checkpoint")
    return json.loads(path.read_text()).get("audits", [])


def audit_levels(audits: Sequence[Sequence], what: str) -> list[int]:
    """Each audit row's milestones left (``AuditWindow.rows``' 4th column); SystemExit naming
    ``what`` for a run whose audits carry none (measured before --critic-calibration levels)."""
    if any(len(r) < 4 or r[3] is None for r in audits):
        raise SystemExit(f"{what}: the run's audits carry no milestones left (a run from before "
                         "--critic-calibration levels); rerun it")
    return [int(r[3]) for r in audits]


def levels_model(live: Sequence[Measured]) -> list[float]:
    """Each live state valued by the Monte-Carlo mean of the other live states with as many milestones
    left (leave-one-out), or of every other live state where it is the only one at its level."""
    total = sum(s.mc for s in live)
    out = []
    for s in live:
        same = [o.mc for o in live if o.left == s.left]
        out.append((sum(same) - s.mc) / (len(same) - 1) if len(same) > 1 else (total - s.mc) / max(1, len(live) - 1))
    return out


def live_states(rows: Sequence[Measured]) -> tuple[list[Measured], float | None]:
    """The live states (Monte-Carlo value above 0) and the constant guess's MAE on them; None where
    fewer than two or all alike leave nothing to score against."""
    live = [s for s in rows if s.mc > 0]
    constant = constant_mae([s.mc for s in live]) if len(live) >= 2 else None
    return live, constant or None


def score(rows: Sequence[Measured]) -> dict:
    """On the live states: MAE / constant of the critic, the levels model and a perfect critic, and per level
    (n, Monte-Carlo mean, critic mean)."""
    live, constant = live_states(rows)
    if constant is None:
        return {"live": len(live)}
    ratio = lambda values: statistics.fmean(abs(v - s.mc) for v, s in zip(values, live)) / constant  # noqa: E731
    levels = {}
    for left in sorted({s.left for s in live}):
        at = [s for s in live if s.left == left]
        levels[left] = (len(at), statistics.fmean(s.mc for s in at), statistics.fmean(s.critic for s in at))
    return {"live": len(live), "critic": ratio([s.critic for s in live]), "levels_model": ratio(levels_model(live)),
            "floor": statistics.fmean(s.floor for s in live) / constant, "levels": levels}


def level_table(outcomes: Sequence[tuple[int, float]], shrink: float = SHRINK) -> tuple[dict[int, float], float]:
    """(per level: (sum z + shrink zbar) / (n + shrink), zbar) from (milestones left, outcome) pairs."""
    overall = statistics.fmean(z for _, z in outcomes)
    table = {}
    for left in {left for left, _ in outcomes}:
        at = [z for lv, z in outcomes if lv == left]
        table[left] = (sum(at) + shrink * overall) / (len(at) + shrink)
    return table, overall


def simulated_audits(rows: Sequence[Measured], audits: int, draws: int = DRAWS, seed: int = 0) -> float | None:
    """The mean live-state MAE / constant of ``level_table`` fitted on ``audits`` simulated audits."""
    live, constant = live_states(rows)
    if constant is None:
        return None
    ratios = []
    for draw in range(draws):
        rng = random.Random(seed * 1_000_003 + draw)
        picked = [rng.choice(rows) for _ in range(audits)]
        outcomes = [(s.left, 1.0 if rng.random() < s.mc else 0.0) for s in picked if s.mc > 0]
        if not outcomes:
            continue
        table, overall = level_table(outcomes)
        ratios.append(statistics.fmean(abs(table.get(s.left, overall) - s.mc) for s in live) / constant)
    return statistics.fmean(ratios) if ratios else None


def refit_maps(audits: Sequence[Sequence], rows: Sequence[Measured]) -> dict[str, tuple[float, float, float]]:
    """Each map of MAPS fitted on one audit window (``AuditWindow.rows``: estimate, calibrated, outcome,
    milestones left) and scored on the measured states: (MAE / constant on all of them, on the live
    ones, mean estimate - Monte-Carlo mean)."""
    pairs, levels = [(r[0], r[2]) for r in audits], audit_levels(audits, "--refit-maps")
    live, live_constant = live_states(rows)
    everywhere = constant_mae([s.mc for s in rows])
    out = {}
    for name, prior in MAPS.items():
        cal = fit_calibration(pairs) if prior is None else fit_calibration(pairs, levels=levels, level_prior=prior)
        signed = {id(s): cal(s.raw, s.left) - s.mc for s in rows}  # each state's estimate once
        out[name] = (statistics.fmean(abs(d) for d in signed.values()) / everywhere if everywhere else float("nan"),
                     statistics.fmean(abs(signed[id(s)]) for s in live) / live_constant if live_constant else float("nan"),
                     statistics.fmean(signed.values()))
    return out


def refit_table(runs: Sequence[Path], refits: Sequence[dict[str, tuple[float, float, float]]]) -> str:
    lines = ["", "Calibration maps refitted on each run's last audit window (its checkpoint), scored on its measured "
             "states: MAE / constant on all states / on the live states / mean estimate - Monte-Carlo mean.", "",
             "| run | " + " | ".join(MAPS) + " |", "|---|" + "---|" * len(MAPS)]
    for run, refit in zip(runs, refits):
        lines.append(f"| {run.name} | " + " | ".join(f"{a:.2f} / {b:.2f} / {c:+.2f}" for a, b, c in refit.values()) + " |")
    return "\n".join(lines) + "\n"


def table(runs: Sequence[Path], scores: Sequence[dict]) -> str:
    lines = ["| run | live states | critic | levels model | perfect critic |", "|---|---|---|---|---|"]
    for run, s in zip(runs, scores):
        if "critic" in s:
            lines.append(f"| {run.name} | {s['live']} | {s['critic']:.2f} | {s['levels_model']:.2f} | {s['floor']:.2f} |")
        else:
            lines.append(f"| {run.name} | {s['live']} | - | - | - |")
    lines += ["", "Per milestones left (live states): n, Monte-Carlo mean, critic mean.", "",
              "| run | " + " | ".join(f"{k} left" for k in _all_levels(scores)) + " |",
              "|---|" + "---|" * len(_all_levels(scores))]
    for run, s in zip(runs, scores):
        cells = [_level_cell(s.get("levels", {}).get(k)) for k in _all_levels(scores)]
        lines.append(f"| {run.name} | " + " | ".join(cells) + " |")
    return "MAE / constant on the live states (Monte-Carlo value above 0). Runs: " + ", ".join(map(str, runs)) + \
        "\n\n" + "\n".join(lines) + "\n"


def simulation_table(runs: Sequence[Path], measured: Sequence[Sequence[Measured]], counts: Sequence[int]) -> str:
    lines = ["", f"A table per milestones left fitted on M simulated audits (mean of {DRAWS} draws), MAE / constant "
             "on the live states.", "", "| run | " + " | ".join(f"M = {m}" for m in counts) + " |",
             "|---|" + "---|" * len(counts)]
    for run, rows in zip(runs, measured):
        cells = [simulated_audits(rows, m) for m in counts]
        lines.append(f"| {run.name} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _level_cell(level: tuple[int, float, float] | None) -> str:
    return "-" if level is None else f"{level[0]}: {level[1]:.2f} / {level[2]:.2f}"


def _all_levels(scores: Sequence[dict]) -> list[int]:
    return sorted({k for s in scores for k in s.get("levels", {})})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished TEMPO run folders with mc_critic/ inside")
    parser.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    parser.add_argument("--simulate-audits", type=int, nargs="*", default=[], metavar="M",
                        help="also the idealised check: a per-level table fitted on M simulated audits")
    parser.add_argument("--refit-maps", action="store_true",
                        help="also refit platt and the levels map (several rho_L) on each run's last audit window")
    args = parser.parse_args()
    if any(m < 1 for m in args.simulate_audits):
        raise SystemExit(f"--simulate-audits takes audit counts of at least 1 (got {args.simulate_audits})")
    for run in args.runs:
        missing = [p for p in ("mc_critic/summary.json", "mc_critic/states.json", "mc_critic/cache.jsonl")
                   if not (run / p).is_file()]  # summary.json: the measurement finished
        if missing:
            raise SystemExit(f"{run}: no {missing[0]}; run analysis/mc_critic on it first (bench/horizon.py --calibrate)")
    measured = [measured_states(run) for run in args.runs]
    scores = [score(rows) for rows in measured]
    text = table(args.runs, scores)
    if args.simulate_audits:
        text += simulation_table(args.runs, measured, args.simulate_audits)
    if args.refit_maps:
        text += refit_table(args.runs, [refit_maps(last_audits(run), rows) for run, rows in zip(args.runs, measured)])
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
