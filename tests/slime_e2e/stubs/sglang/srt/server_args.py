"""Test-only stand-in for sglang.srt.server_args (GPU-only package): a ServerArgs dataclass with the fields slime reads (as --sglang-* flags and through dataclasses.fields) and an add_cli_args that registers them."""

from __future__ import annotations

import argparse
import dataclasses


@dataclasses.dataclass
class ServerArgs:
    # slime skips these when it builds its --sglang-* flags and fills them itself
    model_path: str = ""
    trust_remote_code: bool = False
    random_seed: int | None = None
    enable_memory_saver: bool = False
    tp_size: int = 1
    port: int = 30000
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    gpu_id_step: int = 1
    base_gpu_id: int = 0
    nccl_port: int | None = None
    skip_server_warmup: bool = False
    # read by slime as args.sglang_<name>
    host: str = "127.0.0.1"
    dp_size: int = 1
    pp_size: int = 1
    ep_size: int = 1
    moe_dp_size: int = 1
    enable_dp_attention: bool = False
    enable_deterministic_inference: bool = False
    mem_fraction_static: float | None = None
    enable_draft_weights_cpu_backup: bool = False
    enable_metrics: bool = False
    dtype: str = "auto"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """One --<field-name> flag per field (slime's wrapper prefixes them with --sglang-)."""
        optional = {"random_seed": int, "nccl_port": int, "dist_init_addr": str, "mem_fraction_static": float}
        for field in dataclasses.fields(ServerArgs):
            flag = "--" + field.name.replace("_", "-")
            if isinstance(field.default, bool):
                parser.add_argument(flag, action="store_true", default=field.default)
            else:
                parser.add_argument(flag, type=optional.get(field.name, type(field.default)), default=field.default)

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
