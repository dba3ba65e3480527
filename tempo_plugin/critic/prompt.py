"""The critic prompts: one place for their wording.

Two prompts, chosen by ``--critic-prompt``. ``reference`` is the method's: the task, the
privileged reference, and the condensed transcript of every turn (the first user message as the
initial situation, each actor turn as it was written, each observation without its action list),
asking the critic to reason briefly and end with the value line. ``condensed`` (the default, below)
is shorter.

The condensed prompt: the critic sees the task, a condensed history, where the episode stands (round r of T) and, last,
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


REFERENCE_CRITIC_SYSTEM_PROMPT = (
    "You assess a text-game agent in the middle of an episode. You are given the task, reference facts the "
    "agent cannot see, and everything that has happened so far. Judge how likely the agent is to complete the "
    "task from here: what it has already done, whether its course still leads to the goal given the reference, "
    "and what still stands in its way. Reason in a few words, do not act in the game, and finish with exactly "
    "one line <value>p</value>, p between 0.00 and 1.00."
)


def condensed_transcript(messages: Sequence[tuple[str, str]]) -> str:
    """The episode so far as the reference critic reads it: system turns left out, the first user turn
    as the initial situation, then ``Actor:`` / ``Environment:`` entries (observations without their
    action list), separated by blank lines."""
    entries: list[str] = []
    for role, content in messages:
        if role == "system":
            continue
        if not entries:
            entries.append(f"Initial situation:\n{content}")
        elif role == "assistant":
            entries.append(f"Actor: {content}")
        else:
            entries.append(f"Environment: {without_action_list(content)}")
    return "\n\n".join(entries)


def reference_critic_messages(task: str, privileged_info: str, messages: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The method's critic prompt (``--critic-prompt reference``); ``messages`` are the actor's
    (role, content) turns up to the state."""
    transcript = condensed_transcript(messages) or "(the episode has just started)"
    user = (
        "The episode is in progress.\n"
        f"Task: {task}\n"
        f"Reference (hidden from the agent):\n{privileged_info or '(empty)'}\n"
        f"Interaction so far:\n{transcript}\n"
        "Estimate the probability that the agent eventually completes the task."
    )
    return [{"role": "system", "content": REFERENCE_CRITIC_SYSTEM_PROMPT}, {"role": "user", "content": user}]


HINDSIGHT_SYSTEM_PROMPT = (
    "You review a finished text-game episode. You see the task, hidden facts, every action the agent "
    "took, how the episode ended and how other attempts at the same game ended. Judge how close the "
    "agent was to winning right after the round you are asked about. "
    "Answer with one line <value>p</value>, p between 0.00 and 1.00."
)


def hindsight_messages(task: str, privileged_info: str, actions: Sequence[str], won: bool, after_round: int,
                       group_wins: int, group_size: int) -> list[dict[str, str]]:
    """LVRL's hindsight prompt (``algorithms.lvrl``): the whole episode and its outcome, the group's
    outcomes, and the round to value (1 .. len(actions) - 1). Everything but the last line is the
    same for every round of an episode."""
    user = (
        f"Task: {task}\n"
        f"Hidden: {privileged_info}\n"
        f"Actions: {', '.join(f'{i + 1}. {a}' for i, a in enumerate(actions)) or '(none)'}\n"
        f"Outcome: {'won' if won else 'lost'} after {len(actions)} rounds; "
        f"{group_wins} of {group_size} attempts at this game won.\n"
        f"How close to winning was the agent after round {after_round}?"
    )
    return [{"role": "system", "content": HINDSIGHT_SYSTEM_PROMPT}, {"role": "user", "content": user}]
