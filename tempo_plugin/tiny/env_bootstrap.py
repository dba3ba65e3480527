"""Supervised format bootstrap of the tiny model for any environment with an expert (TextWorld, ALFWorld).

The vault has its own bootstrap (``bootstrap.py``), with critic reasoning about its hidden fact.
Here the demonstrations need only the Env protocol's ``expert_action``:

- actor: episodes that follow the expert plan, with ACTOR_NOISE of the moves a random admissible action;
- critic: states of those episodes with the critic prompt and a *uniformly random* value, so the
  critic learns the format only and value learning happens in the RL phases.
"""

from __future__ import annotations

import random
from typing import Callable, Iterator

from tempo_plugin.tiny.bootstrap import DEMO_GAME_OFFSET, Demo, backward_role_losses, supervised_steps
from tempo_plugin.critic import CRITIC_SYSTEM_PROMPT, critic_messages, format_value
from tempo_plugin.envs.base import Env
from tempo_plugin.rollout.protocol import ACTOR_SYSTEM_PROMPT, ChatProtocol, format_action

ACTOR_NOISE = 0.2


def noisy_expert_episode(env: Env, seed: int, rng: random.Random, max_steps: int) -> Iterator[tuple[str, list[str], str]]:
    """(action, actions so far, observation after it) per round of one noisy expert episode."""
    env.reset(seed)
    actions: list[str] = []
    for _ in range(max_steps):
        expert = env.expert_action()
        admissible = env.admissible_actions()
        if expert is None or not admissible:
            return
        action = rng.choice(admissible) if rng.random() < ACTOR_NOISE else expert
        result = env.step(action)
        actions.append(action)
        yield action, list(actions), result.observation
        if result.done:
            return


def env_corpus(make_env: Callable[[], Env], max_steps: int, games: int = 40) -> list[str]:
    """Texts the tiny tokenizer is trained on: rendered actor turns, actions and critic prompts."""
    rng = random.Random(1)
    env = make_env()
    texts = [ACTOR_SYSTEM_PROMPT, CRITIC_SYSTEM_PROMPT]
    for game in range(games):
        first = env.reset(DEMO_GAME_OFFSET + game)
        texts.append(f"<|im_start|>user\nTask: {env.task}\n{first}<|im_end|>\n<|im_start|>assistant\n")
        for round_index, (action, actions, obs) in enumerate(noisy_expert_episode(env, DEMO_GAME_OFFSET + game, rng, max_steps), 1):
            texts.append(format_action(action) + "<|im_end|>\n")
            texts.append(f"<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n")
            messages = critic_messages(env.task, env.privileged_info(), actions, obs, round_index, max_steps)
            texts.append("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages))
            texts.append(f"{format_value(rng.random())}<|im_end|>\n")
    return texts


def env_demos(
    protocol: ChatProtocol, env: Env, seed: int, rng: random.Random, max_steps: int, critic_count: int
) -> tuple[list[Demo], list[Demo]]:
    """(the actor episode, if it has a move; up to ``critic_count`` critic demonstrations from its states)."""
    first = env.reset(seed)
    tokens = protocol.render_prompt(protocol.initial_messages(env.task, first))
    mask = [0] * len(tokens)
    eos = protocol.tokenizer.eos_token_id
    states = [(env.privileged_info(), [], first, 0)]
    for round_index, (action, actions, obs) in enumerate(noisy_expert_episode(env, seed, rng, max_steps), 1):
        completion = protocol.encode(format_action(action)) + [eos]
        next_tokens, completion_end = protocol.extend(tokens, completion, obs)
        mask += [1] * len(completion) + [0] * (len(next_tokens) - completion_end)
        tokens = next_tokens
        states.append((env.privileged_info(), actions, obs, round_index))
    actor = [Demo(tokens, mask)] if any(mask) else []
    critic = []
    for hidden, actions, obs, round_index in rng.sample(states, min(critic_count, len(states))):
        prompt = protocol.render_prompt(critic_messages(env.task, hidden, actions, obs, round_index, max_steps))
        completion = protocol.encode(format_value(rng.random())) + [eos]
        critic.append(Demo(prompt + completion, [0] * len(prompt) + [1] * len(completion)))
    return actor, critic


def env_bootstrap(
    model,
    protocol: ChatProtocol,
    make_env: Callable[[], Env],
    steps: int,
    max_steps: int,
    seed: int,
    learning_rate: float = 2e-3,
    progress: Callable[[int, float], None] | None = None,
    ramp_steps: int = 20,
) -> list[float]:
    """Cross-entropy on the demonstration tokens, one episode and its critic demos per step."""
    rng = random.Random(seed)
    env = make_env()
    device = next(model.parameters()).device
    pad_id = protocol.tokenizer.pad_token_id

    def step_loss(step: int) -> float:
        actor, critic = env_demos(protocol, env, DEMO_GAME_OFFSET + seed * 100_003 + step, rng, max_steps, critic_count=4)
        return backward_role_losses(model, [actor, critic], pad_id, device)

    return supervised_steps(model, steps, learning_rate, step_loss, progress, ramp_steps)
