"""Tests for the end-of-run summary (tempo_plugin.metrics) and the collapsed-critic warning (embedded/multi_turn.py)."""

from __future__ import annotations

import pytest

from tempo_plugin.metrics import (
    IDENTICAL_PATIENCE,
    IDENTICAL_WARNING,
    MC_REFRESH,
    POOLED_CORR,
    SUCCESS_RATE,
    curve_points,
    format_table,
    last_quarter_mean,
    pooled_corr_row,
    summary_dict,
    summary_rows,
)


def tempo_records() -> list[dict]:
    """A hand-made TEMPO run: base eval, 2 warm-up updates, 8 TD updates, final eval."""
    records = [{"phase": "eval", "update": -1, SUCCESS_RATE: 0.25}]
    records.append({"phase": "warmup", "update": 0, "critic/abs_error_mean": 0.5, "critic/value_corr": 0.1,
                    "critic/parse_failure_rate": 0.5})
    # a None value (a non-finite metric as MetricsLog writes it) counts as absent
    records.append({"phase": "warmup", "update": 1, "critic/abs_error_mean": 0.4, "critic/value_corr": None,
                    "critic/parse_failure_rate": 0.25})
    errors = [0.35, 0.3, 0.25, 0.2, 0.15, 0.1, 0.08, 0.04]
    corrs = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    fresh = [4.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    for i, (e, c, f) in enumerate(zip(errors, corrs, fresh)):
        records.append({"phase": "td", "update": 2 + i, "critic/abs_error_mean": e, "critic/value_corr": c,
                        "td/fresh_states": f})
    records.append({"phase": "eval", "update": 10, SUCCESS_RATE: 0.75})
    return records


def check_rows(rows, expected):
    assert [(k, span) for k, span, *_ in rows] == [(k, span) for k, span, *_ in expected]
    for row, want in zip(rows, expected):
        assert len(row) == 5
        for got, value in zip(row[2:], want[2:]):
            assert got is None if value is None else got == pytest.approx(value, abs=1e-12), (row, want)


def test_last_quarter_mean_by_hand():
    records = tempo_records()
    # all 10 abs errors; the last quarter is the last 10 // 4 = 2: (0.08 + 0.04) / 2 = 0.06
    assert last_quarter_mean(records, "critic/abs_error_mean") == pytest.approx(0.06)
    # the 8 TD correlations: last 2 -> (0.8 + 0.9) / 2 = 0.85
    assert last_quarter_mean(records, "critic/value_corr", "td") == pytest.approx(0.85)
    # the warm-up has one correlation (the other is None): at least one value -> 0.1
    assert last_quarter_mean(records, "critic/value_corr", "warmup") == pytest.approx(0.1)
    # 2 parse-failure rates: 2 // 4 = 0 -> still the last one
    assert last_quarter_mean(records, "critic/parse_failure_rate") == pytest.approx(0.25)
    assert last_quarter_mean(records, "critic/value_corr", "grpo") is None
    assert last_quarter_mean(records, "no/such_metric") is None
    assert last_quarter_mean([], "critic/abs_error_mean") is None
    # 9 values: the last 9 // 4 = 2 of them
    nine = [{"phase": "td", "x": float(i)} for i in range(9)]
    assert last_quarter_mean(nine, "x") == pytest.approx(7.5)


def test_pooled_corr_row_pools_the_states_of_a_quarter_by_hand():
    def update(phase, estimate, target):
        return {"phase": phase, "estimate": estimate, "target": target}

    records = [update("warmup", [0.0, 1.0], [0.0, 1.0])]  # another phase: ignored
    records += [update("td", [0.2, 0.4], [0.0, 1.0]), update("td", [0.6, 0.8], [1.0, 0.0])]
    records += [update("td", [0.3, 0.7], [0.1, 0.9])] * 4
    records += [update("td", [0.5, 0.7], [0.6, 0.4]), update("td", [0.1, 0.9], [0.0, 1.0])]
    # 8 TD updates: a quarter is 2 of them. First quarter: x = .2 .4 .6 .8, y = 0 1 1 0 -> sxy = 0,
    # r = 0 (though the first update alone has r = 1). Last quarter: per update r = -1 and +1, mean 0;
    # pooled x = .5 .7 .1 .9 (mean .55), y = .6 .4 0 1 (mean .5): sxy = .38, sxx = .35, syy = .52,
    # r = .38 / sqrt(.35 x .52) = 0.890724...
    (row,) = pooled_corr_row(records)
    assert row[:2] == (POOLED_CORR, "td")
    assert row[2] == pytest.approx(0.0, abs=1e-12)
    assert row[3] == pytest.approx(0.38 / (0.35 * 0.52) ** 0.5, abs=1e-12)
    assert row[4] == row[3]
    (warm,) = pooled_corr_row(records, "warmup")  # one update, a quarter of at least one
    assert warm[2] == pytest.approx(1.0) and warm[3] == pytest.approx(1.0)
    # no spread of the targets in a quarter: no correlation
    (flat,) = pooled_corr_row([update("td", [0.1, 0.9], [0.5, 0.5])])
    assert flat[2:] == (None, None, None)
    assert pooled_corr_row(records, "grpo") == []


def test_curve_points_keep_the_refreshes_off_the_td_line():
    records = [{"phase": "td", "update": 6, "critic/value_corr": 0.2},
               {"phase": "td", "update": 9, "critic/value_corr": 0.4},
               {"phase": MC_REFRESH, "update": 9, "critic/value_corr": 0.9},
               {"phase": "td", "update": 10, "critic/value_corr": None},
               {"phase": "td", "update": 11}]
    assert curve_points(records, "critic/value_corr") == ([(6, 0.2), (9, 0.4)], [(9, 0.9)])
    assert curve_points(records, "train/loss") == ([], [])


def test_summary_rows_skip_absent_metrics_and_end_with_the_eval():
    rows = summary_rows(tempo_records())
    # identical_group_rate, the TD actor metrics and every grpo metric are absent: no row for them
    check_rows(rows, [
        ("critic/abs_error_mean", "all", 0.5, 0.04, 0.06),
        ("critic/value_corr", "warmup", 0.1, 0.1, 0.1),
        ("critic/value_corr", "td", 0.2, 0.9, 0.85),
        ("critic/parse_failure_rate", "all", 0.5, 0.25, 0.25),
        ("td/fresh_states", "td", 4.0, 1.0, 1.0),
        (SUCCESS_RATE, "base -> final", 0.25, 0.75, None),
    ])


def test_summary_rows_of_a_grpo_run_and_a_single_eval():
    records = [{"phase": "eval", "update": -1, SUCCESS_RATE: 0.5}]
    for i, (s, d, n) in enumerate([(0.25, 0.5, 4.0), (0.5, 0.25, 6.0), (0.75, 0.0, 8.0), (1.0, 1.0, 0.0)]):
        records.append({"phase": "grpo", "update": i, "rollout/success_rate": s,
                        "actor/degenerate_group_rate": d, "train/actor_samples": n})
    rows = summary_rows(records)
    # 4 updates: the last quarter is the last one; one eval only: no final value
    check_rows(rows, [
        ("rollout/success_rate", "grpo", 0.25, 1.0, 1.0),
        ("actor/degenerate_group_rate", "grpo", 0.5, 1.0, 1.0),
        ("train/actor_samples", "grpo", 4.0, 0.0, 0.0),
        (SUCCESS_RATE, "base -> final", 0.5, None, None),
    ])
    # without evaluations there is no eval row; a custom metric list is read in its order
    rows = summary_rows(records[1:], metrics=[("train/actor_samples", None), ("missing", None)])
    check_rows(rows, [("train/actor_samples", "all", 4.0, 0.0, 0.0)])


def test_summary_dict_names_metrics_with_several_spans_by_span():
    summary = summary_dict(summary_rows(tempo_records()))
    assert list(summary) == [
        "critic/abs_error_mean", "critic/value_corr (warmup)", "critic/value_corr (td)",
        "critic/parse_failure_rate", "td/fresh_states", SUCCESS_RATE,
    ]
    assert summary["critic/value_corr (td)"] == {"span": "td", "first": 0.2, "last": 0.9,
                                                 "last_quarter_mean": pytest.approx(0.85)}
    assert summary[SUCCESS_RATE] == {"span": "base -> final", "first": 0.25, "last": 0.75, "last_quarter_mean": None}
    # with one span only the key is the plain metric name
    one = summary_dict([("critic/value_corr", "td", 0.2, 0.9, 0.85)])
    assert list(one) == ["critic/value_corr"]


def test_format_table_has_five_columns():
    table = format_table(summary_rows(tempo_records()))
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "span", "first", "last", "last", "1/4"]
    assert lines[1] == "-" * 73
    assert lines[2].split() == ["critic/abs_error_mean", "all", "0.500", "0.040", "0.060"]
    assert lines[-1].split() == [SUCCESS_RATE, "base", "->", "final", "0.250", "0.750", "-"]
    # metric 30 + span 14 + first 8 + last 8 + last quarter 9, one space between columns
    assert all(len(line) == 73 for line in lines[2:])


# ------------------------------------------------------------------------- collapsed-critic warning


def test_critic_collapse_warning_once_per_streak_of_three(capsys):
    from tempo_plugin.embedded.multi_turn import Progress, warn_if_critic_collapsed

    assert (IDENTICAL_WARNING, IDENTICAL_PATIENCE) == (0.9, 3)
    progress = Progress()
    rates = [0.95, 0.9, 0.5,  # a streak of 2, reset below 0.9
             0.9, 1.0, 0.91,  # 3 in a row: warn at update 5
             1.0, 1.0,  # the streak goes on: no second warning
             0.8999, 0.9, 0.9]  # reset, then only 2 in a row
    streaks = []
    for update, rate in enumerate(rates):
        warn_if_critic_collapsed({"critic/degenerate_group_rate": rate}, progress, update)
        streaks.append(progress.identical_streak)
    assert streaks == [1, 2, 0, 1, 2, 3, 4, 5, 0, 1, 2]
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("warning:") == 1
    assert "update 5:" in err and ">= 90%" in err and "for 3 updates" in err
    # a third in a row after the reset is a new streak of 3: a second warning, at update 11
    warn_if_critic_collapsed({"critic/degenerate_group_rate": 0.99}, progress, 11)
    out, err = capsys.readouterr()
    assert out == "" and err.count("warning:") == 1 and "update 11:" in err


def test_no_critic_collapse_warning_below_the_threshold(capsys):
    from tempo_plugin.embedded.multi_turn import Progress, warn_if_critic_collapsed

    progress = Progress()
    for update in range(20):
        warn_if_critic_collapsed({"critic/degenerate_group_rate": 0.89 if update % 3 == 2 else 0.95}, progress, update)
    # every third update is below 0.9, so the streak never passes 2: 17 is 0.89, then 18 and 19 -> 2
    assert progress.identical_streak == 2
    assert capsys.readouterr() == ("", "")


def test_an_update_with_alike_targets_neither_extends_nor_breaks_a_streak(capsys):
    """One value for all states is a collapse where the targets differ; where they are alike too the
    update cannot tell, so a one-valued critic seen in 3 informative updates is warned about however
    many alike-target updates fall between them."""
    from tempo_plugin.embedded.multi_turn import COLLAPSE_ESTIMATE_STD, COLLAPSE_TARGET_STD, Progress, warn_if_critic_collapsed

    one_value = {"critic/degenerate_group_rate": 0.0, "critic/estimate_std": COLLAPSE_ESTIMATE_STD / 2}
    collapsed = {**one_value, "critic/value_target_std": COLLAPSE_TARGET_STD * 2}
    alike = {**one_value, "critic/value_target_std": 0.0}
    healthy = {"critic/degenerate_group_rate": 0.0, "critic/estimate_std": 0.2, "critic/value_target_std": 0.0}
    progress = Progress()
    streaks = []
    for update, metrics in enumerate([collapsed, alike, collapsed, alike, alike, collapsed, healthy, collapsed]):
        warn_if_critic_collapsed(metrics, progress, update)
        streaks.append(progress.identical_streak)
    assert streaks == [1, 1, 2, 2, 2, 3, 0, 1]
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "update 5:" in err


def test_slime_metric_names_prefix_what_slime_would_not_plot():
    from tempo_plugin.metrics import slime_metric_names

    named = slime_metric_names({"critic/value_corr": 0.5, "td/fresh_states": 2.0, "store/size": 9.0,
                                "train/removed_samples": 1.0, "rollout/success_rate": 0.25, "eval/x": 1.0,
                                "perf/y": 2.0})
    # train/ and eval/ are bound to steps the rollout process never logs (train/step, eval/step)
    assert named == {"rollout/critic/value_corr": 0.5, "rollout/td/fresh_states": 2.0, "rollout/store/size": 9.0,
                     "rollout/train/removed_samples": 1.0, "rollout/success_rate": 0.25, "rollout/eval/x": 1.0,
                     "perf/y": 2.0}
