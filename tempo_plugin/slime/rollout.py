"""slime rollout hooks (``--rollout-function-path``), synchronous, called once per rollout id.

``generate_rollout``: TEMPO. Rollouts ``0 .. warmup_updates-1`` are the critic warm-up (complete
episodes, Monte-Carlo targets at macro-step boundaries), the rest are TD updates (start states from
the store topped up with fresh games, N branches x H rounds, critic at start states and endpoints).
Both run through the shared engine (``updates.rollout.TempoRollout``, phases from ``updates.schedule``) with an HTTP Sampler on the
SGLang router's ``/generate``; the state store lives in ``TempoDataSource``.

``generate_grpo_rollout``: the multi-turn GRPO baseline on the same environment, the embedded
runtime's ``TempoRollout.episode_update``: S games x N complete episodes, each sample's reward its
group-relative advantage (a game whose environment raised is dropped, as are degenerate groups:
padding), so it needs the reward post-process of TEMPO too.

``generate_temporal_grpo_rollout``: Temporal GRPO (``TempoRollout.stage_update``): S games x N
complete episodes; each sample carries its per-token stage advantages in its metadata (see
``samples.TOKEN_ADVANTAGES``), reward = episode return (for logging); the update's degenerate
episodes (all advantages ~0) are padding. Needs the hooks of ``temporal_grpo``.

With ``evaluation=True`` all three play ``eval_games`` held-out games once each and return the success
rate as slime's eval output, logged as ``eval/success_rate``. The held-out games are those of
``TempoDataSource.eval_rollout`` (``envs.eval_env_factory``: for TextWorld and ALFWorld a folder of
games training never plays, ALFWorld's split from ``eval_split`` in the TEMPO YAML).

slime logs a rollout function's metrics with ``rollout/step``, and its wandb setup plots a name
against that step only under the prefixes bound to it (``metrics.SLIME_ROLLOUT_STEP_PREFIXES``), so
``critic/value_corr`` is returned as ``rollout/critic/value_corr``, ``train/actor_samples`` as
``rollout/train/actor_samples``, and so on.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tempo_plugin.slime.data_source import TempoDataSource
from tempo_plugin.slime.samples import from_episode, slime_groups
from tempo_plugin.slime.settings import episode_sample_count, td_sample_count, warmup_sample_count
from tempo_plugin.config import ConfigError
from tempo_plugin.estimators import ESTIMATORS
from tempo_plugin.metrics import SUCCESS_RATE, slime_metric_names
from tempo_plugin.rollout.games import eval_games
from tempo_plugin.updates.play import UpdateBatch
from tempo_plugin.updates.schedule import TD, WARMUP, phase, run_update


def slime_types() -> SimpleNamespace:
    """slime's Sample and rollout output classes (imported here, never at module import)."""
    from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
    from slime.utils.types import Sample

    return SimpleNamespace(Sample=Sample, TrainOutput=RolloutFnTrainOutput, EvalOutput=RolloutFnEvalOutput)


def _tempo_source(data_source: Any) -> TempoDataSource:
    if not isinstance(data_source, TempoDataSource):
        raise ConfigError(
            f"TEMPO's rollout function needs --data-source-path tempo_plugin.slime.data_source.TempoDataSource "
            f"(got {type(data_source).__name__})"
        )
    return data_source


def generate_rollout(args, rollout_id, data_source, evaluation=False):
    source = _tempo_source(data_source)
    types = slime_types()
    if evaluation:
        return evaluate(source, types)
    cfg = source.cfg
    rollout = source.rollout()
    name = phase("tempo", cfg.warmup_updates, rollout_id)
    # a warm-up values at most S states: its rollout holds S x K samples
    batch = run_update(rollout, name, rollout_id, source.next_game, source.store, max_warmup_states=cfg.states_per_batch)
    if name == TD:
        source.store.add(batch.new_states)
    batch.metrics["store/size"] = float(len(source.store))
    count = warmup_sample_count(cfg) if name == WARMUP else td_sample_count(cfg)
    return train_output(batch, count, rollout_id, rollout, types)


def generate_grpo_rollout(args, rollout_id, data_source, evaluation=False):
    return _episode_rollout("grpo", rollout_id, data_source, evaluation)


def generate_temporal_grpo_rollout(args, rollout_id, data_source, evaluation=False):
    return _episode_rollout("temporal_grpo", rollout_id, data_source, evaluation)


def _episode_rollout(estimator: str, rollout_id: int, data_source: Any, evaluation: bool) -> Any:
    """One rollout of an episode estimator (multi-turn GRPO, Temporal GRPO): S games x N complete
    episodes; Temporal GRPO hands slime per-token advantages."""
    source = _tempo_source(data_source)
    types = slime_types()
    if evaluation:
        return evaluate(source, types)
    rollout = source.rollout()
    batch = run_update(rollout, phase(estimator, 0, rollout_id), rollout_id, source.next_game, source.store)
    return train_output(batch, episode_sample_count(source.cfg), rollout_id, rollout, types,
                        token_advantages=ESTIMATORS[estimator].stages)


def train_output(batch: UpdateBatch, count: int, rollout_id: int, rollout: Any, types: SimpleNamespace,
                 token_advantages: bool = False) -> Any:
    """slime's train output of one update: its samples as exactly ``count`` slime samples (padding
    included, ``samples.slime_groups``), its metrics under names slime plots against the rollout step."""
    tokenizer = rollout.protocol.tokenizer
    groups = slime_groups(batch.samples, count, types.Sample, tokenizer.decode, _pad_token_id(tokenizer),
                          first_index=rollout_id * count, token_advantages=token_advantages)
    metrics = {**batch.metrics, "train/removed_samples": float(count - len(batch.samples))}
    return types.TrainOutput(samples=groups, metrics=slime_metric_names(metrics))


def evaluate(source: TempoDataSource, types: SimpleNamespace) -> Any:
    """One episode on each of the ``eval_games`` held-out games; reward 1 for a win."""
    cfg = source.cfg
    if cfg.eval_games < 1:
        raise ConfigError("slime asked for an evaluation (--eval-interval) but eval_games is 0 in the TEMPO YAML")
    rollout = source.eval_rollout()
    branches = rollout.play_episodes(eval_games(cfg.eval_games), seed=cfg.seed)
    decode = rollout.protocol.tokenizer.decode
    samples = [from_episode(b, float(b.won), types.Sample, i, decode) for i, b in enumerate(branches)]
    name = SUCCESS_RATE.split("/", 1)[1]  # slime logs eval/<name>
    data = {
        name: {
            "rewards": [s.reward for s in samples],
            "truncated": [s.status == types.Sample.Status.TRUNCATED for s in samples],
            "samples": samples,
        }
    }
    return types.EvalOutput(data=data, metrics=None)


def _pad_token_id(tokenizer: Any) -> int:
    token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return int(token_id)
