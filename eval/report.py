"""The results of an evaluation as a markdown table and as JSON.

Table rows are benchmark / metric, columns the targets; a cell is ``value ± standard error`` with
three decimals, ``skipped`` or ``failed`` (the reason is listed under the table), or ``-`` where the
benchmark was not run on that target.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from eval.benchmarks import GREEDY, Result, Score


def cell(score: Score | None) -> str:
    return "-" if score is None else f"{score.value:.3f} ± {score.stderr:.3f}"


def metric_label(metric: str, result: Result) -> str:
    kind = result.info.get("kind")
    if metric == GREEDY:
        return "greedy accuracy" if kind == "math" else "greedy success"
    score = result.metrics.get(metric)
    return f"{metric} (n={score.samples})" if score is not None else metric


def benchmark_label(result: Result) -> str:
    if "games" in result.info:
        return f"{result.benchmark} ({result.info['games']} games)"
    if "problems" in result.info:
        return f"{result.benchmark} ({result.info['problems']} problems)"
    return result.benchmark


def markdown_table(targets: Sequence[str], benchmarks: Sequence[str],
                   results: Mapping[str, Mapping[str, Result]]) -> str:
    """The table (and the reasons of skipped or failed cells) as markdown."""
    header = ["benchmark / metric", *targets]
    rows: list[list[str]] = []
    notes: list[str] = []
    for benchmark in benchmarks:
        cells = {t: results.get(t, {}).get(benchmark) for t in targets}
        ran = [r for r in cells.values() if r is not None and r.metrics]
        if ran:
            label = benchmark_label(ran[0])
            metrics = list(dict.fromkeys(m for r in ran for m in r.metrics))
            for metric in metrics:
                row = [f"{label} / {metric_label(metric, next(r for r in ran if metric in r.metrics))}"]
                for target in targets:
                    result = cells[target]
                    row.append(_cell(result, metric))
                rows.append(row)
        else:
            rows.append([benchmark, *[_cell(cells[t], None) for t in targets]])
        for target in targets:
            result = cells[target]
            if result is not None and (result.skipped or result.error):
                what = "skipped" if result.skipped else "failed"
                notes.append(f"- {benchmark} on {target}: {what}: {result.skipped or result.error}")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *[line(r) for r in rows]]
    if notes:
        out += ["", *notes]
    return "\n".join(out) + "\n"


def _cell(result: Result | None, metric: str | None) -> str:
    if result is None:
        return "-"
    if result.skipped:
        return "skipped"
    if result.error:
        return "failed"
    return cell(result.metrics.get(metric)) if metric else "-"


def results_json(settings: Mapping[str, Any], targets: Sequence[Mapping[str, Any]], benchmarks: Sequence[str],
                 results: Mapping[str, Mapping[str, Result]], seconds: float) -> dict[str, Any]:
    return {
        "settings": dict(settings),
        "targets": list(targets),
        "benchmarks": list(benchmarks),
        "results": {t: {b: r.to_dict() for b, r in per.items()} for t, per in results.items()},
        "seconds": round(seconds, 3),
    }
