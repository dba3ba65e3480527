"""Cost of the expected-value critic readout: the 101 value answers scored as their prefix trie in
one forward (``LocalSampler.answer_logprobs``) against every answer run whole (``whole_answers``).

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
from tempo_plugin.samplers.local import LocalSampler, prefix_levels


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
    seconds: dict[str, list[float]] = {"trie": [], "whole rows": []}
    results: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, score in (("trie", sampler.answer_logprobs), ("whole rows", sampler.whole_answers)):
            tic = time.perf_counter()
            results[name] = score(prompt, answers)
            seconds[name].append(time.perf_counter() - tic)
    gap = max(abs(a - b) for a, b in zip(results["trie"], results["whole rows"]))
    print(f"{args.model}: prompt {len(prompt)} tokens, 101 answers of {sum(map(len, answers))} tokens; "
          f"{args.threads} thread(s)")
    print(f"trie       {min(seconds['trie']):7.2f} s  feeds {fed} answer tokens")
    print(f"whole rows {min(seconds['whole rows']):7.2f} s  feeds {sum(map(len, answers))} answer tokens")
    print(f"ratio {min(seconds['whole rows']) / min(seconds['trie']):.2f}x, largest log-likelihood difference {gap:.2e}")


if __name__ == "__main__":
    main()
