"""Parse recipe argument lists with slime's own argument definitions (run as a subprocess by
tests/test_slime_recipe_args.py; reads a JSON object {name: [args...]} on stdin, prints one JSON
object {name: {"error": str | null, "unknown": [flags]}}).

slime's full parser (``slime.utils.arguments.parse_args``) adds SGLang's server arguments (the
``sglang`` package, GPU-only) and hands everything else to Megatron-LM's parser
(``megatron.training``, which is not on the package index). So: SGLang's and its router's
``add_cli_args`` are empty stand-ins, and slime's own arguments (``get_slime_extra_args_provider``,
every flag slime defines, with its types and choices) parse the list with ``parse_known_args``.
What slime does not know is returned as ``unknown``: the caller checks it is Megatron's.
"""

from __future__ import annotations

import argparse
import json
import sys
import types


def stub_sglang() -> None:
    for name in ("sglang", "sglang.srt", "sglang_router"):
        sys.modules.setdefault(name, types.ModuleType(name))
    server_args = types.ModuleType("sglang.srt.server_args")
    server_args.ServerArgs = type("ServerArgs", (), {"add_cli_args": staticmethod(lambda parser: None)})
    router = types.ModuleType("sglang_router.launch_router")
    router.RouterArgs = type("RouterArgs", (), {"add_cli_args": staticmethod(lambda parser, **kw: None)})
    sys.modules["sglang.srt.server_args"] = server_args
    sys.modules["sglang_router.launch_router"] = router


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # raise instead of exiting
        raise _Refused(message)


def main() -> None:
    stub_sglang()
    from slime.utils.arguments import get_slime_extra_args_provider

    results = {}
    for name, args in json.load(sys.stdin).items():
        parser = _Parser(allow_abbrev=False)
        get_slime_extra_args_provider()(parser)
        # the flags slime pre-parses before this parser (slime.utils.arguments._pre_parse_mode)
        parser.add_argument("--train-backend", choices=["megatron"], default="megatron")
        parser.add_argument("--debug-rollout-only", action="store_true")
        try:
            _, unknown = parser.parse_known_args(args)
            results[name] = {"error": None, "unknown": [a for a in unknown if a.startswith("--")]}
        except _Refused as error:
            results[name] = {"error": str(error), "unknown": []}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
