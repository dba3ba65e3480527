"""The advantage estimators: one registry that the config, both drivers and the slime hooks read.

Each estimator says where it plays (an environment, ``--env``, or a single-turn task, ``--task``),
what it plays there (macro-steps from saved states, or complete episodes, scored by the
environment's milestones or not), which critic it trains and how that critic reads a value, and
which slime rollout function runs it. ``updates/schedule.py`` turns an update number into the phase
an estimator runs there. Code asks the entry, never the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from tempo_plugin.algorithms.flash_reinforce import batch_centred_advantages
from tempo_plugin.algorithms.grpo import grpo_advantages
from tempo_plugin.algorithms.ppo_variants import PPOOptions

GENERATIVE = "generative"  # the policy itself, prompted as a critic (TEMPO)
VALUE_MODEL = "value model"  # a separate scalar critic (PPO, TPPO; critic/value_model.py)
NO_CRITIC = "none"
LOGIT_SUM = "logit sum"  # V = sigmoid of the running sum of per-token logit increments, BCE-trained (TPPO)
DIRECT = "direct"  # V is the head's output, trained by squared error (PPO)


@dataclass(frozen=True)
class Estimator:
    name: str
    on_env: bool  # plays episodes of --env
    on_task: bool  # answers a single-turn --task (grpo does both: a task when one is given)
    critic: str  # GENERATIVE, VALUE_MODEL or NO_CRITIC
    slime_rollout: str | None  # its rollout function in tempo_plugin.slime.rollout (None: single-turn, or embedded only)
    label: str  # how tables and messages name it
    stages: bool = False  # its advantages come from the environment's milestones (needs an env that has them)
    value_readout: str | None = None  # VALUE_MODEL: LOGIT_SUM or DIRECT
    # critic-free estimators without stages: (episode returns or answer rewards, group size) -> advantages
    outcome_advantages: Callable[[Sequence[float], int], list[float]] | None = None
    trajectory_gate: bool = False  # its trainer drops episodes whose mean Bernoulli KL exceeds --trajectory-kl-gate
    forecasts: bool = False  # successful episodes also train as action forecasts (--forecast-weight)
    tracker: bool = False  # a per-game Beta tracker is its baseline and picks its games (--train-games, --spo-discount)
    hindsight: bool = False  # a frozen copy of the policy values each finished episode's rounds (LVRL)
    needs_groups: bool = True  # its advantages compare N >= 2 branches or episodes of one state or game
    ppo: PPOOptions = PPOOptions()  # VALUE_MODEL: how it departs from plain PPO (BPCO, EasyPPO, SAO)


ESTIMATORS: dict[str, Estimator] = {e.name: e for e in (
    Estimator("tempo", on_env=True, on_task=False, critic=GENERATIVE, slime_rollout="generate_rollout", label="TEMPO"),
    Estimator("grpo", on_env=True, on_task=True, critic=NO_CRITIC, slime_rollout="generate_grpo_rollout",
              label="GRPO", outcome_advantages=grpo_advantages),
    Estimator("temporal_grpo", on_env=True, on_task=False, critic=NO_CRITIC,
              slime_rollout="generate_temporal_grpo_rollout", label="Temporal GRPO", stages=True),
    Estimator("flash_reinforce", on_env=True, on_task=True, critic=NO_CRITIC, slime_rollout=None,
              label="FlashREINFORCE", outcome_advantages=batch_centred_advantages, trajectory_gate=True,
              needs_groups=False),
    Estimator("spo", on_env=True, on_task=False, critic=NO_CRITIC, slime_rollout=None, label="SPO", tracker=True,
              needs_groups=False),
    Estimator("cope", on_env=True, on_task=False, critic=NO_CRITIC, slime_rollout=None, label="CoPE",
              outcome_advantages=grpo_advantages, forecasts=True),
    Estimator("lvrl", on_env=True, on_task=False, critic=NO_CRITIC, slime_rollout=None, label="LVRL", hindsight=True),
    Estimator("ppo", on_env=False, on_task=True, critic=VALUE_MODEL, slime_rollout=None, label="PPO",
              value_readout=DIRECT),
    Estimator("bpco", on_env=False, on_task=True, critic=VALUE_MODEL, slime_rollout=None, label="BPCO",
              value_readout=DIRECT, ppo=PPOOptions(lambda_alpha=1.0, bounded_values=True, divergence_clip=True)),
    Estimator("easyppo", on_env=False, on_task=True, critic=VALUE_MODEL, slime_rollout=None, label="EasyPPO",
              value_readout=DIRECT, ppo=PPOOptions(finished_actor_only=True, noise_weighted_critic=True,
                                                   critic_minibatches=4)),
    Estimator("sao", on_env=False, on_task=True, critic=VALUE_MODEL, slime_rollout=None, label="SAO",
              value_readout=DIRECT, needs_groups=False,
              ppo=PPOOptions(ratio_band_mask=True, critic_passes=2, freeze_critic_attention=True)),
    Estimator("tppo", on_env=False, on_task=True, critic=VALUE_MODEL, slime_rollout=None, label="TPPO",
              value_readout=LOGIT_SUM),
)}
"""--advantage-estimator -> what it is."""


def estimator_of_rollout_function(path: str) -> Estimator | None:
    """The estimator whose slime rollout function ``path`` (a dotted path) names; None if none does."""
    name = path.rsplit(".", 1)[-1]
    return next((e for e in ESTIMATORS.values() if e.slime_rollout == name), None)
