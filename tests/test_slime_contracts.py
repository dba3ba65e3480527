"""slime's own plugin contract tests (``tests/plugin_contracts`` of slime's source) run against our
hook paths, the way slime documents it: each contract file reads the hook to check from a
``SLIME_CONTRACT_<KEY>`` environment variable. They run in a subprocess from slime's source folder
(the runtime-hook contract reads slime's call sites by relative path).

Hooks we implement and the contract that covers each:
- ``--custom-reward-post-process-path tempo_plugin.slime.reward.post_process``: runtime hooks;
- ``--rollout-function-path ...rollout.generate_rollout`` and ``...generate_grpo_rollout``: rollout.
The rollout contract's behavioural part calls the function with ``args=None`` and slime's
``ContractDataSource``; our rollouts need ``TempoDataSource`` (the state store and the game cursor)
and refuse any other source with a one-line ConfigError, so that part is an expected failure.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.extras import SLIME_REASON

ROOT = Path(__file__).resolve().parents[1]
REWARD_POST_PROCESS = "tempo_plugin.slime.reward.post_process"
ROLLOUTS = ("tempo_plugin.slime.rollout.generate_rollout",
            "tempo_plugin.slime.rollout.generate_grpo_rollout")
BEHAVIOURAL = "test_rollout_function_path_contract_supports_user_override"


def slime_source() -> Path:
    spec = importlib.util.find_spec("slime")
    if spec is None or spec.origin is None:
        pytest.skip(SLIME_REASON)
    source = Path(spec.origin).resolve().parents[1]
    if not (source / "tests" / "plugin_contracts").is_dir():
        pytest.skip(f"{source} has no tests/plugin_contracts (a source checkout of slime is needed)")
    return source


def run_contract(name: str, env: dict[str, str], *pytest_args: str) -> subprocess.CompletedProcess:
    source = slime_source()
    full_env = {**os.environ, **env, "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/plugin_contracts/{name}", *pytest_args],
        cwd=source, env=full_env, capture_output=True, text=True, timeout=600,
    )


def test_runtime_hook_contracts_pass_with_our_reward_post_process():
    result = run_contract("test_plugin_runtime_hook_contracts.py",
                          {"SLIME_CONTRACT_CUSTOM_REWARD_POST_PROCESS_PATH": REWARD_POST_PROCESS})
    assert result.returncode == 0, result.stdout[-3000:]
    assert " failed" not in result.stdout and " passed" in result.stdout


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_rollout_contract_signature_and_loading(rollout):
    result = run_contract("test_plugin_rollout_contracts.py", {"SLIME_CONTRACT_ROLLOUT_FUNCTION_PATH": rollout},
                          "--deselect", f"tests/plugin_contracts/test_plugin_rollout_contracts.py::{BEHAVIOURAL}")
    assert result.returncode == 0, result.stdout[-3000:]
    assert " failed" not in result.stdout and "5 passed" in result.stdout


@pytest.mark.parametrize("rollout", ROLLOUTS)
@pytest.mark.xfail(strict=True, reason="slime's behavioural rollout contract calls the function with args=None and "
                   "its ContractDataSource; TEMPO's rollouts need TempoDataSource and refuse others (ConfigError)")
def test_rollout_contract_behaviour(rollout):
    result = run_contract("test_plugin_rollout_contracts.py", {"SLIME_CONTRACT_ROLLOUT_FUNCTION_PATH": rollout},
                          "-k", BEHAVIOURAL)
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_rollout_contract_behaviour_fails_only_for_the_data_source(rollout):
    """The expected failure above is exactly our refusal of a foreign data source, nothing else."""
    result = run_contract("test_plugin_rollout_contracts.py", {"SLIME_CONTRACT_ROLLOUT_FUNCTION_PATH": rollout},
                          "-k", BEHAVIOURAL)
    assert result.returncode == 1 and "1 failed" in result.stdout
    assert "ConfigError: TEMPO's rollout function needs --data-source-path " \
           "tempo_plugin.slime.data_source.TempoDataSource (got ContractDataSource)" in result.stdout
