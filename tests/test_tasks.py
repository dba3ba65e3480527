"""Single-turn tasks: Countdown and math (generation, rewards, data CLIs, slime hooks)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.extras import needs_extra

from tempo_plugin.tasks import SYSTEM_PROMPT, TASKS, Problem, chat_messages, extract_answer, jsonl_record, make_task
from tempo_plugin.tasks.countdown import CountdownTask, evaluate_expression, make_label
from tempo_plugin.tasks.math import DEFAULT_PATH, MathTask, last_boxed

REPO = Path(__file__).resolve().parents[1]

HAVE_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None

needs_math_verify = needs_extra("math", "math_verify")

LABEL = make_label([25, 4, 7, 2], 107)  # 25 * 4 + 7 = 107


def answer(text: str) -> str:
    return f"Let me think.\n<answer>{text}</answer>"


# ---------------------------------------------------------------- registry and shared helpers


def test_registry_and_unknown_task():
    assert set(TASKS) == {"countdown", "math", "letters"}
    assert isinstance(make_task("countdown", min_numbers=3, max_numbers=3), CountdownTask)
    assert isinstance(make_task("math"), MathTask)
    assert type(make_task("letters")).__name__ == "LettersTask"
    with pytest.raises(ValueError, match="known tasks: countdown, letters, math"):
        make_task("chess")


def test_extract_answer_and_messages():
    assert extract_answer("<answer>1</answer> then <answer> 2 </answer>") == "2"
    assert extract_answer("<answer>1</answer> <answer>unclosed") == "1"
    assert extract_answer("no tag") is None
    assert extract_answer(None) is None
    assert chat_messages("hi") == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "hi"}]
    assert chat_messages("hi", "") == [{"role": "user", "content": "hi"}]
    assert "<answer>" in SYSTEM_PROMPT
    record = jsonl_record(Problem("q", "1"))
    assert record == {"prompt": chat_messages("q"), "label": "1"}


# ---------------------------------------------------------------- Countdown


def test_countdown_generation_deterministic_and_solvable():
    task = CountdownTask()
    first = task.generate(seed=3, count=200)
    assert first == task.generate(seed=3, count=200)
    assert [p.meta for p in first] == [p.meta for p in task.generate(3, 200)]
    assert task.generate(3, 50) == first[:50]  # problem i does not depend on count
    assert first != task.generate(4, 200)
    for problem in first:
        numbers, target = problem.meta["numbers"], problem.meta["target"]
        assert 3 <= len(numbers) <= 4 and all(1 <= n <= 99 for n in numbers)
        assert 1 <= target <= 999
        assert json.loads(problem.label) == {"numbers": numbers, "target": target}
        assert f"Using the numbers {numbers} create an equation that equals {target}." in problem.prompt
        assert task.reward(answer(problem.meta["solution"]), problem.label) == 1.0
    assert {len(p.meta["numbers"]) for p in first} == {3, 4}


def test_countdown_options():
    task = CountdownTask(min_numbers=3, max_numbers=3, max_number=9, max_target=50)
    for problem in task.generate(0, 50):
        assert len(problem.meta["numbers"]) == 3 and max(problem.meta["numbers"]) <= 9
        assert problem.meta["target"] <= 50
    with pytest.raises(ValueError):
        CountdownTask(min_numbers=1)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("25 * 4 + 7", 1.0),  # correct, 2 not used (using all is not required)
        ("(25 * 4) + 7", 1.0),
        ("7 + 4 * 25", 1.0),
        ("25 * 4 + 7 + 2 - 2", 0.0),  # 2 used twice
        ("25 * 4 + 2", 0.0),  # wrong value (102)
        ("25 * 4 + 7 * 1", 0.0),  # 1 not in the list
        ("100 + 7", 0.0),  # 100 not in the list
        ("25 * 4 + 4 + 3", 0.0),  # 4 reused, 3 not in the list
        ("25 * 4 + 7 = 107", 0.0),  # not an expression
        ("25 * 4 + 7.0", 0.0),  # decimals are not integers
        ("25 ** 2", 0.0),
        ("25 // 4", 0.0),
        ("__import__('os').system('touch /tmp/tempo_pwned')", 0.0),
        ("", 0.0),
        ("7 / (4 - 4)", 0.0),  # division by zero (and 4 reused)
    ],
)
def test_countdown_reward_cases(text, expected):
    assert CountdownTask().reward(answer(text), LABEL) == expected


def test_countdown_exact_fraction_division():
    # (7 / 2) * 2 = 7 exactly with fractions: valid although 7 / 2 is not an integer.
    label = make_label([7, 2, 2], 7)
    assert CountdownTask().reward(answer("(7 / 2) * 2"), label) == 1.0
    # 7 / 2 = 3.5 is not the target 3: no integer truncation.
    assert CountdownTask().reward(answer("7 / 2"), make_label([7, 2], 3)) == 0.0
    # 1/3 + 1/3 + 1/3 = 1 exactly (floating point would not give exactly 1 in general).
    assert CountdownTask().reward(answer("1/3 + 1/3 + 1/3"), make_label([1, 3, 1, 3, 1, 3], 1)) == 1.0


def test_countdown_multiplicity_and_unary_minus():
    label = make_label([5, 5, 3], 7)
    assert CountdownTask().reward(answer("5 / 5 + 3 + 3"), label) == 0.0  # 3 twice, listed once
    assert CountdownTask().reward(answer("5 + 5 - 3"), label) == 1.0  # 5 twice, listed twice
    assert CountdownTask().reward(answer("-3 + 5 + 5"), label) == 1.0


def test_countdown_malicious_content_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f"open('{marker}', 'w')",
        "(lambda: 1)()",
        "[x for x in ()]",
        "9" * 5000,
        "(" * 500 + "1" + ")" * 500,
        "(" * 100000,
    ]
    for payload in payloads:
        assert CountdownTask().reward(answer(payload), LABEL) == 0.0
    assert not marker.exists()
    assert evaluate_expression("__import__('os')") is None


def test_countdown_tags_and_garbage():
    task = CountdownTask()
    assert task.reward("25 * 4 + 7", LABEL) == 0.0  # missing tag
    assert task.reward("<answer>1 + 1</answer> ... <answer>25 * 4 + 7</answer>", LABEL) == 1.0  # last wins
    assert task.reward("<answer>25 * 4 + 7</answer> ... <answer>1 + 1</answer>", LABEL) == 0.0
    for garbage in ["<answer>２５ * ４ + ７</answer>", "<answer>\x00\udcff</answer>", "☃" * 100, None, 42, b"<answer>1</answer>"]:
        assert task.reward(garbage, LABEL) == 0.0
    assert task.reward(answer("25 * 4 + 7"), "not json") == 0.0
    assert task.reward(answer("25 * 4 + 7"), {"numbers": [25, 4, 7, 2], "target": 107}) == 1.0


def test_countdown_cli_writes_jsonl(tmp_path):
    out = tmp_path / "nested" / "dir" / "train.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "tempo_plugin.tasks.countdown", "--out", str(out), "--count", "25", "--seed", "7"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "RuntimeWarning" not in result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 25
    task = CountdownTask()
    expected = task.generate(7, 25)
    for line, problem in zip(lines, expected):
        assert set(line) == {"prompt", "label"}
        assert line["prompt"] == task.messages(problem)
        assert line["prompt"][0]["role"] == "system" and line["prompt"][1]["role"] == "user"
        assert line["label"] == problem.label


# ---------------------------------------------------------------- math


def test_math_module_does_not_import_math_verify():
    code = "import sys, tempo_plugin.tasks.math, tempo_plugin.slime.rewards; print('math_verify' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_math_sample_loads_and_generates():
    task = MathTask()
    assert task.path == DEFAULT_PATH
    assert len(task.problems) >= 20
    assert all(p.label and "answer tag" in p.prompt for p in task.problems)
    picked = task.generate(seed=1, count=50)  # more than the file: a new pass is reshuffled
    assert len(picked) == 50
    assert picked == task.generate(1, 50)
    assert set(p.prompt for p in picked[: len(task.problems)]) == set(p.prompt for p in task.problems)


def test_math_missing_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError) as info:
        MathTask(missing)
    message = str(info.value)
    assert str(missing) in message and "data/prepare_math.py" in message and "\n" not in message


def test_math_plain_string_prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "What is 2 + 2?", "label": 4}) + "\n\n")
    (problem,) = MathTask(path).problems
    assert problem.prompt.startswith("What is 2 + 2?") and problem.label == "4"


def test_math_missing_math_verify(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # import math_verify -> ImportError
    with pytest.raises(ImportError, match=r"math rewards need math-verify: pip install -e \.\[math\]"):
        MathTask().reward(answer("1"), "1")


def test_last_boxed():
    assert last_boxed(r"so \boxed{3} and then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert last_boxed(r"\boxed{a^{b^{c}}}") == "a^{b^{c}}"
    assert last_boxed(r"\boxed 5$") == "5"
    assert last_boxed(r"\boxed{unbalanced") is None
    assert last_boxed("none") is None


@needs_math_verify
def test_math_sample_labels_verify():
    task = MathTask()
    for problem in task.problems:
        assert task.reward(answer(problem.label), problem.label) == 1.0, problem.label
        assert task.reward(answer("123456789"), problem.label) == 0.0, problem.label


@needs_math_verify
@pytest.mark.parametrize(
    "response, label, expected",
    [
        (answer("0.5"), r"\frac{1}{2}", 1.0),
        (answer("1/2"), r"\frac{1}{2}", 1.0),
        (answer(r"$\frac{1}{2}$"), r"\frac{1}{2}", 1.0),
        (answer("1/3"), r"\frac{1}{2}", 0.0),
        (answer("x = 5"), "5", 1.0),
        (answer("15"), "15", 1.0),
        (answer("16"), "15", 0.0),
        (r"The answer is \boxed{18}.", "18", 1.0),  # \boxed fallback
        (r"\boxed{17} ... <answer>18</answer>", "18", 1.0),  # the tag wins over a box
        (r"<answer>17</answer> then \boxed{18}", "18", 0.0),
        ("<answer>1</answer> <answer>7</answer>", "7", 1.0),  # last tag wins
        (answer(r"5\sqrt{2}"), r"5\sqrt{2}", 1.0),
        (answer(r"\sqrt{50}"), r"5\sqrt{2}", 1.0),
        (answer(r"2\sqrt{2}"), "2", 0.0),
        ("18", "18", 0.0),  # no tag, no box
        (answer("☃ garbage \x00"), "18", 0.0),
        (None, "18", 0.0),
    ],
)
def test_math_reward_cases(response, label, expected):
    assert MathTask().reward(response, label) == expected


@needs_math_verify
def test_math_reward_in_a_thread():
    import threading

    results = []
    thread = threading.Thread(target=lambda: results.append(MathTask().reward(answer("0.5"), r"\frac{1}{2}")))
    thread.start()
    thread.join()
    assert results == [1.0]


# ---------------------------------------------------------------- prepare_math


def run_prepare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "data" / "prepare_math.py"), *args], capture_output=True, text=True, timeout=120
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_prepare_gsm8k(tmp_path):
    src = tmp_path / "gsm8k.jsonl"
    records = [
        {"question": "Ann has 2 cats and buys 3. How many?", "answer": "2 + 3 = <<2+3=5>>5\n#### 5"},
        {"question": "Big number?", "answer": "work\n#### 1,200"},
        {"question": "No final answer", "answer": "just work"},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out" / "train.jsonl"
    result = run_prepare("--input", str(src), "--format", "gsm8k", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "wrote 2 problems" in result.stderr and "skipped 1" in result.stderr
    lines = read_jsonl(out)
    assert [line["label"] for line in lines] == ["5", "1200"]
    assert lines[0]["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert lines[0]["prompt"][1]["content"].startswith("Ann has 2 cats and buys 3. How many?")
    assert len(MathTask(out).problems) == 2


def test_prepare_math_json(tmp_path):
    src = tmp_path / "math.json"
    records = [
        {"problem": "Half?", "solution": r"It is $\boxed{\frac{1}{2}}$."},
        {"problem": "Set?", "solution": r"First \boxed{1}, finally $\boxed{\{1, \{2\}\}}$"},
        {"problem": "Unboxed", "solution": "The answer is 3."},
        {"problem": "Broken", "solution": r"\boxed{1"},
    ]
    src.write_text(json.dumps(records))
    out = tmp_path / "math.jsonl"
    result = run_prepare("--input", str(src), "--format", "math", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "wrote 2 problems" in result.stderr and "skipped 2" in result.stderr
    assert [line["label"] for line in read_jsonl(out)] == [r"\frac{1}{2}", r"\{1, \{2\}\}"]


def test_prepare_generic_jsonl_and_errors(tmp_path):
    src = tmp_path / "generic.jsonl"
    src.write_text(json.dumps({"q": "One?", "a": 1}) + "\n" + json.dumps({"q": "No answer"}) + "\n")
    out = tmp_path / "g.jsonl"
    result = run_prepare("--input", str(src), "--format", "jsonl", "--out", str(out), "--prompt-key", "q", "--answer-key", "a")
    assert result.returncode == 0, result.stderr
    assert "wrote 1 problems" in result.stderr and "skipped 1" in result.stderr
    assert [line["label"] for line in read_jsonl(out)] == ["1"]

    result = run_prepare("--input", str(tmp_path / "missing.jsonl"), "--format", "jsonl", "--out", str(out))
    assert result.returncode != 0 and "input file not found" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    result = run_prepare("--input", str(src), "--format", "jsonl", "--out", str(out))  # default keys prompt/label
    assert result.returncode != 0 and "key 'prompt' not in the first record" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- slime hooks


def test_slime_reward_hooks():
    from tempo_plugin.slime import rewards

    args = SimpleNamespace()
    good = SimpleNamespace(response=answer("25 * 4 + 7"), label=LABEL)
    bad = SimpleNamespace(response=answer("25 * 4"), label=LABEL)
    assert asyncio.run(rewards.countdown_reward(args, good)) == 1.0
    assert asyncio.run(rewards.countdown_reward(args, bad)) == 0.0
    assert asyncio.run(rewards.countdown_reward(args, [good, bad])) == [1.0, 0.0]


@needs_math_verify
def test_slime_math_reward_hook():
    from tempo_plugin.slime import rewards

    sample = SimpleNamespace(response=r"so \boxed{\frac{5}{6}}", label=r"\frac{5}{6}")
    assert asyncio.run(rewards.math_reward(SimpleNamespace(), sample)) == 1.0
    sample = SimpleNamespace(response=answer("5/7"), label=r"\frac{5}{6}")
    assert asyncio.run(rewards.math_reward(SimpleNamespace(), sample)) == 0.0
