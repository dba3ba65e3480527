"""Supervised format bootstrap for the tiny random-init model (a real model skips it).

It teaches formats only. Actor demonstrations are noisy walkthroughs: the key is chosen uniformly
at random in half of them (the sign is ignored) and 20% of the later moves are random admissible actions, so the
policy is valid but has clear room to improve. Critic demonstrations carry uniformly random values
in the ``<value>`` format after a short reasoning that restates the decisive hidden fact (whether a
plan can still win), so the critic starts uninformative and value
learning happens in the warm-up and TD phases, where the run measures it.

Demonstrations are rendered with the same ChatProtocol as the rollouts (same token extension), on
games from a seed range disjoint from training and evaluation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from tempo_plugin.critic import CRITIC_SYSTEM_PROMPT, critic_messages, format_value
from tempo_plugin.envs.vault import PALETTE, VaultEnv
from tempo_plugin.backends.local.trainer import collate, token_logprobs
from tempo_plugin.rollout.protocol import ACTOR_SYSTEM_PROMPT, ChatProtocol, format_action
from tempo_plugin.rollout.samples import ACTOR, make_sample

DEMO_GAME_OFFSET = 3_000_000_000
ACTOR_NOISE = 0.2  # share of random admissible moves in the halls
KEY_NOISE = 0.5  # share of demonstrations that take a uniformly random key
SLIP = 0.15  # chance of asking for a random palette colour in the key room


@dataclass(frozen=True)
class Demo:
    tokens: list[int]
    loss_mask: list[int]


def noisy_walkthrough_action(env: VaultEnv, rng: random.Random) -> str:
    actions = env.admissible_actions()
    if env.position == 0:
        if rng.random() < SLIP:  # a slip (maybe a key that is not there): the demo then recovers
            return f"take {rng.choice(PALETTE)}"
        return rng.choice(actions) if rng.random() < KEY_NOISE else f"take {env.game.correct}"
    if rng.random() < ACTOR_NOISE:
        return rng.choice(actions)
    return env.expert_action() or ("open vault" if "open vault" in actions else "north")


def critic_reasoning(env: VaultEnv, round_index: int, max_steps: int) -> str:
    """The critic's short reasoning before its value: the decisive hidden fact, restated.

    The bootstrap teaches this format (reasoning, then ``<value>``) with random values, so the
    reasoning carries no value information itself; RL then learns which values follow it.
    """
    if env.done:
        return "The episode is over."
    if env.held is not None and env.held != env.game.correct:
        return "No plan can win."
    return "A plan can still win."


def demo_texts(env: VaultEnv, rng: random.Random, max_steps: int) -> Iterator[tuple[str, list[str], str, str, int, str]]:
    """(first observation, actions, observation, privileged info, round, critic reasoning) along
    one noisy episode."""
    first = env.observation
    actions: list[str] = []
    while not env.done and len(actions) < max_steps:
        actions.append(noisy_walkthrough_action(env, rng))
        env.step(actions[-1])
        reasoning = critic_reasoning(env, len(actions), max_steps)
        yield first, list(actions), env.observation, env.privileged_info(), len(actions), reasoning


def actor_demo(protocol: ChatProtocol, env: VaultEnv, seed: int, rng: random.Random, max_steps: int) -> Demo:
    observation = env.reset(seed)
    tokens = protocol.render_prompt(protocol.initial_messages(env.task, observation))
    mask = [0] * len(tokens)
    eos = protocol.tokenizer.eos_token_id
    for _, actions, obs, _, _, _ in demo_texts(env, rng, max_steps):
        completion = protocol.encode(format_action(actions[-1])) + [eos]
        next_tokens, completion_end = protocol.extend(tokens, completion, obs)
        mask += [1] * len(completion) + [0] * (len(next_tokens) - completion_end)
        tokens = next_tokens
    return Demo(tokens, mask)


def critic_demos(protocol: ChatProtocol, env: VaultEnv, seed: int, rng: random.Random, max_steps: int, count: int) -> list[Demo]:
    first = env.reset(seed)
    initial = (first, [], first, env.privileged_info(), 0, critic_reasoning(env, 0, max_steps))
    states = [initial] + list(demo_texts(env, rng, max_steps))  # fresh games are TD start states too
    eos = protocol.tokenizer.eos_token_id
    demos = []
    for _, actions, obs, hidden, round_index, reasoning in rng.sample(states, min(count, len(states))):
        prompt = protocol.render_prompt(critic_messages(env.task, hidden, actions, obs, round_index, max_steps))
        completion = protocol.encode(f"{reasoning} {format_value(rng.random())}") + [eos]
        demos.append(Demo(prompt + completion, [0] * len(prompt) + [1] * len(completion)))
    return demos


def tokenizer_corpus(max_steps: int, games: int = 300) -> list[str]:
    """Texts the tiny tokenizer is trained on: ChatML-rendered actor turns and critic prompts."""

    rng = random.Random(1)
    env = VaultEnv(max_steps=max_steps)
    texts = [ACTOR_SYSTEM_PROMPT, CRITIC_SYSTEM_PROMPT]
    for game in range(games):
        first = env.reset(DEMO_GAME_OFFSET + game)
        turn = f"<|im_start|>user\nTask: {env.task}\n{first}<|im_end|>\n<|im_start|>assistant\n"
        texts.append(turn)
        for _, actions, obs, hidden, round_index, reasoning in demo_texts(env, rng, max_steps):
            texts.append(format_action(actions[-1]) + "<|im_end|>\n")
            texts.append(f"<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n")
            if rng.random() < 0.2:
                messages = critic_messages(env.task, hidden, actions, obs, round_index, max_steps)
                texts.append("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages))
                texts.append(f"{reasoning} {format_value(rng.random())}<|im_end|>\n")
    return texts


def supervised_bootstrap(
    model,
    protocol: ChatProtocol,
    steps: int,
    max_steps: int,
    seed: int,
    learning_rate: float = 2e-3,
    actor_per_step: int = 3,
    critic_per_step: int = 16,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Cross-entropy on the demonstration tokens (mask 1 only). Returns the loss per step."""
    rng = random.Random(seed)
    env = VaultEnv(max_steps=max_steps)
    device = next(model.parameters()).device
    pad_id = protocol.tokenizer.pad_token_id
    game = DEMO_GAME_OFFSET

    def step_loss(step: int) -> float:
        nonlocal game
        demos = []
        for _ in range(actor_per_step):
            game += 1
            demos.append(actor_demo(protocol, env, game, rng, max_steps))
        while len(demos) < actor_per_step + critic_per_step:
            game += 1
            demos += critic_demos(protocol, env, game, rng, max_steps, count=4)
        return backward_role_losses(model, [demos[:actor_per_step], demos[actor_per_step:]], pad_id, device)

    return supervised_steps(model, steps, learning_rate, step_loss, progress)


def supervised_steps(
    model,
    steps: int,
    learning_rate: float,
    step_loss: Callable[[int], float],
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """The bootstrap loop shared by every tiny-model bootstrap: AdamW with 20 warm-up steps and a
    linear decay to 5%, gradient clip 1. ``step_loss(step)`` runs the backward pass and returns the
    loss value. Returns the loss per step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / max(steps, 1)))
    losses = []
    model.train()
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        losses.append(step_loss(step))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if progress is not None:
            progress(step, losses[-1])
    model.eval()
    return losses


def backward_role_losses(model, parts: list[list[Demo]], pad_id: int, device: torch.device) -> float:
    """Backward the mean NLL of each non-empty part (e.g. actor and critic demonstrations, in
    separate forward passes since their lengths differ a lot), each part weighted equally."""
    parts = [part for part in parts if part]
    total = 0.0
    for part in parts:
        loss = _masked_nll(model, part, pad_id, device) / len(parts)
        loss.backward()
        total += loss.item()
    return total


def _masked_nll(model, demos: list[Demo], pad_id: int, device: torch.device) -> torch.Tensor:
    """Mean negative log-likelihood of the demonstration tokens with mask 1."""
    samples = [make_sample(d.tokens, d.loss_mask, [0.0] * len(d.tokens), 0.0, ACTOR, 0, 0.0) for d in demos]
    tensors = collate(samples, pad_id, device)
    logprobs = token_logprobs(model, tensors["input_ids"], tensors["attention"], temperature=1.0)
    mask = tensors["loss_mask"]
    return -(logprobs * mask).sum() / mask.sum()
