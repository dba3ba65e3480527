"""Letters: write a run of the alphabet in lowercase, one letter at a time.

``Write the letters from d to j in lowercase, separated by spaces.`` is answered by
``<answer>d e f g h i j</answer>``. The answer is built step by step and each step is right or wrong
where it stands: once a wrong letter (a capital, a skipped or a foreign letter) is written the response
can no longer earn the reward, and a reader of the prefix can see it. This is the single-turn task on
which the built-in tiny model's token-level critic has something to track as the response unfolds.

Generation (deterministic in the seed; problem ``i`` of ``generate(seed, n)`` depends only on
``seed``, ``i`` and the options): a length ``L`` uniform in ``min_length..max_length``, then a first
letter uniform among those that leave room for ``L`` letters before ``z``. With the defaults (L from
4 to 7) there are 23 + 22 + 21 + 20 = 86 distinct problems, so held-out problems are new draws rather
than unseen problems.

Reward rules (``reward(response, label)``, 1.0 or 0.0, never raises on model output):

* the LAST ``<answer>...</answer>`` of the response is the answer; no (closed) tag -> 0.0;
* its content, split on whitespace, must equal the label's letters exactly: same letters, same order,
  same count, same case. For ``d e f``: ``<answer>d e f</answer>`` and ``<answer> d  e f </answer>``
  score 1.0; ``def``, ``d, e, f``, ``d e``, ``d e f g``, ``d E f`` score 0.0;
* a response or label that is not a string scores 0.0.

The label is the letters joined by single spaces, e.g. ``"d e f g"``.

CLI (slime data; ``--input-key prompt --label-key label --apply-chat-template``)::

    python -m tempo_plugin.tasks.letters --out data/letters/train.jsonl --count 20000 --seed 0
"""

from __future__ import annotations

import argparse
import random
import string
import sys
from dataclasses import dataclass
from typing import Any

from tempo_plugin.tasks import SYSTEM_PROMPT, Problem, chat_messages, extract_answer, write_jsonl

ALPHABET = string.ascii_lowercase
MAX_ANSWER_CHARS = 1000
"""Longer answer contents score 0.0 without being split."""


def score(response: Any, letters: list[str]) -> float:
    """1.0 if the last ``<answer>`` of ``response`` lists exactly ``letters`` (whitespace-separated)."""
    try:
        answer = extract_answer(response)
        if answer is None or len(answer) > MAX_ANSWER_CHARS:
            return 0.0
        return 1.0 if answer.split() == list(letters) else 0.0
    except Exception:  # never raise on model output
        return 0.0


def user_prompt(first: str, last: str) -> str:
    """The user message of a letters problem."""
    return f"Write the letters from {first} to {last} in lowercase, separated by spaces."


@dataclass
class LettersTask:
    """Letters problems (see the module docstring for generation and reward rules)."""

    min_length: int = 4
    max_length: int = 7
    system_prompt: str = SYSTEM_PROMPT
    name: str = "letters"

    def __post_init__(self) -> None:
        if not 2 <= self.min_length <= self.max_length <= len(ALPHABET):
            raise ValueError(f"need 2 <= min_length <= max_length <= 26, got {self.min_length}, {self.max_length}")

    def problem(self, seed: int, index: int) -> Problem:
        """Problem ``index`` of seed ``seed`` (its own generator, so it does not depend on ``count``)."""
        rng = random.Random(f"letters:{seed}:{index}")
        length = rng.randint(self.min_length, self.max_length)
        start = rng.randint(0, len(ALPHABET) - length)
        letters = list(ALPHABET[start:start + length])
        return Problem(prompt=user_prompt(letters[0], letters[-1]), label=" ".join(letters), meta={"letters": letters})

    def generate(self, seed: int, count: int) -> list[Problem]:
        """``count`` problems; problem ``i`` depends only on ``(seed, i)`` and the options."""
        return [self.problem(seed, i) for i in range(count)]

    def reward(self, response: str, label: str) -> float:
        """1.0 if the response's last answer writes exactly the labelled letters, else 0.0 (never raises)."""
        if not isinstance(label, str):
            return 0.0
        return score(response, label.split())

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The chat prompt of ``problem`` (system instruction + user message)."""
        return chat_messages(problem.prompt, self.system_prompt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write letters problems as slime JSONL ({prompt, label}).")
    parser.add_argument("--out", required=True, help="output .jsonl path (parent directories are created)")
    parser.add_argument("--count", type=int, required=True, help="number of problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-length", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=7)
    args = parser.parse_args(argv)
    if args.count < 0:
        parser.error("--count must be >= 0")
    try:
        task = LettersTask(args.min_length, args.max_length)
    except ValueError as error:
        parser.error(str(error))
    write_jsonl(args.out, task, args.count, args.seed)
    print(f"letters: wrote {args.count} problems to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
