"""The critics measured, all valuing the same states.

- ``GenerativeCritic``: TEMPO's critic, a causal LM asked with the critic prompt (task, actions,
  observation, round r of T, privileged information); value = mean of the K parsed answers
  (``aggregate_values``: 0.0 when none of the K parses, as TEMPO values an endpoint), through
  ``TempoRollout.call_critic``. The run's own model, or another model (--critic-model) with its
  own tokenizer: the critic prompt depends only on the state, not on the actor's tokens.
- ``ScalarCritic``: the value model of a single-turn PPO/TPPO run (``critic/``), read at the state's
  token prefix: TPPO V = sigmoid(sum of the head's logit increments at the prompt's last token and
  every answer token so far) (``algorithms/tppo.reconstruct_values``); PPO V = the head's output at
  the last token of the prefix.

Terminal states are never asked: every critic gets the state's outcome there (as TEMPO uses the
reward, not the critic, at a terminal endpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from tempo_plugin.critic import aggregate_values

from analysis.mc_critic.states import State


@dataclass
class GenerativeCritic:
    name: str
    rollout: Any  # a TempoRollout holding the critic model's sampler and protocol
    samples: int  # K
    identity: str  # what the cache key holds: model directory and weights

    @property
    def kind(self) -> str:
        return "generative"

    def batch_size(self, rows: int) -> int:
        return max(1, rows // self.samples)

    def evaluate(self, states: Sequence[State], seed: int) -> list[dict]:
        calls = self.rollout.call_critic([s.macro for s in states], self.samples, seed=seed)
        results = []
        for call in calls:
            if not call.answered:  # the critic prompt does not fit max_trajectory_tokens
                results.append({"value": None, "parsed": 0, "samples": 0})
                continue
            parsed = [v for v in call.values if v is not None]
            results.append({"value": aggregate_values(call.values), "parsed": len(parsed), "samples": len(call.values)})
        return results


@dataclass
class ScalarCritic:
    name: str
    model: Any  # critic.value_model.ValueModel
    estimator: str  # tppo or ppo
    pad_id: int
    identity: str

    @property
    def kind(self) -> str:
        return self.estimator

    def batch_size(self, rows: int) -> int:
        return max(1, rows // 4)

    @torch.no_grad()
    def evaluate(self, states: Sequence[State], seed: int) -> list[dict]:
        rows = [s.prompt_ids + s.response_ids for s in states]
        width = max(len(r) for r in rows)
        device = next(self.model.parameters()).device
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):  # right-padded: a causal model's outputs at real tokens ignore the padding
            ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            attention[i, :len(row)] = 1
        outputs = self.model(ids.to(device), attention.to(device)).float().cpu()
        results = []
        for i, state in enumerate(states):
            end = len(rows[i])
            if self.estimator == "tppo":
                value = torch.sigmoid(outputs[i, len(state.prompt_ids) - 1:end].sum()).item()
            else:
                value = outputs[i, end - 1].item()
            results.append({"value": float(value)})  # no sampled answers: no parse-failure rate
        return results
