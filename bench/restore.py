"""Restore time vs history length, snapshot vs replay, on every environment; and env steps/s.

    .venv/bin/python bench/restore.py [--repeats 20] [--textworld-games DIR] [--alfworld-data DIR]

For each engine and history length L in (5, 10, 20, 40): play L random admissible actions that
avoid the expert's next move (so the episode is still running), save the MacroState, then time
``restore_env`` into a second environment instance that has just played a different game: by
snapshot (where the engine has one) and by replay (reset + L steps), each followed by the exact
observation check. Prints the median milliseconds, and the steps/s of random play.

TextWorld needs games (``python -m tempo_plugin.envs.textworld --make-games data/textworld --count 8``),
ALFWorld the fixture games (``python -m tempo_plugin.envs.alfworld --make-fixtures data/alfworld``);
an engine whose package or games are missing is skipped with the reason.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from tempo_plugin.envs import env_options, make
from tempo_plugin.envs.base import Env
from tempo_plugin.states.restore import restore_env
from tempo_plugin.states.state import MacroState

HISTORY_LENGTHS = (5, 10, 20, 40)


def running_history(env: Env, length: int, rng: random.Random, seeds: range) -> MacroState:
    """A state after ``length`` actions of a still-running episode (tries seeds until one lasts)."""
    for seed in seeds:
        env.reset(seed)
        actions: list[str] = []
        while len(actions) < length:
            expert = env.expert_action()
            options = [a for a in env.admissible_actions() if a != expert] or env.admissible_actions()
            action = rng.choice(options)
            result = env.step(action)
            actions.append(action)
            if result.done:
                break
        if len(actions) == length and not result.done:
            snapshot = env.snapshot() if env.supports_snapshot else None
            return MacroState(seed, env.task, tuple(actions), env.observation, "", (), (), length, 0, snapshot)
    raise RuntimeError(f"no episode lasted {length} steps")


def median_ms(setup, fn, repeats: int) -> float:
    """Median milliseconds of ``fn()``, each run after an untimed ``setup()``."""
    times = []
    for _ in range(repeats):
        setup()
        tic = time.perf_counter()
        fn()
        times.append((time.perf_counter() - tic) * 1000)
    return statistics.median(times)


def bench_engine(name: str, options: dict, repeats: int) -> tuple[list[tuple[int, float | None, float]], float]:
    env, other = make(name, **options), make(name, **options)
    rng = random.Random(0)
    rows = []
    for length in HISTORY_LENGTHS:
        state = running_history(env, length, rng, range(1000))

        def elsewhere() -> None:
            other.reset(state.env_seed + 1)  # the second instance starts on a different game

        snapshot_ms = None
        if env.supports_snapshot:
            snapshot_ms = median_ms(elsewhere, lambda: restore_env(other, state, "auto"), repeats)
        replay_ms = median_ms(elsewhere, lambda: restore_env(other, state, "replay"), repeats)
        rows.append((length, snapshot_ms, replay_ms))
    steps, tic = 0, time.perf_counter()
    env.reset(0)
    while time.perf_counter() - tic < 2.0:
        result = env.step(rng.choice(env.admissible_actions()))
        steps += 1
        if result.done:
            env.reset(steps)
    return rows, steps / (time.perf_counter() - tic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--textworld-games", default="")
    parser.add_argument("--alfworld-data", default="")
    args = parser.parse_args()
    engines = {
        "vault": {"max_steps": 60},
        "textworld": env_options("textworld", 60, args.textworld_games),
        "alfworld": env_options("alfworld", 60, args.alfworld_data),
    }
    print(f"{'engine':<10} {'history':>7} {'snapshot ms':>12} {'replay ms':>10}")
    rates = {}
    for name, options in engines.items():
        try:
            rows, rate = bench_engine(name, options, args.repeats if name != "alfworld" else max(3, args.repeats // 4))
        except (ImportError, FileNotFoundError, RuntimeError) as error:
            print(f"{name:<10} skipped: {str(error).splitlines()[0]}")
            continue
        rates[name] = rate
        for length, snapshot_ms, replay_ms in rows:
            snap = "-" if snapshot_ms is None else f"{snapshot_ms:.3f}"
            print(f"{name:<10} {length:>7} {snap:>12} {replay_ms:>10.2f}")
    for name, rate in rates.items():
        print(f"{name:<10} random-play steps/s: {rate:,.0f}")


if __name__ == "__main__":
    main()
