"""The critic prompt: one place for its wording.

The critic sees the task, a condensed history, where the episode stands (round r of T) and, last,
right before the question, the privileged information (hidden from the actor). The history is the
actions taken so far and the current observation without its action list: the observations are a
deterministic function of the actions, and this keeps critic prompts short over long episodes.
Putting the privileged information last keeps the decisive facts next to the answer, which a
small model picks up much faster.
"""

from __future__ import annotations

from typing import Sequence

from tempo_plugin.envs.base import without_action_list

CRITIC_SYSTEM_PROMPT = (
    "You judge a text-game agent mid-episode. You see the task, hidden facts the agent cannot see, "
    "and its history. Estimate the probability that the agent eventually wins. "
    "Answer with one line <value>p</value>, p between 0.00 and 1.00."
)


def critic_messages(
    task: str,
    privileged_info: str,
    actions: Sequence[str],
    observation: str,
    round_index: int,
    max_rounds: int,
) -> list[dict[str, str]]:
    history = ", ".join(actions) if actions else "(none yet)"
    user = (
        f"Task: {task}\n"
        f"Actions so far: {history}\n"
        f"Now: {without_action_list(observation)}\n"
        f"Round {round_index} of {max_rounds}.\n"
        f"Hidden: {privileged_info}\n"
        "Probability of eventually winning?"
    )
    return [{"role": "system", "content": CRITIC_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def format_value(value: float) -> str:
    """The answer format the critic is taught: two decimals in value tags."""
    return f"<value>{min(1.0, max(0.0, value)):.2f}</value>"
