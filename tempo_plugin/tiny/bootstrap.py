"""Supervised format bootstrap of the tiny model on the vault games (``vaults`` and ``vault``).

A real model skips it. Actor demonstrations are noisy walkthroughs: in a key room the key is
chosen uniformly among the keys there in KEY_NOISE of the decisions (the sign is ignored), a slip
names a palette colour that may not be there (the demonstration then recovers), and ACTOR_NOISE of
the hall moves are random admissible actions; so the policy is valid but has clear room to improve.
Extra key-room decisions (the prompt up to a key room, one action trained) give the small model
enough examples of reading the sign to *be able* to pick the right key; how often it does so is what
RL has to raise. 64 of them per step: fewer left reading the sign to the luck of the seed (the
measurements are in docs/experiments/environments.md, "The tiny model's bootstrap").

Critic demonstrations are a short reasoning that restates the decisive hidden fact, followed by a
value tied to it: "No plan can win." is followed by 0.00 (exact: the privileged information says
so); "A plan can still win." is followed by a random value, since the probability of winning from a
winnable state depends on the policy and is what the warm-up and TD phases must learn. On the chain
the reasoning also counts the keys still to choose (k, the decisions between the state and a win)
and the value is drawn as u^(k + 1/2), u uniform: a prior that knows nothing of the policy except
that every decision left can lose (means 0.67, 0.40, 0.29, 0.22 for k = 0..3), and that leaves
every value in (0, 1) possible, so no state starts with K identical answers. On the one-vault game
the value is u. Why not u everywhere, or random values after both reasonings: docs/experiments/critic.md.

Demonstrations are rendered with the same ChatProtocol as the rollouts (same token extension), on
games from a seed range disjoint from training and evaluation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from tempo_plugin.critic import CRITIC_SYSTEM_PROMPT, critic_messages, format_value
from tempo_plugin.envs import make
from tempo_plugin.envs.base import Env
from tempo_plugin.envs.vault import PALETTE, TAKE_PREFIX
from tempo_plugin.logprobs import token_logprobs
from tempo_plugin.rollout.batches import chunk_by_token_budget, collate, first_loss_column
from tempo_plugin.rollout.protocol import ACTOR_SYSTEM_PROMPT, ChatProtocol, format_action
from tempo_plugin.rollout.samples import ACTOR, make_sample

DEMO_GAME_OFFSET = 3_000_000_000
ACTOR_NOISE = 0.2  # share of random admissible moves in the halls
KEY_NOISE = 0.5  # share of key-room decisions that take a uniformly random key of the room
SLIP = 0.05  # chance of asking for a random palette colour in a key room


@dataclass(frozen=True)
class Demo:
    tokens: list[int]
    loss_mask: list[int]


def in_key_room(env: Env) -> bool:
    actions = env.admissible_actions()
    return bool(actions) and all(a.startswith(TAKE_PREFIX) for a in actions)


def noisy_walkthrough_action(env: Env, rng: random.Random) -> str:
    actions = env.admissible_actions()
    if in_key_room(env):
        if rng.random() < SLIP:  # a slip (maybe a key that is not there): the demo then recovers
            return f"{TAKE_PREFIX}{rng.choice(PALETTE)}"
        return rng.choice(actions) if rng.random() < KEY_NOISE else env.expert_action()
    if rng.random() < ACTOR_NOISE:
        return rng.choice(actions)
    return env.expert_action() or ("open vault" if "open vault" in actions else "north")


def keys_to_choose(env: Env) -> int | None:
    """The key decisions between a winnable chain state and a win (None on the one-vault game)."""
    left = getattr(env, "vaults_left", None)
    if left is None:
        return None
    # the current vault's key is still to choose in its key room, chosen (rightly) once held
    return left - (env.held is not None)


def critic_reasoning(env: Env) -> str:
    """The critic's short reasoning before its value: the decisive hidden fact, restated."""
    if env.done:
        return "The episode is over."
    if not env.winnable():
        return "No plan can win."
    keys = keys_to_choose(env)
    return "A plan can still win." if keys is None else f"A plan can still win. Keys to choose: {keys}."


def critic_value(env: Env, rng: random.Random) -> float:
    """The demonstrated value: 0 where no plan can win, else u^(k + 1/2) with u uniform and k the
    keys still to choose (u on the one-vault game)."""
    if not env.winnable():
        return 0.0
    keys = keys_to_choose(env)
    u = rng.random()
    return u if keys is None else u ** (keys + 0.5)


def demo_texts(env: Env, rng: random.Random, max_steps: int) -> Iterator[tuple[list[str], str, str, int, str, float]]:
    """(actions, observation, privileged info, round, critic reasoning, critic value) after each
    round of one noisy episode."""
    actions: list[str] = []
    while not env.done and len(actions) < max_steps:
        actions.append(noisy_walkthrough_action(env, rng))
        env.step(actions[-1])
        yield list(actions), env.observation, env.privileged_info(), len(actions), critic_reasoning(env), critic_value(env, rng)


def noisy_key_action(env: Env, rng: random.Random) -> str:
    """The demonstrated key-room decision (the same rule as inside the episodes)."""
    if rng.random() < SLIP:
        return f"{TAKE_PREFIX}{rng.choice(PALETTE)}"
    return rng.choice(env.admissible_actions()) if rng.random() < KEY_NOISE else env.expert_action()


def actor_demos(protocol: ChatProtocol, env: Env, seed: int, rng: random.Random, max_steps: int) -> list[Demo]:
    """One noisy episode (every action trained), plus one demonstration per key room it reached:
    the episode's tokens up to that room and one freshly drawn key decision, the only one trained."""
    observation = env.reset(seed)
    tokens = protocol.render_prompt(protocol.initial_messages(env.task, observation))
    mask = [0] * len(tokens)
    eos = protocol.tokenizer.eos_token_id
    decisions = [(len(tokens), noisy_key_action(env, rng))]
    for actions, obs, _, _, _, _ in demo_texts(env, rng, max_steps):
        completion = protocol.encode(format_action(actions[-1])) + [eos]
        next_tokens, completion_end = protocol.extend(tokens, completion, obs)
        mask += [1] * len(completion) + [0] * (len(next_tokens) - completion_end)
        tokens = next_tokens
        if in_key_room(env):
            decisions.append((len(tokens), noisy_key_action(env, rng)))
    demos = [Demo(tokens, mask)]
    for end, action in decisions:
        completion = protocol.encode(format_action(action)) + [eos]
        demos.append(Demo(tokens[:end] + completion, [0] * end + [1] * len(completion)))
    return demos


def key_room_demos(protocol: ChatProtocol, env: Env, seed: int, rng: random.Random) -> Demo:
    """The first prompt of a fresh game and one key decision (short: many fit in a step)."""
    observation = env.reset(seed)
    prompt = protocol.render_prompt(protocol.initial_messages(env.task, observation))
    completion = protocol.encode(format_action(noisy_key_action(env, rng))) + [protocol.tokenizer.eos_token_id]
    return Demo(prompt + completion, [0] * len(prompt) + [1] * len(completion))


def critic_demos(protocol: ChatProtocol, env: Env, seed: int, rng: random.Random, max_steps: int, count: int) -> list[Demo]:
    first = env.reset(seed)
    initial = ([], first, env.privileged_info(), 0, critic_reasoning(env), critic_value(env, rng))
    states = [s for s in [initial, *demo_texts(env, rng, max_steps)] if s[4] != "The episode is over."]
    eos = protocol.tokenizer.eos_token_id
    demos = []
    for actions, obs, hidden, round_index, reasoning, value in rng.sample(states, min(count, len(states))):
        prompt = protocol.render_prompt(critic_messages(env.task, hidden, actions, obs, round_index, max_steps))
        completion = protocol.encode(f"{reasoning} {format_value(value)}") + [eos]
        demos.append(Demo(prompt + completion, [0] * len(prompt) + [1] * len(completion)))
    return demos


def tokenizer_corpus(max_steps: int, games: int = 300) -> list[str]:
    """Texts the tiny tokenizer is trained on: ChatML-rendered actor turns and critic prompts of
    both vault games (one tokenizer serves both)."""
    rng = random.Random(1)
    texts = [ACTOR_SYSTEM_PROMPT, CRITIC_SYSTEM_PROMPT]
    for name in ("vaults", "vault"):
        env = make(name, max_steps=max_steps)
        for game in range(games):
            first = env.reset(DEMO_GAME_OFFSET + game)
            texts.append(f"<|im_start|>user\nTask: {env.task}\n{first}<|im_end|>\n<|im_start|>assistant\n")
            for actions, obs, hidden, round_index, reasoning, value in demo_texts(env, rng, max_steps):
                texts.append(format_action(actions[-1]) + "<|im_end|>\n")
                texts.append(f"<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n")
                if rng.random() < 0.2:
                    messages = critic_messages(env.task, hidden, actions, obs, round_index, max_steps)
                    texts.append("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages))
                    texts.append(f"{reasoning} {format_value(value)}<|im_end|>\n")
    return texts


def supervised_bootstrap(
    model,
    protocol: ChatProtocol,
    env_name: str,
    steps: int,
    max_steps: int,
    seed: int,
    learning_rate: float = 2e-3,
    episodes_per_step: int = 1,
    key_rooms_per_step: int = 64,
    critic_per_step: int = 12,
    progress: Callable[[int, float], None] | None = None,
    ramp_steps: int = 20,
    tokens_per_micro_batch: int | None = None,
) -> list[float]:
    """Cross-entropy on the demonstration tokens (mask 1 only). Returns the loss per step.
    ``tokens_per_micro_batch``: see ``backward_role_losses``."""
    rng = random.Random(seed)
    env = make(env_name, max_steps=max_steps)
    device = next(model.parameters()).device
    pad_id = protocol.tokenizer.pad_token_id
    game = DEMO_GAME_OFFSET

    def step_loss(step: int) -> float:
        nonlocal game
        actor: list[Demo] = []
        for _ in range(episodes_per_step):
            game += 1
            actor += actor_demos(protocol, env, game, rng, max_steps)
        keys: list[Demo] = []
        for _ in range(key_rooms_per_step):
            game += 1
            keys.append(key_room_demos(protocol, env, game, rng))
        critic: list[Demo] = []
        while len(critic) < critic_per_step:
            game += 1
            critic += critic_demos(protocol, env, game, rng, max_steps, count=4)
        return backward_role_losses(model, [actor, keys, critic], pad_id, device, tokens_per_micro_batch)

    return supervised_steps(model, steps, learning_rate, step_loss, progress, ramp_steps)


def lr_factor(step: int, steps: int, ramp_steps: int) -> float:
    """The bootstrap schedule's factor on the peak rate at 0-based ``step`` of ``steps``."""
    return min(1.0, (step + 1) / max(ramp_steps, 1)) * max(0.05, 1 - step / max(steps, 1))


def supervised_steps(
    model,
    steps: int,
    learning_rate: float,
    step_loss: Callable[[int], float],
    progress: Callable[[int, float], None] | None = None,
    ramp_steps: int = 20,
) -> list[float]:
    """The bootstrap loop shared by every bootstrap and warm start: AdamW with a linear ramp over
    ``ramp_steps`` steps and a linear decay to 5%, gradient clip 1. ``step_loss(step)`` runs the
    backward pass and returns the loss value. Returns the loss per step.

    A ramp as long as the run never reaches the peak rate: 12 steps under a 20-step ramp peak at
    0.18 of it, so a short warm start passes a short ramp."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, steps, ramp_steps))
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


def backward_role_losses(model, parts: list[list[Demo]], pad_id: int, device: torch.device,
                         tokens_per_micro_batch: int | None = None) -> float:
    """Backward the mean NLL of each non-empty part (e.g. actor and critic demonstrations, in
    separate forward passes since their lengths differ a lot), each part weighted equally.
    ``tokens_per_micro_batch``: a part runs in micro-batches of at most that many padded tokens,
    each backwarded on its own (the same gradient, a smaller peak); None: a part at once."""
    parts = [part for part in parts if part]
    total = 0.0
    for part in parts:
        trained = sum(sum(d.loss_mask) for d in part)
        chunks = ([part] if tokens_per_micro_batch is None else
                  chunk_by_token_budget(part, lambda d: len(d.tokens), tokens_per_micro_batch))
        for chunk in chunks:
            loss = _summed_nll(model, chunk, pad_id, device) / trained / len(parts)
            loss.backward()
            total += loss.item()
    return total


def _summed_nll(model, demos: list[Demo], pad_id: int, device: torch.device) -> torch.Tensor:
    """Summed negative log-likelihood of the demonstration tokens with mask 1."""
    samples = [make_sample(d.tokens, d.loss_mask, [0.0] * len(d.tokens), 0.0, ACTOR, 0, 0.0) for d in demos]
    tensors = collate(samples, pad_id, device)
    mask = tensors["loss_mask"]
    # from the first trained column on: the demonstrations' shared start (system prompt, task) runs once
    logprobs = token_logprobs(model, tensors["input_ids"], tensors["attention"], temperature=1.0,
                              first=first_loss_column(mask))
    return -(logprobs * mask).sum()
