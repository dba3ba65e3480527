"""The critic's value as a distribution over its answers (``--critic-value expected``).

The critic answers ``<value>d.dd</value>``: one of the 101 values v_j = j / 100 of ``VALUE_GRID``.
Given its prompt x, the model assigns each answer a_j (the tokens of ``format_value(v_j)``) the
likelihood pi(a_j | x), a product over the answer's tokens. Normalised over the grid,

    p_j  = pi(a_j | x) / sum_i pi(a_i | x)
    V(x) = sum_j v_j p_j                                  the expected-value readout

Where the critic reasons before it answers, x is its prompt and one sampled completion up to the
``<value>`` tag, and V(s) is the mean of the readouts after its K completions. The readout
cannot fail to parse. Training moves this distribution towards a
two-hot target q whose mean is exactly the value target G:

    j = floor(100 G),  w = 100 G - j
    q_j = 1 - w,  q_{j+1} = w                             (sum_j q_j v_j = G)
    L_value = -beta sum_j q_j log pi(a_j | x)              the value cross-entropy

(averaged over the K contexts x). It has a gradient whenever the critic is wrong, however alike
its answers are. Only the (at most two) answers with q_j > 0 carry loss, so a context costs two
teacher-forced answers in training; the readout scores all 101 with the context run once
(``token_logprobs`` shares it). The reasoning before the tag keeps a group-relative reward,
-(V_k - G)^2 of its own readout V_k.
"""

from __future__ import annotations

import math
from typing import Sequence

from tempo_plugin.critic.prompt import format_value

VALUE_GRID: tuple[float, ...] = tuple(j / 100 for j in range(101))
"""Every answer ``format_value`` writes: 0.00, 0.01, ..., 1.00."""
VALUE_TAG = "<value>"
VALUE_ANSWER_ROOM = 16
"""Tokens kept free after a critic completion for the readout's answer (``<value>d.dd</value>``
takes 6 with the tiny tokenizer, at most 14 with one token per character)."""


def value_answer_texts() -> list[str]:
    """The answer text of each grid value, in grid order."""
    return [format_value(v) for v in VALUE_GRID]


def two_hot(target: float) -> list[tuple[int, float]]:
    """(grid index, weight) pairs of the two-hot distribution whose mean is ``target`` (clamped to
    [0, 1]); one pair when the target sits on the grid."""
    g = min(1.0, max(0.0, float(target)))
    scaled = round(g * 100, 9)  # 0.29 * 100 is 28.999999999999996, not a hair below the grid point 29
    j = min(int(math.floor(scaled)), 100)
    w = scaled - j
    if w <= 1e-9 or j == 100:
        return [(j, 1.0)]
    return [(j, 1.0 - w), (j + 1, w)]


def _softmax(logprobs: Sequence[float]) -> list[float]:
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


def answer_distribution(answer_logprobs: Sequence[float]) -> list[float]:
    """p_j: the answers' likelihoods normalised over the grid (a softmax of their log-likelihoods)."""
    if len(answer_logprobs) != len(VALUE_GRID):
        raise ValueError(f"expected {len(VALUE_GRID)} answer log-likelihoods (one per grid value), got {len(answer_logprobs)}")
    return _softmax(answer_logprobs)


def expected_value(answer_logprobs: Sequence[float]) -> float:
    """V = sum_j v_j p_j."""
    return sum(v * p for v, p in zip(VALUE_GRID, answer_distribution(answer_logprobs)))


TENTHS: tuple[tuple[str, float], ...] = tuple((f"<value>0.{d}", d / 10 + 0.045) for d in range(10)) + (("<value>1", 1.0),)
"""The readout by tenths: (answer prefix, the mean grid value it starts). The prefix "<value>0.d"
begins exactly the ten answers 0.d0 .. 0.d9, so its likelihood is their total, and "<value>1"
begins only 1.00: eleven short answers marginalise the 101 of ``VALUE_GRID`` to 0.1 resolution."""


def expected_value_by_tenths(prefix_logprobs: Sequence[float]) -> float:
    """V = sum_b m_b p_b over the tenths of ``TENTHS`` (p_b: their likelihoods normalised, m_b their
    mean value): the expected value read with 11 answers instead of 101."""
    if len(prefix_logprobs) != len(TENTHS):
        raise ValueError(f"expected {len(TENTHS)} prefix log-likelihoods (one per tenth), got {len(prefix_logprobs)}")
    return sum(p * m for p, (_, m) in zip(_softmax(prefix_logprobs), TENTHS))
