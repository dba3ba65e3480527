"""tempo_plugin.slime.hooks lists every hook path the slime recipes name, each importable without slime."""

import importlib
import re
import sys
from pathlib import Path

import pytest

from tempo_plugin.slime.hooks import HOOKS, ROLLOUT_FUNCTIONS

METHODS = Path(__file__).resolve().parents[1] / "scripts" / "methods"
FLAG_AND_HOOK = re.compile(r"(--[a-z-]+-path)\s+(tempo_plugin\.[\w.]+)")
TASK_REWARD = re.compile(r"TASK_REWARD=(tempo_plugin\.[\w.]+)")  # methods/task.sh: --custom-rm-path "$TASK_REWARD"


def recipe_hooks() -> set[tuple[str, str]]:
    texts = [path.read_text() for path in METHODS.glob("*.sh")]
    return ({m.groups() for text in texts for m in FLAG_AND_HOOK.finditer(text)}
            | {("--custom-rm-path", m.group(1)) for text in texts for m in TASK_REWARD.finditer(text)})


def test_the_recipes_name_only_listed_hooks_under_their_flags():
    named = recipe_hooks()
    assert len(named) == 11  # the 11 hook paths of tempo, grpo, temporal_grpo, ppo, tppo and the two task rewards
    for flag, path in named:
        assert path in HOOKS.get(flag, ()), f"scripts/methods names {flag} {path}, which slime/hooks.py does not list"


def test_every_estimator_with_a_slime_rollout_is_named_by_a_recipe():
    named = {path for flag, path in recipe_hooks() if flag == "--rollout-function-path"}
    assert named == set(ROLLOUT_FUNCTIONS.values()) == {
        "tempo_plugin.slime.rollout.generate_rollout",
        "tempo_plugin.slime.rollout.generate_grpo_rollout",
        "tempo_plugin.slime.rollout.generate_temporal_grpo_rollout",
    }


@pytest.mark.parametrize("path", sorted({p for paths in HOOKS.values() for p in paths}))
def test_every_listed_hook_imports_without_slime(path, monkeypatch):
    monkeypatch.setitem(sys.modules, "slime", None)  # an import of slime at module level would raise
    module, name = path.rsplit(".", 1)
    for loaded in [m for m in sys.modules if m.startswith("tempo_plugin.slime")]:
        monkeypatch.delitem(sys.modules, loaded)
    assert callable(getattr(importlib.import_module(module), name))
