"""The environment protocol every TEMPO environment implements.

An environment is a deterministic text game: the same seed and the same action sequence always
produce the same observations. Observations are plain text and list the admissible actions.
``privileged_info`` is for the critic only and is never shown to the actor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool
    won: bool
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """reset/step/admissible_actions/privileged_info, plus optional O(1) snapshot/restore.

    ``supports_snapshot`` tells the state-restore code whether ``snapshot``/``restore`` exist;
    environments without them are restored by replaying their action history.

    Optional, for Temporal GRPO: ``stage_count`` (int) and ``stages_completed() -> int``, an ordered
    chain of milestones read from the privileged state, the last one the win; a milestone may be
    lost again (TextWorld: dropping the key), Temporal GRPO counts the round that first reached it
    (``has_stages`` tells whether an environment has them).
    """

    supports_snapshot: bool

    @property
    def task(self) -> str: ...

    @property
    def observation(self) -> str: ...

    def reset(self, seed: int) -> str: ...

    def step(self, action: str) -> StepResult: ...

    def admissible_actions(self) -> list[str]: ...

    def privileged_info(self) -> str: ...

    def expert_action(self) -> str | None:
        """The next action of the privileged plan (None when the game is over); used to build
        demonstrations for the tiny model's bootstrap, never shown to the actor."""
        ...

    def snapshot(self) -> Any: ...

    def restore(self, snapshot: Any) -> None: ...


class EpisodeProgress:
    """The episode accessors the game environments share. Each reads what ``reset`` and ``step``
    set (``_observation``, ``_steps``, ``_done``, ``_won``) after ``_require_game()``, which raises
    before the first reset."""

    _observation: str
    _steps: int
    _done: bool
    _won: bool

    def _require_game(self) -> Any:
        raise NotImplementedError

    @property
    def observation(self) -> str:
        """The last observation returned by ``reset`` or ``step``."""
        self._require_game()
        return self._observation

    @property
    def steps(self) -> int:
        """Number of ``step`` calls since the last reset (admissible or not)."""
        self._require_game()
        return self._steps

    @property
    def done(self) -> bool:
        """Whether the episode has ended."""
        self._require_game()
        return self._done

    @property
    def won(self) -> bool:
        """Whether the episode was won."""
        self._require_game()
        return self._won


MILESTONES_HINT = "add stage_count and stages_completed to its class, see tempo_plugin/envs/base.py"
"""What to do about an environment without milestones (the end of every such error)."""


def has_stages(env: Any) -> bool:
    """Whether ``env`` reports milestones (``stage_count`` and ``stages_completed``) for Temporal GRPO."""
    return hasattr(env, "stage_count") and callable(getattr(env, "stages_completed", None))


def milestones_left(env: Any) -> int | None:
    """``stage_count - stages_completed()`` in the environment's current state (None without
    milestones): the level the ``--critic-calibration levels`` map gives each state its own intercept."""
    return env.stage_count - env.stages_completed() if has_stages(env) else None


NAVIGATION_VERBS = frozenset({"go", "look", "examine", "inventory"})
"""First words of the commands that move or look around without changing the world."""


def plan_subgoals(plan: Sequence[str]) -> list[str]:
    """The subgoals of a winning plan, in order: the milestones of the plan-based environments.

    Rule: a subgoal is a command of the plan that changes the world, i.e. every command except the
    pure navigation and looking ones, those whose first word is ``go`` (TextWorld's "go east",
    ALFWorld's "go to fridge 1"), ``look``, ``examine`` or ``inventory``.
    """
    return [c for c in plan if canonical_action(c).partition(" ")[0] not in NAVIGATION_VERBS]


def plan_stage_count(start_plan: Sequence[str] | None) -> int:
    """Milestones of a game: the subgoals of its winning plan from the start, at least 1 (a plan
    without subgoals, or no plan, has the win as its only milestone)."""
    return max(1, len(plan_subgoals(start_plan or ())))


def plan_stages_completed(stage_count: int, won: bool, remaining_plan: Sequence[str] | None) -> int:
    """Milestones reached, from the winning plan that remains from the current state.

    ``stage_count`` when won; otherwise ``stage_count`` less the subgoals still in the remaining
    plan, clamped into [0, stage_count - 1]; 0 when no winning plan remains (None or empty: the
    quest can no longer be completed, or the planner finds no way), since a state from which the
    game cannot be won has reached none of the milestones on the way to the win.
    """
    if won:
        return stage_count
    if not remaining_plan:
        return 0
    return min(max(stage_count - len(plan_subgoals(remaining_plan)), 0), stage_count - 1)


ACTION_LIST_MARKER = "Actions:"


def with_action_list(text: str, actions: Sequence[str]) -> str:
    """The observation format every environment uses: ``text Actions: a, b, c``."""
    return f"{text} {ACTION_LIST_MARKER} {', '.join(actions)}"


def without_action_list(observation: str) -> str:
    """The observation without its trailing action list (the critic's view)."""
    return re.split(rf"\s+{ACTION_LIST_MARKER}", observation, maxsplit=1)[0]


def canonical_action(text: str) -> str:
    """Lower case with runs of white space collapsed to one space."""
    return " ".join(text.lower().split())
