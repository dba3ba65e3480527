"""The letters task (tempo_plugin/tasks/letters.py) and its tiny-model bootstrap (task_bootstrap.py)."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tempo_plugin.tiny.task_bootstrap import (
    LETTERS_MALFORMED,
    LETTERS_SLIP,
    TINY_TASKS,
    letters_response,
    task_corpus,
    tiny_task,
)
from tempo_plugin.tasks import LettersTask, make_task
from tempo_plugin.tasks.letters import ALPHABET

REPO = Path(__file__).resolve().parents[1]
LABEL = "d e f g"


# ---------------------------------------------------------------- verifier


@pytest.mark.parametrize("response, expected", [
    ("<answer>d e f g</answer>", 1.0),  # exact
    ("<answer> d e f g</answer>", 1.0),  # the tiny model's leading space
    ("Sure.\n<answer>  d e\nf   g </answer>", 1.0),  # any whitespace between letters
    ("<answer>x</answer> then <answer>d e f g</answer>", 1.0),  # the last answer counts
    ("<ANSWER>d e f g</ANSWER>", 1.0),  # tags are case-insensitive (extract_answer)
    ("<answer>d e F g</answer>", 0.0),  # a capital: wrong at step 3
    ("<answer>d e x g</answer>", 0.0),  # a wrong letter at step 3
    ("<answer>d e g f</answer>", 0.0),  # out of order
    ("<answer>d e f</answer>", 0.0),  # a letter missing
    ("<answer>d e f g h</answer>", 0.0),  # an extra letter
    ("<answer>d e f g g</answer>", 0.0),  # a repeated letter
    ("<answer>defg</answer>", 0.0),  # not separated
    ("<answer>d, e, f, g</answer>", 0.0),  # commas are not whitespace
    ("d e f g", 0.0),  # no tag
    ("<answer>d e f g", 0.0),  # unclosed tag
    ("d e f g</answer>", 0.0),  # no opening tag (the malformed demonstrations)
    ("<answer></answer>", 0.0),
    ("", 0.0),
])
def test_reward_by_hand(response, expected):
    assert LettersTask().reward(response, LABEL) == expected


@pytest.mark.parametrize("garbage", [None, 7, 3.5, b"<answer>d e f g</answer>", ["<answer>d e f g</answer>"], {"a": 1}])
def test_reward_never_raises_on_garbage(garbage):
    task = LettersTask()
    assert task.reward(garbage, LABEL) == 0.0
    assert task.reward("<answer>d e f g</answer>", garbage) == 0.0  # a label that is not a string


def test_overlong_answer_scores_zero_without_splitting():
    assert LettersTask().reward("<answer>" + "d " * 600 + "</answer>", LABEL) == 0.0  # 1200 chars > 1000


# ---------------------------------------------------------------- generation


def test_generation_deterministic_and_well_formed():
    task = LettersTask()
    problems = task.generate(5, 300)
    assert problems == task.generate(5, 300)
    assert task.generate(5, 10) == problems[:10]  # problem i depends on (seed, i) only
    assert task.generate(6, 300) != problems
    lengths = set()
    for p in problems:
        letters = p.label.split()
        lengths.add(len(letters))
        start = ALPHABET.index(letters[0])
        assert letters == list(ALPHABET[start:start + len(letters)])  # a consecutive run, lowercase
        assert p.meta["letters"] == letters
        assert p.prompt == f"Write the letters from {letters[0]} to {letters[-1]} in lowercase, separated by spaces."
        assert task.reward(f"<answer>{p.label}</answer>", p.label) == 1.0
    assert lengths == {4, 5, 6, 7}


def test_number_of_distinct_problems():
    # a run of L letters starts at one of 27 - L letters: 23 + 22 + 21 + 20 = 86 for L = 4..7
    labels = {p.label for p in LettersTask().generate(0, 5000)}
    assert len(labels) == 86
    assert len({p.label for p in LettersTask(min_length=2, max_length=2).generate(0, 2000)}) == 25  # ab .. yz


def test_options_and_messages():
    with pytest.raises(ValueError, match="min_length"):
        LettersTask(min_length=5, max_length=4)
    with pytest.raises(ValueError, match="min_length"):
        LettersTask(min_length=2, max_length=27)
    task = make_task("letters", min_length=3, max_length=3)
    assert isinstance(task, LettersTask) and {len(p.label.split()) for p in task.generate(0, 50)} == {3}
    messages = task.messages(task.generate(0, 1)[0])
    assert [m["role"] for m in messages] == ["system", "user"] and "<answer>" in messages[0]["content"]


def test_cli_writes_jsonl(tmp_path):
    out = tmp_path / "nested" / "train.jsonl"
    result = subprocess.run([sys.executable, "-m", "tempo_plugin.tasks.letters", "--out", str(out), "--count", "12", "--seed", "3"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    task = LettersTask()
    assert [line["label"] for line in lines] == [p.label for p in task.generate(3, 12)]
    assert lines[0]["prompt"] == task.messages(task.generate(3, 1)[0])


# ---------------------------------------------------------------- demonstrations (tiny bootstrap)


def test_demonstration_structure():
    rng = random.Random(0)
    letters = list("defg")
    for _ in range(500):
        text = letters_response(letters, rng)
        body = text.removeprefix("<answer>").removesuffix("</answer>")
        assert text.endswith("</answer>") and body.startswith(" ")  # a leading space, always closed
        steps = body.split()
        assert [s.lower() for s in steps] == letters  # only the case can slip
        capitals = [s.isupper() for s in steps]
        assert capitals == sorted(capitals)  # once in capitals, it stays there: d e F G, never d E f g


def test_demonstration_noise_rates():
    # P(a demonstration scores 1) = (1 - slip)^L (1 - malformed) = 0.9^4 * 0.95 = 0.6561 * 0.95 = 0.6233 for L = 4;
    # P(no opening tag) = 0.05; P(first letter in capitals) = 0.1 (among the well-formed ones)
    assert (LETTERS_SLIP, LETTERS_MALFORMED) == (0.1, 0.05)
    rng = random.Random(1)
    texts = [letters_response(list("defg"), rng) for _ in range(20000)]
    task = LettersTask()
    right = sum(task.reward(t, LABEL) for t in texts) / len(texts)
    no_tag = sum(not t.startswith("<answer>") for t in texts) / len(texts)
    first_capital = sum(t.removeprefix("<answer>").split()[0].isupper() for t in texts) / len(texts)
    # binomial standard errors over 20000 draws: <= 0.0035, so 0.015 is over 4 of them
    assert right == pytest.approx(0.6233, abs=0.015)
    assert no_tag == pytest.approx(0.05, abs=0.015)
    assert first_capital == pytest.approx(0.1, abs=0.015)


def test_letters_are_single_tokens_shared_by_prompt_and_answer():
    from tempo_plugin.tiny.task_bootstrap import ANSWER_TAGS
    from tempo_plugin.tiny.model import build_tokenizer

    entry = tiny_task("letters")
    task = entry.make()
    tokenizer = build_tokenizer(task_corpus(task, entry.demo, count=400), tags=ANSWER_TAGS)
    answer = tokenizer.encode("<answer> d e f g</answer>")
    assert [tokenizer.decode([i]) for i in answer] == ["<answer>", " d", " e", " f", " g", "</answer>"]
    prompt = tokenizer.encode(task.messages(task.generate(0, 1)[0])[1]["content"])
    first = task.generate(0, 1)[0].label.split()[0]
    assert tokenizer.encode(" " + first)[0] in prompt  # the answer's first letter is a token of the prompt
    assert len(tokenizer.encode(" G")) == 1  # a capital slip is one token too


def test_tiny_registry_and_errors():
    assert set(TINY_TASKS) == {"countdown", "letters"}
    assert isinstance(TINY_TASKS["letters"].make(), LettersTask)
    with pytest.raises(ValueError, match="countdown, letters only"):
        tiny_task("math")


def test_tiny_bootstrap_accepts_letters(tmp_path, one_thread):
    import torch

    from tempo_plugin.embedded.model import build_bootstrapped_tiny, tiny_cache_dir
    from tempo_plugin.config import ConfigError, TempoConfig
    from tempo_plugin.embedded.single_turn import make_task as single_turn_task

    cfg = TempoConfig(advantage_estimator="tppo", task="letters", bootstrap_steps=2, cache_dir=str(tmp_path))
    other = TempoConfig(advantage_estimator="tppo", task="countdown", bootstrap_steps=2, cache_dir=str(tmp_path))
    assert tiny_cache_dir(cfg) != tiny_cache_dir(other)  # one cached model per task
    model, tokenizer = build_bootstrapped_tiny(cfg, torch.device("cpu"))
    assert (tiny_cache_dir(cfg) / "config.json").is_file()
    assert len(tokenizer.encode(" q")) == 1 and model.config.vocab_size == len(tokenizer)
    assert isinstance(single_turn_task(cfg), LettersTask)  # the tiny variant the model was bootstrapped on
    with pytest.raises(ConfigError, match="countdown, letters only"):
        build_bootstrapped_tiny(TempoConfig(advantage_estimator="tppo", task="math", cache_dir=str(tmp_path)), torch.device("cpu"))


def test_slime_reward_hook():
    import asyncio
    from types import SimpleNamespace

    from tempo_plugin.slime.rewards import letters_reward

    good = SimpleNamespace(response="<answer> d e f g</answer>", label=LABEL)
    bad = SimpleNamespace(response="<answer> d e F G</answer>", label=LABEL)
    assert asyncio.run(letters_reward(None, good)) == 1.0
    assert asyncio.run(letters_reward(None, bad)) == 0.0
    assert asyncio.run(letters_reward(None, [good, bad, SimpleNamespace(response=None, label=LABEL)])) == [1.0, 0.0, 0.0]
