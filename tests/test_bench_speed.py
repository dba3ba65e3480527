"""bench/speed.py --quick runs end to end on the tiny model and reports every measurement."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.extras import importable, needs_extra

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick_report(tokenizer, tmp_path_factory):
    """bench/speed.py --quick on the tiny model, run once for this module's tests."""
    from tempo_plugin.tiny.model import build_tiny_model

    tmp_path = tmp_path_factory.mktemp("speed")
    model_dir = tmp_path / "tiny-model"
    torch.manual_seed(0)
    build_tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "results"
    # one thread and one process: the tiny model gains nothing from more, and a process per
    # measurement would spend most of the test importing torch
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "speed.py"), "--quick", "--in-process", "--threads", "1",
         "--model", str(model_dir), "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "speed-tiny-model.md").read_text().startswith("# Speed")
    return json.loads((out / "speed-tiny-model.json").read_text())


def test_quick_speed_bench_reports_every_measurement(quick_report):
    report = quick_report
    assert report["machine"]["threads"] == 1 and report["machine"]["torch"]

    assert report["sampler"]
    for row in report["sampler"]:
        expected = row["batch"] * row["new_tokens"]
        for side in ("ours", "generate"):
            result = row[side]
            assert "error" not in result, result
            assert result["tokens_per_s"] > 0 and result["peak_growth_mb"] >= 0
            assert result["expected_tokens"] == expected
            assert all(count == expected for count in result["generated_tokens"]), (side, result["generated_tokens"])
            assert all(rows == row["batch"] for rows in result["rows_with_exactly_L"])
        assert row["ratio"] > 0

    assert [row["batch"] for row in report["trainer"]] == ["shared", "own"]
    for row in report["trainer"]:
        ours, plain = row["ours"], row["plain"]
        assert "error" not in ours and "error" not in plain, (ours, plain)
        assert ours["tokens_per_s"] > 0 and plain["tokens_per_s"] > 0 and row["ratio"] > 0
        assert ours["tokens"] == plain["tokens"] and ours["samples"] == plain["samples"]
        assert 0 < ours["model_tokens"] <= ours["tokens"]
    shared = report["trainer"][0]["ours"]
    assert shared["distinct_prompts"] == report["settings"]["groups"]
    assert shared["model_tokens"] < shared["tokens"]  # each group's prompt ran once

    assert [row["batch"] for row in report["lora"]] == ["shared", "own"]
    if not importable("peft"):  # named as not measured, not an error
        assert all("peft is not installed" in row["lora"]["skipped"] for row in report["lora"])


@needs_extra("smollm2", "peft")
def test_quick_speed_bench_measures_lora(quick_report):
    report = quick_report
    for row in report["lora"]:
        lora = row["lora"]
        assert "error" not in lora, lora
        assert lora["tokens_per_s"] > 0 and row["ratio"] > 0
        assert 0 < lora["trainable_params"] < report["model_params"]


def test_a_worker_process_gets_every_resolved_setting():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_speed", ROOT / "bench" / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    args = speed.parse_args(["--quick", "--model", "some/dir", "--threads", "3", "--learning-rate", "0.5"])
    again = speed.parse_args(speed.worker_argv(args) + ["--worker", "{}"])
    measured = {k for k in vars(args) if k not in ("batches", "new_tokens", "quick", "in_process", "out", "worker")}
    assert {k: getattr(again, k) for k in measured} == {k: getattr(args, k) for k in measured}
    assert speed.model_slug("smollm2-135m") == "smollm2-135m"
    assert speed.model_slug(str(ROOT / "some" / "Tiny Model")) == "tiny-model"


def load_speed_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_speed", ROOT / "bench" / "speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resume_reuses_finished_measurements_made_with_the_same_settings(tmp_path):
    speed = load_speed_module()
    args = speed.parse_args(["--model", "m", "--quick"])
    settings = {k: v for k, v in vars(args).items() if k not in ("worker", "out")}
    report = {"settings": settings}
    done = {"kind": "sampler", "side": "ours", "batch": args.batches[0], "new_tokens": args.new_tokens[0],
            "tokens_per_s": 10.0}
    failed = {"kind": "trainer", "side": "plain", "batch": "shared", "error": "exit 1: boom"}
    speed.fill_sections(report, {speed.spec_key(done): done, speed.spec_key(failed): failed}, args)
    path = tmp_path / "speed-m.json"
    path.write_text(json.dumps(report))

    # the finished measurement comes back; the failed one and the pending ones are measured again
    again = speed.finished_measurements(path, {**settings, "resume": True})
    assert list(again.values()) == [done]
    pending = [r for r in speed.all_measurements(report) if r.get("pending")]
    assert len(pending) == len(speed.measurement_specs(args)) - 2
    assert "**Incomplete**" in speed.render({**report, "complete": False, "model": "m", "date": "d",
                                             "machine": {"cpu": "c", "usable_cores": 2, "cores": 2, "device": "cpu",
                                                         "threads": 1, "torch": "t", "transformers": "t", "peft": "p"},
                                             "load_average_before": [0, 0, 0], "load_average_after": [0, 0, 0],
                                             "model_class": "X", "model_params": 1, "dtype": "float32"})
    # other settings: nothing is reused
    assert speed.finished_measurements(path, {**settings, "threads": settings["threads"] + 1}) == {}
