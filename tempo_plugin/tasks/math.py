"""Math word problems with exact answers, scored by ``math-verify`` (an optional dependency).

Data: a JSONL file of ``{"prompt": ..., "label": ...}`` lines (default ``data/math/sample.jsonl`` of
the repository; ``data/prepare_math.py`` converts GSM8K / MATH / generic files into it). ``prompt`` is
either the chat messages written by ``tempo_plugin.tasks.jsonl_record`` (the last user message is the
problem text) or a plain problem string (the answer-format hint of ``user_prompt`` is appended);
``label`` is the exact answer (a number or LaTeX, e.g. ``\\frac{1}{2}``).

``generate(seed, count)`` returns ``count`` problems from the file in a seed-determined order (a fresh
permutation per pass when ``count`` exceeds the file).

Reward rules (``reward(response, label)``, 1.0 or 0.0, never raises on model output):

* the answer is the content of the LAST ``<answer>...</answer>``; without one, the content of the
  last ``\\boxed{...}``; neither -> 0.0;
* gold and answer are parsed with ``math_verify.parse`` (as inline LaTeX ``$...$`` unless already
  delimited by ``$``, ``\\(`` or ``\\[``; an answer that parses to nothing that way is parsed as is)
  and compared with ``math_verify.verify(gold, answer)``, so ``0.5``, ``1/2`` and ``\\frac{1}{2}`` agree;
* a label math-verify cannot parse is compared as a whitespace-stripped string.

Importing this module does not import ``math_verify``; ``reward`` imports it and, when missing,
raises ``ImportError(MISSING_MATH_VERIFY)`` (one line naming the install step). Its signal-based
timeouts only work in the main thread, so elsewhere they are disabled.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tempo_plugin.tasks import SYSTEM_PROMPT, Problem, chat_messages, extract_answer

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PATH = REPO_ROOT / "data" / "math" / "sample.jsonl"
MISSING_MATH_VERIFY = ("math rewards need math-verify: pip install -e .[math] (the slime math recipes "
                       "have Ray install it for the job; check the job's runtime_env pip step)")
MAX_ANSWER_CHARS = 2000
"""Longer answers score 0.0 without being parsed."""

ANSWER_HINT = "Put only the final answer (a number or a LaTeX expression) in the answer tag."


def user_prompt(problem_text: str) -> str:
    """The user message of a math problem: its text and the answer-format hint."""
    return f"{problem_text.strip()}\n\n{ANSWER_HINT}"


def last_boxed(text: Any) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched, or None.

    Nested braces are matched and escaped braces (``\\{``, ``\\}``) are skipped; ``\\boxed 5`` (no
    braces) gives ``5``. An unbalanced last box gives None.
    """
    if not isinstance(text, str):
        return None
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    if i < len(text) and text[i] == " ":
        rest = text[i + 1 :].lstrip()
        token = rest.split("$")[0].split()[0] if rest.split() else ""
        return token or None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
        j += 1
    return None


def final_answer(response: Any) -> str | None:
    """The last ``<answer>`` content of ``response``, else its last ``\\boxed{}`` content, else None."""
    answer = extract_answer(response)
    if answer is None:
        answer = last_boxed(response)
    return answer


def _delimited(text: str) -> str:
    stripped = text.strip()
    if "$" in stripped or stripped.startswith(("\\(", "\\[")):
        return stripped
    return f"${stripped}$"


def _math_verify() -> tuple[Any, Any]:
    try:
        from math_verify import parse, verify
    except ImportError:
        raise ImportError(MISSING_MATH_VERIFY) from None
    return parse, verify


def math_score(response: Any, label: str) -> float:
    """1.0 if the final answer of ``response`` equals ``label`` mathematically, else 0.0."""
    parse, verify = _math_verify()
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        answer = final_answer(response)
        if not answer or len(answer) > MAX_ANSWER_CHARS:
            return 0.0
        label = str(label)
        gold = parse(_delimited(label), parsing_timeout=timeout)
        if not gold:
            return 1.0 if "".join(answer.split()) == "".join(label.split()) else 0.0
        predicted = parse(_delimited(answer), parsing_timeout=timeout)
        if not predicted:
            predicted = parse(answer, parsing_timeout=timeout)
        if not predicted:
            return 0.0
        return 1.0 if verify(gold, predicted, timeout_seconds=timeout) else 0.0
    except Exception:  # never raise on model output
        return 0.0


def load_problems(path: str | Path) -> list[Problem]:
    """The problems of a ``{"prompt", "label"}`` JSONL file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"math data file not found: {path} (write one with: python data/prepare_math.py --help)"
        )
    problems = []
    with path.open(encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                record = json.loads(line)
                prompt, label = record["prompt"], record["label"]
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise ValueError(f"{where}: expected a JSON object with 'prompt' and 'label' ({error!r})") from None
            if isinstance(prompt, list):
                users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
                if not users:
                    raise ValueError(f"{where}: prompt messages have no user message")
                text = users[-1]
            elif isinstance(prompt, str):
                text = user_prompt(prompt)
            else:
                raise ValueError(f"{where}: prompt must be a string or a list of chat messages")
            problems.append(Problem(prompt=text, label=str(label), meta={"source": str(path), "line": line_number}))
    if not problems:
        raise ValueError(f"math data file has no problems: {path}")
    return problems


@dataclass
class MathTask:
    """Math problems from a JSONL file (see the module docstring for data and reward rules)."""

    path: str | Path | None = None
    system_prompt: str = SYSTEM_PROMPT
    name: str = "math"
    problems: list[Problem] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path) if self.path is not None else DEFAULT_PATH
        self.problems = load_problems(self.path)

    def generate(self, seed: int, count: int) -> list[Problem]:
        """``count`` problems of the file, in an order fixed by ``seed`` (reshuffled on each pass)."""
        rng = random.Random(f"math:{seed}")
        out: list[Problem] = []
        while len(out) < count:
            order = list(range(len(self.problems)))
            rng.shuffle(order)
            out.extend(self.problems[i] for i in order[: count - len(out)])
        return out

    def reward(self, response: str, label: str) -> float:
        """1.0 for a mathematically equal final answer, else 0.0 (needs math-verify)."""
        return math_score(response, label)

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The chat prompt of ``problem`` (system instruction + user message)."""
        return chat_messages(problem.prompt, self.system_prompt)
