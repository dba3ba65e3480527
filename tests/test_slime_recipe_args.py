"""Every recipe's full train.py argument list (as its --dry-run prints it) parses with slime's own
argument definitions at the pinned commit (tests/slime_parse_args.py, in a subprocess).

What cannot be checked on CPU: Megatron-LM's parser lives in ``megatron.training``, which ships
only with the Megatron-LM repository (megatron-core on the package index lacks it), and SGLang's
server arguments need the ``sglang`` package (GPU-only). So the flags slime does not define must be
exactly the Megatron flags listed below or ``--sglang-*`` server flags; a misspelt slime flag shows
up as unknown and fails.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.extras import needs_slime
from test_recipes import PROMPT_RECIPES, RECIPES, run, setup, stubs, train_args  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]

# Megatron-LM flags the recipes pass (model shape, optimizer, parallelism, recompute, numerics).
MEGATRON_FLAGS = {
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--swiglu", "--num-attention-heads",
    "--group-query-attention", "--num-query-groups", "--kv-channels", "--qk-layernorm", "--normalization",
    "--norm-epsilon", "--use-rotary-position-embeddings", "--rotary-base", "--disable-bias-linear",
    "--vocab-size", "--untie-embeddings-and-output-weights", "--add-qkv-bias",
    "--optimizer", "--lr-decay-style", "--weight-decay", "--adam-beta1", "--adam-beta2",
    "--tensor-model-parallel-size", "--sequence-parallel", "--pipeline-model-parallel-size",
    "--context-parallel-size", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--attention-dropout", "--hidden-dropout", "--accumulate-allreduce-grads-in-fp32",
    "--attention-softmax-in-fp32", "--attention-backend",
}



def parse_with_slime(arg_lists: dict) -> dict:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "slime_parse_args.py")], input=json.dumps(arg_lists),
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@needs_slime
def test_every_recipe_parses_with_slimes_arguments(stubs, setup):  # noqa: F811
    arg_lists = {}
    for recipe in sorted(RECIPES) + sorted(PROMPT_RECIPES):
        result = run(recipe, stubs, "--dry-run", NUM_NODES="2", WANDB_KEY="k", EVAL_DATA=setup["PROMPT_DATA"], **setup)
        assert result.returncode == 0, result.stderr
        arg_lists[recipe] = train_args(result.stdout, setup["SLIME_DIR"])
    parsed = parse_with_slime(arg_lists)
    assert set(parsed) == set(arg_lists)
    for recipe, outcome in parsed.items():
        assert outcome["error"] is None, f"{recipe}: {outcome['error']}"
        foreign = {f for f in outcome["unknown"] if not f.startswith("--sglang-")}
        assert foreign <= MEGATRON_FLAGS, f"{recipe}: flags neither slime nor Megatron define: {foreign - MEGATRON_FLAGS}"


@needs_slime
def test_a_misspelt_or_ill_typed_flag_is_caught():
    base = ["--rollout-batch-size", "8"]  # required by slime
    parsed = parse_with_slime({"typo": [*base, "--n-samples-per-prmopt", "8"], "type": ["--rollout-batch-size", "eight"],
                               "json": [*base, "--apply-chat-template-kwargs", "{enable_thinking: false}"],
                               "missing": ["--n-samples-per-prompt", "8"]})
    assert parsed["typo"] == {"error": None, "unknown": ["--n-samples-per-prmopt"]}
    assert "required: --rollout-batch-size" in parsed["missing"]["error"]
    assert "--rollout-batch-size" in parsed["type"]["error"]
    assert "--apply-chat-template-kwargs" in parsed["json"]["error"]
