"""Single-turn reasoning tasks (Countdown, math, letters) for PPO / GRPO / TPPO training.

Every task exposes the same small interface:

* ``generate(seed, count) -> list[Problem]``: ``count`` problems, deterministic in ``seed``;
* ``reward(response, label) -> float``: 1.0 for a correct final answer, else 0.0 (never raises on
  model output);
* ``system_prompt``: the instruction text (``SYSTEM_PROMPT``, defined once here) asking the model to
  reason briefly and end with its final answer inside ``<answer>...</answer>``;
* ``messages(problem)``: the chat messages for one problem (``chat_messages``), the one format used by
  the JSONL files written for slime (``jsonl_record``) and by the embedded runtime.

``make_task(name, **options)`` builds a task from the registry ``TASKS``.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

SYSTEM_PROMPT = (
    "You are a careful problem solver. Think step by step, but keep your reasoning brief. "
    "End your reply with the final answer inside <answer>...</answer>, for example <answer>42</answer>."
)
"""The instruction shared by every task (the system message of each chat prompt)."""

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    """One single-turn problem.

    ``prompt`` is the user text (without the system instruction), ``label`` the string given to the
    task's ``reward`` (and written as slime's ``--label-key label``), ``meta`` task-specific extras
    (Countdown: numbers, target, a solution expression; math: source file and line; letters: the
    letters).
    """

    prompt: str
    label: str
    meta: dict = field(default_factory=dict, compare=False, hash=False)


@runtime_checkable
class Task(Protocol):
    """The interface every task implements (see the module docstring)."""

    name: str
    system_prompt: str

    def generate(self, seed: int, count: int) -> list[Problem]: ...

    def reward(self, response: str, label: str) -> float: ...

    def messages(self, problem: Problem) -> list[dict[str, str]]: ...


def extract_answer(response: Any) -> str | None:
    """The content of the LAST ``<answer>...</answer>`` in ``response`` (stripped), or None.

    Tags are matched case-insensitively; an unclosed trailing ``<answer>`` is ignored. Non-string
    input gives None.
    """
    if not isinstance(response, str):
        return None
    matches = _ANSWER_RE.findall(response)
    if not matches:
        return None
    return matches[-1].strip()


def chat_messages(user_prompt: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """The chat prompt of one problem: a system message (the instruction) then the user message.

    This is the format slime reads with ``--input-key prompt --apply-chat-template`` (a list of
    ``{"role", "content"}`` messages is passed to ``tokenizer.apply_chat_template`` as is) and the one
    the embedded runtime renders; an empty ``system_prompt`` omits the system message.
    """
    messages: list[dict[str, str]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": user_prompt})
    return messages


def jsonl_record(problem: Problem, system_prompt: str = SYSTEM_PROMPT) -> dict[str, Any]:
    """One JSONL line for slime: ``{"prompt": chat_messages(...), "label": problem.label}``."""
    return {"prompt": chat_messages(problem.prompt, system_prompt), "label": problem.label}


def write_jsonl(path: str | Path, task: Task, count: int, seed: int, progress: bool = True) -> int:
    """Write ``task.generate(seed, count)`` as slime JSONL lines (``jsonl_record``), creating parent
    directories; prints progress to stderr for 10,000 problems or more. Returns ``count``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    step = max(1, count // 20)
    with path.open("w", encoding="utf-8") as f:
        for i, problem in enumerate(task.generate(seed, count)):
            f.write(json.dumps(jsonl_record(problem, task.system_prompt)) + "\n")
            if progress and count >= 10000 and (i + 1) % step == 0:
                print(f"{task.name}: {i + 1}/{count} problems", file=sys.stderr, flush=True)
    return count


TASKS: dict[str, str] = {
    "countdown": "tempo_plugin.tasks.countdown:CountdownTask",
    "math": "tempo_plugin.tasks.math:MathTask",
    "letters": "tempo_plugin.tasks.letters:LettersTask",
}
"""Task name -> ``"module:Class"`` of its task class, imported on use (so that importing this package
imports no task module, and ``python -m tempo_plugin.tasks.countdown`` runs cleanly); options of
``make_task`` are the class's constructor arguments."""


def task_class(name: str) -> type:
    """The task class registered as ``name`` in ``TASKS``."""
    try:
        target = TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def make_task(name: str, **options: Any) -> Task:
    """Build the task ``name`` (a key of ``TASKS``) with constructor ``options``."""
    return task_class(name)(**options)


def __getattr__(name: str) -> Any:
    # Lazy exports: ``from tempo_plugin.tasks import CountdownTask, MathTask, LettersTask``.
    if name == "CountdownTask":
        return task_class("countdown")
    if name == "MathTask":
        return task_class("math")
    if name == "LettersTask":
        return task_class("letters")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SYSTEM_PROMPT",
    "TASKS",
    "CountdownTask",
    "LettersTask",
    "MathTask",
    "Problem",
    "Task",
    "chat_messages",
    "extract_answer",
    "jsonl_record",
    "write_jsonl",
    "make_task",
    "task_class",
]
