"""slime data source ``--data-source-path tempo_plugin.slime.data_source.TempoDataSource``.

TEMPO does not read prompts from a dataset: it plays games from seeds and resumes saved
mid-episode states. What a data source is for in slime is what TEMPO needs kept: it lives in the
RolloutManager process for the whole job (so the state store survives between rollouts), slime
hands it to the rollout function, and slime calls ``save(rollout_id)`` next to every checkpoint and
``load(start_rollout_id - 1)`` when a job starts, so a resumed job continues from its stored states.

Saved per checkpoint: ``<--save>/tempo/state_<rollout_id>.json`` with the state store (and its
sampling RNG) and the training-game cursor, as plain JSON (loading it runs no code); only the newest
``KEEP_STATE_FILES`` are kept (slime saves one per checkpoint, forever otherwise).

Multi-node: Ray may place the RolloutManager (and so this data source) on any node. It reads the
TEMPO YAML (``--custom-config-path``) and reads and writes ``SAVE_DIR/tempo``, so both must be at
the same path on every node (a shared filesystem). The recipe writes ``SAVE_DIR/tempo_launch_id``
on the head node and passes the id to the job as ``TEMPO_LAUNCH_ID``; :func:`check_shared_save_dir`
compares the two at start-up, so a SAVE_DIR the RolloutManager's node cannot see fails at once
instead of silently starting from an empty state store on resume.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from tempo_plugin.slime.settings import (
    check_global_batch_size,
    check_lr_schedule,
    optimiser_steps,
    sample_counts,
    tempo_config_from_args,
)
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.run_lock import acquire, run_folder_lock
from tempo_plugin.rollout.games import train_game
from tempo_plugin.states.store import StateStore

logger = logging.getLogger(__name__)


LAUNCH_ID_FILE = "tempo_launch_id"
"""Written into SAVE_DIR by the recipe (scripts/slime_common.sh) on the head node."""


KEEP_STATE_FILES = 2
"""State files kept in <--save>/tempo: the newest, and one before it in case its checkpoint is incomplete."""


def state_path(directory: str, rollout_id: int) -> Path:
    return Path(directory) / "tempo" / f"state_{rollout_id}.json"


def prune_state_files(folder: Path, keep: int = KEEP_STATE_FILES) -> list[Path]:
    """Delete all but the ``keep`` newest ``state_<id>.json`` files (by rollout id); the deleted ones."""
    numbered = sorted((int(p.stem.split("_", 1)[1]), p) for p in folder.glob("state_*.json")
                      if p.stem.split("_", 1)[1].isdigit())
    doomed = [p for _, p in numbered[:-keep]] if keep > 0 else []
    for p in doomed:
        p.unlink(missing_ok=True)
    return doomed


def check_shared_save_dir(save_dir: str | None, launch_id: str | None) -> None:
    """Raise ConfigError unless ``save_dir`` holds the launch id the recipe wrote on the head node.
    No check without a launch id (a job not started by our recipes) or without --save."""
    if not launch_id or not save_dir:
        return
    marker = Path(save_dir) / LAUNCH_ID_FILE
    seen = marker.read_text().strip() if marker.is_file() else None
    if seen != launch_id:
        raise ConfigError(
            f"SAVE_DIR={save_dir} on node {socket.gethostname()} does not hold this launch's {LAUNCH_ID_FILE} "
            f"({'missing' if seen is None else repr(seen)}, expected {launch_id!r}): the RolloutManager keeps the "
            "state store in SAVE_DIR/tempo, so SAVE_DIR must be on a filesystem every node shares"
        )


class TempoDataSource:
    """TEMPO's per-job state on slime: config, state store, game cursor, and the rollout machinery."""

    def __init__(self, args: Any) -> None:
        self.args = args
        check_shared_save_dir(getattr(args, "save", None), os.environ.get("TEMPO_LAUNCH_ID"))
        if getattr(args, "save", None):  # one writer of SAVE_DIR/tempo, held until this process ends
            acquire(run_folder_lock(Path(args.save) / "tempo"), "slime data source")
        self.cfg: TempoConfig = tempo_config_from_args(args)
        counts = sample_counts(self.cfg, str(getattr(args, "rollout_function_path", "")))
        check_global_batch_size(getattr(args, "global_batch_size", None), counts)
        if getattr(args, "global_batch_size", None) is not None:
            check_lr_schedule(args, optimiser_steps(self.cfg, counts, args.global_batch_size, int(args.num_rollout)))
        self.store = StateStore(self.cfg.state_store_capacity, seed=self.cfg.seed + 1)
        self.game_cursor = 0
        self._rollout: Any = None
        self._eval_rollout: Any = None
        self._make_eval_env: Any = None
        if getattr(args, "eval_interval", None) and self.cfg.eval_games > 0:
            self._make_eval_env = self._eval_env_factory()  # a missing held-out folder fails at start-up

    # -- what the rollout functions use -------------------------------------------------------------

    def next_game(self) -> int:
        self.game_cursor += 1
        return train_game(self.cfg.seed, self.game_cursor - 1, self.cfg.train_games)

    def rollout(self) -> Any:
        """The TempoRollout over the SGLang router (built on first use: the router is up by then)."""
        if self._rollout is None:
            from transformers import AutoTokenizer

            from tempo_plugin.samplers.sglang_http import HTTPSampler
            from tempo_plugin.envs import env_factory
            from tempo_plugin.rollout.protocol import ChatProtocol
            from tempo_plugin.updates.rollout import TempoRollout

            tokenizer = AutoTokenizer.from_pretrained(self.args.hf_checkpoint, trust_remote_code=True)
            url = f"http://{self.args.sglang_router_ip}:{self.args.sglang_router_port}/generate"
            # as many requests in flight as slime lets its own rollout send to one engine; a server is
            # dead once its /health has not answered for slime's own health-check timeout
            sampler = HTTPSampler(url, max_workers=int(getattr(self.args, "sglang_server_concurrency", 64) or 64),
                                  health_timeout_s=float(getattr(self.args, "rollout_health_check_timeout", 30.0)),
                                  seed_requests=bool(getattr(self.args, "sglang_enable_deterministic_inference", False)))
            cfg = self.cfg
            make_env = env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data, cfg.vaults)
            self._rollout = TempoRollout(cfg, sampler, ChatProtocol(tokenizer), make_env)
        return self._rollout

    def _eval_env_factory(self) -> Any:
        """``envs.eval_env_factory`` for the run's settings; ConfigError (one line naming the folder and
        the command that makes it) when the held-out games are missing."""
        from tempo_plugin.envs import eval_env_factory

        cfg = self.cfg
        try:
            return eval_env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data, cfg.vaults, cfg.eval_split)
        except (ValueError, ImportError, FileNotFoundError) as error:
            raise ConfigError(str(error)) from None

    def eval_rollout(self) -> Any:
        """The TempoRollout of the held-out games (``envs.eval_env_factory``: for TextWorld and ALFWorld
        a folder training never plays), sharing the training rollout's sampler; built on first use.
        With slime's --eval-interval the held-out games are checked when the data source starts."""
        if self._eval_rollout is None:
            from tempo_plugin.updates.rollout import TempoRollout

            train = self.rollout()
            make_env = self._make_eval_env or self._eval_env_factory()
            self._eval_rollout = TempoRollout(self.cfg, train.sampler, train.protocol, make_env)
        return self._eval_rollout

    # -- slime's data-source interface --------------------------------------------------------------

    def get_samples(self, num_samples: int) -> list:
        raise RuntimeError(
            "TempoDataSource serves TEMPO's rollout functions only: set --rollout-function-path "
            "tempo_plugin.slime.rollout.generate_rollout (or generate_grpo_rollout)"
        )

    def add_samples(self, samples: list) -> None:
        raise RuntimeError("TempoDataSource keeps no sample buffer (partial rollouts are not supported)")

    def save(self, rollout_id: int) -> None:
        if self.args.save is None:
            return
        path = state_path(self.args.save, rollout_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"game_cursor": self.game_cursor, "store": self.store.state_dict()}))
        tmp.replace(path)
        pruned = prune_state_files(path.parent)
        logger.info(f"saved {len(self.store)} TEMPO states and game cursor {self.game_cursor} to {path}"
                    + (f"; removed {len(pruned)} older state files" if pruned else ""))

    def load(self, rollout_id: int | None = None) -> None:
        """The state saved at ``rollout_id`` under --load, else under --save: slime points --load at
        --ref-load when --load holds no Megatron checkpoint, though --save may hold TEMPO's states."""
        if rollout_id is None or rollout_id < 0:
            return
        folders = [f for f in (self.args.load, self.args.save) if f is not None]
        path = next((state_path(f, rollout_id) for f in folders if state_path(f, rollout_id).exists()), None)
        if path is None:
            logger.warning(f"no TEMPO state for rollout {rollout_id} under {' or '.join(folders) or 'no --load/--save'}: "
                           "starting with an empty state store")
            return
        payload = json.loads(path.read_text())
        self.store = StateStore.from_state_dict(payload["store"], capacity=self.cfg.state_store_capacity)
        self.game_cursor = int(payload["game_cursor"])
        logger.info(f"loaded {len(self.store)} TEMPO states and game cursor {self.game_cursor} from {path}")

    def __len__(self) -> int:
        return len(self.store)

