"""Why a run's calibrated critic reads low: do its audits lag the actor, or start from harder states?

A map fitted on audits (``--critic-calibration platt`` or ``levels``) learns the audits' outcome
rate. For a finished TEMPO run measured against Monte Carlo (``run/mc_critic``, as ``bench/horizon.py
--calibrate`` does), this prints per count of milestones left:

- audits: the mean outcome of the audits in the run's last window (its checkpoint), each played to
  the episode's end by the actor of its own TD update;
- store, final actor: the final actor's Monte-Carlo value (``--mc-samples`` continuations) of up to
  ``--states`` of the run's stored start states with that count (the states audits start from);
- on-policy: the Monte-Carlo mean of the measured states (the final actor's own trajectories on
  held-out games), as ``analysis/mc_critic`` measured them.

If the final actor values the store's states as it values its own and the audits read lower, the
audits lag the improving actor (the window spans several TD updates); if the store's states read as
low as the audits, they are harder states than the actor's own at the same count. The game's start
(the most milestones left) has no store column: its audits are fresh games.

    .venv/bin/python bench/audit_lag.py bench/results/critic-levels-map/v4/tempo-*-seed? [--out F.md]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from critic_levels import audit_levels, last_audits, measured_states  # noqa: E402

from tempo_plugin.runs import resolve_run  # noqa: E402
from tempo_plugin.states.store import StateStore  # noqa: E402

Row = tuple[int, list[float], list[float], list[float]]  # (milestones left, audits, store MC, on-policy MC)


def store_values(run: Path, levels: Sequence[int], states: int, samples: int, seed: int) -> dict[int, list[float]]:
    """The final actor's Monte-Carlo value of up to ``states`` stored start states per count of
    milestones left (a seeded draw of the run's checkpointed store)."""
    import torch

    from analysis.mc_critic.ground_truth import agent_mc
    from analysis.mc_critic.states import State, macro_id
    from tempo_plugin.embedded.model import load_pretrained
    from tempo_plugin.envs import env_factory
    from tempo_plugin.rollout.protocol import ChatProtocol
    from tempo_plugin.samplers.local import LocalSampler
    from tempo_plugin.updates.rollout import TempoRollout

    ref = resolve_run(run)
    cfg = ref.config
    stored = list(StateStore.load(ref.model_dir / "store.json"))
    rng = random.Random(seed)
    chosen = []
    for level in levels:
        pool = [s for s in stored if s.milestones_left == level]
        rng.shuffle(pool)
        chosen += pool[:states]
    if not chosen:
        return {}
    torch.manual_seed(seed)
    model, tokenizer = load_pretrained(str(ref.model_dir), torch.device("cpu"))
    protocol = ChatProtocol(tokenizer)
    sampler = LocalSampler(model, tokenizer, max_batch_size=64)
    # training games: the store's states come from them
    rollout = TempoRollout(cfg, sampler, protocol, env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data, cfg.vaults))
    measured = [State(id=macro_id(m), trajectory=str(i), order=0, position=m.round_index, macro=m)
                for i, m in enumerate(chosen)]
    values: dict[int, list[float]] = {}
    for state, result in agent_mc(rollout, measured, samples, seed, rows=64):
        if result["wins"] is not None:
            values.setdefault(state.macro.milestones_left, []).append(result["wins"])
    return values


def lag_rows(run: Path, states: int, samples: int, seed: int) -> list[Row]:
    audits = last_audits(run)
    audited = list(zip(audit_levels(audits, str(run)), (float(r[2]) for r in audits)))  # (L_i, z_i)
    measured = measured_states(run)
    levels = sorted({lv for lv, _ in audited} | {s.left for s in measured})
    # not the game's start (the most milestones left): its audits are fresh games, its stored states lost ones
    store = store_values(run, [lv for lv in levels if 0 < lv < max(levels)], states, samples, seed)
    return [(lv, [z for left, z in audited if left == lv], store.get(lv, []),
             [s.mc for s in measured if s.left == lv]) for lv in levels]


def _cell(values: Sequence[float]) -> str:
    return f"{len(values)}: {statistics.fmean(values):.2f}" if values else "-"


def gaps(rows: Sequence[Row]) -> tuple[float, float] | None:
    """(store - audits, store - on-policy), each count's difference of means weighted by how many
    audits (on-policy states) it has, over the counts with a store column: what the window's audits
    would have won, had the final actor played them, minus what they won; and the store's value of
    the actor's own states minus their Monte Carlo. None where a column has nothing to weigh."""
    audited = [(len(a), statistics.fmean(s) - statistics.fmean(a)) for _, a, s, _ in rows if a and s]
    own = [(len(o), statistics.fmean(s) - statistics.fmean(o)) for _, _, s, o in rows if s and o]
    if not audited or not own:
        return None
    return (sum(n * g for n, g in audited) / sum(n for n, _ in audited),
            sum(n * g for n, g in own) / sum(n for n, _ in own))


def table(runs: Sequence[Path], results: Sequence[list[Row]], args: argparse.Namespace) -> str:
    lines = [f"Per milestones left, n: mean value. audits: the run's last audit window (each played by the actor of "
             f"its TD update); store: the final actor's Monte Carlo ({args.mc_samples} continuations) from up to "
             f"{args.states} stored start states; on-policy: Monte Carlo of the final actor's own states "
             f"(analysis/mc_critic). Seed {args.seed}.", ""]
    for run, rows in zip(runs, results):
        lines += [f"**{run}**", "", "| left | audits | store, final actor | on-policy |", "|---|---|---|---|"]
        lines += [f"| {lv} | {_cell(a)} | {_cell(s)} | {_cell(o)} |" for lv, a, s, o in rows]
        gap = gaps(rows)
        if gap:
            lines += ["", f"weighted over counts: store - audits {gap[0]:+.2f} (by audits), "
                          f"store - on-policy {gap[1]:+.2f} (by on-policy states)"]
        lines.append("")
    pooled = [g for g in map(gaps, results) if g]
    if pooled:
        lines.append(f"Mean over {len(pooled)} runs: store - audits {statistics.fmean(g for g, _ in pooled):+.3f}, "
                     f"store - on-policy {statistics.fmean(g for _, g in pooled):+.3f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished TEMPO runs with run/mc_critic and a checkpoint")
    parser.add_argument("--states", type=int, default=8, help="stored start states per count of milestones left")
    parser.add_argument("--mc-samples", type=int, default=16, help="Monte-Carlo continuations per stored state")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    if args.states < 1 or args.mc_samples < 1:
        parser.error("--states and --mc-samples must be at least 1")
    results = []
    for run in args.runs:
        print(f"{run}: Monte Carlo from its stored states ...", flush=True)
        results.append(lag_rows(run, args.states, args.mc_samples, args.seed))
    text = table(args.runs, results, args)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
