"""Ask slime's own RolloutManager for TRAIN data (run as a subprocess by tests/test_slime_e2e.py).

In rollout-only mode (``--debug-rollout-only``) ``RolloutManager.generate`` returns before it turns
the samples into train data, so train.py never shows that step. This driver builds the
RolloutManager the way train.py does (``create_rollout_manager``, slime's parsed arguments, our
server as the external engine and router), switches rollout-only OFF, hands it a train parallel
config of one data-parallel rank (what the Megatron actor would report), and calls
``generate(rollout_id)``: the rollout function runs, then slime's reward post-process, conversion
(``_convert_samples_to_train_data``) and split (``_split_train_data_by_dp``); each rank's data comes
back as a Box holding a Ray ObjectRef, resolved here.

    python train_data_driver.py OUT.json PHASES -- <train.py flags, with --debug-rollout-only>

PHASES is a comma-separated list of ``name:rollout_function:rollout_id`` (rollout_function a name in
recording_rollout); phases sharing a rollout function share one RolloutManager (so a TD rollout
after the warm-up finds the state store the warm-up left), in the order given.

The rollout functions are the test's recording wrappers (recording_rollout.py): they run our real
rollout functions and record the embedded runtime's TrainSamples for the same rollout. OUT.json gets,
per phase, slime's rank-0 train data (lists), the recorded TrainSamples, and the roles in train-data
order chunked into optimiser steps of --global-batch-size samples. The test compares them.
"""

from __future__ import annotations

import copy
import json
import socket
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain(value):
    """Tensors and nested lists of them as plain lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def wait_for_lock_free(path: Path, timeout_s: float = 60.0) -> None:
    """Wait until no process holds the flock of ``path`` (a killed actor's process may take a moment to end)."""
    import fcntl
    import os
    import time

    if not path.exists():
        return
    deadline = time.monotonic() + timeout_s
    fd = os.open(path, os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{path} still held {timeout_s:g} s after its RolloutManager was killed") from None
                time.sleep(0.2)
    finally:
        os.close(fd)


def main() -> None:
    out_path, phases_arg = sys.argv[1], sys.argv[2]
    assert sys.argv[3] == "--", "usage: train_data_driver.py OUT.json PHASES -- <train.py flags>"
    sys.argv = [sys.argv[0], *sys.argv[4:]]  # slime's parser reads sys.argv

    import ray
    from slime.ray.placement_group import create_rollout_manager
    from slime.utils.arguments import parse_args

    import recording_rollout
    from tempo_plugin.run_lock import run_folder_lock
    from compare import match_rows, roles_per_step

    # Parsed as train.py parses them, with --debug-rollout-only: the Megatron side (its argument
    # validation, the model config check against --hf-checkpoint) is not there on CPU. Then the
    # RolloutManager gets rollout-only OFF, so generate() converts and splits its samples.
    base = parse_args()
    assert base.debug_rollout_only, "pass --debug-rollout-only (switched off here, after parsing)"
    phases = [p.split(":") for p in phases_arg.split(",")]
    ray.init(address="auto")
    managers: dict[str, object] = {}
    result: dict[str, dict] = {}
    try:
        for name, function, rollout_id in phases:
            rollout_id = int(rollout_id)
            if function not in managers:
                # one RolloutManager at a time: its data source holds SAVE_DIR/tempo's writer lock
                # for as long as its process lives, as in a real job (phases of one function are contiguous)
                for other in managers.values():
                    ray.get(other.dispose.remote())
                    ray.kill(other)
                managers.clear()
                wait_for_lock_free(run_folder_lock(Path(base.save) / "tempo"))
                args = copy.deepcopy(base)
                args.debug_rollout_only = False
                args.rollout_function_path = f"recording_rollout.{function}"
                args.eval_function_path = args.rollout_function_path
                if args.sglang_router_ip is None and managers:
                    # slime launches a router for each RolloutManager: the next one needs its own port
                    args.sglang_router_port = free_port()
                manager, _ = create_rollout_manager(args, None)  # external engines: no placement group used
                # what the Megatron actor reports at start-up (TrainRayActor.set_rollout_manager): one DP rank
                ray.get(manager.set_train_parallel_config.remote(
                    {"dp_size": 1, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}))
                managers[function] = manager
            manager = managers[function]
            boxes = ray.get(manager.generate.remote(rollout_id))
            ranks = [plain(ray.get(box.inner)) for box in boxes]
            records = sorted(recording_rollout.record_dir(base).glob(f"*_{rollout_id}.json"))
            recorded = [json.loads(p.read_text()) for p in records]
            rank = ranks[0]
            samples = [s for record in recorded for s in record["samples"]]
            steps = roles_per_step(rank, samples, match_rows(rank, samples), base.global_batch_size)
            result[name] = {
                "rollout_id": rollout_id,
                "function": function,
                "num_ranks": len(ranks),
                "train_data": rank,
                "recorded": recorded,
                "global_batch_size": base.global_batch_size,
                "roles_per_step": steps,
            }
            print(f"{name} (rollout {rollout_id}): roles per optimiser step of {base.global_batch_size}: {steps}",
                  flush=True)
            # the record of this rollout id is consumed: a later phase with the same id (another
            # function) must find only its own
            for p in records:
                p.rename(p.with_name(f"{name}.{p.name}.done"))
        Path(out_path).write_text(json.dumps(result))
    finally:
        for manager in managers.values():
            try:
                ray.get(manager.dispose.remote())
            finally:
                ray.kill(manager)
        ray.shutdown()


if __name__ == "__main__":
    main()
