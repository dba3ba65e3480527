"""Temporal GRPO on slime: the rollout function (rollout.generate_temporal_grpo_rollout), the reward
post-process and the advantage hook (tempo_plugin/slime/temporal_grpo.py).

Without slime: the rollout over real HTTP on loopback (slime's Sample when importable, stand-ins
otherwise), the post-process on hand samples, the advantage hook on hand tensors with the pure
context-parallel layout of tppo.py. With slime on PYTHONPATH (megatron stubbed, as in
test_slime_tppo.py): the advantage hook called by slime's own ``compute_advantages_and_returns``
with its real ``slice_log_prob_with_cp`` at CP 1 and 2, slime's ``log_rollout_data`` on the result,
and the samples through slime's RolloutManager train-data path (test_slime_train_data.py's runner).
"""

from __future__ import annotations

import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.extras import needs_slime
import torch
from test_slime_rollout import ScriptedPolicy, check_sample_arrays, flat, slime_args, write_yaml

from tempo_plugin.slime import temporal_grpo, tppo
from tempo_plugin.slime.data_source import TempoDataSource
from tempo_plugin.slime.rollout import generate_temporal_grpo_rollout
from tempo_plugin.slime.samples import TOKEN_ADVANTAGES
from tempo_plugin.slime.settings import episode_sample_count, sample_counts
from tempo_plugin.config import ConfigError
from tempo_plugin.rollout.games import train_game

ROOT = Path(__file__).resolve().parents[1]
FUNCTION = "tempo_plugin.slime.rollout.generate_temporal_grpo_rollout"
POST_PROCESS = "tempo_plugin.slime.temporal_grpo.post_process"
ADVANTAGES = "tempo_plugin.slime.temporal_grpo.advantages"


def runs(mask):
    """(start, end) of each run of 1s in ``mask``: the policy's completions."""
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


# --------------------------------------------------------------------------------------------------
# the rollout function, end to end over HTTP


def test_rollout_carries_the_per_token_advantages_of_stage_update(
    tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types, monkeypatch
):
    from tempo_plugin.envs import env_factory
    from tempo_plugin.updates.rollout import TempoRollout

    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url, rollout_function_path=FUNCTION)  # S = 2 games, N = 2 episodes
    source = TempoDataSource(args)
    assert episode_sample_count(source.cfg) == 4
    rollout = source.rollout()
    calls, original = [], rollout.stage_update

    def spy(update, games):
        batch = original(update, games)
        calls.append((update, list(games), batch))
        return batch

    monkeypatch.setattr(rollout, "stage_update", spy)
    outputs = [generate_temporal_grpo_rollout(args, rollout_id, source) for rollout_id in range(2)]

    real_seen = padding_seen = 0
    for rollout_id, (out, (update, games, batch)) in enumerate(zip(outputs, calls)):
        # stage_update got this rollout's id and S fresh training games
        assert update == rollout_id and games == [train_game(0, 2 * rollout_id + g) for g in range(2)]
        samples = flat(out.samples)
        assert len(samples) == 4 and [s.index for s in samples] == list(range(4 * rollout_id, 4 * rollout_id + 4))
        real = [s for s in samples if not s.remove_sample]
        padding = [s for s in samples if s.remove_sample]
        assert len({s.group_index for s in padding}) <= 1  # one padding group, spread over the steps
        assert out.metrics["rollout/train/removed_samples"] == len(padding) == 4 - len(batch.samples)
        assert out.metrics["rollout/actor/degenerate_group_rate"] == batch.metrics["actor/degenerate_group_rate"]
        for sample, train in zip(real, batch.samples, strict=True):
            check_sample_arrays(sample)
            start = train.prompt_length
            assert sample.tokens == train.tokens and sample.response_length == len(train.tokens) - start
            assert sample.loss_mask == train.loss_mask[start:] and sample.group_index == 2 * train.group
            assert sample.reward == train.reward  # the episode return, for logging
            advantages = sample.metadata[TOKEN_ADVANTAGES]
            assert advantages == train.advantages[start:]  # what stage_update gave, response tokens only
            # one value per completion (its round's stage advantage), 0 on observations and turn tokens
            assert all(a == 0.0 for a, m in zip(advantages, sample.loss_mask) if not m)
            for a, b in runs(sample.loss_mask):
                assert len(set(advantages[a:b])) == 1
            assert any(a != 0.0 for a in advantages)
        for sample in padding:
            assert sample.metadata == {"tempo_role": "padding", TOKEN_ADVANTAGES: [0.0]} and sample.response_length == 1
        real_seen += len(real)
        padding_seen += len(padding)

        # the reward post-process: episode returns for logging, per-token advantages as slime's rewards
        raw, rewards = temporal_grpo.post_process(args, samples)
        assert raw == [s.reward for s in samples]
        assert rewards == [s.metadata[TOKEN_ADVANTAGES] for s in samples]
    assert real_seen and padding_seen, "the scripted rollouts train some episodes and pad degenerate ones"
    assert source.game_cursor == 4

    # the same updates on the embedded runtime (no HTTP, no slime), from a fresh policy: the same
    # episodes with the same advantages (matched by tokens: concurrent requests may reach the
    # server in another order, which can swap identical-prompt episodes within a game)
    cfg = source.cfg
    local = TempoRollout(cfg, ScriptedPolicy(tokenizer, protocol), protocol,
                         env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data))
    for out, (update, games, _) in zip(outputs, calls):
        expected = sorted((tuple(s.tokens), s.advantages) for s in local.stage_update(update, games).samples)
        got = sorted(
            (tuple(s.tokens), [0.0] * (len(s.tokens) - s.response_length) + s.metadata[TOKEN_ADVANTAGES])
            for s in flat(out.samples) if not s.remove_sample
        )
        assert [t for t, _ in got] == [t for t, _ in expected]
        for (_, a), (_, b) in zip(got, expected):
            assert a == pytest.approx(b, abs=1e-12)


def test_evaluation_and_the_data_source_check(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url, rollout_function_path=FUNCTION)
    out = generate_temporal_grpo_rollout(args, 0, TempoDataSource(args), evaluation=True)
    data = out.data["success_rate"]  # slime logs it as eval/success_rate
    assert len(data["rewards"]) == len(data["samples"]) == 3 and set(data["rewards"]) <= {0.0, 1.0}
    with pytest.raises(ConfigError, match="--data-source-path tempo_plugin.slime.data_source.TempoDataSource"):
        generate_temporal_grpo_rollout(args, 0, object())


def test_settings_count_and_check_the_environment(tmp_path, tokenizer_dir, monkeypatch):
    from tempo_plugin.envs import ENVS

    args = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1", rollout_function_path=FUNCTION,
                      global_batch_size=3)
    with pytest.raises(ConfigError, match="--global-batch-size 3 does not divide the 4 samples of a Temporal GRPO "
                                          "episode rollout"):
        TempoDataSource(args)
    args.global_batch_size = 4
    assert sample_counts(TempoDataSource(args).cfg, FUNCTION) == {"Temporal GRPO episode": 4}
    # an environment without milestones is refused at start-up, in one line
    monkeypatch.setitem(ENVS, "plain", "tempo_plugin.envs.base:StepResult")  # a class without milestones
    args.custom_config_path = write_yaml(tmp_path / "plain.yaml", env="plain")
    with pytest.raises(ConfigError, match=r"env 'plain' reports no milestones .* needs: add stage_count and stages_completed to its class, see tempo_plugin/envs/base.py$"):
        TempoDataSource(args)
    args.rollout_function_path = "tempo_plugin.slime.rollout.generate_grpo_rollout"
    TempoDataSource(args)  # the plain GRPO baseline needs none


def test_hook_signatures_and_light_imports():
    import inspect

    parameters = inspect.signature(generate_temporal_grpo_rollout).parameters
    assert list(parameters) == ["args", "rollout_id", "data_source", "evaluation"]
    assert parameters["evaluation"].default is False
    # slime's call sites: func(args, samples) (slime/ray/rollout.py) and fn(args, rollout_data) (loss.py)
    assert list(inspect.signature(temporal_grpo.post_process).parameters) == ["args", "samples"]
    assert list(inspect.signature(temporal_grpo.advantages).parameters) == ["args", "rollout_data"]
    code = (
        "import sys\n"
        "import tempo_plugin.slime.temporal_grpo, tempo_plugin.slime.rollout\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'slime', 'torch', 'numpy', 'megatron', 'ray'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------------
# reward post-process on hand samples


def hand_sample(sample_cls, index, reward, advantages, loss_mask, prompt=2, **metadata):
    response = len(loss_mask)
    meta = {"tempo_role": "actor", **metadata}
    if advantages is not None:
        meta[TOKEN_ADVANTAGES] = advantages
    return sample_cls(
        group_index=0, index=index, tokens=list(range(prompt + response)), response="", response_length=response,
        loss_mask=loss_mask, rollout_log_probs=[0.0] * response, reward=reward, status=sample_cls.Status.COMPLETED,
        metadata=meta,
    )


def test_post_process_passes_the_per_token_advantages(slime_types):
    Sample = slime_types.Sample
    samples = [
        hand_sample(Sample, 0, 1.0, [0.5, 0.5, 0.0, -1.0], [1, 1, 0, 1]),
        hand_sample(Sample, 1, 0.0, [-0.25, 0.0, 2], [1, 0, 1]),
    ]
    raw, rewards = temporal_grpo.post_process(Namespace(reward_key=None), samples)
    assert raw == [1.0, 0.0]
    assert rewards == [[0.5, 0.5, 0.0, -1.0], [-0.25, 0.0, 2.0]] and all(type(a) is float for a in rewards[1])


def test_post_process_refuses_samples_of_another_rollout_function(slime_types):
    Sample = slime_types.Sample
    grpo_episode = hand_sample(Sample, 7, 1.0, None, [1, 1])  # e.g. generate_grpo_rollout's: no advantages
    with pytest.raises(ConfigError) as error:
        temporal_grpo.post_process(
            Namespace(reward_key=None), [hand_sample(Sample, 6, 0.0, [0.0, 0.0], [1, 1]), grpo_episode]
        )
    message = str(error.value)
    assert "\n" not in message and message.startswith("sample 1 (index 7) carries no per-token advantages")
    assert message.endswith(f"{POST_PROCESS} needs --rollout-function-path {FUNCTION}")
    with pytest.raises(ValueError, match="sample 0 .* 3 per-token advantages for 2 response tokens"):
        temporal_grpo.post_process(Namespace(reward_key=None), [hand_sample(Sample, 0, 0.0, [1.0, 1.0, 1.0], [1, 1])])


# --------------------------------------------------------------------------------------------------
# advantage hook on hand tensors
#
# A: total 8, response 5 (prompt 3), advantages [0.5, 0.5, 0, -1, -1], mask [1, 1, 0, 1, 1]
# B: total 9, response 4 (prompt 5), advantages [1.5, 0, -0.5, -0.5],  mask [1, 0, 1, 1]
# C: padding, total 2, response 1,    advantages [0],                   mask [0]
# CP 2 (chunks of ceil(total / 4); rank r holds chunks r and 3 - r; response token j sits at logit
# position prompt - 1 + j):
#   A: chunk 2 -> chunks [0,2) [2,4) [4,6) [6,8); positions 2..6: rank 0 holds 6 (j = 4),
#      rank 1 holds 2, 3, 4, 5 (j = 0..3)
#   B: chunk 3 -> chunks [0,3) [3,6) [6,9) [9,12); positions 4..7: rank 0 holds none, rank 1 all
#   C: chunk 1 -> position 0 in chunk 0: rank 0 holds it, rank 1 none
# Means over the trained tokens (what replaces the rewards): A (0.5 + 0.5 - 1 - 1) / 4 = -0.25,
# B (1.5 - 0.5 - 0.5) / 3 = 1/6, C 0.

HAND = {
    "total_lengths": [8, 9, 2],
    "response_lengths": [5, 4, 1],
    "rewards": [[0.5, 0.5, 0.0, -1.0, -1.0], [1.5, 0.0, -0.5, -0.5], [0.0]],
    "loss_masks": [[1, 1, 0, 1, 1], [1, 0, 1, 1], [0]],
}
EXPECTED_LOCAL = {
    (1, 0): [[0.5, 0.5, 0.0, -1.0, -1.0], [1.5, 0.0, -0.5, -0.5], [0.0]],
    (2, 0): [[-1.0], [], [0.0]],
    (2, 1): [[0.5, 0.5, 0.0, -1.0], [1.5, 0.0, -0.5, -0.5], []],
}
EXPECTED_MEANS = [-0.25, 1 / 6, 0.0]


def hand_rollout_data(cp_size, cp_rank):
    """rollout_data as the actor holds it after our post-process: full-length per-token reward lists,
    full-length int loss masks, CP-local log-probs (here zeros of the local length)."""
    local = [len(x) for x in EXPECTED_LOCAL[(cp_size, cp_rank)]]
    return {
        "total_lengths": list(HAND["total_lengths"]),
        "response_lengths": list(HAND["response_lengths"]),
        "rewards": [list(r) for r in HAND["rewards"]],
        "loss_masks": [torch.tensor(m, dtype=torch.int) for m in HAND["loss_masks"]],
        "log_probs": [torch.zeros(n) for n in local],
        "kl": [torch.zeros(n) for n in local],
    }


def check_filled(rollout_data, cp_size, cp_rank):
    expected = [torch.tensor(x, dtype=torch.float32) for x in EXPECTED_LOCAL[(cp_size, cp_rank)]]
    assert len(rollout_data["advantages"]) == len(rollout_data["returns"]) == 3
    for got, ret, want, full, total, resp in zip(rollout_data["advantages"], rollout_data["returns"], expected,
                                                 HAND["rewards"], HAND["total_lengths"], HAND["response_lengths"]):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(ret, want)  # returns = advantages, as slime's GRPO
        # and the pure layout of tppo.py agrees
        torch.testing.assert_close(got, tppo.slice_local(torch.tensor(full), total, resp, cp_size, cp_rank))
    assert rollout_data["rewards"] == pytest.approx(EXPECTED_MEANS)


@pytest.mark.parametrize("cp_size, cp_rank", sorted(EXPECTED_LOCAL))
def test_advantage_hook_slices_for_context_parallelism(cp_size, cp_rank):
    rollout_data = hand_rollout_data(cp_size, cp_rank)
    temporal_grpo.fill_advantages(
        rollout_data, lambda t, total, resp: tppo.slice_local(t, total, resp, cp_size, cp_rank)
    )
    check_filled(rollout_data, cp_size, cp_rank)


def test_advantage_hook_refuses_what_it_cannot_use():
    identity = lambda t, total, resp: t  # noqa: E731
    scalar = hand_rollout_data(1, 0)
    scalar["rewards"] = [1.0, 0.0, 0.0]  # slime's default post-process, or another one
    with pytest.raises(RuntimeError, match=f"sample 0: the reward is a number.*-path {POST_PROCESS}"):
        temporal_grpo.fill_advantages(scalar, identity)
    short = hand_rollout_data(1, 0)
    short["rewards"][1] = [1.0, 2.0]
    with pytest.raises(RuntimeError, match="sample 1: 2 per-token advantages for 4 response tokens"):
        temporal_grpo.fill_advantages(short, identity)
    wrong_layout = hand_rollout_data(2, 0)  # local kl, but a slicer that keeps the full response
    with pytest.raises(RuntimeError, match=r"sample 0: advantages \(5,\) but kl \(1,\)"):
        temporal_grpo.fill_advantages(wrong_layout, identity)


# --------------------------------------------------------------------------------------------------
# against slime (megatron stubbed)


@pytest.fixture()
def slime_mods():
    from slime_megatron_stubs import make_mpu, slime_megatron_utils

    mpu = make_mpu()
    mpu.get_tensor_model_parallel_rank = lambda: 0  # what slime's log_rollout_data asks besides
    with slime_megatron_utils(mpu) as (loss, cp_utils):
        yield SimpleNamespace(loss=loss, cp_utils=cp_utils, mpu=mpu)


def actor_args(**overrides):
    """The args slime's compute_advantages_and_returns reads, as the recipes set them."""
    values = dict(
        advantage_estimator="grpo", custom_advantage_function_path=ADVANTAGES, kl_coef=0.0, use_rollout_logprobs=False,
        use_opd=False, normalize_advantages=False, ci_test=False, log_multi_turn=False, log_passrate=False,
        log_correct_samples=False,
    )
    values.update(overrides)
    return Namespace(**values)


@needs_slime
@pytest.mark.parametrize("cp_size, cp_rank", sorted(EXPECTED_LOCAL))
def test_slimes_advantage_step_runs_our_hook_with_its_cp_slicing(slime_mods, cp_size, cp_rank):
    from slime_megatron_stubs import set_cp

    set_cp(slime_mods.mpu, cp_size, cp_rank)
    rollout_data = hand_rollout_data(cp_size, cp_rank)
    del rollout_data["kl"]  # slime sets it (zeros like the local log-probs, kl_coef = 0) before the hook
    slime_mods.loss.compute_advantages_and_returns(actor_args(), rollout_data)
    check_filled(rollout_data, cp_size, cp_rank)
    for adv, kl in zip(rollout_data["advantages"], rollout_data["kl"]):
        assert adv.shape == kl.shape
    # slime's own slicing of the full lists, directly
    for got, full, total, resp in zip(rollout_data["advantages"], HAND["rewards"], HAND["total_lengths"],
                                      HAND["response_lengths"]):
        torch.testing.assert_close(got, slime_mods.cp_utils.slice_log_prob_with_cp(torch.tensor(full), total, resp))


@needs_slime
def test_slimes_rollout_logging_needs_the_rewards_replaced(slime_mods, monkeypatch):
    """slime's log_rollout_data sums each per-sample list it does not skip; per-token reward lists
    would stop it, the numbers the hook leaves are logged as rollout/rewards."""
    import slime.observability.train_metric_utils as metrics

    logged = {}
    monkeypatch.setattr(metrics, "gather_log_data", lambda name, args, rollout_id, log_dict: logged.update(log_dict))
    rollout_data = hand_rollout_data(1, 0)
    rollout_data.update(global_batch_sizes=[3], raw_reward=[1.0, 0.0, 0.0])
    with pytest.raises(TypeError):  # negative control: the lists as they arrive
        metrics.log_rollout_data(0, actor_args(), dict(rollout_data))
    del rollout_data["kl"]
    slime_mods.loss.compute_advantages_and_returns(actor_args(), rollout_data)
    metrics.log_rollout_data(0, actor_args(), rollout_data)
    assert logged["rewards"] == (pytest.approx(sum(EXPECTED_MEANS)), 3)
    assert logged["raw_reward"] == (1.0, 3)
    assert "advantages" in logged and "returns" in logged


@needs_slime
def test_samples_through_slimes_train_data_path(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    """slime's RolloutManager (_get_rollout_data, _convert_samples_to_train_data with our post-process,
    _split_train_data_by_dp): each rank gets its samples' per-token lists untouched, not tensorised."""
    from test_slime_train_data import SPLITS, check_conversion, check_split, run_slime, train_args

    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url, rollout_function_path=FUNCTION)
    source = TempoDataSource(args)
    outputs = [generate_temporal_grpo_rollout(args, rollout_id, source) for rollout_id in range(2)]
    samples_of = {f"tg{i}": flat(out.samples) for i, out in enumerate(outputs)}
    results = run_slime(tmp_path, [
        {"name": f"tg{i}", "output": out, "rollout_id": i,
         "args": train_args(args, custom_reward_post_process_path=POST_PROCESS), "splits": SPLITS}
        for i, out in enumerate(outputs)
    ])
    for name, samples in samples_of.items():
        # raw_reward = the episode returns, rewards = the per-token lists, passed through as they are
        check_conversion(results[name], samples, [s.metadata[TOKEN_ADVANTAGES] for s in samples])
        data = results[name]["train_data"]
        assert [len(r) for r in data["rewards"]] == data["response_lengths"]
        check_split(results[name], 4, 4)  # every sample on one rank, its rewards list unchanged
        for split in results[name]["splits"]:
            for rank in split["ranks"]:
                assert "rewards" not in rank["tensor_keys"]


@needs_slime
def test_slimes_runtime_hook_contract_reaches_our_refusal():
    """slime's plugin contract for --custom-reward-post-process-path: the call site and our signature
    pass; its invocation uses plain samples (no per-token advantages), which we refuse in one line."""
    from test_slime_contracts import run_contract

    result = run_contract("test_plugin_runtime_hook_contracts.py",
                          {"SLIME_CONTRACT_CUSTOM_REWARD_POST_PROCESS_PATH": POST_PROCESS},
                          "-k", "custom_reward_post_process")
    assert result.returncode == 1 and "1 failed, 1 passed" in result.stdout, result.stdout[-3000:]
    assert f"ConfigError: sample 0 (index 0) carries no per-token advantages (metadata[{TOKEN_ADVANTAGES!r}]): " \
           f"{POST_PROCESS} needs --rollout-function-path {FUNCTION}" in result.stdout
