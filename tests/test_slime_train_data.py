"""Our rollout hooks' samples through slime's REAL train-data path: RolloutManager._get_rollout_data
(flatten), _convert_samples_to_train_data and _split_train_data_by_dp (build_dp_schedule), as
RolloutManager.generate runs them, checking that nothing is changed or dropped on the way.

The samples are made here (slime's own Sample, over HTTP on loopback as in test_slime_rollout.py),
pickled, and handed to tests/slime_stub_imports.py in a subprocess: slime.ray.rollout imports ray and
sglang at module level, which that script stubs, and the stubs must not leak into this process.

Needs slime's source on PYTHONPATH (docs/slime.md); skipped otherwise:

    PYTHONPATH=/path/to/slime python -m pytest -q tests/test_slime_train_data.py
"""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from tests.extras import skip_module_without_slime

skip_module_without_slime()

from test_slime_rollout import ScriptedPolicy, flat, slime_args  # noqa: E402

from tempo_plugin.slime.data_source import TempoDataSource  # noqa: E402
from tempo_plugin.slime.reward import post_process  # noqa: E402
from tempo_plugin.slime.rollout import generate_grpo_rollout, generate_rollout  # noqa: E402
from tempo_plugin.slime.settings import check_global_batch_size  # noqa: E402
from tempo_plugin.config import ConfigError  # noqa: E402

RUNNER = Path(__file__).with_name("slime_stub_imports.py")
REWARD_HOOK = "tempo_plugin.slime.reward.post_process"
PER_SAMPLE_KEYS = (
    "tokens", "response_lengths", "rewards", "raw_reward", "loss_masks", "rollout_log_probs", "rollout_ids",
    "rollout_mask_sums", "truncated", "sample_indices",
)
# keys _split_train_data_by_dp hands each rank for its own partition only
PARTITIONED = ("tokens", "response_lengths", "rewards", "truncated", "loss_masks", "sample_indices", "rollout_ids",
               "rollout_mask_sums", "rollout_log_probs", "source_names")


def train_args(args, **overrides):
    """The slime args the three RolloutManager methods read: slime's defaults, with dynamic batching
    (--use-dynamic-batch-size --max-tokens-per-gpu, as scripts/qwen3-*/parallel.sh) and our reward hook."""
    values = dict(
        load_debug_rollout_data=None, reward_key=None, rollout_top_p=float(args.rollout_top_p),
        n_samples_per_prompt=args.n_samples_per_prompt, rollout_batch_size=args.rollout_batch_size,
        global_batch_size=args.global_batch_size, advantage_estimator="grpo", rewards_normalization=True,
        grpo_std_normalization=True, custom_reward_post_process_path=REWARD_HOOK,
        use_dynamic_batch_size=True, max_tokens_per_gpu=1024, micro_batch_size=1, balance_by_flops=False,
        balance_data=False, rollout_data_transport="object-store",
    )
    values.update(overrides)
    return values


def parallel(name, dp_size, **args):
    config = {"dp_size": dp_size, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}
    return {"name": name, "train_parallel_config": config, "args": args}


SPLITS = [
    parallel("dp2-dynamic", 2, use_dynamic_batch_size=True, max_tokens_per_gpu=1024),
    parallel("dp1-static", 1, use_dynamic_batch_size=False, micro_batch_size=2),
]


def run_slime(tmp_path, cases):
    """Run the cases through slime's RolloutManager in a subprocess; {case name: its JSON facts}."""
    for case in cases:
        path = tmp_path / f"{case['name']}.pkl"
        with open(path, "wb") as f:
            pickle.dump(case.pop("output"), f)
        case["pickle"] = str(path)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cases": cases}))
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(spec)], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_conversion(result, samples, expected_rewards):
    """train_data is the samples' fields unchanged, one entry per sample, in order."""
    n = len(samples)
    data = result["train_data"]
    assert result["num_samples"] == n
    assert set(PER_SAMPLE_KEYS) <= set(result["keys"])
    for key in PER_SAMPLE_KEYS:
        assert len(data[key]) == n, key
    assert data["tokens"] == [s.tokens for s in samples]
    assert data["response_lengths"] == [s.response_length for s in samples]
    assert data["sample_indices"] == [s.index for s in samples]
    assert data["raw_reward"] == [s.reward for s in samples]
    assert data["rewards"] == expected_rewards  # a custom post-process's rewards are passed through as they are
    assert data["truncated"] == [int(s.status == type(s).Status.TRUNCATED) for s in samples]
    # our samples leave rollout_id unset: slime numbers them 0..n-1, so a "rollout" is one sample and
    # --global-batch-size counts samples (what settings.check_global_batch_size assumes)
    assert all(s.rollout_id is None for s in samples)
    assert data["rollout_ids"] == list(range(n))
    for mask, logprobs, sample, total in zip(data["loss_masks"], data["rollout_log_probs"], samples, data["rollout_mask_sums"]):
        assert len(mask) == len(logprobs) == sample.response_length
        assert logprobs == pytest.approx(sample.rollout_log_probs)
        if sample.remove_sample:
            assert mask == [0] * sample.response_length and total == 0
        else:
            assert mask == sample.loss_mask and total == sum(mask) > 0


def check_split(result, n, global_batch_size):
    """Every sample on exactly one DP rank, as converted; samples / global_batch_size steps."""
    data = result["train_data"]
    for split in result["splits"]:
        ranks = split["ranks"]
        placed = sorted(j for rank in ranks for j in rank["partition"])
        assert placed == list(range(n)), split["name"]
        for rank in ranks:
            assert rank["global_batch_sizes"] == [global_batch_size] * (n // global_batch_size)
            assert len(rank["num_microbatches"]) == n // global_batch_size
            assert sorted(i for mbs in rank["micro_batch_indices"] for i in mbs) == list(range(len(rank["partition"])))
            assert {"tokens", "loss_masks", "rollout_log_probs"} <= set(rank["tensor_keys"])
            for key in PARTITIONED:
                expected = [data[key][j] for j in rank["partition"]]
                if key == "rollout_log_probs":  # float32 tensors now
                    assert all(a == pytest.approx(b, abs=1e-6) for a, b in zip(rank[key], expected))
                else:
                    assert rank[key] == expected, (split["name"], key)
            for j, mask, logprobs in zip(rank["partition"], rank["loss_masks"], rank["rollout_log_probs"]):
                assert len(mask) == len(logprobs) == data["response_lengths"][j]
            assert rank["raw_reward"] == data["raw_reward"]  # whole list: split again on the train side
            assert rank["total_lengths"] == [len(t) for t in data["tokens"]]


def grouped_centring(samples):
    """Our post_process, written out: reward minus its group_index mean."""
    groups = {}
    for s in samples:
        groups.setdefault(s.group_index, []).append(s.reward)
    return [s.reward - sum(groups[s.group_index]) / len(groups[s.group_index]) for s in samples]


def test_tempo_samples_survive_slimes_conversion_and_dp_split(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    from slime.utils.types import Sample

    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url)  # S = 2, N = 2, K = 2, --global-batch-size 4
    source = TempoDataSource(args)
    warmup = generate_rollout(args, 0, source)
    td = generate_rollout(args, 1, source)
    warmup_samples, td_samples = flat(warmup.samples), flat(td.samples)
    assert isinstance(td_samples[0], Sample)
    assert (len(warmup_samples), len(td_samples)) == (4, 8)
    assert any(s.remove_sample for s in warmup_samples + td_samples), "padding is exercised"
    assert {s.metadata["tempo_role"] for s in td_samples} >= {"actor", "critic"}

    expected = {name: post_process(args, samples) for name, samples in (("warmup", warmup_samples), ("td", td_samples))}
    for name, samples in (("warmup", warmup_samples), ("td", td_samples)):
        assert expected[name][1] == pytest.approx(grouped_centring(samples))
        for group in {s.group_index for s in samples}:
            assert sum(c for c, s in zip(expected[name][1], samples) if s.group_index == group) == pytest.approx(0, abs=1e-9)

    # negative control: --global-batch-size 3 on the 8-sample TD rollout (our settings refuse it)
    with pytest.raises(ConfigError, match="does not divide the 8 samples of a TD rollout"):
        check_global_batch_size(3, {"TD": 8})
    results = run_slime(tmp_path, [
        {"name": "warmup", "output": warmup, "rollout_id": 0, "args": train_args(args), "splits": SPLITS},
        {"name": "td", "output": td, "rollout_id": 1, "args": train_args(args), "splits": SPLITS},
        {"name": "td_gbs3", "output": td, "rollout_id": 1, "args": train_args(args, global_batch_size=3),
         "splits": [parallel("dp2-dynamic", 2, use_dynamic_batch_size=True, max_tokens_per_gpu=1024)]},
    ])

    for name, samples in (("warmup", warmup_samples), ("td", td_samples)):
        check_conversion(results[name], samples, expected[name][1])
        check_split(results[name], len(samples), 4)

    ranks = results["td_gbs3"]["splits"][0]["ranks"]
    kept = sorted(j for rank in ranks for j in rank["partition"])
    assert ranks[0]["global_batch_sizes"] == [3, 3]
    assert len(kept) == 6 < 8 and kept == list(range(6)), "slime drops the 2 samples after 8 // 3 steps of 3"
    with pytest.raises(AssertionError):  # and the split check above catches it
        check_split(results["td_gbs3"], 8, 3)


def test_grpo_baseline_survives_slimes_conversion_and_split(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    """Multi-turn GRPO hands slime each episode's group-relative advantage as its reward (the
    embedded ``episode_update``'s), already centred per game: our reward hook passes it through."""
    url = serve(ScriptedPolicy(tokenizer, protocol, invalid_share=0.3))
    args = slime_args(tmp_path, tokenizer_dir, url,
                      rollout_function_path="tempo_plugin.slime.rollout.generate_grpo_rollout")
    source = TempoDataSource(args)
    outputs = [generate_grpo_rollout(args, rollout_id, source) for rollout_id in range(2)]
    cases = [
        {"name": f"grpo{i}", "output": out, "rollout_id": i, "args": train_args(args), "splits": SPLITS}
        for i, out in enumerate(outputs)
    ]
    samples_of = {case["name"]: flat(case["output"].samples) for case in cases}
    assert any(not s.remove_sample for samples in samples_of.values() for s in samples), "some group has signal"
    results = run_slime(tmp_path, cases)

    for name, samples in samples_of.items():
        assert len(samples) == 4  # S = 2 games x N = 2 episodes, padding included
        raw, centred = post_process(args, samples)
        assert centred == pytest.approx(raw, abs=1e-9)
        check_conversion(results[name], samples, centred)
        check_split(results[name], 4, 4)
