"""Strict parsing of the critic's ``<value>p</value>`` answer and aggregation of K samples."""

from __future__ import annotations

import math
import re
from typing import Sequence

# An unsigned decimal between the tags: no sign, no exponent, optional white space.
_VALUE_RE = re.compile(r"<value>\s*(\d+(?:\.\d+)?)\s*</value>", re.IGNORECASE | re.ASCII)


def parse_value(text: str) -> float | None:
    """The last ``<value>`` match, clamped to [0, 1]; None when there is no valid match.

    ``-0.2`` does not match (parse failure); ``1.5`` is clamped to 1.0. Never raises on str input.
    """
    matches = _VALUE_RE.findall(text)
    if not matches:
        return None
    value = float(matches[-1])
    if not math.isfinite(value):
        return None
    return min(1.0, max(0.0, value))


def aggregate_values(parsed: Sequence[float | None]) -> float:
    """Endpoint value = mean of the samples that parsed; 0.0 (pessimistic) when none did."""
    good = [v for v in parsed if v is not None]
    return sum(good) / len(good) if good else 0.0
