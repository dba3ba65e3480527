"""Benchmarks and their estimators.

Two metrics per benchmark, each with its standard error over the items (games or problems):

* **greedy**: one (near-)greedy episode or answer per item; the success rate p over n items, with
  standard error sqrt(p (1 - p) / n). Greedy decoding is sampling at ``GREEDY_TEMPERATURE`` (1e-5):
  the local sampler and the ``/generate`` server take a temperature > 0 only, and at 1e-5 a token
  wins unless its logit is within ~1e-4 of the best one (the OpenAI sampler sends it as 0).
* **pass@k**: n >= k sampled episodes or answers per item at the sampling temperature (the run's
  ``temperature``/``top_p``, 1.0 for a bare model, or ``--temperature``/``--top-p``), c of them
  successful; the unbiased estimator 1 - C(n - c, k) / C(n, k) per item, averaged; standard error
  std(per-item pass@k) / sqrt(items), with the sample standard deviation (ddof 1).

**Agent benchmarks** play the first ``games`` held-out games (``rollout.games.eval_games``) of an
environment, built by ``envs.eval_env_factory`` so that no game is a training game (TextWorld: the
``<games>/eval`` folder; ALFWorld: the split of ``Settings.eval_split``, else the run's
``--eval-split``, else ``valid_unseen``; a missing or empty folder skips the benchmark with one line
naming it and the command that makes it), through the training engine (``TempoRollout.play_episodes``), with the target's
generation settings (``max_assistant_tokens``, ``max_episode_steps``, ``max_trajectory_tokens``: the
run's, else ``TempoConfig``'s defaults); success = the episode was won. **Math benchmarks** answer
each problem of a ``{"prompt", "label"}`` JSONL file (``tasks.math``) once per sample, prompted as
in training (``MathTask.messages``), scored by ``math_score``.

Work is sent to the sampler in batches of at most ``batch_rows`` sequences (64 for a local model,
its sampler's batch size, so that its KV cache is kept between rounds), which is also the step of
the progress bar.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from tempo_plugin.envs.chain import ROUNDS_PER_VAULT
from tempo_plugin.config import TempoConfig
from tempo_plugin.rollout.games import eval_games
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.sampler import Request, Sampler, SamplingParams

GREEDY_TEMPERATURE = 1e-5
"""The temperature of the greedy metric (see the module docstring)."""
GREEDY = "greedy"

Progress = Callable[[int], None]
"""Called with the number of episodes/answers just finished."""


# -- estimators ---------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes: 1 - C(n - c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def binomial_stderr(p: float, n: int) -> float:
    """Standard error of a success rate p measured on n independent items: sqrt(p (1 - p) / n)."""
    return math.sqrt(p * (1.0 - p) / n) if n > 0 else 0.0


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean) with the sample standard deviation; 0 error for one value."""
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True)
class Score:
    """One metric of one benchmark on one target."""

    value: float
    stderr: float
    items: int  # games or problems
    samples: int  # episodes/answers per item
    successes: tuple[int, ...]  # successful samples per item
    k: int | None = None  # pass@k; None for greedy

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "stderr": self.stderr, "items": self.items, "samples_per_item": self.samples,
                "k": self.k, "successes_per_item": list(self.successes)}


def greedy_score(successes: Sequence[int]) -> Score:
    """Success rate of one sample per item (each 0 or 1), with its binomial standard error."""
    if not successes:
        raise ValueError("no items")
    p = statistics.fmean(float(bool(s)) for s in successes)
    return Score(p, binomial_stderr(p, len(successes)), len(successes), 1, tuple(int(s) for s in successes))


def pass_at_k_score(successes: Sequence[int], n: int, k: int) -> Score:
    """Mean unbiased pass@k over items with ``successes[i]`` successes out of n samples each."""
    value, stderr = mean_stderr([pass_at_k(n, c, k) for c in successes])
    return Score(value, stderr, len(successes), n, tuple(int(s) for s in successes), k)


# -- what a benchmark runs on ---------------------------------------------------------------------------


@dataclass
class Policy:
    """An opened target: its sampler, chat protocol and generation settings."""

    sampler: Sampler
    protocol: ChatProtocol
    config: TempoConfig
    batch_rows: int = 64  # sequences per sampler batch


@dataclass(frozen=True)
class Settings:
    """Settings shared by every benchmark of an evaluation."""

    k: int = 4
    samples: int = 4  # n >= k samples per item for pass@k
    seed: int = 0
    temperature: float | None = None  # sampling temperature of pass@k (None: the target's)
    top_p: float | None = None
    max_new_tokens: int = 1024  # math answers
    eval_split: str | None = None  # ALFWorld's held-out split (None: the run's --eval-split, valid_unseen for a model)
    vaults: int | None = None  # the vaults game's chain length (None: a run's own --vaults, 3 for a model)

    def sampling(self, cfg: TempoConfig) -> tuple[float, float]:
        return (self.temperature if self.temperature is not None else cfg.temperature,
                self.top_p if self.top_p is not None else cfg.top_p)


@dataclass
class Result:
    """A benchmark on one target: its metrics, or why there are none."""

    benchmark: str
    metrics: dict[str, Score] = field(default_factory=dict)
    skipped: str | None = None  # the benchmark cannot run here (an environment not installed, ...)
    error: str | None = None  # it failed (a server error)
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metrics": {name: s.to_dict() for name, s in self.metrics.items()},
                               "seconds": round(self.seconds, 3), **self.info}
        if self.skipped:
            out["skipped"] = self.skipped
        if self.error:
            out["error"] = self.error
        return out


def pass_name(k: int) -> str:
    return f"pass@{k}"


def batches(items: Sequence[Any], rows_per_item: int, max_rows: int) -> list[list[Any]]:
    """Consecutive slices of ``items`` with at most ``max_rows`` rows each (at least one item)."""
    size = max(1, max_rows // max(1, rows_per_item))
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


# -- agent games -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentBenchmark:
    env: str
    games: int

    @property
    def name(self) -> str:
        return self.env

    def work(self, settings: Settings) -> int:
        return self.games * (1 + settings.samples)

    def run(self, policy: Policy, settings: Settings, progress: Progress = lambda n: None) -> Result:
        from tempo_plugin.envs import DEFAULT_EVAL_SPLIT, HELD_OUT_SPLITS, eval_env_factory, held_out_split

        cfg = policy.config
        tic = time.perf_counter()
        own = self.env == cfg.env  # the target's own environment: its game folder and settings
        data_dir = cfg.env_data if own else ""
        eval_split = cfg.eval_split if own else DEFAULT_EVAL_SPLIT
        if settings.eval_split in HELD_OUT_SPLITS.get(self.env, ()):  # --eval-split names an ALFWorld split
            eval_split = settings.eval_split
        vaults = cfg.vaults if own else 3
        if settings.vaults is not None and self.env == "vaults":  # --vaults: a longer chain gets a longer episode
            vaults = settings.vaults
            cfg = replace(cfg, vaults=vaults, max_episode_steps=max(cfg.max_episode_steps, ROUNDS_PER_VAULT * vaults))
        try:
            make_env = eval_env_factory(self.env, cfg.max_episode_steps, data_dir, vaults, eval_split)
            split = held_out_split(self.env, eval_split)
        except (ValueError, ImportError, FileNotFoundError) as error:
            progress(self.work(settings))
            return Result(self.name, skipped=str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
        games = eval_games(self.games)
        greedy = episode_successes(policy, cfg, make_env, games, 1, GREEDY_TEMPERATURE, 1.0, settings.seed, progress)
        temperature, top_p = settings.sampling(cfg)
        sampled = episode_successes(policy, cfg, make_env, games, settings.samples, temperature, top_p,
                                    settings.seed + 1, progress)
        return Result(
            self.name,
            metrics={GREEDY: greedy_score(greedy), pass_name(settings.k): pass_at_k_score(sampled, settings.samples, settings.k)},
            seconds=time.perf_counter() - tic,
            info={"kind": "agent", "games": self.games, **({"split": split} if split else {}),
                  **({"vaults": vaults} if self.env == "vaults" else {}),
                  "max_episode_steps": cfg.max_episode_steps,
                  "max_assistant_tokens": cfg.max_assistant_tokens, "max_trajectory_tokens": cfg.max_trajectory_tokens,
                  "temperature": temperature, "top_p": top_p},
        )


def episode_successes(
    policy: Policy, cfg: TempoConfig, make_env: Callable[[], Any], games: Sequence[int], episodes: int,
    temperature: float, top_p: float, seed: int, progress: Progress,
) -> list[int]:
    """Episodes won per game, ``episodes`` complete episodes of each game, played with ``cfg``'s
    generation settings (the target's, or with eval's --vaults its episode cap)."""
    from tempo_plugin.updates.rollout import TempoRollout

    cfg = replace(cfg, temperature=temperature, top_p=top_p)
    rollout = TempoRollout(cfg, policy.sampler, policy.protocol, make_env)
    wins: list[int] = []
    for index, chunk in enumerate(batches(games, episodes, policy.batch_rows)):
        branches = rollout.play_episodes(chunk, seed=seed * 1_000 + index, episodes_per_game=episodes)
        counts = [0] * len(chunk)
        for branch in branches:
            counts[branch.group] += int(branch.won)
        wins += counts
        progress(len(chunk) * episodes)
    return wins


# -- math problems ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MathBenchmark:
    label: str  # NAME of --math NAME=PATH
    path: str
    task: Any  # tasks.math.MathTask (its problems already limited to --problems)

    @property
    def name(self) -> str:
        return f"math:{self.label}"

    @property
    def problems(self) -> list[Any]:
        return self.task.problems

    def work(self, settings: Settings) -> int:
        return len(self.problems) * (1 + settings.samples)

    def run(self, policy: Policy, settings: Settings, progress: Progress = lambda n: None) -> Result:
        tic = time.perf_counter()
        protocol = policy.protocol
        prompts = [protocol.render_prompt(self.task.messages(p)) for p in self.problems]
        labels = [p.label for p in self.problems]
        stop = protocol.stop_token_ids
        greedy = answer_successes(policy, prompts, labels, 1, SamplingParams(GREEDY_TEMPERATURE, 1.0, stop),
                                  settings.max_new_tokens, self.task.reward, settings.seed, progress)
        temperature, top_p = settings.sampling(policy.config)
        sampled = answer_successes(policy, prompts, labels, settings.samples, SamplingParams(temperature, top_p, stop),
                                   settings.max_new_tokens, self.task.reward, settings.seed + 1, progress)
        return Result(
            self.name,
            metrics={GREEDY: greedy_score(greedy), pass_name(settings.k): pass_at_k_score(sampled, settings.samples, settings.k)},
            seconds=time.perf_counter() - tic,
            info={"kind": "math", "path": self.path, "problems": len(self.problems),
                  "max_new_tokens": settings.max_new_tokens, "temperature": temperature, "top_p": top_p},
        )


def answer_successes(
    policy: Policy, prompts: Sequence[list[int]], labels: Sequence[str], samples: int, params: SamplingParams,
    max_new_tokens: int, score: Callable[[str, str], float], seed: int, progress: Progress,
) -> list[int]:
    """Correct answers per problem out of ``samples`` each."""
    correct: list[int] = []
    indices = list(range(len(prompts)))
    for index, chunk in enumerate(batches(indices, samples, policy.batch_rows)):
        requests = [Request(prompts[i], max_new_tokens) for i in chunk for _ in range(samples)]
        completions = policy.sampler.generate(requests, params, seed=seed * 1_000 + index)
        for j, i in enumerate(chunk):
            answers = completions[j * samples:(j + 1) * samples]
            correct.append(sum(int(score(c.text, labels[i]) > 0) for c in answers))
        progress(len(requests))
    return correct
