"""Cost of the expected-value critic readout: the 101 value answers scored by walking their prefix
trie (``LocalSampler.answer_logprobs``) against every answer run whole after the prompt's keys/values.

    .venv/bin/python bench/readout.py [--model smollm2-135m] [--prompt-tokens 400] [--repeats 3]

Prints seconds per readout for both (alternating, best of the repeats), the tokens each feeds past
the prompt, and the largest difference of their log-likelihoods.
"""

from __future__ import annotations

import argparse
import time

import torch

from tempo_plugin.critic.readout import value_answer_texts
from tempo_plugin.embedded.model import load_pretrained
from tempo_plugin.logprobs import token_logprobs
from tempo_plugin.rollout.batches import pad_rows
from tempo_plugin.samplers.local import LocalSampler, prefix_levels


@torch.no_grad()
def whole_rows(sampler: LocalSampler, prompt: list[int], answers: list[list[int]]) -> list[float]:
    rows = [prompt + a for a in answers]
    input_ids = pad_rows(rows, sampler.pad_id, torch.long, sampler.device)
    attention = pad_rows([[1] * len(r) for r in rows], 0, torch.long, sampler.device)
    logprobs = token_logprobs(sampler.model, input_ids, attention, 1.0, first=len(prompt))
    return [float(logprobs[i, len(prompt): len(r)].sum()) for i, r in enumerate(rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_pretrained(args.model, torch.device("cpu"))
    model.eval()
    sampler = LocalSampler(model, tokenizer)
    text = "You see a key, a door and a vault. The plan: take the brass key, open the vault. "
    prompt = (tokenizer.encode(text * 100, add_special_tokens=False))[: args.prompt_tokens]
    answers = [tokenizer.encode(" " + t, add_special_tokens=False) for t in value_answer_texts()]
    fed = sum(len(level) for level in prefix_levels(answers)[1:])
    seconds: dict[str, list[float]] = {"trie walk": [], "whole rows": []}
    results: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, score in (("trie walk", sampler.answer_logprobs), ("whole rows", lambda p, a: whole_rows(sampler, p, a))):
            tic = time.perf_counter()
            results[name] = score(prompt, answers)
            seconds[name].append(time.perf_counter() - tic)
    gap = max(abs(a - b) for a, b in zip(results["trie walk"], results["whole rows"]))
    print(f"{args.model}: prompt {len(prompt)} tokens, 101 answers of {sum(map(len, answers))} tokens; "
          f"{args.threads} thread(s)")
    print(f"trie walk  {min(seconds['trie walk']):7.2f} s  feeds {fed} answer tokens")
    print(f"whole rows {min(seconds['whole rows']):7.2f} s  feeds {sum(map(len, answers))} answer tokens")
    print(f"ratio {min(seconds['whole rows']) / min(seconds['trie walk']):.2f}x, largest log-likelihood difference {gap:.2e}")


if __name__ == "__main__":
    main()
