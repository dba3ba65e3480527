"""slime reward hooks (``--custom-rm-path``) for the single-turn tasks of ``tempo_plugin.tasks``.

Use in a recipe, with data written by ``python -m tempo_plugin.tasks.countdown --out ...`` or
``python data/prepare_math.py ...`` (JSONL lines ``{"prompt": [chat messages], "label": ...}``)::

    --prompt-data data/countdown/train.jsonl
    --input-key prompt --label-key label --apply-chat-template
    --custom-rm-path tempo_plugin.slime.rewards.countdown_reward

and ``--custom-rm-path tempo_plugin.slime.rewards.math_reward`` for math (needs
``pip install -e .[math]``), ``...rewards.letters_reward`` for letters
(``python -m tempo_plugin.tasks.letters --out ...``). Each hook reads ``sample.response`` and ``sample.label`` and returns 1.0
or 0.0; given a list of samples (slime's ``--group-rm`` batch mode) it returns a list. Nothing here
imports slime.
"""

from __future__ import annotations

from typing import Any

from tempo_plugin.tasks.countdown import CountdownTask
from tempo_plugin.tasks.letters import LettersTask
from tempo_plugin.tasks.math import math_score

_COUNTDOWN = CountdownTask()
_LETTERS = LettersTask()


def _score_one(sample: Any, scorer: Any) -> float:
    return float(scorer(getattr(sample, "response", "") or "", getattr(sample, "label", None)))


async def countdown_reward(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """Countdown reward of ``sample`` (or of each sample of a list): see ``tempo_plugin.tasks.countdown``."""
    if isinstance(sample, list):
        return [_score_one(s, _COUNTDOWN.reward) for s in sample]
    return _score_one(sample, _COUNTDOWN.reward)


async def math_reward(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """Math reward of ``sample`` (or of each sample of a list): see ``tempo_plugin.tasks.math``."""
    if isinstance(sample, list):
        return [_score_one(s, math_score) for s in sample]
    return _score_one(sample, math_score)


async def letters_reward(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """Letters reward of ``sample`` (or of each sample of a list): see ``tempo_plugin.tasks.letters``."""
    if isinstance(sample, list):
        return [_score_one(s, _LETTERS.reward) for s in sample]
    return _score_one(sample, _LETTERS.reward)
