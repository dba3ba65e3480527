"""The advantage estimators: one registry that the config, both drivers and the slime hooks read.

Each estimator says where it plays (an environment, ``--env``, or a single-turn task, ``--task``),
which critic it trains, and which slime rollout function runs it. ``schedule.py`` turns an update
number into the phase an estimator runs there.
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATIVE = "generative"  # the policy itself, prompted as a critic (TEMPO)
VALUE_MODEL = "value model"  # a separate scalar critic (PPO, TPPO; embedded/value_model.py)
NO_CRITIC = "none"


@dataclass(frozen=True)
class Estimator:
    name: str
    on_env: bool  # plays episodes of --env
    on_task: bool  # answers a single-turn --task (grpo does both: a task when one is given)
    critic: str  # GENERATIVE, VALUE_MODEL or NO_CRITIC
    slime_rollout: str | None  # its rollout function in tempo_plugin.slime.rollout (None: single-turn)


ESTIMATORS: dict[str, Estimator] = {e.name: e for e in (
    Estimator("tempo", on_env=True, on_task=False, critic=GENERATIVE, slime_rollout="generate_rollout"),
    Estimator("grpo", on_env=True, on_task=True, critic=NO_CRITIC, slime_rollout="generate_grpo_rollout"),
    Estimator("temporal_grpo", on_env=True, on_task=False, critic=NO_CRITIC,
              slime_rollout="generate_temporal_grpo_rollout"),
    Estimator("ppo", on_env=False, on_task=True, critic=VALUE_MODEL, slime_rollout=None),
    Estimator("tppo", on_env=False, on_task=True, critic=VALUE_MODEL, slime_rollout=None),
)}
"""--advantage-estimator -> what it is."""


def estimator_of_rollout_function(path: str) -> Estimator | None:
    """The estimator whose slime rollout function ``path`` (a dotted path) names; None if none does."""
    name = path.rsplit(".", 1)[-1]
    return next((e for e in ESTIMATORS.values() if e.slime_rollout == name), None)
