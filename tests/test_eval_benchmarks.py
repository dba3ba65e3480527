"""eval/: estimators, the markdown table, math scoring with a known sampler, greedy decoding,
targets side by side, a /generate server target, user errors, and eval/eval.sh --help."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from eval.benchmarks import (
    GREEDY_TEMPERATURE,
    MathBenchmark,
    Policy,
    Result,
    Settings,
    batches,
    binomial_stderr,
    greedy_score,
    mean_stderr,
    pass_at_k,
    pass_at_k_score,
)
from eval.cli import main
from eval.report import markdown_table
from tempo_plugin.config import TempoConfig
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams

REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")


def write_math(path: Path, labels) -> Path:
    lines = [{"prompt": f"Problem number {i}: what is the answer?", "label": label} for i, label in enumerate(labels)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture()
def model_dir(tiny_model, tokenizer, tmp_path):
    path = tmp_path / "tiny-model"
    tiny_model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# -- estimators -------------------------------------------------------------------------------------


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # fewer than k failures: some k-subset always succeeds
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # pass@1 = c / n
    assert pass_at_k(1, 1, 1) == 1.0
    for bad in ((4, 5, 2), (4, 1, 5), (4, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_standard_errors_hand_values():
    assert binomial_stderr(0.5, 4) == pytest.approx(0.25)
    assert binomial_stderr(0.0, 10) == 0.0
    mean, se = mean_stderr([1.0, 0.0, 0.5, 0.5])
    assert mean == pytest.approx(0.5) and se == pytest.approx(math.sqrt(1 / 6) / 2)  # sample variance 1/6
    assert mean_stderr([0.3]) == (0.3, 0.0)
    greedy = greedy_score([1, 0, 1, 1])
    assert greedy.value == pytest.approx(0.75) and greedy.stderr == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert greedy.items == 4 and greedy.samples == 1 and greedy.k is None
    passk = pass_at_k_score([1, 0, 4, 2], n=4, k=2)  # per game 0.5, 0, 1, 5/6
    per_game = [0.5, 0.0, 1.0, 5 / 6]
    assert passk.value == pytest.approx(sum(per_game) / 4)
    assert passk.stderr == pytest.approx(mean_stderr(per_game)[1])
    assert passk.to_dict()["successes_per_item"] == [1, 0, 4, 2] and passk.to_dict()["k"] == 2


def test_batches_respect_the_row_budget():
    assert batches(list(range(5)), 4, 8) == [[0, 1], [2, 3], [4]]
    assert batches(list(range(3)), 100, 64) == [[0], [1], [2]]  # at least one item per batch
    assert batches(list(range(3)), 1, 64) == [[0, 1, 2]]


# -- the markdown table ---------------------------------------------------------------------------------


def test_markdown_table_layout():
    def agent(greedy_successes):
        return Result("vaults", metrics={
            "greedy": greedy_score(greedy_successes),
            "pass@4": pass_at_k_score([4, 0], 4, 4),
        }, info={"kind": "agent", "games": 2})

    results = {
        "tempo": {"vaults": agent([1, 0]), "alfworld": Result("alfworld", skipped="no ALFWorld games")},
        "grpo": {"vaults": agent([0, 0]), "alfworld": Result("alfworld", skipped="no ALFWorld games")},
    }
    table = markdown_table(["tempo", "grpo"], ["vaults", "alfworld"], results)
    lines = table.splitlines()
    assert lines[0].startswith("| benchmark / metric") and lines[0].endswith("| tempo         | grpo          |")
    assert set(lines[1]) == {"|", "-"} and len(lines[1]) == len(lines[0])
    assert lines[2] == "| vaults (2 games) / greedy success | 0.500 ± 0.354 | 0.000 ± 0.000 |"
    assert lines[3] == "| vaults (2 games) / pass@4 (n=4)   | 0.500 ± 0.500 | 0.500 ± 0.500 |"
    assert lines[4] == "| alfworld                          | skipped       | skipped       |"
    assert lines[6:] == ["- alfworld on tempo: skipped: no ALFWorld games", "- alfworld on grpo: skipped: no ALFWorld games"]
    # a target that did not run a benchmark shows '-', a failed one 'failed' with its reason
    partial = markdown_table(["a", "b"], ["vaults"], {"a": {"vaults": agent([1, 1])},
                                                      "b": {"vaults": Result("vaults", error="server down")}})
    assert "| 1.000 ± 0.000 | failed |" in partial and "- vaults on b: failed: server down" in partial
    assert "| -" in markdown_table(["a", "b"], ["vaults"], {"a": {"vaults": agent([1, 1])}})


# -- math scoring with a sampler whose answers are known ------------------------------------------------


class ScriptedSampler:
    """Answers problem i with greedy[i] at (near-)zero temperature, else with sampled[i][0], [1], ..."""

    def __init__(self, prompts, greedy, sampled):
        self.index = {tuple(p): i for i, p in enumerate(prompts)}
        self.greedy, self.sampled = greedy, sampled
        self.used = [0] * len(prompts)
        self.calls = []

    def generate(self, requests, params, seed):
        self.calls.append((len(requests), params, seed))
        out = []
        for request in requests:
            i = self.index[tuple(request.prompt_ids)]
            if params.temperature <= 1e-3:
                text = self.greedy[i]
            else:
                text = self.sampled[i][self.used[i]]
                self.used[i] += 1
            out.append(Completion([7], [0.0], text, "stop"))
        return out


def test_math_benchmark_scores_known_answers(tmp_path, protocol):
    from tempo_plugin.tasks.math import MathTask

    path = write_math(tmp_path / "small.jsonl", ["5", "\\frac{1}{2}", "12", "7"])
    task = MathTask(path)
    prompts = [protocol.render_prompt(task.messages(p)) for p in task.problems]
    right = ["<answer>5</answer>", "<answer>0.5</answer>", "<answer>12</answer>", "<answer>7</answer>"]
    wrong = "<answer>3</answer>"
    greedy = [right[0], right[1], wrong, "no answer tag"]  # 2 of 4 right
    correct_samples = [0, 1, 2, 4]  # of 4 samples each
    sampled = [[right[i]] * c + [wrong] * (4 - c) for i, c in enumerate(correct_samples)]
    sampler = ScriptedSampler(prompts, greedy, sampled)
    policy = Policy(sampler, protocol, TempoConfig(), batch_rows=8)
    progress = []
    result = MathBenchmark("small", str(path), task).run(policy, Settings(k=2, samples=4, seed=3), progress.append)
    assert result.benchmark == "math:small" and result.info["problems"] == 4
    greedy_score_ = result.metrics["greedy"]
    assert greedy_score_.value == 0.5 and greedy_score_.stderr == pytest.approx(0.25)
    assert greedy_score_.successes == (1, 1, 0, 0)
    passk = result.metrics["pass@2"]
    assert passk.successes == (0, 1, 2, 4)
    assert passk.value == pytest.approx((0 + 0.5 + 5 / 6 + 1) / 4)
    # greedy at GREEDY_TEMPERATURE, pass@k at the config's temperature; at most 8 rows per sampler call
    assert {c[1].temperature for c in sampler.calls} == {GREEDY_TEMPERATURE, 1.0}
    assert all(c[0] <= 8 for c in sampler.calls) and sum(progress) == 4 + 16
    assert all(c[1].stop_token_ids == protocol.stop_token_ids for c in sampler.calls)


def test_greedy_temperature_is_argmax_on_the_local_sampler(tiny_model, tokenizer):
    from tempo_plugin.samplers.local import LocalSampler

    prompt = tokenizer.encode("Hall 2 of 9. You hold the red key.")
    sampler = LocalSampler(tiny_model, tokenizer, reuse_cache=False)
    completions = [sampler.generate([Request(prompt, 6)], SamplingParams(GREEDY_TEMPERATURE), seed=s)[0] for s in (1, 2)]
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            tokens.append(int(tiny_model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax()))
    assert completions[0].token_ids == completions[1].token_ids == tokens[len(prompt):]


# -- the command line -------------------------------------------------------------------------------------


def run_dir_with_config(model_dir: Path, root: Path, **settings) -> Path:
    run = root / "my-run"
    (run / "checkpoints").mkdir(parents=True)
    model_dir.rename(run / "checkpoints" / "latest")
    (run / "config.yaml").write_text(yaml.safe_dump(TempoConfig(**settings).to_dict()))
    return run


def test_vaults_sets_the_chain_length_and_a_long_enough_episode(model_dir, tmp_path):
    """A model target plays 3 vaults in 30 rounds by default; --vaults 4 plays 4 in 40 (10 per vault),
    --vaults 1 keeps the target's 30."""
    for vaults, steps in ((None, 30), (4, 40), (1, 30)):
        out = tmp_path / f"v{vaults}" / "r.json"
        extra = [] if vaults is None else ["--vaults", str(vaults)]
        rc = main([str(model_dir), "--envs", "vaults", "--games", "1", "--k", "1", "--threads", "1", "--no-progress",
                   "--out", str(out), *extra])
        assert rc == 0
        data = json.loads(out.read_text())
        result = data["results"][model_dir.name]["vaults"]
        assert (result["vaults"], result["max_episode_steps"], data["settings"]["vaults"]) == (vaults or 3, steps, vaults)


def test_two_targets_side_by_side(model_dir, tiny_model, tokenizer, tmp_path, capsys):
    run = run_dir_with_config(model_dir, tmp_path, env="vault", max_episode_steps=15, max_assistant_tokens=6)
    other = tmp_path / "other-model"
    tiny_model.save_pretrained(other)
    tokenizer.save_pretrained(other)
    out = tmp_path / "results" / "r.json"
    rc = main([str(run), str(other), "--games", "2", "--k", "2", "--threads", "1", "--no-progress", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out.read_text())
    assert [t["name"] for t in data["targets"]] == ["my-run", "other-model"]
    assert [t["kind"] for t in data["targets"]] == ["run", "model"]
    assert data["targets"][0]["settings_from"] == "run config.yaml" and data["targets"][0]["max_episode_steps"] == 15
    assert data["targets"][1]["settings_from"] == "TempoConfig defaults" and data["targets"][1]["max_episode_steps"] == 30
    assert data["benchmarks"] == ["vault"]  # by default: the env the run trained on, for every target
    for name in ("my-run", "other-model"):
        vault = data["results"][name]["vault"]
        assert vault["games"] == 2 and set(vault["metrics"]) == {"greedy", "pass@2"}
        assert vault["metrics"]["greedy"]["items"] == 2 and vault["metrics"]["pass@2"]["samples_per_item"] == 2
        assert 0.0 <= vault["metrics"]["pass@2"]["value"] <= 1.0
    assert data["results"]["my-run"]["vault"]["max_assistant_tokens"] == 6
    table = (tmp_path / "results" / "r.md").read_text()
    assert table in printed
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    assert header == ["benchmark / metric", "my-run", "other-model"]
    assert "vault (2 games) / greedy success" in table and "vault (2 games) / pass@2 (n=2)" in table


def test_server_target_through_generate(serve, tiny_model, tokenizer, tokenizer_dir, tmp_path):
    from tempo_plugin.samplers.local import LocalSampler

    url = serve(LocalSampler(tiny_model, tokenizer))
    out = tmp_path / "server"
    rc = main(["--server", url, "--tokenizer", tokenizer_dir, "--envs", "vault", "--games", "2", "--k", "1",
               "--threads", "1", "--no-progress", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    target = data["targets"][0]
    assert target["kind"] == "server" and target["location"] == url and target["name"] == url.split("//")[1]
    vault = data["results"][target["name"]]["vault"]
    assert "error" not in vault and vault["metrics"]["greedy"]["items"] == 2
    assert (out / "results.md").is_file()


def test_unavailable_env_is_skipped_not_fatal(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "no-alfworld-here"))
    monkeypatch.setenv("TEXTWORLD_GAMES", str(tmp_path / "no-textworld-here"))
    monkeypatch.chdir(tmp_path)  # data/<env> defaults are not found from here either
    rc = main([str(model_dir), "--envs", "textworld,alfworld", "--games", "1", "--k", "1", "--threads", "1",
               "--no-progress", "--out", "out"])
    assert rc == 0
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    for env in ("textworld", "alfworld"):
        assert data["results"]["tiny-model"][env]["skipped"]
    assert "skipped" in capsys.readouterr().out


@pytest.mark.parametrize("args, expected", [
    (["{missing}"], ["{missing}", "no such directory"]),
    (["{model}", "--math", "aime=/nowhere/aime.jsonl"], ["--math", "/nowhere/aime.jsonl", "not found"]),
    (["{model}", "--math", "aime.jsonl"], ["--math", "NAME=PATH"]),
    (["{model}", "--math", "bad={bad}"], ["--math", "bad.jsonl:1"]),
    (["{model}", "--envs", "chess"], ["--envs", "chess"]),
    (["{model}", "--k", "4", "--samples", "2"], ["--samples"]),
    (["{model}", "--games", "many"], ["--games"]),
    (["{model}", "--games", "0"], ["--games"]),
    (["{model}", "--vaults", "0"], ["--vaults must be >= 1"]),
    (["{model}", "--frobnicate"], ["--frobnicate"]),
    ([], ["nothing to evaluate"]),
    (["--server", "http://127.0.0.1:9"], ["--tokenizer"]),
    (["--server", "localhost:30000", "--tokenizer", "{model}"], ["--server", "localhost:30000"]),
    (["--openai", "http://127.0.0.1:9", "--tokenizer", "{missing}"], ["--tokenizer", "{missing}"]),
])
def test_user_errors_are_one_line_with_exit_code_2(args, expected, tmp_path, capsys):
    fake_model = tmp_path / "fake-model"
    fake_model.mkdir()
    (fake_model / "config.json").write_text("{}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    values = {"model": str(fake_model), "missing": str(tmp_path / "no-such-run"), "bad": str(bad)}
    argv = [a.format(**values) for a in args]
    rc = main(argv + ["--no-progress", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("eval: error: ") and err.count("\n") == 1 and "Traceback" not in err
    for piece in expected:
        assert piece.format(**values) in err


def test_eval_sh_help_exits_0(tmp_path):
    # A stand-in venv whose stamp is current, so bootstrap_env.sh installs nothing.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    (venv / ".tempo-installed-math").touch()
    env = {**os.environ, "TEMPO_VENV": str(venv)}
    env.pop("TEMPO_EXTRAS", None)
    result = subprocess.run(["bash", str(REPO / "eval" / "eval.sh"), "--help"], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    for option in ("--server", "--openai", "--openai-model", "--tokenizer", "--envs", "--games", "--vaults", "--math", "--problems",
                   "--k", "--samples", "--temperature", "--top-p", "--seed", "--device", "--max-new-tokens", "--out",
                   "--threads", "--no-progress"):
        assert option in result.stdout
    assert "[setup]" not in result.stdout  # nothing was installed
    bad = subprocess.run(["bash", str(REPO / "eval" / "eval.sh"), "no-such-run"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and "no-such-run" in bad.stderr and "Traceback" not in bad.stderr


# -- prepare_math: list answers (OlympiadBench) -------------------------------------------------------


def test_prepare_math_list_answer_is_its_first_element(tmp_path):
    source = tmp_path / "olympiad.jsonl"
    records = [{"question": "Find x.", "final_answer": ["$5$"]},
               {"question": "Find y.", "final_answer": []},
               {"question": "Find z.", "final_answer": ["\\frac{1}{2}", "0.5"]},
               {"question": "Find w.", "final_answer": 7}]
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "olympiad-converted.jsonl"
    result = subprocess.run([sys.executable, str(REPO / "data" / "prepare_math.py"), "--input", str(source), "--format",
                             "jsonl", "--prompt-key", "question", "--answer-key", "final_answer", "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "wrote 3 problems" in result.stderr and "skipped 1" in result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["label"] for line in lines] == ["$5$", "\\frac{1}{2}", "7"]
    from tempo_plugin.tasks.math import load_problems, math_score

    problems = load_problems(out)
    assert math_score("<answer>5</answer>", problems[0].label) == 1.0
    assert math_score("<answer>0.5</answer>", problems[1].label) == 1.0


def test_math_files_are_read_at_start_and_cut_to_problems(tmp_path):
    from eval.cli import parse_math

    path = write_math(tmp_path / "five.jsonl", ["1", "2", "3", "4", "5"])
    (bench,) = parse_math([f"five={path}"], problems=2)
    assert bench.name == "math:five" and [p.label for p in bench.problems] == ["1", "2"]
    assert bench.work(Settings(k=2, samples=3)) == 2 * (1 + 3)
    assert len(parse_math([f"five={path}"], problems=None)[0].problems) == 5
