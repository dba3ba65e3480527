"""``TempoRollout``: every multi-turn update of ``method/`` on one run's sampler, chat protocol and
environment pool. Both drivers (``embedded/multi_turn.py``, ``slime/rollout.py``) hold one."""

from __future__ import annotations

from tempo_plugin.method.episodes import EpisodeUpdates
from tempo_plugin.method.tempo import TempoUpdates


class TempoRollout(TempoUpdates, EpisodeUpdates):
    """TEMPO's warm-up and TD updates (``method/tempo.py``), multi-turn GRPO and Temporal GRPO
    (``method/episodes.py``), the generative critic (``method/critic_calls.py``) and held-out play
    (``method/play.py``)."""
