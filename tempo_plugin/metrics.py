"""Run outputs: metrics.jsonl (one flushed line per update), learning curves, the summary table."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable

from tempo_plugin.algorithms.stats import pearson

MC_REFRESH = "mc_refresh"  # the phase of a Monte-Carlo refresh's record (--mc-refresh-every)

# The metrics the end-of-run table compares (first value, last value, mean of the last quarter)
# with the phase they are read over (None: every update), and the ones the curves plot.
SUMMARY_METRICS: tuple[tuple[str, str | None], ...] = (
    ("critic/abs_error_mean", None),
    ("critic/value_corr", "warmup"),
    ("critic/value_corr", "td"),
    ("critic/value_corr", MC_REFRESH),
    ("critic/identical_group_rate", None),
    ("critic/parse_failure_rate", None),
    ("actor/segment_reward_mean", "td"),
    ("actor/degenerate_group_rate", "td"),
    ("train/actor_samples", "td"),
    ("td/fresh_states", "td"),
    ("td/start_round_mean", "td"),
    ("rollout/success_rate", "grpo"),
    ("actor/degenerate_group_rate", "grpo"),
    ("train/actor_samples", "grpo"),
    ("rollout/success_rate", "temporal_grpo"),
    ("stages/completed_mean", "temporal_grpo"),
    ("actor/degenerate_group_rate", "temporal_grpo"),
    ("train/actor_samples", "temporal_grpo"),
    ("is/log_w_mean", "td"),
    ("is/ess", "td"),
    ("is/clip_frac", "td"),
)
PLOTTED_METRICS = ("critic/abs_error_mean", "critic/value_corr", "critic/identical_group_rate",
                   "actor/segment_reward_mean", "actor/degenerate_group_rate", "train/actor_samples",
                   "td/start_round_mean", "actor/value_gap_zero_reward", "store/size", "train/loss",
                   "rollout/success_rate", "eval/success_rate")
VALUE_PAIRS_FILE = "critic_values.jsonl"  # per update: the critic's mean estimate and the value target of each valued state
POOLED_CORR = "critic/value_corr_pooled"  # one Pearson over all the states of a quarter of the updates
SUCCESS_RATE = "eval/success_rate"
ENV_STEPS = "rollout/env_steps_total"  # environment steps (rounds) of every rollout so far, evaluations excluded
SLIME_ROLLOUT_STEP_PREFIXES = ("rollout/", "multi_turn/", "passrate/", "perf/")
"""The prefixes slime's wandb setup binds to ``rollout/step`` (slime/observability/wandb_utils.py),
the only step its rollout process logs; ``train/`` is bound to ``train/step`` (the train actors')."""
IDENTICAL_WARNING = 0.9  # warn when critic/degenerate_group_rate stays at or above this ...
IDENTICAL_PATIENCE = 3  # ... for this many consecutive updates
COLLAPSE_ESTIMATE_STD = 0.02  # or when the critic's estimates spread less than this across states ...
COLLAPSE_TARGET_STD = 0.1  # ... while their value targets spread more than this


class MetricsLog:
    """Appends one JSON line per record and flushes it, so a crash loses nothing already logged."""

    def __init__(self, path: str | Path, keep_updates_below: int | None = None,
                 mirror: Callable[[dict[str, Any]], None] | None = None) -> None:
        """``mirror`` also receives every record logged from now on (``--wandb``)."""
        self.path = Path(path)
        self.mirror = mirror
        self.records: list[dict[str, Any]] = []
        if self.path.exists():
            kept = [r for r in read_metrics(self.path) if keep_updates_below is None or r.get("update", -1) < keep_updates_below]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
            self.records = kept
        self._file = open(self.path, "a", encoding="utf-8")

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self.records.append(clean)
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        if self.mirror is not None:
            self.mirror(clean)

    def close(self) -> None:
        self._file.close()


def slime_metric_names(metrics: dict[str, Any]) -> dict[str, Any]:
    """A rollout function's metrics under names slime plots against the rollout step: a name outside
    ``SLIME_ROLLOUT_STEP_PREFIXES`` (critic/, td/, store/, actor/, time/, train/ ...) gets ``rollout/``
    in front."""
    return {k if k.startswith(SLIME_ROLLOUT_STEP_PREFIXES) else f"rollout/{k}": v for k, v in metrics.items()}


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def first_last(records: Iterable[dict[str, Any]], key: str, phase: str | None = None) -> tuple[float | None, float | None]:
    values = [r[key] for r in records if r.get(key) is not None and (phase is None or r.get("phase") == phase)]
    return (values[0], values[-1]) if values else (None, None)


def last_quarter_mean(records: Iterable[dict[str, Any]], key: str, phase: str | None = None) -> float | None:
    """Mean of the metric over the last quarter (at least one) of the updates of ``phase`` that have it."""
    values = [r[key] for r in records if r.get(key) is not None and (phase is None or r.get("phase") == phase)]
    if not values:
        return None
    tail = values[-max(1, len(values) // 4):]
    return sum(tail) / len(tail)


Row = tuple[str, str, "float | None", "float | None", "float | None"]


def pooled_corr_row(value_records: list[dict[str, Any]], phase: str = "td") -> list[Row]:
    """The critic's value correlation pooled over quarters of the ``phase`` updates: (POOLED_CORR,
    phase, first quarter, last quarter, last quarter), one Pearson over all states of the quarter's
    updates (records of VALUE_PAIRS_FILE: ``estimate`` and ``target`` lists); [] without such updates.

    ``critic/value_corr`` is one Pearson per update over its S start states: a batch without a lost
    state has little spread of values to correlate, so its mean over updates swings with which
    states each batch drew; a quarter's 2 x S or more states pooled do not.
    """
    updates = [r for r in value_records if r.get("phase") == phase]
    if not updates:
        return []
    quarter = max(1, len(updates) // 4)

    def pooled(chunk: list[dict[str, Any]]) -> float | None:
        return pearson([x for r in chunk for x in r["estimate"]], [y for r in chunk for y in r["target"]])

    last = pooled(updates[-quarter:])
    return [(POOLED_CORR, phase, pooled(updates[:quarter]), last, last)]


def mean_std(values: Iterable[float | None]) -> str:
    """``"mean +- std"`` (sample std, 0 for one value; Nones dropped; ``"-"`` when empty), the
    benchmarks' over-seeds cell."""
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    spread = statistics.stdev(present) if len(present) > 1 else 0.0
    return f"{statistics.fmean(present):.3f} +- {spread:.3f}"


def summary_rows(
    records: list[dict[str, Any]],
    metrics: Iterable[tuple[str, str | None]] = SUMMARY_METRICS,
    eval_metric: str = SUCCESS_RATE,
) -> list[Row]:
    """(metric, span, first, last, last-quarter mean) rows for the metrics present, phase-specific
    metrics over their phase; then base -> final evaluation."""
    rows = []
    for key, span in metrics:
        first, last = first_last(records, key, span)
        if first is not None:
            rows.append((key, span or "all", first, last, last_quarter_mean(records, key, span)))
    evals = [r for r in records if r.get("phase") == "eval"]
    if evals:
        final = evals[-1].get(eval_metric) if len(evals) > 1 else None
        rows.append((eval_metric, "base -> final", evals[0].get(eval_metric), final, None))
    return rows


def summary_dict(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """summary.json: one entry per row, keyed by the metric ("metric (span)" where a metric has several spans)."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row[0]] = counts.get(row[0], 0) + 1
    return {
        (key if counts[key] == 1 else f"{key} ({span})"): {"span": span, "first": a, "last": b, "last_quarter_mean": q}
        for key, span, a, b, q in rows
    }


def format_table(rows: list[Row]) -> str:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = [f"{'metric':<30} {'span':<14} {'first':>8} {'last':>8} {'last 1/4':>9}", "-" * 73]
    lines += [f"{k:<30} {span:<14} {fmt(a):>8} {fmt(b):>8} {fmt(q):>9}" for k, span, a, b, q in rows]
    return "\n".join(lines)


def curve_points(records: Iterable[dict[str, Any]], key: str) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(update, value) of ``key``: the updates' line, and the Monte-Carlo refreshes' points apart (a
    refresh shares its TD update's number and measures against other targets)."""
    present = [r for r in records if r.get(key) is not None]
    return ([(r["update"], r[key]) for r in present if r.get("phase") != MC_REFRESH],
            [(r["update"], r[key]) for r in present if r.get("phase") == MC_REFRESH])


def plot_curves(records: list[dict[str, Any]], path: str | Path, plotted: tuple[str, ...] = PLOTTED_METRICS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    updates = [r for r in records if r.get("phase") is not None]  # eval records carry only eval/success_rate
    cols = 3
    rows = math.ceil(len(plotted) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    warmup_end = max((r["update"] for r in updates if r["phase"] == "warmup"), default=None)
    for ax, key in zip(axes.flat, plotted):
        points, refreshes = curve_points(updates, key)
        if points:
            ax.plot(*zip(*points), marker="o", markersize=3)
        if refreshes:
            ax.scatter(*zip(*refreshes), marker="x", s=16, color="tab:orange", label=MC_REFRESH, zorder=3)
            ax.legend(fontsize=6)
        if warmup_end is not None:
            ax.axvline(warmup_end + 0.5, color="grey", linestyle=":", linewidth=1)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("update", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(plotted):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
