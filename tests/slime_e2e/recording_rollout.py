"""Test-only rollout functions for slime (``--rollout-function-path recording_rollout.<name>``): each
calls our real rollout function (tempo_plugin.slime.rollout) unchanged, and records what
the embedded runtime's update computed for that rollout, the ``UpdateBatch.samples`` (TrainSample:
tokens, loss mask, old log-probs, per-token advantages, role, group), as JSON in
``<--save>/recorded/<update method>_<rollout id>.json``.

The record is written where the RolloutManager runs (a Ray actor, which does not see the driver's
environment), so its folder is derived from slime's ``--save``. tests/slime_e2e/train_data_driver.py
compares slime's train data with it, field by field.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from tempo_plugin.slime import rollout as slime_rollout
from tempo_plugin.updates.rollout import TempoRollout

UPDATE_METHODS = ("warmup_update", "td_update", "episode_update", "stage_update")


def record_dir(args) -> Path:
    return Path(args.save) / "recorded"


def record_path(args, method: str, rollout_id: int) -> Path:
    return record_dir(args) / f"{method}_{rollout_id}.json"


@contextlib.contextmanager
def recording(args, rollout_id: int):
    """While active, every TempoRollout update writes its samples to ``record_path``."""
    originals = {name: getattr(TempoRollout, name) for name in UPDATE_METHODS}

    def wrap(name, original):
        def recorded(self, update, *rest, **kwargs):
            batch = original(self, update, *rest, **kwargs)
            samples = [{**asdict(s), "prompt_length": s.prompt_length} for s in batch.samples]
            path = record_path(args, name, rollout_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps({"method": name, "update": update, "rollout_id": rollout_id, "samples": samples}))
            os.replace(tmp, path)
            return batch

        return recorded

    for name, original in originals.items():
        setattr(TempoRollout, name, wrap(name, original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(TempoRollout, name, original)


def generate_rollout(args, rollout_id, data_source, evaluation=False):
    with recording(args, rollout_id):
        return slime_rollout.generate_rollout(args, rollout_id, data_source, evaluation=evaluation)


def generate_grpo_rollout(args, rollout_id, data_source, evaluation=False):
    with recording(args, rollout_id):
        return slime_rollout.generate_grpo_rollout(args, rollout_id, data_source, evaluation=evaluation)


def generate_temporal_grpo_rollout(args, rollout_id, data_source, evaluation=False):
    with recording(args, rollout_id):
        return slime_rollout.generate_temporal_grpo_rollout(args, rollout_id, data_source, evaluation=evaluation)
