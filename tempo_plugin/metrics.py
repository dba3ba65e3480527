"""Run outputs: metrics.jsonl (one flushed line per update), learning curves, the summary table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

# The metrics the end-of-run table compares (first vs last value) with the phase they are read
# over (None: every update), and the ones the curves plot.
SUMMARY_METRICS: dict[str, str | None] = {
    "critic/abs_error_mean": None,
    "critic/value_corr": "warmup",
    "critic/parse_failure_rate": None,
    "actor/segment_reward_mean": "td",
    "actor/degenerate_group_rate": "td",
    "td/fresh_states": "td",
}
PLOTTED_METRICS = tuple(SUMMARY_METRICS) + ("actor/value_gap_zero_reward", "store/size", "train/loss")
SUCCESS_RATE = "eval/success_rate"


class MetricsLog:
    """Appends one JSON line per record and flushes it, so a crash loses nothing already logged."""

    def __init__(self, path: str | Path, keep_updates_below: int | None = None) -> None:
        self.path = Path(path)
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

    def close(self) -> None:
        self._file.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def first_last(records: Iterable[dict[str, Any]], key: str, phase: str | None = None) -> tuple[float | None, float | None]:
    values = [r[key] for r in records if r.get(key) is not None and (phase is None or r.get("phase") == phase)]
    return (values[0], values[-1]) if values else (None, None)


def summary_rows(
    records: list[dict[str, Any]],
    metrics: dict[str, str | None] = SUMMARY_METRICS,
    eval_metric: str = SUCCESS_RATE,
) -> list[tuple[str, str, float | None, float | None]]:
    """(metric, span, first, last) rows: phase-specific metrics over their phase, then base -> final eval."""
    rows = []
    for key, span in metrics.items():
        first, last = first_last(records, key, span)
        rows.append((key, span or "all", first, last))
    evals = [r for r in records if r.get("phase") == "eval"]
    if evals:
        rows.append((eval_metric, "base -> final", evals[0].get(eval_metric), evals[-1].get(eval_metric) if len(evals) > 1 else None))
    return rows


def format_table(rows: list[tuple[str, str, float | None, float | None]]) -> str:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = [f"{'metric':<30} {'span':<14} {'first':>8} {'last':>8}", "-" * 63]
    lines += [f"{k:<30} {span:<14} {fmt(a):>8} {fmt(b):>8}" for k, span, a, b in rows]
    return "\n".join(lines)


def plot_curves(records: list[dict[str, Any]], path: str | Path, plotted: tuple[str, ...] = PLOTTED_METRICS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    updates = [r for r in records if r.get("phase") not in (None, "eval")]
    cols = 3
    rows = math.ceil(len(plotted) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    warmup_end = max((r["update"] for r in updates if r["phase"] == "warmup"), default=None)
    for ax, key in zip(axes.flat, plotted):
        points = [(r["update"], r[key]) for r in updates if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", markersize=3)
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
