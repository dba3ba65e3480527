"""Recall: repeat a short list of digits, in order, one digit at a time.

The answer is built step by step and each step is right or wrong where everyone can see it: once a
wrong digit is written the response can no longer earn the reward, and a reader of the prefix
(a small token-level critic, say) can tell. This is the single-turn task on which the tiny model's
TPPO critic has something to track as the response unfolds (on Countdown it would have to check
arithmetic).

Generation (deterministic in the seed; problem ``i`` of ``generate(seed, n)`` depends only on
``seed``, ``i`` and the options): a length ``L`` uniform in ``min_length..max_length``, then ``L``
symbols drawn uniformly, independently, from ``alphabet`` (repeats allowed).

Reward rules (``reward(response, label)``, 1.0 or 0.0, never raises on model output):

* the LAST ``<answer>...</answer>`` of the response is the answer; no (closed) tag -> 0.0;
* its content, split on whitespace, must equal the label's symbols exactly: same symbols, same order,
  same count. ``<answer>4 7 1</answer>`` answers ``4 7 1``; ``471``, ``4, 7, 1``, ``4 7`` and
  ``4 7 1 1`` do not;
* non-string responses, and labels that are not strings, score 0.0.

The label is the symbols joined by single spaces, e.g. ``"4 7 1 9"``.

CLI (slime data; ``--input-key prompt --label-key label --apply-chat-template``)::

    python -m tempo_plugin.tasks.recall --out data/recall/train.jsonl --count 20000 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempo_plugin.tasks import SYSTEM_PROMPT, Problem, chat_messages, extract_answer, jsonl_record

DIGITS = "0123456789"
MAX_ANSWER_CHARS = 1000
"""Longer answer contents score 0.0 without being split."""


def score(response: Any, symbols: list[str]) -> float:
    """1.0 if the last ``<answer>`` of ``response`` lists exactly ``symbols`` (whitespace-separated)."""
    try:
        answer = extract_answer(response)
        if answer is None or len(answer) > MAX_ANSWER_CHARS:
            return 0.0
        return 1.0 if answer.split() == list(symbols) else 0.0
    except Exception:  # never raise on model output
        return 0.0


def user_prompt(symbols: list[str]) -> str:
    """The user message of a recall problem."""
    return (
        f"Repeat these digits in the same order, separated by spaces: {' '.join(symbols)}. "
        "Put only the digits in the answer tag."
    )


@dataclass
class RecallTask:
    """Recall problems (see the module docstring for generation and reward rules)."""

    min_length: int = 4
    max_length: int = 7
    alphabet: str = DIGITS
    distinct: bool = True
    system_prompt: str = SYSTEM_PROMPT
    name: str = "recall"

    def __post_init__(self) -> None:
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(f"need 1 <= min_length <= max_length, got {self.min_length}, {self.max_length}")
        if len(set(self.alphabet)) < 2 or any(c.isspace() for c in self.alphabet):
            raise ValueError(f"the alphabet needs at least 2 distinct non-space symbols, got {self.alphabet!r}")

    def problem(self, seed: int, index: int) -> Problem:
        """Problem ``index`` of seed ``seed`` (its own generator, so it does not depend on ``count``)."""
        rng = random.Random(f"recall:{seed}:{index}")
        length = rng.randint(self.min_length, self.max_length)
        if self.distinct:
            symbols = rng.sample(self.alphabet, length)
        else:
            symbols = [rng.choice(self.alphabet) for _ in range(length)]
        return Problem(prompt=user_prompt(symbols), label=" ".join(symbols), meta={"symbols": symbols})

    def generate(self, seed: int, count: int) -> list[Problem]:
        """``count`` problems; problem ``i`` depends only on ``(seed, i)`` and the options."""
        return [self.problem(seed, i) for i in range(count)]

    def reward(self, response: str, label: str) -> float:
        """1.0 if the response's last answer repeats the labelled symbols exactly, else 0.0 (never raises)."""
        if not isinstance(label, str):
            return 0.0
        return score(response, label.split())

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The chat prompt of ``problem`` (system instruction + user message)."""
        return chat_messages(problem.prompt, self.system_prompt)


def write_jsonl(path: str | Path, count: int, seed: int, task: RecallTask | None = None) -> int:
    """Write ``count`` problems as slime JSONL lines ``{"prompt": messages, "label": ...}``; returns count."""
    task = task or RecallTask()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for i in range(count):
            f.write(json.dumps(jsonl_record(task.problem(seed, i), task.system_prompt)) + "\n")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write recall problems as slime JSONL ({prompt, label}).")
    parser.add_argument("--out", required=True, help="output .jsonl path (parent directories are created)")
    parser.add_argument("--count", type=int, required=True, help="number of problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-length", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=7)
    args = parser.parse_args(argv)
    if args.count < 0:
        parser.error("--count must be >= 0")
    try:
        task = RecallTask(args.min_length, args.max_length)
    except ValueError as error:
        parser.error(str(error))
    write_jsonl(args.out, args.count, args.seed, task)
    print(f"recall: wrote {args.count} problems to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
