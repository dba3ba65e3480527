"""Batched sampling with a KV cache on a local HF causal LM, returning per-token log-probs.

Prompts are left-padded so every row's next token sits in the last column. The recorded log-prob
of a token is its log-probability under the temperature-scaled distribution (what the trainer
recomputes), before any top-p truncation.

Multi-round rollouts extend each branch's prompt by a few tokens per round, so the sampler keeps
the KV cache of its last call: when every request of the next call extends a distinct row of that
call (the tokens the cache holds are a prefix of its prompt), only the new tokens are prefilled.
The new tokens of all rows are left-padded into one block; the padding stays masked out of
attention and positions count real tokens only, so the result equals a fresh prefill. Any other
call (a critic call, a new batch) prefills from scratch and replaces the kept cache, as does any
call after the model's weights changed (a training step, a refreshed sampling copy: the kept
keys/values belong to the old weights); there,
requests with the same prompt (the N branches of one start state, the K samples of one critic
prompt) prefill it once and share the cache row. ``prompt_tokens`` / ``prefill_tokens`` count both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from tempo_plugin.logprobs import cache_argument, token_logprobs

from tempo_plugin.rollout.batches import chunk_by_token_budget, pad_rows
from tempo_plugin.samplers.kv_cache import chunked_cache
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams


def _sample_top_p(probs: torch.Tensor, top_p: float, generator: torch.Generator) -> torch.Tensor:
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
        choice = torch.multinomial(sorted_probs * keep, 1, generator=generator)
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def prefix_levels(answers: Sequence[Sequence[int]]) -> list[list[tuple[int, ...]]]:
    """Level d: the distinct length-d prefixes of the answers that some answer continues (level 0:
    the empty prefix), sorted. Scoring the answers over them feeds one token per prefix past level 0."""
    longest = max((len(a) for a in answers), default=0)
    return [sorted({tuple(a[:d]) for a in answers if len(a) > d}) for d in range(longest)]


@dataclass
class _KeptCache:
    cache: Any
    attention: torch.Tensor  # [B, W] 1 where the cached position holds a visible token
    visible: list[list[int]]  # per row, the tokens whose keys/values the cache holds (unmasked)
    weights_version: int  # the model's weights_version when the cache was computed


def weights_version(model: Any) -> int:
    """A number that changes whenever any parameter is written in place (an optimiser step, a
    ``copy_`` or ``load_state_dict``): the sum of the parameters' autograd version counters."""
    return sum(p._version for p in model.parameters())


@dataclass
class LocalSampler:
    model: Any
    tokenizer: Any
    max_batch_size: int = 64
    max_batch_tokens: int = 65536
    reuse_cache: bool = True
    in_place_cache: bool = True  # decode into a cache written in place (kv_cache.py), not one copied per token
    reused_calls: int = 0
    prompt_tokens: int = 0  # prompt tokens of every request served (what a naive sampler prefills) ...
    prefill_tokens: int = 0  # ... and those actually run through the model (kept cache, shared prompts)
    _kept: _KeptCache | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._cache_arg = cache_argument(self.model)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def rows_per_call(self, row_tokens: int) -> int:
        """How many requests of at most ``row_tokens`` tokens (prompt + new) one ``generate`` call
        takes whole. A larger call is split, and a split call keeps no cache for the next one."""
        return max(1, min(self.max_batch_size, self.max_batch_tokens // max(1, row_tokens)))

    @torch.no_grad()
    def prompt_logprobs(self, prompts: Sequence[Sequence[int]], temperature: float) -> list[list[float]]:
        """Row i, entry j: log p(prompts[i][j] | prompts[i][:j]) under the temperature-scaled
        distribution, as ``generate`` reports for sampled tokens; entry 0 is 0.0 (nothing predicts
        it). The kept cache is left as it is."""
        rows: list[list[float]] = []
        for chunk in chunk_by_token_budget(list(prompts), len, self.max_batch_tokens):
            input_ids = pad_rows(chunk, self.pad_id, torch.long, self.device)
            attention = pad_rows([[1] * len(p) for p in chunk], 0, torch.long, self.device)
            logprobs = token_logprobs(self.model, input_ids, attention, temperature)
            rows += [logprobs[i, : len(p)].tolist() for i, p in enumerate(chunk)]
        return rows

    @torch.no_grad()
    def answer_logprobs(self, prompt: Sequence[int], answers: Sequence[Sequence[int]]) -> list[float]:
        """log pi(answer | prompt) of each answer, summed over its tokens, at temperature 1 (the
        model's own distribution). The prompt runs once. Answers that share most of their tokens
        (the critic's 101 value answers share their tag and digits) run as their prefix trie, each
        distinct prefix fed once (``_trie_answers``), where that feeds at most half their tokens;
        otherwise every answer runs whole, attending to the prompt's keys/values. The kept cache
        is left as it is. The trie needs an attention that takes a 4D mask (eager or sdpa); a model
        loaded with another (flash-attention-2) runs every answer whole."""
        levels = prefix_levels(answers)
        takes_4d_mask = getattr(self.model.config, "_attn_implementation", None) in (None, "eager", "sdpa")
        if takes_4d_mask and 2 * sum(len(level) for level in levels[1:]) <= sum(len(a) for a in answers) and prompt and answers:
            return self._trie_answers(prompt, answers, levels)
        return self.whole_answers(prompt, answers)

    @torch.no_grad()
    def whole_answers(self, prompt: Sequence[int], answers: Sequence[Sequence[int]]) -> list[float]:
        """``answer_logprobs`` with every answer run whole, attending to the prompt's keys/values."""
        rows = [list(prompt) + list(a) for a in answers]
        input_ids = pad_rows(rows, self.pad_id, torch.long, self.device)
        attention = pad_rows([[1] * len(r) for r in rows], 0, torch.long, self.device)
        logprobs = token_logprobs(self.model, input_ids, attention, 1.0, first=len(prompt))
        return [float(logprobs[i, len(prompt): len(r)].sum()) for i, r in enumerate(rows)]

    def _trie_answers(self, prompt: Sequence[int], answers: Sequence[Sequence[int]],
                      levels: list[list[tuple[int, ...]]]) -> list[float]:
        """``answer_logprobs`` over the answers' prefix trie, in one forward after the prompt: each
        prefix the answers continue is one token at position len(prompt) + its length - 1, seeing the
        prompt and its own ancestors only (a 4D attention mask), so its next-token log-probs score
        every answer that continues it."""
        device, dtype = self.device, next(self.model.parameters()).dtype
        output = self.model(input_ids=torch.tensor([list(prompt)], device=device), use_cache=True, logits_to_keep=1)
        after_prompt = torch.log_softmax(output.logits[0, -1, :].float(), dim=-1)
        nodes = [node for level in levels[1:] for node in level]  # parents before children
        row_of = {node: row for row, node in enumerate(nodes)}
        after_node = after_prompt[None, :0]
        if nodes:
            width = len(prompt) + len(nodes)
            sees = torch.zeros((len(nodes), width), dtype=torch.bool, device=device)
            sees[:, : len(prompt)] = True
            for row, node in enumerate(nodes):
                sees[row, [len(prompt) + row_of[node[:d]] for d in range(1, len(node) + 1)]] = True
            mask = torch.zeros((1, 1, len(nodes), width), dtype=dtype, device=device)
            mask.masked_fill_(~sees[None, None], torch.finfo(dtype).min)
            output = self.model(input_ids=torch.tensor([[node[-1] for node in nodes]], device=device),
                                attention_mask=mask,
                                position_ids=torch.tensor([[len(prompt) + len(node) - 1 for node in nodes]], device=device),
                                use_cache=True, **{self._cache_arg: getattr(output, self._cache_arg)})
            after_node = torch.log_softmax(output.logits[0].float(), dim=-1)
        totals = []
        for answer in answers:
            total = float(after_prompt[answer[0]]) if answer else 0.0
            if len(answer) > 1:
                rows = torch.tensor([row_of[tuple(answer[:d])] for d in range(1, len(answer))], device=device)
                total += float(after_node[rows, torch.tensor(answer[1:], device=device)].double().sum())
            totals.append(total)
        return totals

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed % (2**63))
        rows = self._match_kept(requests) if self.reuse_cache else None
        if rows is not None:
            self.reused_calls += 1
            return self._generate_chunk(requests, params, generator, rows)
        self._kept = None
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        chunks = []
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
            chunks.append(order[start:end])
            start = end
        if len(chunks) == 1:
            chunks = [list(range(len(requests)))]  # keep request order so the kept cache rows match
        results: list[Completion | None] = [None] * len(requests)
        for chunk in chunks:
            completions = self._generate_chunk([requests[i] for i in chunk], params, generator, None)
            for index, completion in zip(chunk, completions):
                results[index] = completion
        if len(chunks) > 1:
            self._kept = None
        return [r for r in results if r is not None]

    def _match_kept(self, requests: Sequence[Request]) -> list[int] | None:
        """Rows of the kept cache that the requests extend (one distinct row each), else None."""
        kept = self._kept
        if kept is None or not requests or len(requests) > self.max_batch_size:
            return None
        if kept.weights_version != weights_version(self.model):
            return None  # keys/values of weights the model no longer has
        longest = max(len(r.prompt_ids) for r in requests)
        if kept.attention.shape[1] > 2 * longest + 512:
            return None  # too many masked holes: a fresh prefill is cheaper
        by_length: dict[int, dict[tuple[int, ...], list[int]]] = {}
        for row, tokens in enumerate(kept.visible):
            by_length.setdefault(len(tokens), {}).setdefault(tuple(tokens), []).append(row)
        rows: list[int] = []
        used: set[int] = set()
        for request in requests:
            prompt = request.prompt_ids
            found = None
            for length, table in by_length.items():
                if length < len(prompt):
                    for row in table.get(tuple(prompt[:length]), ()):
                        if row not in used:
                            found = row
                            break
                if found is not None:
                    break
            if found is None:
                return None
            rows.append(found)
            used.add(found)
        return rows

    def _prefill_fresh(self, requests: Sequence[Request]):
        """Prefill each distinct prompt once; requests with the same prompt (N branches of one start
        state, K critic samples of one state) then share its cache row, copied."""
        slots: dict[tuple[int, ...], int] = {}
        slot_of = [slots.setdefault(tuple(r.prompt_ids), len(slots)) for r in requests]
        distinct = [Request(list(prompt), 0) for prompt in slots]
        self.prompt_tokens += sum(len(r.prompt_ids) for r in requests)
        self.prefill_tokens += sum(len(r.prompt_ids) for r in distinct)
        logits, cache, attention = self._prefill_rows(distinct)
        if len(distinct) < len(requests):
            index = torch.tensor(slot_of, dtype=torch.long, device=self.device)
            cache.batch_select_indices(index)
            logits, attention = logits.index_select(0, index), attention.index_select(0, index)
        return logits, cache, attention

    def _prefill_rows(self, requests: Sequence[Request]):
        device = self.device
        pad_id = self.pad_id
        lengths = [len(r.prompt_ids) for r in requests]
        width = max(lengths)
        input_ids = torch.full((len(requests), width), pad_id, dtype=torch.long, device=device)
        attention = torch.zeros((len(requests), width), dtype=torch.long, device=device)
        for row, request in enumerate(requests):
            input_ids[row, width - lengths[row]:] = torch.tensor(list(request.prompt_ids), dtype=torch.long)
            attention[row, width - lengths[row]:] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = chunked_cache(self.model) if self.in_place_cache else None
        output = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                            use_cache=True, logits_to_keep=1, **({self._cache_arg: cache} if cache is not None else {}))
        return output.logits[:, -1, :], getattr(output, self._cache_arg), attention

    def _prefill_extension(self, requests: Sequence[Request], rows: list[int]):
        kept = self._kept
        assert kept is not None
        device = self.device
        pad_id = self.pad_id
        index = torch.tensor(rows, dtype=torch.long, device=device)
        kept.cache.batch_select_indices(index)
        new_tokens = [list(r.prompt_ids[len(kept.visible[row]):]) for r, row in zip(requests, rows)]
        width = max(len(t) for t in new_tokens)
        block = torch.full((len(requests), width), pad_id, dtype=torch.long, device=device)
        block_mask = torch.zeros((len(requests), width), dtype=torch.long, device=device)
        positions = torch.zeros((len(requests), width), dtype=torch.long, device=device)
        for i, (tokens, row) in enumerate(zip(new_tokens, rows)):
            start = len(kept.visible[row])
            block[i, width - len(tokens):] = torch.tensor(tokens, dtype=torch.long)
            block_mask[i, width - len(tokens):] = 1
            positions[i, :] = start
            positions[i, width - len(tokens):] = torch.arange(start, start + len(tokens))
        attention = torch.cat([kept.attention.index_select(0, index), block_mask], dim=1)
        self.prompt_tokens += sum(len(r.prompt_ids) for r in requests)
        self.prefill_tokens += sum(len(t) for t in new_tokens)
        output = self.model(input_ids=block, attention_mask=attention, position_ids=positions,
                            use_cache=True, logits_to_keep=1, **{self._cache_arg: kept.cache})
        return output.logits[:, -1, :], getattr(output, self._cache_arg), attention

    @torch.no_grad()
    def _generate_chunk(
        self, requests: Sequence[Request], params: SamplingParams, generator: torch.Generator, rows: list[int] | None
    ) -> list[Completion]:
        device = self.device
        if rows is None:
            logits, cache, attention = self._prefill_fresh(requests)
        else:
            logits, cache, attention = self._prefill_extension(requests, rows)
        logits = logits.float()
        batch = len(requests)
        next_position = torch.tensor([len(r.prompt_ids) for r in requests], device=device)
        budgets = torch.tensor([r.max_new_tokens for r in requests], device=device)
        stop_ids = torch.tensor(list(params.stop_token_ids) or [-1], device=device)
        tokens: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        finish = ["length"] * batch
        active = torch.ones(batch, dtype=torch.bool, device=device)
        for step in range(int(budgets.max().item())):
            log_dist = torch.log_softmax(logits / params.temperature, dim=-1)
            chosen = _sample_top_p(log_dist.exp(), params.top_p, generator)
            chosen_logprob = log_dist.gather(-1, chosen[:, None]).squeeze(-1)
            for row, (token, logprob, live) in enumerate(zip(chosen.tolist(), chosen_logprob.tolist(), active.tolist())):
                if live:
                    tokens[row].append(token)
                    logprobs[row].append(logprob)
            is_stop = torch.isin(chosen, stop_ids)
            for row in torch.nonzero(active & is_stop).flatten().tolist():
                finish[row] = "stop"
            active = active & ~is_stop & (budgets > step + 1)
            if not bool(active.any()):
                break
            # finished rows keep a column, masked out, so the batch stays rectangular
            attention = torch.cat([attention, active[:, None].long()], dim=1)
            output = self.model(input_ids=chosen[:, None], attention_mask=attention, position_ids=next_position[:, None],
                                use_cache=True, **{self._cache_arg: cache})
            cache = getattr(output, self._cache_arg)
            logits = output.logits[:, -1, :].float()
            next_position = next_position + 1
        # the cache holds each prompt and every generated token but the last (never fed, or masked)
        self._kept = _KeptCache(
            cache=cache, attention=attention,
            visible=[list(r.prompt_ids) + t[:-1] for r, t in zip(requests, tokens)],
            weights_version=weights_version(self.model),
        )
        return [
            Completion(token_ids=t, logprobs=lp, text=self.tokenizer.decode(t, skip_special_tokens=True), finish_reason=f)
            for t, lp, f in zip(tokens, logprobs, finish)
        ]
