"""Weights & Biases logging of an embedded run (``--wandb``): the same records as metrics.jsonl.

Every record the run writes to metrics.jsonl goes to wandb too, under the same metric names, with
``update`` as a metric (evaluations are logged at the update they follow; the base evaluation at
-1); the run's resolved configuration is the wandb config, and the curves PNG is logged at the end.
``WANDB_MODE=offline`` writes the run under ``<out>/wandb/offline-run-*`` with no network (upload
it later with ``wandb sync``). A resumed run (``--resume``) continues the same wandb run: its id is
kept in ``<out>/wandb_run_id``.
"""

from __future__ import annotations

import math
import secrets
from pathlib import Path
from typing import Any

from tempo_plugin.config import ConfigError

RUN_ID_FILE = "wandb_run_id"
MISSING_WANDB = "--wandb needs the wandb package: pip install -e .[wandb]"


class WandbRun:
    """One wandb run mirroring a run directory's metrics.jsonl."""

    def __init__(self, out: Path, config: dict[str, Any], project: str) -> None:
        try:
            import wandb
        except ImportError:
            raise ConfigError(MISSING_WANDB) from None
        self._wandb = wandb
        id_file = out / RUN_ID_FILE
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
        id_file.write_text(run_id)
        self._run = wandb.init(project=project, name=out.name, id=run_id, resume="allow", dir=str(out),
                               config=config)

    def log(self, record: dict[str, Any]) -> None:
        """The record's numeric values (``phase``, a word, is left out: ``update`` places the record)."""
        self._run.log({k: float(v) for k, v in record.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)})

    def finish(self, curves: Path | None = None) -> None:
        if curves is not None and curves.is_file():
            try:
                self._run.log({"curves": self._wandb.Image(str(curves))})
            except (ImportError, ValueError):  # wandb.Image needs pillow; the metrics are logged anyway
                pass
        self._run.finish()
