"""From per-state results to ``summary.json``, a markdown table and the plots.

Value metrics are over the sampled states (not the action children): each critic's value against
the MC value of the same state (``metrics.value_metrics``), by position (round index or answer
token), and tracking between consecutive states of one trajectory. Action ranking is over the
action children grouped by the state their action was forced in: per state the critic's values of
the candidates against their MC values (Spearman, Kendall tau-b; both undefined, so skipped, when
every candidate has the same MC value), pooled over states the pairwise sign agreement and the
top-1 agreement (the critic's best candidate has the best MC value; ties split the credit).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from analysis.mc_critic import metrics as m
from analysis.mc_critic.states import State


def _value(state: State, results: dict[str, dict]) -> float | None:
    if state.terminal:
        return state.outcome
    result = results.get(state.id)
    return None if result is None else result.get("value")


def _mc(state: State, mc: dict[str, dict]) -> float | None:
    if state.terminal:
        return state.outcome
    result = mc.get(state.id)
    return None if result is None else result.get("wins")


def _by_position(rows: Sequence[tuple[State, float, float]]) -> list[dict]:
    groups: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for state, v, t in rows:
        groups[state.position].append((v, t))
    out = []
    for position in sorted(groups):
        v, t = np.array(groups[position]).T
        out.append({"position": position, "n": int(v.size), "mae": float(np.abs(v - t).mean()),
                    "bias": float((v - t).mean()), "value_mean": float(v.mean()), "mc_mean": float(t.mean())})
    return out


def _tracking_pairs(states: Sequence[State], values: dict[str, dict], mc: dict[str, dict]) -> list[tuple]:
    by_trajectory: dict[str, list[State]] = defaultdict(list)
    for state in states:
        by_trajectory[state.trajectory].append(state)
    pairs = []
    for members in by_trajectory.values():
        members = sorted(members, key=lambda s: s.order)
        for a, b in zip(members, members[1:]):
            va, vb, ta, tb = _value(a, values), _value(b, values), _mc(a, mc), _mc(b, mc)
            if None not in (va, vb, ta, tb):
                pairs.append((va, ta, vb, tb))
    return pairs


def _top1(scores: np.ndarray, targets: np.ndarray) -> float:
    best = np.flatnonzero(scores >= scores.max() - m.SIGN_TOLERANCE)
    return float(np.mean(targets[best] >= targets.max() - m.SIGN_TOLERANCE))


def _action_groups(children: Sequence[State], mc: dict[str, dict]) -> dict[str, list[State]]:
    groups: dict[str, list[State]] = defaultdict(list)
    for child in children:
        if _mc(child, mc) is not None:
            groups[child.parent].append(child)
    return {p: sorted(g, key=lambda s: s.order) for p, g in groups.items() if len(g) >= 2}


DECISIVE_SPREAD = 0.25
"""Action-ranking states whose candidates' MC values spread at least this much are also reported
apart ("decisive"): there the order is not MC noise."""


def _rank_aggregate(per_state: Sequence[dict]) -> dict:
    pairs = sum(s["pairs"] for s in per_state)
    top1 = [s["top1"] for s in per_state if s["top1"] is not None]
    return {
        "states": len(per_state),
        "spearman_mean": m.mean_or_none([s["spearman"] for s in per_state]),
        "kendall_mean": m.mean_or_none([s["kendall"] for s in per_state]),
        "ranked_states": sum(s["kendall"] is not None for s in per_state),
        "pairwise_sign_agreement": sum(s["agree"] * s["pairs"] for s in per_state if s["pairs"]) / pairs if pairs else None,
        "pairs": pairs,
        "top1_agreement": float(np.mean(top1)) if top1 else None,
    }


def action_ranking(children: Sequence[State], mc: dict[str, dict], values: dict[str, dict]) -> dict:
    per_state, rows = [], []
    for parent, group in _action_groups(children, mc).items():
        scored = [(c, _value(c, values), _mc(c, mc)) for c in group]
        scored = [(c, v, t) for c, v, t in scored if v is not None]
        if len(scored) < 2:
            continue
        v = np.array([x[1] for x in scored])
        t = np.array([x[2] for x in scored])
        share, counted = m.pairwise_sign_agreement(v, t)
        per_state.append({"parent": parent, "actions": [c.action for c, _, _ in scored], "values": v.tolist(),
                          "mc": t.tolist(), "spearman": m.spearman(v, t), "kendall": m.kendall_tau(v, t),
                          "agree": share, "pairs": counted, "top1": _top1(v, t) if counted else None,
                          "mc_spread": float(t.max() - t.min())})
        rows += [(c, float(a), float(b)) for (c, a, b) in scored if not c.terminal]
    return {
        **_rank_aggregate(per_state),
        "decisive": _rank_aggregate([s for s in per_state if s["mc_spread"] >= DECISIVE_SPREAD]),
        "child_value_mae": m.mae([r[1] for r in rows], [r[2] for r in rows]) if rows else None,
        "per_state": per_state,
    }


def summarize(base: Sequence[State], children: Sequence[State], mc: dict[str, dict],
              critics: dict[str, dict[str, dict]], mc_samples: int) -> dict:
    """``mc``: state id -> MC result; ``critics``: critic name -> state id -> critic result."""
    measured = [s for s in base if _mc(s, mc) is not None]
    targets = [_mc(s, mc) for s in measured]
    groups = _action_groups(children, mc)
    floor = m.perfect_critic_deviations(targets, mc_samples)  # per state: what a perfect critic would be off by
    summary: dict[str, Any] = {
        "states": len(base),
        "states_measured": len(measured),
        "trajectories": len({s.trajectory for s in base}),
        "mc_failed": sum(1 for s in base if s.id in mc and mc[s.id].get("wins") is None),
        "mc_mean": m.mean_or_none(targets),
        # what even a perfect critic shows against M-sample MC values (RMSE, expected MAE), and a constant guess's MAE
        "mc_noise_rmse": m.mc_standard_error(targets, mc_samples),
        "constant_baseline_mae": m.constant_mae(targets),
        "perfect_critic_mae": float(floor.mean()) if floor is not None else None,
        "action_states": len(groups),
        "action_candidates_mean": float(np.mean([len(g) for g in groups.values()])) if groups else None,
        "action_mc_spread_mean": float(np.mean([max(_mc(c, mc) for c in g) - min(_mc(c, mc) for c in g)
                                                for g in groups.values()])) if groups else None,
        "critics": {},
    }
    floor_of = {s.id: float(d) for s, d in zip(measured, floor)} if floor is not None else {}
    for name, values in critics.items():
        rows = [(s, _value(s, values), _mc(s, mc)) for s in measured]
        answered = [(s, v, t) for s, v, t in rows if v is not None]
        results = [values[s.id] for s in measured if s.id in values]
        samples = sum(r.get("samples", 0) for r in results)
        answered_values, answered_targets = [v for _, v, _ in answered], [t for _, _, t in answered]
        block = m.value_metrics(answered_values, answered_targets)
        block.update({
            "live": m.live_state_metrics(answered_values, answered_targets,
                                         [floor_of[s.id] for s, _, _ in answered] if floor_of else None),
            "unanswered": len(rows) - len(answered),
            "parse_failure_rate": 1 - sum(r.get("parsed", 0) for r in results) / samples if samples else None,
            "by_position": _by_position(answered),
            "tracking": m.tracking(_tracking_pairs(measured, values, mc)),
        })
        if children:
            block["action_ranking"] = action_ranking(children, mc, values)
        summary["critics"][name] = block
    return summary


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(summary: dict) -> str:
    head = ["critic", "n", "MAE", "RMSE", "Pearson", "Spearman", "EV", "ECE", "track corr", "track sign", "parse fail"]
    with_actions = any("action_ranking" in c for c in summary["critics"].values())
    if with_actions:
        head += ["act Spearman", "act Kendall", "act pair sign", "act top-1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for name, c in summary["critics"].items():
        row = [name, _fmt(c["n"]), _fmt(c["mae"]), _fmt(c["rmse"]), _fmt(c["pearson"]), _fmt(c["spearman"]),
               _fmt(c["explained_variance"]), _fmt(c["ece"]), _fmt(c["tracking"]["corr"]),
               _fmt(c["tracking"]["sign_agreement"]), _fmt(c["parse_failure_rate"], 2)]
        if with_actions:
            a = c.get("action_ranking", {})
            row += [_fmt(a.get("spearman_mean")), _fmt(a.get("kendall_mean")), _fmt(a.get("pairwise_sign_agreement")),
                    _fmt(a.get("top1_agreement"))]
        lines.append("| " + " | ".join(row) + " |")
    notes = (f"{summary['states_measured']} states on {summary['trajectories']} trajectories; MC mean "
             f"{_fmt(summary['mc_mean'])}, MC noise RMSE {_fmt(summary['mc_noise_rmse'])}, constant-guess MAE "
             f"{_fmt(summary['constant_baseline_mae'])}, a perfect critic's expected MAE "
             f"{_fmt(summary['perfect_critic_mae'])}")
    if summary["action_states"]:
        notes += (f"; action ranking on {summary['action_states']} states x {_fmt(summary['action_candidates_mean'], 1)} "
                  f"candidates (mean MC spread {_fmt(summary['action_mc_spread_mean'])})")
    return "\n".join(lines) + "\n\n" + notes + "\n"


# -- plots ----------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_all(summary: dict, base: Sequence[State], children: Sequence[State], mc: dict[str, dict],
             critics: dict[str, dict[str, dict]], out: Path, position_label: str) -> list[str]:
    """Writes calibration.png, scatter.png, error_vs_position.png, tracking.png and (with action
    children) action_ranking.png into ``out``; returns the file names."""
    plt = _pyplot()
    names = list(summary["critics"])
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []

    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect")
    for i, name in enumerate(names):
        rows = [b for b in summary["critics"][name]["calibration"] if b["n"]]
        ax.plot([b["value_mean"] for b in rows], [b["mc_mean"] for b in rows], "o-", color=colours[i % len(colours)],
                label=f"{name} (ECE {_fmt(summary['critics'][name]['ece'])})")
    ax.set(xlabel="critic value (bin mean)", ylabel="Monte-Carlo value (bin mean)", xlim=(0, 1), ylim=(0, 1),
           title="calibration (10 equal-width bins)")
    ax.legend(fontsize=8)
    written.append(_save(fig, out / "calibration.png", plt))

    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4.2), squeeze=False)
    for i, name in enumerate(names):
        ax = axes[0][i]
        pairs = [(critics[name][s.id]["value"], mc[s.id]["wins"]) for s in base
                 if s.id in mc and mc[s.id].get("wins") is not None and critics[name].get(s.id, {}).get("value") is not None]
        if pairs:
            v, t = np.array(pairs).T
            ax.scatter(t, v, s=14, alpha=0.6, color=colours[i % len(colours)])
        ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
        c = summary["critics"][name]
        ax.set(xlabel="Monte-Carlo value", ylabel="critic value", xlim=(-0.03, 1.03),
               title=f"{name}\nMAE {_fmt(c['mae'])}  Pearson {_fmt(c['pearson'])}  EV {_fmt(c['explained_variance'])}")
        ax.title.set_fontsize(9)
    written.append(_save(fig, out / "scatter.png", plt))

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    for i, name in enumerate(names):
        rows = summary["critics"][name]["by_position"]
        x = [r["position"] for r in rows]
        ax.plot(x, [r["mae"] for r in rows], "o-", color=colours[i % len(colours)], label=name)
        bx.plot(x, [r["value_mean"] for r in rows], "o-", color=colours[i % len(colours)], label=name)
    rows = summary["critics"][names[0]]["by_position"] if names else []
    bx.plot([r["position"] for r in rows], [r["mc_mean"] for r in rows], "s--", color="black", label="Monte Carlo")
    ax.set(xlabel=position_label, ylabel="mean |critic - MC|", title="error against position")
    bx.set(xlabel=position_label, ylabel="mean value", title="mean value against position")
    ax.legend(fontsize=8)
    bx.legend(fontsize=8)
    written.append(_save(fig, out / "error_vs_position.png", plt))

    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4.2), squeeze=False)
    for i, name in enumerate(names):
        ax = axes[0][i]
        pairs = _tracking_pairs([s for s in base if s.id in mc], critics[name], mc)
        if pairs:
            p = np.array(pairs)
            ax.scatter(p[:, 3] - p[:, 1], p[:, 2] - p[:, 0], s=14, alpha=0.6, color=colours[i % len(colours)])
        ax.axhline(0, color="grey", lw=0.8)
        ax.axvline(0, color="grey", lw=0.8)
        t = summary["critics"][name]["tracking"]
        ax.set(xlabel="MC change to the next state", ylabel="critic change",
               title=f"{name}\ncorr {_fmt(t['corr'])}  sign agreement {_fmt(t['sign_agreement'])} ({t['sign_pairs']} pairs)")
        ax.title.set_fontsize(9)
    written.append(_save(fig, out / "tracking.png", plt))

    if children and summary["action_states"]:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
        labels = ["Spearman", "Kendall", "pair sign", "top-1"]
        keys = ["spearman_mean", "kendall_mean", "pairwise_sign_agreement", "top1_agreement"]
        width = 0.8 / max(1, len(names))
        for i, name in enumerate(names):
            a = summary["critics"][name].get("action_ranking", {})
            heights = [a.get(k) if a.get(k) is not None else 0.0 for k in keys]
            ax.bar(np.arange(len(keys)) + i * width, heights, width, color=colours[i % len(colours)], label=name)
            for state in a.get("per_state", []):
                bx.scatter(state["mc"], state["values"], s=14, alpha=0.6, color=colours[i % len(colours)])
        ax.set_xticks(np.arange(len(keys)) + width * (len(names) - 1) / 2, labels)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(ylim=(-1, 1), title=f"action ranking on {summary['action_states']} states")
        ax.legend(fontsize=8)
        bx.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
        bx.set(xlabel="MC value after the forced action", ylabel="critic value after it",
               title="candidate actions: critic against MC")
        written.append(_save(fig, out / "action_ranking.png", plt))
    return written


def _save(fig, path: Path, plt) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
