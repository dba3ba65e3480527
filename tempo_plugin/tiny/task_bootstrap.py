"""Supervised bootstrap of the tiny model for single-turn tasks, like the vault's.

Each task the built-in tiny model supports has an entry in ``TINY_TASKS``: the small variant of the
task it trains on, the noisy demonstration answer to a problem, and a version (part of the model
cache key; bump it when that task's variant or demonstrations change). The demonstrations answer
``<answer>...</answer>`` directly (no reasoning), and they are noisy on purpose, so the policy starts
with a success rate well inside (0, 1), which is what RL has to raise and a critic can learn to
predict.

**countdown** (three numbers from 1..4, targets up to 16):

- SOLVED (80%): the problem's own solution expression;
- otherwise a random two-number expression from the problem's numbers (sometimes right by chance);
- MALFORMED (10% of all): an answer without its closing tag, which the verifier scores 0.

**letters** (runs of 4 to 7 letters, ``tasks/letters.py``): the letters in order, but before each
letter the demonstration slips with probability LETTERS_SLIP into capitals, and stays there for the
rest of the answer (``d e F G``): the step that goes wrong is a token a small critic recognises on
sight. LETTERS_MALFORMED of the answers lack their opening tag, also visible at the first token. A
demonstration is right with probability ``(1 - LETTERS_SLIP)^L (1 - LETTERS_MALFORMED)``: 0.62 for
L = 4, 0.45 for L = 7. Answers start with a space (``<answer> d e f``) so that every letter is the
same token as in the prompt: the first letter is then copied as it stands rather than mapped from
`` d`` to ``d``. Wrong letters are mistakes a small critic cannot see (it would have to check the
letter against the prompt or the previous one), so the bootstrap should leave few: with 150 steps the
base policy wrote a wrong first letter in 7% of its answers without the space and 2% with it; with
the 300 steps of ``scripts/tiny/tppo.sh``, wrong letters of any kind in under 1%.

Demonstrations use problems from a seed disjoint from training and evaluation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from tempo_plugin.tiny.bootstrap import Demo, backward_role_losses, supervised_steps
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.tasks import Problem
from tempo_plugin.tasks.countdown import CountdownTask
from tempo_plugin.tasks.letters import LettersTask

DEMO_SEED = 3_000_000_000
SOLVED = 0.8
MALFORMED = 0.1
LETTERS_SLIP = 0.1
LETTERS_MALFORMED = 0.05
ANSWER_TAGS = ["<answer>", "</answer>"]


def tiny_countdown() -> CountdownTask:
    """The Countdown variant the built-in tiny model trains on."""
    return CountdownTask(min_numbers=3, max_numbers=3, max_number=4, max_target=16)


def tiny_letters() -> LettersTask:
    """The letters variant the built-in tiny model trains on (the task's defaults)."""
    return LettersTask(min_length=4, max_length=7)


def demo_response(numbers: list[int], solution: str, rng: random.Random) -> str:
    """A noisy Countdown demonstration (see the module docstring)."""
    if rng.random() < SOLVED:
        expression = solution
    else:
        a, b = rng.sample(numbers, 2)
        expression = f"{a} {rng.choice('+-*/')} {b}"
    if rng.random() < MALFORMED:
        return f"<answer>{expression}"
    return f"<answer>{expression}</answer>"


def countdown_demo(problem: Problem, rng: random.Random) -> str:
    return demo_response(problem.meta["numbers"], problem.meta["solution"], rng)


def letters_response(letters: list[str], rng: random.Random) -> str:
    """A noisy letters demonstration (see the module docstring)."""
    steps, slipped = [], False
    for letter in letters:
        slipped = slipped or rng.random() < LETTERS_SLIP
        steps.append(letter.upper() if slipped else letter)
    body = "".join(" " + step for step in steps)
    if rng.random() < LETTERS_MALFORMED:
        return f"{body}</answer>"
    return f"<answer>{body}</answer>"


def letters_demo(problem: Problem, rng: random.Random) -> str:
    return letters_response(problem.meta["letters"], rng)


@dataclass(frozen=True)
class TinyTask:
    """What the tiny model's bootstrap needs of one task."""

    make: Callable[[], Any]
    """The task variant the tiny model trains on (what the single-turn loop then uses)."""
    demo: Callable[[Problem, random.Random], str]
    """A noisy demonstration answer to a problem of that variant."""
    version: int
    """Part of the tiny model's cache key: bump when ``make`` or ``demo`` change."""


TINY_TASKS: dict[str, TinyTask] = {
    "countdown": TinyTask(tiny_countdown, countdown_demo, version=1),
    "letters": TinyTask(tiny_letters, letters_demo, version=1),
}


def tiny_task(name: str) -> TinyTask:
    """The tiny-model entry of task ``name``; ValueError when the tiny model does not support it."""
    try:
        return TINY_TASKS[name]
    except KeyError:
        raise ValueError(f"the built-in tiny model is bootstrapped on {', '.join(sorted(TINY_TASKS))} only, "
                         f"not {name!r}") from None


def task_corpus(task: Any, demo: Callable[[Problem, random.Random], str], count: int = 2000) -> list[str]:
    """Texts the tiny tokenizer is trained on: rendered prompts and demonstration answers."""
    rng = random.Random(1)
    texts = []
    for problem in task.generate(DEMO_SEED + 1, count):
        texts.append("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in task.messages(problem)))
        texts.append(demo(problem, rng) + "<|im_end|>\n")
    return texts


def task_demo(protocol: ChatProtocol, task: Any, demo: Callable[[Problem, random.Random], str], problem: Problem,
              rng: random.Random) -> Demo:
    """One demonstration: the rendered prompt (not trained) and the answer with its end token (trained)."""
    prompt = protocol.render_prompt(task.messages(problem))
    completion = protocol.encode(demo(problem, rng)) + [protocol.tokenizer.eos_token_id]
    return Demo(prompt + completion, [0] * len(prompt) + [1] * len(completion))


def task_bootstrap(
    model,
    protocol: ChatProtocol,
    task: Any,
    demo: Callable[[Problem, random.Random], str],
    steps: int,
    seed: int,
    learning_rate: float = 2e-3,
    per_step: int = 32,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Cross-entropy on the demonstration answers. Returns the loss per step."""
    rng = random.Random(seed)
    problems = task.generate(DEMO_SEED + seed, steps * per_step)
    device = next(model.parameters()).device
    pad_id = protocol.tokenizer.pad_token_id

    def step_loss(step: int) -> float:
        demos = [task_demo(protocol, task, demo, p, rng) for p in problems[step * per_step:(step + 1) * per_step]]
        return backward_role_losses(model, [demos], pad_id, device)

    return supervised_steps(model, steps, learning_rate, step_loss, progress)
