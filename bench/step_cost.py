"""The cost of an environment step in a rollout, before and after privileged information became lazy.

    .venv/bin/python bench/step_cost.py [--steps 200] [--macro-rounds 5] [--textworld-games DIR] [--alfworld-data DIR]

The rollout engine used to ask the environment for its privileged information (ALFWorld and
TextWorld run a planner for it) and a snapshot after every step; it now asks only at macro-step
boundaries, the only rounds that can become stored states. For each environment whose package and
games are there, the same random admissible play is timed three ways, side by side:
step only; step + privileged info + snapshot after every step (before); the same every
--macro-rounds steps (after). Prints milliseconds per step.

Then the cost of giving a branch its environment, side by side: build a new one and restore it to
a mid-episode state (before: one environment per branch), or take one from an EnvPool and restore
it (after). The states are --branch-states random mid-episode states of different games, each
restored --branches times as a TD group's branches are. Prints milliseconds per branch.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempo_plugin.envs import env_options, make  # noqa: E402
from tempo_plugin.envs.pool import EnvPool  # noqa: E402
from tempo_plugin.states.restore import restore_env  # noqa: E402


def play(env, steps: int, seed: int, every: int) -> float:
    """Seconds for ``steps`` random admissible steps; privileged info + snapshot every ``every`` steps (0: never)."""
    rng = random.Random(seed)
    game = seed
    env.reset(game)
    seconds = 0.0
    for i in range(1, steps + 1):
        action = rng.choice(env.admissible_actions())
        tic = time.perf_counter()
        result = env.step(action)
        if every and i % every == 0 and not result.done:
            env.privileged_info()
            if env.supports_snapshot:
                env.snapshot()
        seconds += time.perf_counter() - tic
        if result.done:
            game += 1
            env.reset(game)
    return seconds


def random_states(env, count: int, rounds: int, seed: int) -> list[tuple[int, tuple[str, ...], str, object]]:
    """``count`` states of games seed, seed+1, ...: (game, actions, observation, snapshot) after up to
    ``rounds`` random admissible actions."""
    rng = random.Random(seed)
    states = []
    for game in range(seed, seed + count):
        env.reset(game)
        actions: list[str] = []
        for _ in range(rounds):
            action = rng.choice(env.admissible_actions())
            if env.step(action).done:
                env.reset(game)
                actions = []
                break
            actions.append(action)
        states.append((game, tuple(actions), env.observation, env.snapshot() if env.supports_snapshot else None))
    return states


def branch_cost(make_env, states, branches: int, pooled: bool) -> float:
    """Seconds to give ``branches`` branches of every state an environment restored to it."""
    from tempo_plugin.states.state import MacroState

    pool = EnvPool(make_env)
    macro = [MacroState(env_seed=g, task="", action_history=a, observation=o, privileged_info="", token_prefix=(),
                        messages=(), round_index=len(a), macro_index=0, snapshot=s) for g, a, o, s in states]
    tic = time.perf_counter()
    for state in macro:
        envs = [pool.acquire(state.env_seed) if pooled else make_env() for _ in range(branches)]
        for env in envs:
            restore_env(env, state)
        if pooled:
            for env in envs:
                pool.release(env, state.env_seed)
    return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--macro-rounds", type=int, default=5)
    parser.add_argument("--branches", type=int, default=4, help="N: branches restored from each state")
    parser.add_argument("--branch-states", type=int, default=8, help="mid-episode states (one game each) to restore")
    parser.add_argument("--textworld-games", default="", help="TextWorld games (default $TEXTWORLD_GAMES / data/textworld)")
    parser.add_argument("--alfworld-data", default="", help="ALFWorld games (default $ALFWORLD_DATA / data/alfworld)")
    args = parser.parse_args()
    data = {"textworld": args.textworld_games, "alfworld": args.alfworld_data}
    print(f"{'environment':<12} {'step only':>10} {'before: every step':>19} {f'after: every {args.macro_rounds}':>15}  (ms per step, {args.steps} steps)")
    built = {}
    for name in ("vaults", "vault", "textworld", "alfworld"):
        try:
            env = make(name, **env_options(name, 50, data.get(name, "")))
        except (ImportError, ValueError, FileNotFoundError) as error:
            print(f"{name:<12} skipped: {str(error).splitlines()[0]}")
            continue
        play(env, args.steps, 11, 1)  # warm-up on the same games: each game file loaded once before timing
        rows = [play(env, args.steps, 11, every) / args.steps * 1e3 for every in (0, 1, args.macro_rounds)]
        print(f"{name:<12} {rows[0]:>10.3f} {rows[1]:>19.3f} {rows[2]:>15.3f}")
        built[name] = env
    print(f"\n{'environment':<12} {'before: new env':>16} {'after: pooled':>14}  (ms per branch, {args.branch_states} states x {args.branches} branches)")
    for name, env in built.items():
        states = random_states(env, args.branch_states, 2 * args.macro_rounds, 23)
        options = env_options(name, 50, data.get(name, ""))
        per_branch = args.branch_states * args.branches
        before, after = (branch_cost(lambda: make(name, **options), states, args.branches, pooled) / per_branch * 1e3
                         for pooled in (False, True))
        print(f"{name:<12} {before:>16.3f} {after:>14.3f}")


if __name__ == "__main__":
    main()
