"""Countdown: combine given numbers with + - * / into an expression equal to a target.

Generation (deterministic in the seed; problem ``i`` of ``generate(seed, n)`` depends only on
``seed`` and ``i``): draw ``min_numbers..max_numbers`` integers in ``1..max_number``, combine a random
subset of at least two of them, pairwise in random order, with random operations that keep every
intermediate value a positive integer (``-`` only when the result is positive, ``/`` only when it is
exact); the result is the target if it lies in ``1..max_target`` (else draw again). A solution thus
always exists; it is kept in ``meta["solution"]``.

Reward rules (``reward(response, label)``, 1.0 or 0.0, never raises on model output):

* the LAST ``<answer>...</answer>`` of the response is the answer; no tag -> 0.0;
* its content must be an arithmetic expression of non-negative integer literals, ``+ - * /``
  (binary, and unary minus/plus) and parentheses only; anything else (names, calls, ``**``, ``=``,
  decimals, text) -> 0.0. It is parsed with :mod:`ast`, never evaluated by Python;
* every number used must come from the list, each list entry at most once (multiplicity counts);
  using all numbers is not required;
* it is evaluated with :class:`fractions.Fraction`, so division is exact (``(7 / 2) * 2`` is 7);
  division by zero -> 0.0;
* the value must equal the target exactly.

The label is the JSON string ``{"numbers": [...], "target": T}``.

CLI (slime data; ``--input-key prompt --label-key label --apply-chat-template``)::

    python -m tempo_plugin.tasks.countdown --out data/countdown/train.jsonl --count 100000 --seed 0
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from tempo_plugin.tasks import SYSTEM_PROMPT, Problem, chat_messages, extract_answer, write_jsonl

MAX_ANSWER_CHARS = 1000
"""Longer answer contents score 0.0 without being parsed."""

_ALLOWED_CHARS = re.compile(r"[0-9+\-*/()\s]+")
_BINARY_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class _Reject(Exception):
    """The answer is not a valid Countdown expression."""


def _evaluate(node: ast.AST, used: list[int]) -> Fraction:
    """Value of an allowed expression tree (Fraction arithmetic); records integer literals in ``used``."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, used)
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) is not int or value < 0:
            raise _Reject
        used.append(value)
        return Fraction(value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left = _evaluate(node.left, used)
        right = _evaluate(node.right, used)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise _Reject
        return left / right
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, used)
        return -value if isinstance(node.op, ast.USub) else value
    raise _Reject


def evaluate_expression(expression: str) -> tuple[Fraction, list[int]] | None:
    """``(exact value, integer literals used)`` of a Countdown expression, or None if it is not one.

    Only digits, ``+ - * /``, parentheses and whitespace are accepted, and the :mod:`ast` tree is
    walked by hand: nothing is ever executed.
    """
    if not isinstance(expression, str) or len(expression) > MAX_ANSWER_CHARS:
        return None
    if not _ALLOWED_CHARS.fullmatch(expression) or "**" in expression or "//" in expression:
        return None
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        used: list[int] = []
        value = _evaluate(tree, used)
    except (_Reject, SyntaxError, ValueError, RecursionError, MemoryError, ZeroDivisionError):
        return None
    return value, used


def parse_label(label: Any) -> tuple[list[int], int]:
    """``(numbers, target)`` from a label (the JSON string, or an already decoded dict)."""
    data = json.loads(label) if isinstance(label, (str, bytes)) else label
    numbers = [int(n) for n in data["numbers"]]
    return numbers, int(data["target"])


def make_label(numbers: list[int], target: int) -> str:
    """The label string ``{"numbers": [...], "target": T}``."""
    return json.dumps({"numbers": list(numbers), "target": int(target)})


def score(response: Any, numbers: list[int], target: int) -> float:
    """1.0 if the last ``<answer>`` of ``response`` is a valid expression worth ``target``, else 0.0."""
    try:
        answer = extract_answer(response)
        if answer is None:
            return 0.0
        result = evaluate_expression(answer)
        if result is None:
            return 0.0
        value, used = result
        if not used:
            return 0.0
        available = Counter(numbers)
        if any(count > available[n] for n, count in Counter(used).items()):
            return 0.0
        return 1.0 if value == target else 0.0
    except Exception:  # never raise on model output
        return 0.0


def user_prompt(numbers: list[int], target: int) -> str:
    """The user message of a Countdown problem."""
    return (
        f"Using the numbers {list(numbers)} create an equation that equals {target}. "
        "You may use + - * / and parentheses, each number at most once. "
        "Put only the expression in the answer tag, for example <answer>(1 + 2) * 3</answer>."
    )


@dataclass
class CountdownTask:
    """Countdown problems (see the module docstring for generation and reward rules)."""

    min_numbers: int = 3
    max_numbers: int = 4
    max_number: int = 99
    max_target: int = 999
    system_prompt: str = SYSTEM_PROMPT
    name: str = "countdown"

    def __post_init__(self) -> None:
        if not 2 <= self.min_numbers <= self.max_numbers:
            raise ValueError(f"need 2 <= min_numbers <= max_numbers, got {self.min_numbers}, {self.max_numbers}")
        if self.max_number < 1 or self.max_target < 1:
            raise ValueError(f"max_number and max_target must be >= 1, got {self.max_number}, {self.max_target}")

    def make_problem(self, rng: random.Random) -> Problem:
        """One solvable problem drawn with ``rng``."""
        while True:
            numbers = [rng.randint(1, self.max_number) for _ in range(rng.randint(self.min_numbers, self.max_numbers))]
            pool = [(n, str(n)) for n in rng.sample(numbers, rng.randint(2, len(numbers)))]
            while len(pool) > 1:
                (a, ea), (b, eb) = pool.pop(rng.randrange(len(pool))), pool.pop(rng.randrange(len(pool)))
                options = [("+", a + b), ("*", a * b)]
                if a > b:
                    options.append(("-", a - b))
                if a % b == 0:
                    options.append(("/", a // b))
                op, value = rng.choice(options)
                pool.append((value, f"({ea} {op} {eb})"))
            target, expression = pool[0]
            if 1 <= target <= self.max_target:
                solution = expression[1:-1]
                return Problem(
                    prompt=user_prompt(numbers, target),
                    label=make_label(numbers, target),
                    meta={"numbers": numbers, "target": target, "solution": solution},
                )

    def problem(self, seed: int, index: int) -> Problem:
        """Problem ``index`` of seed ``seed`` (its own generator, so it does not depend on ``count``)."""
        return self.make_problem(random.Random(f"countdown:{seed}:{index}"))

    def generate(self, seed: int, count: int) -> list[Problem]:
        """``count`` problems; problem ``i`` depends only on ``(seed, i)`` and the options."""
        return [self.problem(seed, i) for i in range(count)]

    def reward(self, response: str, label: str) -> float:
        """1.0 if the response's last answer solves the labelled problem, else 0.0 (never raises)."""
        try:
            numbers, target = parse_label(label)
        except Exception:
            return 0.0
        return score(response, numbers, target)

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The chat prompt of ``problem`` (system instruction + user message)."""
        return chat_messages(problem.prompt, self.system_prompt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write Countdown problems as slime JSONL ({prompt, label}).")
    parser.add_argument("--out", required=True, help="output .jsonl path (parent directories are created)")
    parser.add_argument("--count", type=int, required=True, help="number of problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-numbers", type=int, default=3)
    parser.add_argument("--max-numbers", type=int, default=4)
    parser.add_argument("--max-number", type=int, default=99)
    parser.add_argument("--max-target", type=int, default=999)
    args = parser.parse_args(argv)
    if args.count < 0:
        parser.error("--count must be >= 0")
    try:
        task = CountdownTask(args.min_numbers, args.max_numbers, args.max_number, args.max_target)
    except ValueError as error:
        parser.error(str(error))
    write_jsonl(args.out, task, args.count, args.seed)
    print(f"countdown: wrote {args.count} problems to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
