"""The slime launch recipes in scripts/<model>/ (bash), run without Ray, slime or GPUs.

Every run puts a folder of stub commands (ray, pkill, sleep, nvidia-smi) first on PATH; each stub
logs its command line, so a test can tell exactly what a recipe would have started or killed.
The ``--dry-run`` output is parsed back with shlex, as a user would paste it into a shell.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"

RECIPES = {
    "qwen3-4B/tempo.sh": {"model": "4B", "algorithm": "tempo"},
    "qwen3-4B/grpo.sh": {"model": "4B", "algorithm": "grpo"},
    "qwen3-4B/temporal_grpo.sh": {"model": "4B", "algorithm": "temporal_grpo"},
    "qwen3-8B/tempo.sh": {"model": "8B", "algorithm": "tempo"},
    "qwen3-8B/grpo.sh": {"model": "8B", "algorithm": "grpo"},
    "qwen3-8B/temporal_grpo.sh": {"model": "8B", "algorithm": "temporal_grpo"},
}
ROLLOUT_FUNCTION = {
    "tempo": "tempo_plugin.slime.rollout.generate_rollout",
    "grpo": "tempo_plugin.slime.rollout.generate_grpo_rollout",
    "temporal_grpo": "tempo_plugin.slime.rollout.generate_temporal_grpo_rollout",
}
# The reward post-process and advantage hook of each tempo.yaml recipe (absent: slime's own).
REWARD_POST_PROCESS = {
    "tempo": "tempo_plugin.slime.reward.post_process",
    "grpo": "tempo_plugin.slime.reward.post_process",  # its rewards are advantages already
    "temporal_grpo": "tempo_plugin.slime.temporal_grpo.post_process",
}
ADVANTAGE_FUNCTION = {
    "temporal_grpo": "tempo_plugin.slime.temporal_grpo.advantages",
}
HIDDEN_SIZE = {"4B": "2560", "8B": "4096"}

# The single-turn prompt-data recipes (PROMPT_DATA instead of tempo.yaml): PPO and TPPO.
PROMPT_RECIPES = {
    "qwen3-4B/tppo.sh": {"model": "qwen3-4B", "algorithm": "tppo", "task": "math"},
    "qwen3-4B/ppo.sh": {"model": "qwen3-4B", "algorithm": "ppo", "task": "math"},
    "qwen3-8B/tppo.sh": {"model": "qwen3-8B", "algorithm": "tppo", "task": "math"},
    "qwen3-8B/ppo.sh": {"model": "qwen3-8B", "algorithm": "ppo", "task": "math"},
    "qwen2.5-math-1.5B/tppo.sh": {"model": "qwen2.5-math-1.5B", "algorithm": "tppo", "task": "countdown"},
}
TPPO_HOOKS = {
    "--custom-megatron-init-path": "tempo_plugin.slime.tppo.init",
    "--custom-advantage-function-path": "tempo_plugin.slime.tppo.advantages",
}
REWARD = {
    "math": "tempo_plugin.slime.rewards.math_reward",
    "countdown": "tempo_plugin.slime.rewards.countdown_reward",
}
# Per model: --tensor-model-parallel-size, --rollout-num-gpus-per-engine, --max-tokens-per-gpu,
# --rollout-max-response-len.
PROMPT_SIZES = {
    "qwen3-4B": ("2", "2", "9216", "4096"),
    "qwen3-8B": ("2", "2", "18432", "4096"),
    "qwen2.5-math-1.5B": ("1", "1", "9216", "1024"),
}

# Everything the recipes read from the environment: cleared so the caller's shell cannot leak in.
RECIPE_ENV = [
    "HF_CKPT", "REF_CKPT", "SAVE_DIR", "SLIME_DIR", "MEGATRON_DIR", "NUM_GPUS", "NUM_NODES",
    "MASTER_ADDR", "TEMPO_CONFIG", "WANDB_KEY", "DRY_RUN", "PROMPT_DATA", "EVAL_DATA", "TEMPO_ALLOW_SLIME_COMMIT",
    "TEMPO_LAUNCH_ID", "TASK",
]
# The slime commit the recipes are pinned to (SLIME_PINNED_COMMIT in scripts/slime_common.sh).
SLIME_PIN = "624b824a898ab0ec1fcb4d373004c7f3852bf515"

STUB = """#!/usr/bin/env bash
{{ printf '%q ' "$(basename "$0")" "$@"; echo; }} >> "$STUB_LOG"
{body}
"""
TOPO_NVLINK = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
TOPO_PCIE = "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n"

recipe_params = pytest.mark.parametrize("recipe", sorted(RECIPES))
prompt_recipe_params = pytest.mark.parametrize("recipe", sorted(PROMPT_RECIPES))
all_recipe_params = pytest.mark.parametrize("recipe", sorted(RECIPES) + sorted(PROMPT_RECIPES))


@pytest.fixture()
def stubs(tmp_path):
    """A bin folder of logging stand-ins; nvidia-smi prints the topology in $STUB_TOPO."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    bodies = {
        # also logs, one line per call, the TEMPO_LAUNCH_ID it was started with (empty: none)
        "ray": 'printf "%s\\n" "${TEMPO_LAUNCH_ID-}" >> "$STUB_LOG.env"',
        "pkill": "exit 1",  # as when nothing matched
        "sleep": "exit 0",
        "nvidia-smi": 'printf "%b" "${STUB_TOPO:-}"',
    }
    for name, body in bodies.items():
        path = bin_dir / name
        path.write_text(STUB.format(body=body))
        path.chmod(0o755)
    return bin_dir


@pytest.fixture()
def setup(tmp_path):
    """Existing HF and torch_dist directories, a fake slime checkout, a SAVE_DIR not yet made, and a
    prompt file (read only by the PPO/TPPO recipes)."""
    hf = tmp_path / "hf model"  # a space on purpose: quoting must survive the round trip
    ref = tmp_path / "ref"
    slime = tmp_path / "slime"
    for d in (hf, ref, slime):
        d.mkdir()
    (slime / "train.py").write_text("")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": [{"role": "user", "content": "1+1?"}], "label": "2"}\n')
    return {
        "HF_CKPT": str(hf),
        "REF_CKPT": str(ref),
        "SAVE_DIR": str(tmp_path / "save"),
        "SLIME_DIR": str(slime),
        "PROMPT_DATA": str(prompts),
    }


def run(recipe, stubs, *args, cwd=None, **env_vars):
    env = {k: v for k, v in os.environ.items() if k not in RECIPE_ENV}
    env["PATH"] = f"{stubs}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["STUB_LOG"] = str(stubs / "calls.log")
    env.update(env_vars)
    return subprocess.run(
        ["bash", str(SCRIPTS / recipe), *args],
        env=env, cwd=cwd or stubs, capture_output=True, text=True, timeout=10,
    )


def stub_calls(stubs):
    log = stubs / "calls.log"
    if not log.exists():
        return []
    return [shlex.split(line) for line in log.read_text().splitlines()]


def ray_calls(stubs):
    """Every call of the ray stub, with the TEMPO_LAUNCH_ID in its environment: [(argv, launch_id)]."""
    env_log = stubs / "calls.log.env"
    ids = env_log.read_text().splitlines() if env_log.exists() else []
    calls = [call for call in stub_calls(stubs) if call[0] == "ray"]
    assert len(calls) == len(ids)
    return list(zip(calls, ids))


def submitted_launch_id(stubs):
    """TEMPO_LAUNCH_ID in the runtime environment of the last `ray job submit` the stub saw."""
    submit = [call for call, _ in ray_calls(stubs) if call[:3] == ["ray", "job", "submit"]][-1]
    [flag] = [a for a in submit if a.startswith("--runtime-env-json=")]
    return json.loads(flag.split("=", 1)[1])["env_vars"]["TEMPO_LAUNCH_ID"]


def forget_calls(stubs):
    for log in ("calls.log", "calls.log.env"):
        (stubs / log).unlink(missing_ok=True)


def printed_command(stdout, prefix):
    """The one printed line starting with PREFIX, split as a shell would."""
    lines = [line for line in stdout.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0])


def train_args(stdout, slime_dir):
    """The arguments after `-- python3 <slime>/train.py` on the printed `ray job submit` line."""
    words = printed_command(stdout, "ray job submit")
    assert words[:3] == ["ray", "job", "submit"]
    assert "--address=http://127.0.0.1:8265" in words
    dash = words.index("--")
    assert words[dash + 1:dash + 3] == ["python3", f"{slime_dir}/train.py"]
    return words[dash + 3:]


def runtime_env(stdout, key="env_vars"):
    words = printed_command(stdout, "ray job submit")
    [flag] = [w for w in words if w.startswith("--runtime-env-json=")]
    return json.loads(flag.split("=", 1)[1]).get(key)


def values(args, flag):
    """Every value given to FLAG, in order."""
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def value(args, flag):
    found = values(args, flag)
    assert len(found) == 1, f"{flag}: {found}"
    return found[0]


# ---------------------------------------------------------------- environment checks


@all_recipe_params
def test_nothing_set_names_the_required_variables_and_runs_nothing(recipe, stubs):
    result = run(recipe, stubs)  # no --dry-run: the checks must come before anything is killed or started
    assert result.returncode == 2
    for name in ("HF_CKPT", "REF_CKPT", "SAVE_DIR"):
        assert name in result.stderr
    assert ("PROMPT_DATA" in result.stderr) == (recipe in PROMPT_RECIPES)
    assert all(line.startswith("error: ") for line in result.stderr.splitlines())
    assert stub_calls(stubs) == []


@all_recipe_params
def test_missing_ref_ckpt_is_named(recipe, stubs, setup):
    result = run(recipe, stubs, HF_CKPT=setup["HF_CKPT"], SAVE_DIR=setup["SAVE_DIR"], SLIME_DIR=setup["SLIME_DIR"])
    assert result.returncode == 2
    assert "REF_CKPT" in result.stderr
    assert "HF_CKPT" not in result.stderr
    assert stub_calls(stubs) == []


@all_recipe_params
def test_nonexistent_hf_ckpt_is_reported_missing(recipe, stubs, setup, tmp_path):
    result = run(recipe, stubs, **{**setup, "HF_CKPT": str(tmp_path / "nowhere")})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "HF_CKPT" in line and "nowhere" in line and "missing" in line
    assert stub_calls(stubs) == []


def test_slime_dir_without_train_py_is_reported(stubs, setup, tmp_path):
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", **{**setup, "SLIME_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert "SLIME_DIR" in result.stderr and "train.py" in result.stderr


def test_bad_gpu_count_is_reported(stubs, setup):
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", NUM_GPUS="eight", **setup)
    assert result.returncode == 2
    assert "NUM_GPUS" in result.stderr


def git_checkout(path):
    """Makes PATH a git checkout holding one commit; returns that commit."""
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True, timeout=10)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "not the pin"], check=True, timeout=10)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, timeout=10, capture_output=True, text=True)
    return head.stdout.strip()


def test_slime_checkout_off_the_pin_is_refused_unless_allowed(stubs, setup):
    head = git_checkout(setup["SLIME_DIR"])
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", **setup)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: SLIME_DIR=")
    for part in (setup["SLIME_DIR"], head, SLIME_PIN, "TEMPO_ALLOW_SLIME_COMMIT=any"):
        assert part in line

    allowed = run("qwen3-4B/tempo.sh", stubs, "--dry-run", TEMPO_ALLOW_SLIME_COMMIT="any", **setup)
    assert allowed.returncode == 0, allowed.stderr


def test_slime_checkout_at_the_pin_is_accepted(stubs, setup):
    (Path(setup["SLIME_DIR"]) / ".git").mkdir()
    git = stubs / "git"  # a checkout at the pinned commit, as `git rev-parse HEAD` reports it
    git.write_text(STUB.format(body=f"echo {SLIME_PIN}"))
    git.chmod(0o755)
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", **setup)
    assert result.returncode == 0, result.stderr
    assert ["git", "-C", setup["SLIME_DIR"], "rev-parse", "HEAD"] in stub_calls(stubs)


# ---------------------------------------------------------------- dry run


@all_recipe_params
def test_dry_run_prints_the_commands_and_touches_nothing(recipe, stubs, setup):
    result = run(recipe, stubs, "--dry-run", **setup)
    assert result.returncode == 0, result.stderr
    assert printed_command(result.stdout, "ray start") == [
        "ray", "start", "--head", "--node-ip-address", "127.0.0.1", "--num-gpus", "8",
        "--disable-usage-stats", "--dashboard-host=127.0.0.1", "--dashboard-port=8265",
    ]
    assert not Path(setup["SAVE_DIR"]).exists()
    assert [call[0] for call in stub_calls(stubs) if call[0] != "nvidia-smi"] == []


@recipe_params
def test_dry_run_train_arguments(recipe, stubs, setup):
    model, algorithm = RECIPES[recipe]["model"], RECIPES[recipe]["algorithm"]
    result = run(recipe, stubs, "--dry-run", **setup)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])

    assert value(args, "--hf-checkpoint") == setup["HF_CKPT"]
    assert value(args, "--ref-load") == setup["REF_CKPT"]
    assert value(args, "--save") == setup["SAVE_DIR"]
    assert value(args, "--load") == setup["SAVE_DIR"]

    assert value(args, "--rollout-function-path") == ROLLOUT_FUNCTION[algorithm]
    assert value(args, "--data-source-path") == "tempo_plugin.slime.data_source.TempoDataSource"
    config = Path(value(args, "--custom-config-path"))
    assert config.is_absolute() and config.is_file()
    assert config == SCRIPTS / "methods" / "tempo.yaml"  # the shared one: the model folder has none
    for flag, hooks in (("--custom-reward-post-process-path", REWARD_POST_PROCESS),
                        ("--custom-advantage-function-path", ADVANTAGE_FUNCTION)):
        if algorithm in hooks:
            assert value(args, flag) == hooks[algorithm]
        else:
            assert flag not in args
    # every hook path names a function that exists (imported without slime, torch or GPUs)
    for path in [value(args, "--rollout-function-path"), *(value(args, f) for f in (
            "--custom-reward-post-process-path", "--custom-advantage-function-path") if f in args)]:
        module, _, name = path.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), path

    assert value(args, "--global-batch-size") == "256"
    assert value(args, "--rollout-batch-size") == "32"
    assert value(args, "--n-samples-per-prompt") == "8"
    assert value(args, "--num-rollout") == "300"
    assert value(args, "--advantage-estimator") == "grpo"
    assert values(args, "--eval-prompt-data") == ["tempo"] and "held-out" in args
    assert value(args, "--actor-num-nodes") == "1"
    assert value(args, "--actor-num-gpus-per-node") == "8"
    assert "--colocate" in args
    assert value(args, "--tensor-model-parallel-size") == "2"
    assert value(args, "--rollout-num-gpus-per-engine") == "2"

    # the model architecture comes from scripts/models/<model>.sh
    assert value(args, "--num-layers") == "36"
    assert value(args, "--hidden-size") == HIDDEN_SIZE[model]
    assert ("--untie-embeddings-and-output-weights" in args) == (model == "8B")

    # the flags TEMPO must not get (see the recipe comments), and no W&B without a key
    # --use-rollout-logprobs: slime's recomputed old log-probs are the ones the losses need (docs/slime.md)
    for absent in ("--disable-rollout-global-dataset", "--log-passrate", "--num-steps-per-rollout", "--use-wandb",
                   "--use-rollout-logprobs"):
        assert absent not in args


@all_recipe_params
def test_runtime_env_puts_the_repository_on_pythonpath(recipe, stubs, setup):
    result = run(recipe, stubs, "--dry-run", MEGATRON_DIR="/opt/megatron", **setup)
    env = runtime_env(result.stdout)
    assert env["PYTHONPATH"].split(":") == ["/opt/megatron", str(REPO)]
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["NCCL_NVLS_ENABLE"] == "0"  # the stub's topology is empty


@pytest.mark.parametrize("topology, expected", [(TOPO_NVLINK, "1"), (TOPO_PCIE, "0")])
def test_nvlink_detection(stubs, setup, topology, expected):
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", STUB_TOPO=topology, **setup)
    assert runtime_env(result.stdout)["NCCL_NVLS_ENABLE"] == expected


@all_recipe_params
def test_extra_arguments_come_last_and_win(recipe, stubs, setup):
    result = run(recipe, stubs, "--num-rollout", "7", "--dry-run", "--seed", "3", **setup)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert values(args, "--num-rollout") == ["300", "7"]
    assert args[-4:] == ["--num-rollout", "7", "--seed", "3"]
    assert "--dry-run" not in args


def test_dry_run_from_the_environment(stubs, setup):
    result = run("qwen3-4B/grpo.sh", stubs, DRY_RUN="1", **setup)
    assert result.returncode == 0, result.stderr
    assert "ray job submit" in result.stdout
    assert not Path(setup["SAVE_DIR"]).exists()
    assert [call[0] for call in stub_calls(stubs) if call[0] != "nvidia-smi"] == []


@all_recipe_params
def test_multi_node(recipe, stubs, setup):
    result = run(recipe, stubs, "--dry-run", NUM_NODES="2", NUM_GPUS="4", MASTER_ADDR="10.0.0.1", **setup)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert value(args, "--actor-num-nodes") == "2"
    assert value(args, "--actor-num-gpus-per-node") == "4"
    head = printed_command(result.stdout, "ray start --head")
    assert head[head.index("--node-ip-address") + 1] == "10.0.0.1"
    assert head[head.index("--num-gpus") + 1] == "4"
    assert printed_command(result.stdout, "env SAVE_DIR=") == [
        "env", f"SAVE_DIR={setup['SAVE_DIR']}", "MASTER_ADDR=10.0.0.1", "NUM_GPUS=4",
        "bash", str(SCRIPTS / "join_node.sh"),
    ]


def test_single_node_prints_no_worker_command(stubs, setup):
    result = run("qwen3-8B/tempo.sh", stubs, "--dry-run", **setup)
    assert "--address=" not in result.stdout.replace("--address=http://127.0.0.1:8265", "")


def test_wandb_only_with_a_key_which_is_not_printed(stubs, setup):
    result = run("qwen3-8B/grpo.sh", stubs, "--dry-run", WANDB_KEY="s3cret", **setup)
    assert result.returncode == 0, result.stderr
    assert "s3cret" not in result.stdout
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert "--use-wandb" in args
    assert value(args, "--wandb-project") == "tempo"
    assert value(args, "--wandb-group") == "qwen3-8B-grpo"
    assert value(args, "--wandb-key") == "$WANDB_KEY"  # pasted into a shell, it expands to the key


def test_relative_paths_become_absolute(stubs, setup, tmp_path):
    relative = {k: os.path.relpath(v, tmp_path) for k, v in setup.items()}
    config = tmp_path / "my tempo.yaml"  # not the default, so the recipe must take TEMPO_CONFIG
    shutil.copy(SCRIPTS / "methods" / "tempo.yaml", config)
    relative["TEMPO_CONFIG"] = os.path.relpath(config, tmp_path)
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", cwd=tmp_path, **relative)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert value(args, "--hf-checkpoint") == setup["HF_CKPT"]
    assert value(args, "--ref-load") == setup["REF_CKPT"]
    assert value(args, "--save") == setup["SAVE_DIR"]
    assert Path(value(args, "--custom-config-path")) == config


# ---------------------------------------------------------------- launch (with stub ray)


def test_launch_clears_leftovers_starts_ray_and_submits(stubs, setup):
    result = run("qwen3-4B/tempo.sh", stubs, "--num-rollout", "5", NUM_NODES="2", **setup)
    assert result.returncode == 0, result.stderr
    assert Path(setup["SAVE_DIR"]).is_dir()
    calls = [call for call in stub_calls(stubs) if call[0] != "nvidia-smi"]
    # the launch id for the RolloutManager's shared-SAVE_DIR check, equal to the job's TEMPO_LAUNCH_ID
    submitted_env = json.loads(next(a for a in calls[-1] if a.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert (Path(setup["SAVE_DIR"]) / "tempo_launch_id").read_text().strip() == submitted_env["env_vars"]["TEMPO_LAUNCH_ID"]
    # a first launch stops nothing: no Ray head of its own to stop, and nothing is pkill'ed
    assert calls[0] == ["sleep", "3"]
    assert calls[1][:3] == ["ray", "start", "--head"]
    assert calls[2][:3] == ["ray", "job", "submit"]
    assert len(calls) == 3
    submitted = calls[2][calls[2].index("--") + 3:]
    assert values(submitted, "--num-rollout") == ["300", "5"]
    assert value(submitted, "--actor-num-nodes") == "2"
    # the other nodes join through join_node.sh, which follows this launch's id in SAVE_DIR
    assert "MASTER_ADDR=127.0.0.1 NUM_GPUS=8 bash " in result.stdout and "scripts/join_node.sh" in result.stdout


@all_recipe_params
def test_math_recipes_ship_math_verify_and_turn_qwen3_thinking_off(recipe, stubs, setup):
    import tomllib

    result = run(recipe, stubs, "--dry-run", **setup)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])
    math_extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["math"]
    uses_math = value(args, "--custom-rm-path") == "tempo_plugin.slime.rewards.math_reward" if "--custom-rm-path" in args else False
    assert runtime_env(result.stdout, "pip") == (math_extra if uses_math else None)
    single_turn_qwen3 = "--prompt-data" in args and recipe.startswith("qwen3")
    expected = ['{"enable_thinking":false}'] if single_turn_qwen3 else []
    assert values(args, "--apply-chat-template-kwargs") == expected
    if expected:
        assert json.loads(expected[0]) == {"enable_thinking": False}


def test_dashboard_binds_to_loopback_unless_asked(stubs, setup):
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", RAY_DASHBOARD_HOST="0.0.0.0", **setup)
    assert "--dashboard-host=0.0.0.0" in printed_command(result.stdout, "ray start")


def test_num_gpus_per_node_follows_num_gpus(stubs, setup):
    result = run("qwen3-4B/tempo.sh", stubs, "--dry-run", NUM_GPUS="4", **setup)
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert value(args, "--num-gpus-per-node") == "4" and value(args, "--actor-num-gpus-per-node") == "4"


def test_every_launch_gets_a_new_id_which_its_save_dir_holds(stubs, setup, tmp_path):
    """The id in SAVE_DIR/tempo_launch_id is this launch's TEMPO_LAUNCH_ID, and a relaunch at the same
    SAVE_DIR gets another one, so a node holding a stale copy of SAVE_DIR fails the shared-folder check."""
    from tempo_plugin.slime.data_source import check_shared_save_dir
    from tempo_plugin.config import ConfigError

    save = Path(setup["SAVE_DIR"])
    ids = []
    for _ in range(2):
        forget_calls(stubs)
        result = run("qwen3-4B/tempo.sh", stubs, **setup)
        assert result.returncode == 0, result.stderr
        ids.append(submitted_launch_id(stubs))
        assert (save / "tempo_launch_id").read_text() == ids[-1] + "\n"
        if len(ids) == 1:
            stale = tmp_path / "stale copy"
            stale.mkdir()
            (stale / "tempo_launch_id").write_text((save / "tempo_launch_id").read_text())
    assert ids[0] != ids[1]
    check_shared_save_dir(str(save), ids[1])
    with pytest.raises(ConfigError, match="stale copy"):
        check_shared_save_dir(str(stale), ids[1])


def test_relaunch_stops_only_the_processes_of_the_previous_launch(stubs, setup):
    """The Ray head runs with the launch's TEMPO_LAUNCH_ID in its environment, which its processes
    (raylet, workers, the SGLang servers they start) inherit, in a session of its own. A relaunch
    sends TERM to every process holding exactly the previous launch's id and to every process in
    such a process's session (Ray's renamed workers show no environment), and KILL to those that
    outlive it; processes of other launches or without an id are left alone, and `ray stop`, which
    stops every Ray cluster on the host, is never run."""
    first = run("qwen3-4B/tempo.sh", stubs, **setup)
    assert first.returncode == 0, first.stderr
    launch_id = submitted_launch_id(stubs)
    [head_id] = [tag for call, tag in ray_calls(stubs) if call[:3] == ["ray", "start", "--head"]]
    assert head_id == launch_id
    forget_calls(stubs)

    def process(launch, ignore_term=False):
        env = {k: v for k, v in os.environ.items() if k != "TEMPO_LAUNCH_ID"}
        if launch is not None:
            env["TEMPO_LAUNCH_ID"] = launch
        trap = "trap '' TERM; " if ignore_term else ""  # an ignored signal stays ignored across exec
        return subprocess.Popen(["bash", "-c", f"{trap}exec sleep 60"], env=env)

    def session_with_untagged_member(launch):
        """A session of its own: its leader holds ``launch``; a member does not (as a Ray worker that
        renamed itself shows no environment). Returns (leader, the member's pid)."""
        env = {k: v for k, v in os.environ.items() if k != "TEMPO_LAUNCH_ID"}
        env["TEMPO_LAUNCH_ID"] = launch
        leader = subprocess.Popen(["bash", "-c", "env -u TEMPO_LAUNCH_ID sleep 60 & echo $!; exec sleep 60"],
                                  env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
        return leader, int(leader.stdout.readline())

    procs, members = {}, {}
    try:
        procs["previous"] = process(launch_id)
        procs["previous, ignores TERM"] = process(launch_id, ignore_term=True)
        procs["another launch"] = process(launch_id + "0")
        procs["someone else"] = process("someone-else")
        procs["no launch id"] = process(None)
        procs["previous, own session"], members["previous"] = session_with_untagged_member(launch_id)
        procs["another launch, own session"], members["another launch"] = session_with_untagged_member(launch_id + "0")
        deadline = time.monotonic() + 5
        pids = [p.pid for p in procs.values()] + list(members.values())
        while not all(Path(f"/proc/{pid}/comm").read_text().strip() == "sleep" for pid in pids):
            assert time.monotonic() < deadline, "the test processes did not start"
            time.sleep(0.05)

        second = run("qwen3-4B/tempo.sh", stubs, **setup)
        assert second.returncode == 0, second.stderr
        assert procs["previous"].wait(timeout=5) == -15
        assert procs["previous, ignores TERM"].wait(timeout=5) == -9
        assert procs["previous, own session"].wait(timeout=5) == -15
        deadline = time.monotonic() + 5  # the untagged member of the previous launch's session: not our child
        while Path(f"/proc/{members['previous']}/comm").exists() and \
                Path(f"/proc/{members['previous']}/stat").read_text().split()[2] != "Z":
            assert time.monotonic() < deadline, "the untagged process in the previous launch's session still runs"
            time.sleep(0.05)
        for name in ("another launch", "someone else", "no launch id", "another launch, own session"):
            assert procs[name].poll() is None, name
        assert Path(f"/proc/{members['another launch']}/comm").read_text().strip() == "sleep"
        calls = [call for call in stub_calls(stubs) if call[0] != "nvidia-smi"]
        assert not any(call[:2] == ["ray", "stop"] or call[0] == "pkill" for call in calls)
        ray = [call[:3] for call in calls if call[0] == "ray"]
        assert ray == [["ray", "start", "--head"], ["ray", "job", "submit"]]
    finally:
        for pid in members.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_a_joined_node_follows_relaunches_stopping_only_the_old_launchs_processes(tmp_path):
    """scripts/join_node.sh on a worker node: joins with the id in SAVE_DIR/tempo_launch_id; when a
    relaunch writes a new id it stops this node's processes of the old launch (TERM) and joins the
    new one; TERM to the script stops the current launch's processes; other processes live on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ray.log"
    (bin_dir / "ray").write_text(f'#!/usr/bin/env bash\nprintf "%s %s\\n" "${{TEMPO_LAUNCH_ID-}}" "$*" >> {log}\n')
    (bin_dir / "ray").chmod(0o755)
    save = tmp_path / "save"
    save.mkdir()
    (save / "tempo_launch_id").write_text("tempo-a\n")
    env = {k: v for k, v in os.environ.items() if k not in RECIPE_ENV}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", SAVE_DIR=str(save), MASTER_ADDR="10.0.0.1",
               NUM_GPUS="4", TEMPO_JOIN_POLL_S="0.1")

    def tagged(launch):
        return subprocess.Popen(["sleep", "60"], env={**env, "TEMPO_LAUNCH_ID": launch})

    def wait_for(condition, what):
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    def joined():
        return log.read_text().splitlines() if log.exists() else []

    procs = {}
    join = subprocess.Popen(["bash", str(SCRIPTS / "join_node.sh")], env=env, stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(joined()) == 1, "the node did not join")
        assert joined() == ["tempo-a start --address=10.0.0.1:6379 --num-gpus 4"]
        procs = {name: tagged(name) for name in ("tempo-a", "tempo-b", "tempo-other")}
        (save / "tempo_launch_id").write_text("tempo-b\n")  # the head relaunched
        assert procs["tempo-a"].wait(timeout=10) == -15
        wait_for(lambda: len(joined()) == 2, "the node did not join the new launch")
        assert joined()[1] == "tempo-b start --address=10.0.0.1:6379 --num-gpus 4"
        assert procs["tempo-b"].poll() is None and procs["tempo-other"].poll() is None
        join.send_signal(signal.SIGTERM)
        assert join.wait(timeout=15) == 130
        assert procs["tempo-b"].wait(timeout=5) == -15
        assert procs["tempo-other"].poll() is None
    finally:
        for proc in [join, *procs.values()]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


# ---------------------------------------------------------------- tempo.yaml


TEMPO_KEYS = {
    "env", "macro_rounds", "max_episode_steps", "critic_samples", "endpoint_samples", "warmup_updates",
    "warmup_games_per_batch", "state_store_capacity", "max_trajectory_tokens", "max_assistant_tokens",
    "critic_max_tokens", "r_max", "eval_games",
}


@pytest.mark.parametrize("model", ["qwen3-4B", "qwen3-8B"])
def test_tempo_yaml_holds_only_tempo_settings_and_fits_the_batch_sizes(model, stubs, setup):
    import yaml

    settings = yaml.safe_load((SCRIPTS / "methods" / "tempo.yaml").read_text())
    assert set(settings) == TEMPO_KEYS
    assert settings["env"] == "vaults" and settings["critic_samples"] == 8

    k = settings["critic_samples"]
    for algorithm in ROLLOUT_FUNCTION:
        result = run(f"{model}/{algorithm}.sh", stubs, "--dry-run", **setup)
        args = train_args(result.stdout, setup["SLIME_DIR"])
        s, n = int(value(args, "--rollout-batch-size")), int(value(args, "--n-samples-per-prompt"))
        gbs = int(value(args, "--global-batch-size"))
        counts = [s * k, s * (n + k)] if algorithm == "tempo" else [s * n]
        assert all(count % gbs == 0 for count in counts), (algorithm, counts, gbs)
        # a packed micro-batch must hold the longest trajectory
        assert int(value(args, "--max-tokens-per-gpu")) >= settings["max_trajectory_tokens"]


@pytest.mark.parametrize("model", ["qwen3-4B", "qwen3-8B"])
@pytest.mark.parametrize("algorithm", sorted(ROLLOUT_FUNCTION))
def test_tempo_yaml_is_accepted_by_the_slime_settings(model, algorithm, stubs, setup):
    """The YAML and each recipe's flags together, as tempo_plugin reads them inside slime: the
    settings (for Temporal GRPO, an environment with milestones) and every phase's sample count
    divisible by --global-batch-size."""
    from types import SimpleNamespace

    from tempo_plugin.slime import settings

    result = run(f"{model}/{algorithm}.sh", stubs, "--dry-run", **setup)
    args = train_args(result.stdout, setup["SLIME_DIR"])
    function = value(args, "--rollout-function-path")
    namespace = SimpleNamespace(
        custom_config_path=value(args, "--custom-config-path"),
        rollout_batch_size=int(value(args, "--rollout-batch-size")),
        n_samples_per_prompt=int(value(args, "--n-samples-per-prompt")),
        rollout_temperature=float(value(args, "--rollout-temperature")),
        rollout_top_p=1.0,  # slime's defaults
        seed=1234,
        num_rollout=int(value(args, "--num-rollout")),
        rollout_function_path=function,
    )
    cfg = settings.tempo_config_from_args(namespace)
    counts = settings.sample_counts(cfg, function)
    expected = {"tempo": {"warm-up": 32 * 8, "TD": 32 * (8 + 8)}, "grpo": {"GRPO episode": 32 * 8},
                "temporal_grpo": {"Temporal GRPO episode": 32 * 8}}
    assert counts == expected[algorithm]
    settings.check_global_batch_size(int(value(args, "--global-batch-size")), counts)


# ---------------------------------------------------------------- PPO / TPPO (prompt data)


def printed_megatron_config(stdout, path):
    """The YAML a dry run says it would write to PATH, parsed."""
    import yaml

    lines = stdout.splitlines()
    start = lines.index(f"# would write {path}:") + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        body.append(line[4:])
    return yaml.safe_load("\n".join(body))


def critic_overrides(config):
    """The critic's overrides, checking the layout slime requires (one entry per role)."""
    entries = config["megatron"]
    assert isinstance(entries, list)
    assert sorted(entry["role"] for entry in entries) == ["actor", "critic"]
    [actor] = [entry for entry in entries if entry["role"] == "actor"]
    assert not actor.get("overrides")  # the actor takes the command line as it is
    [critic] = [entry for entry in entries if entry["role"] == "critic"]
    return critic["overrides"]


@prompt_recipe_params
def test_missing_prompt_data_is_named_with_how_to_make_it(recipe, stubs, setup):
    env = {k: v for k, v in setup.items() if k != "PROMPT_DATA"}
    result = run(recipe, stubs, **env)  # no --dry-run: nothing may be started
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: PROMPT_DATA is not set")
    task = PROMPT_RECIPES[recipe]["task"]
    expected = ("python -m tempo_plugin.tasks.countdown --out data/countdown/train.jsonl --count 20000 --seed 0"
                if task == "countdown" else "python data/prepare_math.py")
    assert expected in line
    assert stub_calls(stubs) == []


@prompt_recipe_params
def test_nonexistent_prompt_or_eval_data_is_reported(recipe, stubs, setup, tmp_path):
    result = run(recipe, stubs, **{**setup, "PROMPT_DATA": str(tmp_path / "nowhere.jsonl")})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "PROMPT_DATA" in line and "nowhere.jsonl" in line and "missing" in line

    result = run(recipe, stubs, **{**setup, "EVAL_DATA": str(tmp_path / "no-eval.jsonl")})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "EVAL_DATA" in line and "no-eval.jsonl" in line
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    for name in ("PROMPT_DATA", "EVAL_DATA"):
        result = run(recipe, stubs, **{**setup, name: str(empty)})
        assert result.returncode == 2
        [line] = result.stderr.splitlines()
        assert f"{name}={empty} holds no prompts" in line, line
    assert stub_calls(stubs) == []


@prompt_recipe_params
def test_prompt_recipes_need_no_tempo_yaml(recipe, stubs, setup, tmp_path):
    result = run(recipe, stubs, "--dry-run", TEMPO_CONFIG=str(tmp_path / "absent.yaml"), **setup)
    assert result.returncode == 0, result.stderr


@prompt_recipe_params
def test_prompt_recipe_dry_run_train_arguments(recipe, stubs, setup):
    model, algorithm, task = (PROMPT_RECIPES[recipe][k] for k in ("model", "algorithm", "task"))
    result = run(recipe, stubs, "--dry-run", **setup)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])

    assert value(args, "--hf-checkpoint") == setup["HF_CKPT"]
    assert value(args, "--ref-load") == setup["REF_CKPT"]
    assert value(args, "--save") == setup["SAVE_DIR"]
    assert value(args, "--load") == setup["SAVE_DIR"]

    # data and reward
    assert value(args, "--prompt-data") == setup["PROMPT_DATA"]
    assert value(args, "--input-key") == "prompt"
    assert value(args, "--label-key") == "label"
    for flag in ("--apply-chat-template", "--rollout-shuffle", "--balance-data"):
        assert flag in args
    assert value(args, "--custom-rm-path") == REWARD[task]
    assert value(args, "--num-rollout") == "300"
    assert value(args, "--rollout-batch-size") == "32"
    assert value(args, "--n-samples-per-prompt") == "8"
    assert value(args, "--global-batch-size") == "256"
    assert value(args, "--rollout-temperature") == "1.0"

    # PPO with a critic, none of the GRPO / KL-loss flags, no TEMPO hooks, no eval without EVAL_DATA
    assert value(args, "--advantage-estimator") == "ppo"
    assert value(args, "--num-critic-only-steps") == "1"
    assert value(args, "--kl-coef") == "0"
    assert value(args, "--eps-clip") == "0.2"
    assert value(args, "--eps-clip-high") == "0.28"
    for absent in ("--use-kl-loss", "--kl-loss-coef", "--rollout-function-path", "--data-source-path",
                   "--custom-config-path", "--custom-reward-post-process-path", "--eval-interval",
                   "--eval-prompt-data", "--use-wandb"):
        assert absent not in args, absent

    # TPPO's two hooks, and whitening only for plain PPO
    for flag, hook in TPPO_HOOKS.items():
        if algorithm == "tppo":
            assert value(args, flag) == hook
        else:
            assert flag not in args
    assert ("--normalize-advantages" in args) == (algorithm == "ppo")
    if algorithm == "tppo":
        assert value(args, "--gamma") == "1.0"
        assert value(args, "--lambd") == "0.95"

    # the per-role YAML: generated under SAVE_DIR at launch, printed (not written) by a dry run
    config_path = value(args, "--megatron-config-path")
    assert config_path == str(Path(setup["SAVE_DIR"]) / "ppo_megatron.yaml")
    assert not Path(setup["SAVE_DIR"]).exists()
    template = SCRIPTS / "methods" / "ppo_megatron.yaml"  # the shared one: the model folder has none
    assert f"#   # Generated from {template} at launch; edit that file, not this one." in result.stdout.splitlines()
    critic = critic_overrides(printed_megatron_config(result.stdout, config_path))
    assert critic["gamma"] == 1.0 and critic["lambd"] == 1.0
    assert isinstance(critic["lr"], float) and critic["lr"] == 1e-5
    assert critic["save"] == str(Path(setup["SAVE_DIR"]) / "critic")
    assert critic["load"] == setup["REF_CKPT"]  # no critic checkpoint yet: start from the reference weights
    assert critic["finetune"] is True and critic["no_load_optim"] is True and critic["no_load_rng"] is True

    # sizes per model
    tp, engine, max_tokens, response_len = PROMPT_SIZES[model]
    assert value(args, "--tensor-model-parallel-size") == tp
    assert value(args, "--rollout-num-gpus-per-engine") == engine
    assert value(args, "--max-tokens-per-gpu") == max_tokens
    assert value(args, "--rollout-max-response-len") == response_len
    assert int(max_tokens) > int(response_len)


def test_qwen25_math_architecture(stubs, setup):
    result = run("qwen2.5-math-1.5B/tppo.sh", stubs, "--dry-run", **setup)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert value(args, "--num-layers") == "28"
    assert value(args, "--hidden-size") == "1536"
    assert value(args, "--num-query-groups") == "2"
    assert value(args, "--rotary-base") == "10000"
    assert "--add-qkv-bias" in args and "--disable-bias-linear" in args
    for absent in ("--qk-layernorm", "--untie-embeddings-and-output-weights", "--sequence-parallel"):
        assert absent not in args


@prompt_recipe_params
def test_eval_data_adds_a_named_eval_set(recipe, stubs, setup, tmp_path):
    eval_file = tmp_path / "held out.jsonl"
    eval_file.write_text(Path(setup["PROMPT_DATA"]).read_text())
    result = run(recipe, stubs, "--dry-run", EVAL_DATA=str(eval_file), **setup)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert value(args, "--eval-interval") == "20"
    i = args.index("--eval-prompt-data")
    assert args[i + 1:i + 3] == [PROMPT_RECIPES[recipe]["task"], str(eval_file)]


def test_prompt_data_paths_become_absolute(stubs, setup, tmp_path):
    relative = {k: os.path.relpath(v, tmp_path) for k, v in setup.items()}
    (tmp_path / "eval.jsonl").write_text('{"prompt": [], "label": "1"}\n')
    result = run("qwen3-4B/ppo.sh", stubs, "--dry-run", cwd=tmp_path, EVAL_DATA="eval.jsonl", **relative)
    assert result.returncode == 0, result.stderr
    args = train_args(result.stdout, setup["SLIME_DIR"])
    assert value(args, "--prompt-data") == setup["PROMPT_DATA"]
    assert values(args, "--eval-prompt-data") == ["math"] and str(tmp_path / "eval.jsonl") in args
    assert value(args, "--megatron-config-path") == str(Path(setup["SAVE_DIR"]) / "ppo_megatron.yaml")


@pytest.mark.parametrize("recipe", ["qwen3-4B/tppo.sh", "qwen2.5-math-1.5B/tppo.sh"])
def test_launch_writes_the_megatron_config_under_save_dir(recipe, stubs, setup, tmp_path):
    import yaml

    save = tmp_path / 'odd "save" dir'  # YAML must quote it correctly
    result = run(recipe, stubs, **{**setup, "SAVE_DIR": str(save)})
    assert result.returncode == 0, result.stderr
    calls = [call for call in stub_calls(stubs) if call[0] != "nvidia-smi"]
    submitted = calls[-1][calls[-1].index("--") + 3:]
    config_path = Path(value(submitted, "--megatron-config-path"))
    assert config_path == save / "ppo_megatron.yaml" and config_path.is_file()
    critic = critic_overrides(yaml.safe_load(config_path.read_text()))
    assert critic["gamma"] == 1.0 and critic["lambd"] == 1.0
    assert critic["save"] == str(save / "critic") and critic["load"] == setup["REF_CKPT"]
    assert critic["finetune"] is True

    # once the critic has saved a checkpoint, the next launch resumes it, optimizer included
    (save / "critic").mkdir()
    (save / "critic" / "latest_checkpointed_iteration.txt").write_text("20")
    result = run(recipe, stubs, **{**setup, "SAVE_DIR": str(save)})
    assert result.returncode == 0, result.stderr
    critic = critic_overrides(yaml.safe_load(config_path.read_text()))
    assert critic["load"] == str(save / "critic") == critic["save"]
    assert critic["finetune"] is False and critic["no_load_optim"] is False and critic["no_load_rng"] is False


def test_megatron_config_template_parses_and_holds_the_placeholders():
    import yaml

    text = (SCRIPTS / "methods" / "ppo_megatron.yaml").read_text()
    critic = critic_overrides(yaml.safe_load(text))
    assert critic["save"] == "@CRITIC_SAVE@" and critic["load"] == "@CRITIC_LOAD@"
    assert critic["finetune"] == critic["no_load_optim"] == critic["no_load_rng"] == "@CRITIC_FRESH@"


def test_a_model_folders_own_yaml_replaces_the_shared_one(stubs, setup, tmp_path):
    """scripts/methods/{tempo,ppo_megatron}.yaml serve every model folder that has no copy of its own."""
    scripts = tmp_path / "repo" / "scripts"
    shutil.copytree(SCRIPTS, scripts)
    own_tempo = scripts / "qwen3-4B" / "tempo.yaml"
    shutil.copy(scripts / "methods" / "tempo.yaml", own_tempo)
    own_megatron = scripts / "qwen2.5-math-1.5B" / "ppo_megatron.yaml"
    shutil.copy(scripts / "methods" / "ppo_megatron.yaml", own_megatron)

    for recipe, config in (("qwen3-4B/tempo.sh", own_tempo), ("qwen3-8B/tempo.sh", scripts / "methods" / "tempo.yaml")):
        result = run(scripts / recipe, stubs, "--dry-run", **setup)
        assert result.returncode == 0, result.stderr
        assert value(train_args(result.stdout, setup["SLIME_DIR"]), "--custom-config-path") == str(config)

    result = run(scripts / "qwen2.5-math-1.5B/tppo.sh", stubs, "--dry-run", **setup)
    assert result.returncode == 0, result.stderr
    assert f"#   # Generated from {own_megatron} at launch; edit that file, not this one." in result.stdout.splitlines()


def test_an_unknown_task_is_reported(stubs, setup):
    result = run("qwen3-4B/ppo.sh", stubs, "--dry-run", TASK="chess", **setup)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: TASK=chess is not a task of the single-turn recipes: set it to math or countdown"]
    assert stub_calls(stubs) == []


# ---------------------------------------------------------------- the scripts themselves


ALL_SCRIPTS = sorted(
    [SCRIPTS / "slime_common.sh", SCRIPTS / "launch.sh", SCRIPTS / "join_node.sh", *(SCRIPTS / "methods").glob("*.sh"),
     *(SCRIPTS / "models").glob("qwen*.sh"), *SCRIPTS.glob("qwen*/parallel.sh"),
     *(SCRIPTS / r for r in RECIPES), *(SCRIPTS / r for r in PROMPT_RECIPES)]
)


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_bash_syntax(script):
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=10)
