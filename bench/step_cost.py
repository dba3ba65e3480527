"""The cost of an environment step in a rollout, before and after privileged information became lazy.

    .venv/bin/python bench/step_cost.py [--steps 200] [--macro-rounds 5] [--textworld-games DIR] [--alfworld-data DIR]

The rollout engine used to ask the environment for its privileged information (ALFWorld and
TextWorld run a planner for it) and a snapshot after every step; it now asks only at macro-step
boundaries, the only rounds that can become stored states. For each environment whose package and
games are there, the same random admissible play is timed three ways, side by side:
step only; step + privileged info + snapshot after every step (before); the same every
--macro-rounds steps (after). Prints milliseconds per step.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempo_plugin.envs import env_options, make  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--macro-rounds", type=int, default=5)
    parser.add_argument("--textworld-games", default="", help="TextWorld games (default $TEXTWORLD_GAMES / data/textworld)")
    parser.add_argument("--alfworld-data", default="", help="ALFWorld games (default $ALFWORLD_DATA / data/alfworld)")
    args = parser.parse_args()
    data = {"textworld": args.textworld_games, "alfworld": args.alfworld_data}
    print(f"{'environment':<12} {'step only':>10} {'before: every step':>19} {f'after: every {args.macro_rounds}':>15}  (ms per step, {args.steps} steps)")
    for name in ("vaults", "vault", "textworld", "alfworld"):
        try:
            env = make(name, **env_options(name, 50, data.get(name, "")))
        except (ImportError, ValueError, FileNotFoundError) as error:
            print(f"{name:<12} skipped: {str(error).splitlines()[0]}")
            continue
        play(env, args.steps, 11, 1)  # warm-up on the same games: each game file loaded once before timing
        rows = [play(env, args.steps, 11, every) / args.steps * 1e3 for every in (0, 1, args.macro_rounds)]
        print(f"{name:<12} {rows[0]:>10.3f} {rows[1]:>19.3f} {rows[2]:>15.3f}")


if __name__ == "__main__":
    main()
