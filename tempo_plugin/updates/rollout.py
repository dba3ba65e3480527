"""``TempoRollout``: every multi-turn update of ``updates/`` on one run's sampler, chat protocol and
environment pool. Both drivers (``embedded/multi_turn.py``, ``slime/rollout.py``) hold one."""

from __future__ import annotations

from tempo_plugin.updates.episodes import EpisodeUpdates
from tempo_plugin.updates.hindsight import HindsightUpdates
from tempo_plugin.updates.tempo import TempoUpdates


class TempoRollout(TempoUpdates, HindsightUpdates, EpisodeUpdates):
    """TEMPO's warm-up and TD updates (``updates/tempo.py``), multi-turn GRPO and Temporal GRPO
    (``updates/episodes.py``), LVRL (``updates/hindsight.py``), the generative critic (``updates/critic_calls.py``) and held-out play
    (``updates/play.py``)."""
