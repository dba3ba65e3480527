"""Every metric our rollout functions hand slime is plotted against the step slime's rollout process
logs (``rollout/step``), as slime's own wandb setup binds the prefixes.

slime logs a rollout function's metrics together with ``rollout/step`` only; its wandb setup
(``slime.observability.wandb_utils._init_wandb_common``) binds each prefix to a step metric, and a
name bound to ``train/step`` or ``eval/step`` is never drawn from the rollout process. Here that
setup runs for real with a recording stand-in for the ``wandb`` module.
"""

import fnmatch

import pytest
from tests.extras import skip_module_without_slime

skip_module_without_slime()

from test_slime_rollout import ScriptedPolicy, slime_args  # noqa: E402

from tempo_plugin.slime.data_source import TempoDataSource  # noqa: E402
from tempo_plugin.slime.rollout import generate_grpo_rollout, generate_rollout  # noqa: E402
from tempo_plugin.metrics import slime_metric_names  # noqa: E402


class RecordingWandb:
    def __init__(self):
        self.bindings: list[tuple[str, str | None]] = []

    def define_metric(self, name, step_metric=None, **kwargs):
        self.bindings.append((name, step_metric))


@pytest.fixture()
def step_of(monkeypatch):
    """step_of(name) -> the step metric slime's wandb setup binds ``name`` to (None: unbound)."""
    from slime.observability import wandb_utils

    recorder = RecordingWandb()
    monkeypatch.setattr(wandb_utils, "wandb", recorder)
    wandb_utils._init_wandb_common()
    assert recorder.bindings, "slime's wandb setup defined no metrics"

    def lookup(name: str) -> str | None:
        for pattern, step in recorder.bindings:
            if step is not None and fnmatch.fnmatchcase(name, pattern):
                return step
        return None

    return lookup


def test_slime_binds_train_names_to_a_step_the_rollout_never_logs(step_of):
    # what the fix is about: before it, train/actor_samples went out under its own name
    assert step_of("train/actor_samples") == "train/step"
    assert step_of("eval/success_rate") == "eval/step"
    assert step_of("critic/value_corr") is None
    renamed = slime_metric_names({"train/actor_samples": 3.0, "eval/x": 1.0, "critic/value_corr": 0.5, "perf/t": 1.0})
    assert {name: step_of(name) for name in renamed} == {
        "rollout/train/actor_samples": "rollout/step", "rollout/eval/x": "rollout/step",
        "rollout/critic/value_corr": "rollout/step", "perf/t": "rollout/step",
    }


def test_every_rollout_metric_is_plotted_against_the_rollout_step(
    tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types, step_of
):
    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url)
    source = TempoDataSource(args)
    outputs = [generate_rollout(args, 0, source), generate_rollout(args, 1, source)]  # warm-up, TD
    (tmp_path / "grpo").mkdir()
    grpo_args = slime_args(tmp_path / "grpo", tokenizer_dir, url,
                           rollout_function_path="tempo_plugin.slime.rollout.generate_grpo_rollout")
    outputs.append(generate_grpo_rollout(grpo_args, 0, TempoDataSource(grpo_args)))
    names = {name for out in outputs for name in out.metrics}
    assert {"rollout/train/actor_samples", "rollout/train/critic_samples", "rollout/train/removed_samples"} <= names
    unplotted = sorted(name for name in names if step_of(name) != "rollout/step")
    assert unplotted == []
