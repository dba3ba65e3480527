"""Compare slime's train data (one data-parallel rank, as ``RolloutManager.generate`` hands it to the
actor) with the TrainSamples the embedded runtime computed for the same rollout (recorded by
recording_rollout.py as dicts). Pure functions on plain lists: used by train_data_driver.py (roles
per optimiser step) and tests/test_slime_e2e.py (the field-by-field comparison).

A train-data row holds the RESPONSE part of a slime sample: ``tokens`` is the whole sequence,
``response_lengths`` its response length; ``loss_masks``, ``rollout_log_probs`` cover the response.
A TrainSample is the whole sequence with per-token arrays; its response starts at ``prompt_length``
(the first trained token). Padding rows (``remove_sample``) have no TrainSample and loss mask 0.
"""

from __future__ import annotations

PADDING = "padding"


def row(train_data: dict, i: int) -> dict:
    """Row i of the train data: its fields, the prompt/response split, and the prompt length."""
    tokens = list(train_data["tokens"][i])
    response_length = int(train_data["response_lengths"][i])
    return {
        "tokens": tokens,
        "response_length": response_length,
        "prompt_length": len(tokens) - response_length,
        "loss_mask": list(train_data["loss_masks"][i]),
        "log_probs": list(train_data["rollout_log_probs"][i]),
        "reward": float(train_data["rewards"][i]),
        "raw_reward": float(train_data["raw_reward"][i]) if "raw_reward" in train_data else None,
    }


def match_rows(train_data: dict, samples: list[dict]) -> list[int | None]:
    """For each train-data row, the index of the TrainSample with the same tokens and loss mask
    (each used once; equal copies are interchangeable), or None for a row that has none (padding)."""
    free = list(range(len(samples)))
    matches: list[int | None] = []
    for i in range(len(train_data["tokens"])):
        r = row(train_data, i)
        found = None
        for j in free:
            s = samples[j]
            if s["tokens"] == r["tokens"] and s["loss_mask"][r["prompt_length"]:] == r["loss_mask"] \
                    and s["prompt_length"] == r["prompt_length"]:
                found = j
                break
        if found is not None:
            free.remove(found)
        matches.append(found)
    return matches


def roles_per_step(train_data: dict, samples: list[dict], matches: list[int | None], global_batch_size: int) -> list[list[str]]:
    """The role of every row (actor, critic, padding) in train-data order, cut into optimiser steps of
    ``global_batch_size`` rows (every row is its own slime rollout here: rollout_ids are distinct)."""
    roles = [samples[j]["role"] if j is not None else PADDING for j in matches]
    return [roles[k:k + global_batch_size] for k in range(0, len(roles), global_batch_size)]


def one_advantage(sample: dict) -> float | None:
    """The advantage every trained token of a TEMPO / GRPO TrainSample carries (None if they differ)."""
    values = {a for a, m in zip(sample["advantages"], sample["loss_mask"]) if m}
    return values.pop() if len(values) == 1 else None


def mismatches(train_data: dict, samples: list[dict], tol: float = 1e-5) -> list[str]:
    """Every disagreement between slime's train data and the TrainSamples, one line each (empty: all agree).

    Per row with a TrainSample: tokens (whole sequence), response length = len - prompt_length, loss
    mask = the TrainSample's mask from prompt_length on, rollout log-probs = its old log-probs from
    prompt_length on, reward (after slime's reward post-process) and raw reward (before) = the
    sample's one advantage, and the per-token advantages the reward implies (reward on every
    loss-mask token, 0 elsewhere) = the TrainSample's advantages from prompt_length on. Per padding
    row: loss mask all 0. Every row: not truncated, total length = its token count, and its
    rollout's loss-mask sum = its own (every row is its own slime rollout). Over the rollout: every
    TrainSample matched exactly once, rollout ids distinct, sample_indices strictly increasing in
    train-data order, and the per-row lengths consistent.
    """
    problems: list[str] = []
    n = len(train_data["tokens"])
    for key in ("response_lengths", "loss_masks", "rollout_log_probs", "rewards", "raw_reward", "truncated",
                "total_lengths", "rollout_ids", "rollout_mask_sums", "sample_indices"):
        if len(train_data[key]) != n:
            problems.append(f"{key} has {len(train_data[key])} rows for {n} token rows")
    if problems:
        return problems
    matches = match_rows(train_data, samples)
    unmatched = sorted(set(range(len(samples))) - {j for j in matches if j is not None})
    if unmatched:
        problems.append(f"TrainSamples {unmatched} have no train-data row with their tokens and loss mask")
    if len(set(train_data["rollout_ids"])) != n:
        problems.append(f"rollout ids are not distinct: {train_data['rollout_ids']}")
    indices = list(train_data["sample_indices"])
    if any(b <= a for a, b in zip(indices, indices[1:])):
        problems.append(f"sample_indices are not increasing in train-data order: {indices}")
    for i, j in enumerate(matches):
        r = row(train_data, i)
        if train_data["truncated"][i] != 0:
            problems.append(f"row {i} is marked truncated")
        if train_data["total_lengths"][i] != len(r["tokens"]):
            problems.append(f"row {i}: total length {train_data['total_lengths'][i]} for {len(r['tokens'])} tokens")
        if train_data["rollout_mask_sums"][i] != sum(r["loss_mask"]):
            problems.append(f"row {i}: rollout mask sum {train_data['rollout_mask_sums'][i]}, its own is {sum(r['loss_mask'])}")
        if not (len(r["loss_mask"]) == len(r["log_probs"]) == r["response_length"] >= 1):
            problems.append(f"row {i}: loss mask {len(r['loss_mask'])}, log-probs {len(r['log_probs'])}, "
                            f"response length {r['response_length']}")
            continue
        if j is None:
            if any(r["loss_mask"]):
                problems.append(f"row {i} has no TrainSample (padding) but a loss mask with {sum(r['loss_mask'])} ones")
            continue
        s = samples[j]
        p = s["prompt_length"]
        advantage = one_advantage(s)
        if advantage is None:
            problems.append(f"row {i}: its TrainSample has several advantages on its trained tokens")
            continue
        if abs(r["reward"] - advantage) > tol or abs(r["raw_reward"] - advantage) > tol:
            problems.append(f"row {i}: reward {r['reward']} (raw {r['raw_reward']}) but the TrainSample's "
                            f"advantage is {advantage}")
        implied = [r["reward"] * m for m in r["loss_mask"]]
        expected = s["advantages"][p:]
        if len(implied) != len(expected) or any(abs(a - b) > tol for a, b in zip(implied, expected)):
            problems.append(f"row {i}: per-token advantages implied by the reward differ from the TrainSample's")
        logprobs = s["old_logprobs"][p:]
        if any(abs(a - b) > tol for a, b in zip(r["log_probs"], logprobs)):
            problems.append(f"row {i}: rollout log-probs differ from the TrainSample's old log-probs")
    return problems
