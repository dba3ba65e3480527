"""Batched sampling with a KV cache on a local HF causal LM, returning per-token log-probs.

Requests are sorted by prompt length and processed in chunks; prompts are left-padded so every
row's next token sits in the last column. The recorded log-prob of a token is its log-probability
under the temperature-scaled distribution (what the trainer recomputes as the new log-prob), before
any top-p truncation.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams


def _sample_top_p(probs: torch.Tensor, top_p: float, generator: torch.Generator) -> torch.Tensor:
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
        sorted_probs = sorted_probs * keep
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass
class LocalSampler:
    model: Any
    tokenizer: Any
    max_batch_size: int = 64
    max_batch_tokens: int = 65536

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed % (2**63))
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        results: list[Completion | None] = [None] * len(requests)
        start = 0
        while start < len(order):
            end = start + 1
            while (
                end < len(order)
                and end - start < self.max_batch_size
                and (end + 1 - start) * (len(requests[order[end]].prompt_ids) + requests[order[end]].max_new_tokens)
                <= self.max_batch_tokens
            ):
                end += 1
            chunk = order[start:end]
            for index, completion in zip(chunk, self._generate_chunk([requests[i] for i in chunk], params, generator)):
                results[index] = completion
            start = end
        return [r for r in results if r is not None]

    @torch.no_grad()
    def _generate_chunk(
        self, requests: Sequence[Request], params: SamplingParams, generator: torch.Generator
    ) -> list[Completion]:
        device = self.device
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        lengths = [len(r.prompt_ids) for r in requests]
        width = max(lengths)
        batch = len(requests)
        input_ids = torch.full((batch, width), pad_id, dtype=torch.long, device=device)
        attention = torch.zeros((batch, width), dtype=torch.long, device=device)
        for row, request in enumerate(requests):
            input_ids[row, width - lengths[row]:] = torch.tensor(list(request.prompt_ids), dtype=torch.long)
            attention[row, width - lengths[row]:] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        output = self.model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        cache = getattr(output, cache_arg)
        logits = output.logits[:, -1, :].float()
        budgets = torch.tensor([r.max_new_tokens for r in requests], device=device)
        stop_ids = torch.tensor(list(params.stop_token_ids) or [-1], device=device)
        tokens: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        finish = ["length"] * batch
        active = torch.ones(batch, dtype=torch.bool, device=device)
        next_position = positions[:, -1] + 1
        for step in range(int(budgets.max().item())):
            log_dist = torch.log_softmax(logits / params.temperature, dim=-1)
            chosen = _sample_top_p(log_dist.exp(), params.top_p, generator)
            chosen_logprob = log_dist.gather(-1, chosen[:, None]).squeeze(-1)
            chosen_list = chosen.tolist()
            logprob_list = chosen_logprob.tolist()
            for row in range(batch):
                if active[row]:
                    tokens[row].append(chosen_list[row])
                    logprobs[row].append(logprob_list[row])
            is_stop = torch.isin(chosen, stop_ids)
            for row in torch.nonzero(active & is_stop).flatten().tolist():
                finish[row] = "stop"
            active = active & ~is_stop & (budgets > step + 1)
            if not bool(active.any()):
                break
            attention = torch.cat([attention, torch.ones((batch, 1), dtype=torch.long, device=device)], dim=1)
            output = self.model(
                input_ids=chosen[:, None],
                attention_mask=attention,
                position_ids=next_position[:, None],
                use_cache=True,
                **{cache_arg: cache},
            )
            cache = getattr(output, cache_arg)
            logits = output.logits[:, -1, :].float()
            next_position = next_position + 1
        return [
            Completion(token_ids=t, logprobs=lp, text=self.tokenizer.decode(t, skip_special_tokens=True), finish_reason=f)
            for t, lp, f in zip(tokens, logprobs, finish)
        ]
