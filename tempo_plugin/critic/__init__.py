"""Generative critic: the policy model asked, with a critic prompt and privileged information,
for the probability that the agent eventually wins from a state."""

from tempo_plugin.critic.prompt import CRITIC_SYSTEM_PROMPT, critic_messages, format_value, reference_critic_messages
from tempo_plugin.critic.value import aggregate_values, parse_value

__all__ = ["CRITIC_SYSTEM_PROMPT", "aggregate_values", "critic_messages", "format_value", "parse_value", "reference_critic_messages"]
