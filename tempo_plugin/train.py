"""The embedded runtime's command line: ``python -m tempo_plugin.train [--flags]``.

``--advantage-estimator`` picks the loop (``estimators``): TEMPO, multi-turn GRPO and
Temporal GRPO play an environment (``embedded/multi_turn.py``); PPO, TPPO and GRPO with ``--task``
answer a single-turn task (``embedded/single_turn.py``). ``--help`` lists every setting.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

from tempo_plugin.config import ConfigError, parse_config
from tempo_plugin.run_lock import run_folder_lock, writer_lock


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
        if not any(a == "--out" or a.startswith("--out=") for a in argv):
            if cfg.resume:
                raise ConfigError("--resume needs --out DIR naming the run to continue")
            cfg.out = f"runs/{cfg.advantage_estimator}-{time.strftime('%Y%m%d-%H%M%S')}"
        if cfg.resume and not Path(cfg.out).is_dir():  # before the lock, which would create the folder
            raise ConfigError(f"--resume: no checkpoint in {Path(cfg.out) / 'checkpoints' / 'latest'}; check --out")
        # OMP_NUM_THREADS when set (e.g. 1 per run when several runs share a few cores), else all cores up to 16
        threads = os.environ.get("OMP_NUM_THREADS", "")
        torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else max(1, min(os.cpu_count() or 1, 16)))
        if cfg.multi_turn:
            from tempo_plugin.embedded.multi_turn import run
        else:
            from tempo_plugin.embedded.single_turn import run
        with writer_lock(run_folder_lock(cfg.out), "training"):  # one writer per run folder
            run(cfg)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
