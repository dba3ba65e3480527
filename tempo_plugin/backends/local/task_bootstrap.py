"""Supervised bootstrap of the tiny model for single-turn tasks (Countdown), like the vault's.

The tiny default Countdown is small enough for a 3M-parameter model to get partly right: three
numbers from 1..9 and a target that two or three of them reach. The demonstrations answer
``<answer>expr</answer>`` directly (no reasoning), and they are noisy on purpose, so the policy
starts with a success rate well inside (0, 1) and varying across problems, which is what a critic
can learn to predict:

- SOLVED (50%): the problem's own solution expression;
- otherwise a random two-number expression from the problem's numbers (sometimes right by chance);
- MALFORMED (10% of all): an answer without its closing tag, which the verifier scores 0.

Demonstrations use problems from a seed disjoint from training and evaluation.
"""

from __future__ import annotations

import random
from typing import Callable

from tempo_plugin.backends.local.bootstrap import Demo, backward_role_losses, supervised_steps
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.tasks.countdown import CountdownTask, parse_label

DEMO_SEED = 3_000_000_000
SOLVED = 0.8
MALFORMED = 0.1
ANSWER_TAGS = ["<answer>", "</answer>"]


def tiny_countdown() -> CountdownTask:
    """The Countdown variant the built-in tiny model trains on."""
    return CountdownTask(min_numbers=3, max_numbers=3, max_number=4, max_target=16)


def demo_response(numbers: list[int], solution: str, rng: random.Random) -> str:
    if rng.random() < SOLVED:
        expression = solution
    else:
        a, b = rng.sample(numbers, 2)
        expression = f"{a} {rng.choice('+-*/')} {b}"
    if rng.random() < MALFORMED:
        return f"<answer>{expression}"
    return f"<answer>{expression}</answer>"


def task_corpus(task: CountdownTask, count: int = 2000) -> list[str]:
    """Texts the tiny tokenizer is trained on: rendered prompts and demonstration answers."""
    rng = random.Random(1)
    texts = []
    for problem in task.generate(DEMO_SEED + 1, count):
        texts.append("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in task.messages(problem)))
        texts.append(demo_response(problem.meta["numbers"], problem.meta["solution"], rng) + "<|im_end|>\n")
    return texts


def task_demo(protocol: ChatProtocol, task: CountdownTask, problem, rng: random.Random) -> Demo:
    prompt = protocol.render_prompt(task.messages(problem))
    numbers = parse_label(problem.label)[0]
    completion = protocol.encode(demo_response(numbers, problem.meta["solution"], rng)) + [protocol.tokenizer.eos_token_id]
    return Demo(prompt + completion, [0] * len(prompt) + [1] * len(completion))


def task_bootstrap(
    model,
    protocol: ChatProtocol,
    task: CountdownTask,
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
        demos = [task_demo(protocol, task, p, rng) for p in problems[step * per_step:(step + 1) * per_step]]
        return backward_role_losses(model, [demos], pad_id, device)

    return supervised_steps(model, steps, learning_rate, step_loss, progress)
