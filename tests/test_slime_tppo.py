"""TPPO's slime hooks (tempo_plugin/slime/tppo.py).

Without slime: the pure zig-zag CP layout, the per-sample advantage core on simulated CP ranks,
and hand-computed values / advantages. With slime on PYTHONPATH (megatron stubbed): the layout
against slime's ``slice_log_prob_with_cp``, the init hook's patch of slime's value loss (reached
through slime's own loss dispatcher), and the value loss against hand-computed BCE and autograd.
"""

from __future__ import annotations

import math
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
from tests.extras import needs_slime
import torch

from tempo_plugin.algorithms.tppo import gae, reconstruct_values, value_bce_loss
from tempo_plugin.slime import tppo

ROOT = Path(__file__).resolve().parents[1]

# (total_length, response_length): responses in one chunk, across chunks, prompt-heavy (a rank holds
# nothing), total not divisible by 2 * cp_size, one-token prompt, empty response.
LAYOUT_CASES = [(8, 5), (9, 4), (13, 13 - 1), (20, 3), (17, 9), (31, 7), (7, 1), (40, 39), (6, 0), (64, 32)]
LN3 = math.log(3.0)


# --------------------------------------------------------------------------------------------------
# pure layout


@pytest.mark.parametrize("cp_size", [1, 2, 4])
@pytest.mark.parametrize("total, resp", LAYOUT_CASES)
def test_split_then_gather_is_identity(total, resp, cp_size):
    full = torch.arange(resp, dtype=torch.float32) + 1
    chunks = [tppo.slice_local(full, total, resp, cp_size, r) for r in range(cp_size)]
    assert sum(c.numel() for c in chunks) == resp
    assert sorted(i for r in range(cp_size) for i in tppo.local_response_indices(total, resp, cp_size, r)) == list(
        range(resp)
    )
    torch.testing.assert_close(tppo.gather_full(chunks, total, resp), full)


def test_layout_by_hand():
    # total 8, cp 2: chunk size 2, chunks [0,2) [2,4) [4,6) [6,8); rank 0 holds chunks 0 and 3, rank 1
    # chunks 1 and 2. Response of 5 -> prompt 3; logit positions 2..6 carry response tokens 0..4.
    assert tppo.local_response_indices(8, 5, 2, 0) == [4]  # logit 6 (chunk 3; logit 7 is past the end)
    assert tppo.local_response_indices(8, 5, 2, 1) == [0, 1, 2, 3]  # logits 2,3 (chunk 1) then 4,5 (chunk 2)
    assert tppo.local_response_indices(8, 5, 1, 0) == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------------------------------
# advantages: hand-computed, full vs simulated CP


def _full_core(f, mask, reward, gamma, lambd):
    identity = lambda t: t  # noqa: E731
    return tppo.sample_advantages(f, mask, reward, gamma, lambd, gather=identity, slice_=identity)


def test_hand_computed_three_tokens():
    f = torch.tensor([0.0, LN3, -LN3])  # z = [0, ln3, 0] -> V = [1/2, 3/4, 1/2]
    mask = torch.ones(3)
    torch.testing.assert_close(reconstruct_values(f, mask), torch.tensor([0.5, 0.75, 0.5]))
    adv, ret = _full_core(f, mask, 1.0, 1.0, 1.0)  # A_t = R - V_t
    torch.testing.assert_close(adv, torch.tensor([0.5, 0.25, 0.5]))
    torch.testing.assert_close(ret, torch.ones(3))
    adv, ret = _full_core(f, mask, 1.0, 1.0, 0.0)  # A_t = V_{t+1} - V_t, A_T = R - V_T
    torch.testing.assert_close(adv, torch.tensor([0.25, -0.25, 0.5]))
    torch.testing.assert_close(ret, torch.tensor([0.75, 0.5, 1.0]))
    # a masked middle token adds nothing to z: z = [0, 0, ln3] -> V = [1/2, 1/2, 3/4]
    adv, _ = _full_core(torch.tensor([0.0, LN3, LN3]), torch.tensor([1.0, 0.0, 1.0]), 0.0, 1.0, 1.0)
    torch.testing.assert_close(adv, torch.tensor([-0.5, -0.5, -0.75]))


def test_kl_penalty_enters_the_rewards():
    f, mask = torch.tensor([0.0, LN3, -LN3]), torch.ones(3)
    kl = torch.tensor([0.1, 0.2, 0.4])
    identity = lambda t: t  # noqa: E731
    adv, _ = tppo.sample_advantages(f, mask, 1.0, 1.0, 1.0, gather=identity, slice_=identity, local_kl=kl, kl_coef=0.5)
    # A_t = sum_{k>=t} r_k - V_t with r = -0.5 kl + R at the end
    torch.testing.assert_close(adv, torch.tensor([1 - 0.35 - 0.5, 1 - 0.3 - 0.75, 1 - 0.2 - 0.5]))


def test_cp_size_one_equals_plain_full_computation():
    torch.manual_seed(0)
    f, mask = torch.randn(11), (torch.rand(11) > 0.3).float()
    rewards = torch.zeros(11)
    rewards[-1] = 0.7
    expected = gae(rewards, reconstruct_values(f, mask), 0.9, 0.8)
    total, resp = 15, 11
    got = tppo.sample_advantages(
        f,
        mask,
        0.7,
        0.9,
        0.8,
        gather=lambda t: tppo.gather_full([t], total, resp),
        slice_=lambda t: tppo.slice_local(t, total, resp, 1, 0),
    )
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("cp_size", [2, 4])
@pytest.mark.parametrize("total, resp", [(9, 4), (17, 9), (31, 7), (40, 39), (64, 32), (20, 3)])
@pytest.mark.parametrize("gamma, lambd", [(1.0, 1.0), (1.0, 0.0), (0.95, 0.9)])
def test_simulated_cp_ranks_match_full_computation(total, resp, cp_size, gamma, lambd):
    torch.manual_seed(total * 7 + resp)
    f_full, mask, reward = torch.randn(resp), (torch.rand(resp) > 0.2).float(), 1.0
    adv_full, ret_full = _full_core(f_full, mask, reward, gamma, lambd)
    locals_ = [tppo.slice_local(f_full, total, resp, cp_size, r) for r in range(cp_size)]
    for rank in range(cp_size):

        def gather(t, rank=rank):  # what slime's all_gather_with_cp returns on this rank
            chunks = list(locals_)
            chunks[rank] = t
            return tppo.gather_full(chunks, total, resp)

        adv, ret = tppo.sample_advantages(
            locals_[rank],
            mask,
            reward,
            gamma,
            lambd,
            gather=gather,
            slice_=lambda t, rank=rank: tppo.slice_local(t, total, resp, cp_size, rank),
        )
        torch.testing.assert_close(adv, tppo.slice_local(adv_full, total, resp, cp_size, rank))
        torch.testing.assert_close(ret, tppo.slice_local(ret_full, total, resp, cp_size, rank))


def test_advantages_without_values_says_to_use_megatron_config():
    with pytest.raises(RuntimeError, match="--megatron-config-path"):
        tppo.advantages(Namespace(gamma=1.0, lambd=1.0), {"rewards": [1.0]})


def test_reward_outside_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        _full_core(torch.zeros(2), torch.ones(2), 2.0, 1.0, 1.0)


def test_import_does_not_import_slime_or_megatron():
    code = (
        "import sys, tempo_plugin.slime.tppo\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('slime', 'megatron')]\n"
        "import torch.distributed as d\n"
        "assert not bad, bad\n"
        "assert not d.is_initialized()\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# --------------------------------------------------------------------------------------------------
# against slime (megatron stubbed)


@pytest.fixture()
def slime_mods():
    from slime_megatron_stubs import make_mpu, slime_megatron_utils

    mpu = make_mpu()
    with slime_megatron_utils(mpu) as (loss, cp_utils):
        yield Namespace(loss=loss, cp_utils=cp_utils, mpu=mpu)


@needs_slime
@pytest.mark.parametrize("cp_size", [2, 4])
@pytest.mark.parametrize("total, resp", [c for c in LAYOUT_CASES if c[1] > 0])
def test_layout_matches_slime_slice_log_prob_with_cp(slime_mods, total, resp, cp_size):
    from slime_megatron_stubs import set_cp

    for rank in range(cp_size):
        set_cp(slime_mods.mpu, cp_size, rank)
        theirs = slime_mods.cp_utils.slice_log_prob_with_cp(list(range(resp)), total, resp)
        assert tppo.local_response_indices(total, resp, cp_size, rank) == theirs, (total, resp, cp_size, rank)
        # and the length slime's sum_of_sample_mean expects for this rank's chunk of the sample
        _, _, logits_offset, _ = slime_mods.cp_utils.get_logits_and_tokens_offset_with_cp(total, resp)
        assert len(theirs) == sum(b - a for a, b in logits_offset)


def _fake_critic_batch():
    # two packed samples: (total 4, response 3) and (total 3, response 2); logits[start - 1 : end - 1]
    # of each sample are its response values, so f_A = logits[0, 0:3], f_B = logits[0, 4:6].
    f_a = torch.tensor([0.0, LN3, -LN3])
    f_b = torch.tensor([0.3, -1.2])
    logits = torch.zeros(1, 7, 1)
    logits[0, 0:3, 0] = f_a
    logits[0, 4:6, 0] = f_b
    logits[0, 3, 0], logits[0, 6, 0] = 5.0, -5.0  # positions that are not response values
    batch = {
        "unconcat_tokens": [torch.arange(4), torch.arange(3)],
        "total_lengths": [4, 3],
        "response_lengths": [3, 2],
        "loss_masks": [torch.ones(3), torch.tensor([1.0, 0.0])],
        "returns": [torch.ones(3), torch.zeros(2)],  # what the critic's GAE gives with gamma = lambd = 1
        "values": [f_a.clone(), f_b.clone()],
        "rollout_mask_sums": None,
    }
    return logits, batch, f_a, f_b


def _critic_args(**overrides):
    base = dict(
        gamma=1.0, lambd=1.0, allgather_cp=False, rollout_temperature=1.0, loss_type="value_loss",
        calculate_per_token_loss=False, recompute_loss_function=False, value_clip=0.2,
    )  # fmt: skip
    base.update(overrides)
    return Namespace(**base)


@needs_slime
def test_value_loss_hand_computed_and_gradient(slime_mods):
    logits, batch, f_a, f_b = _fake_critic_batch()
    logits.requires_grad_(True)
    reducer = slime_mods.cp_utils.get_sum_of_sample_mean(
        batch["total_lengths"], batch["response_lengths"], batch["loss_masks"]
    )
    loss, metrics = tppo.value_loss(_critic_args(), batch, logits, reducer)
    # A: z = [0, ln3, 0], R = 1 -> -log sigmoid(z) = [ln2, ln(4/3), ln2]
    # B: z = [0.3, 0.3] (second token masked), R = 0, mean over the one unmasked token: log(1 + e^0.3)
    expected = (2 * math.log(2) + math.log(4 / 3)) / 3 + math.log1p(math.exp(0.3))
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["value_loss"].item() == pytest.approx(expected, rel=1e-6)
    assert metrics["tppo_value_mean"].item() == pytest.approx((0.5 + 0.75 + 0.5) / 3 + torch.sigmoid(torch.tensor(0.3)).item())
    loss.backward()

    fa, fb = f_a.clone().requires_grad_(True), f_b.clone().requires_grad_(True)
    (value_bce_loss(fa, 1.0, batch["loss_masks"][0]) + value_bce_loss(fb, 0.0, batch["loss_masks"][1])).backward()
    grad = logits.grad[0, :, 0]
    torch.testing.assert_close(grad[0:3], fa.grad)
    torch.testing.assert_close(grad[4:6], fb.grad)
    assert grad[3] == 0 and grad[6] == 0
    # dL_A/df_1 = (1/3) sum_t (sigmoid(z_t) - 1) = (1/3)(-1/2 - 1/4 - 1/2)
    assert grad[0].item() == pytest.approx(-1.25 / 3, rel=1e-6)


@needs_slime
def test_value_loss_refuses_a_misconfigured_critic(slime_mods):
    logits, batch, *_ = _fake_critic_batch()
    reducer = slime_mods.cp_utils.get_sum_of_sample_mean(
        batch["total_lengths"], batch["response_lengths"], batch["loss_masks"]
    )
    with pytest.raises(ValueError, match="gamma: 1 and lambd: 1"):
        tppo.value_loss(_critic_args(gamma=0.99), batch, logits, reducer)
    batch["returns"][0] = torch.tensor([0.9, 0.95, 1.0])  # what gamma < 1 would give
    with pytest.raises(ValueError, match="gamma: 1 and lambd: 1"):
        tppo.value_loss(_critic_args(), batch, logits, reducer)


@needs_slime
def test_init_patches_slime_value_loss_and_dispatcher_uses_it(slime_mods, monkeypatch):
    loss_mod = slime_mods.loss
    original = loss_mod.value_loss_function
    assert original is not tppo.value_loss
    monkeypatch.setattr(loss_mod, "value_loss_function", original)  # restored after the test
    heads = []
    # slime_mods stubs megatron.core with an mpu only; the head patch is tested on real megatron-core
    # in tests/test_slime_critic_head.py
    monkeypatch.setattr(tppo, "patch_critic_head", lambda: heads.append(1))
    tppo.init(_critic_args())
    assert heads == [1]
    assert loss_mod.value_loss_function is tppo.value_loss
    tppo.init(_critic_args())  # idempotent
    assert loss_mod.value_loss_function is tppo.value_loss

    logits, batch, *_ = _fake_critic_batch()
    batch["rollout_mask_sums"] = None
    scaled, _, log = loss_mod.loss_function(_critic_args(), batch, 1, 2, logits)
    assert log["keys"] == ["value_loss", "tppo_value_mean"]
    expected = (2 * math.log(2) + math.log(4 / 3)) / 3 + math.log1p(math.exp(0.3))
    assert log["values"][1].item() == pytest.approx(expected, rel=1e-6)
    assert scaled.item() == pytest.approx(expected / 2, rel=1e-6)  # slime's 1 / global batch size


@needs_slime
def test_advantages_hook_cp1_with_slime(slime_mods):
    f_a, f_b = torch.tensor([0.0, LN3, -LN3]), torch.tensor([0.3, -1.2])
    rollout_data = {
        "values": [f_a, f_b],
        "loss_masks": [torch.ones(3), torch.ones(2)],
        "rewards": [1.0, 0.0],
        "total_lengths": [4, 3],
        "response_lengths": [3, 2],
        "kl": [torch.zeros(3), torch.zeros(2)],
    }
    tppo.advantages(Namespace(gamma=1.0, lambd=0.0, kl_coef=0.0), rollout_data)
    torch.testing.assert_close(rollout_data["advantages"][0], torch.tensor([0.25, -0.25, 0.5]))
    v_b = torch.sigmoid(torch.tensor([0.3, -0.9]))
    torch.testing.assert_close(rollout_data["advantages"][1], torch.stack([v_b[1] - v_b[0], -v_b[1]]))
    torch.testing.assert_close(rollout_data["returns"][0], torch.tensor([0.75, 0.5, 1.0]))


@needs_slime
@pytest.mark.parametrize("cp_size", [2, 4])
def test_cp_ranks_in_processes_match_the_full_computation(tmp_path, cp_size):
    """Real gloo CP group: slime's all_gather_with_cp / slicing / CP reducer around our hooks. The
    ranks' local losses add up to the full loss, each position's gradient on its owner rank equals
    the full autograd gradient, and the ranks' advantages are slices of the full ones. One sample
    lies wholly on one rank (the others hold none of it)."""
    import os
    import socket

    torch.manual_seed(cp_size)
    total_lengths, response_lengths = [12, 20, 9, 23], [8, 3, 4, 15]
    heads = [torch.randn(t) for t in total_lengths]
    masks = [(torch.rand(r) > 0.25).float() for r in response_lengths]
    rewards = [1.0, 0.0, 1.0, 0.5]
    case = {
        "total_lengths": total_lengths,
        "response_lengths": response_lengths,
        "heads": heads,
        "loss_masks": masks,
        "returns": [torch.full((r,), rw) for r, rw in zip(response_lengths, rewards)],
        "rewards": rewards,
        "gamma": 0.97,
        "lambd": 0.9,
    }
    torch.save(case, tmp_path / "case.pt")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "slime_megatron_stubs.py"), str(rank), str(cp_size), str(port),
             str(tmp_path / "case.pt"), str(tmp_path / f"out{rank}.pt")],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        for rank in range(cp_size)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out.decode()[-3000:]
    outs = [torch.load(tmp_path / f"out{rank}.pt") for rank in range(cp_size)]

    full_heads = [h.clone().requires_grad_(True) for h in heads]
    expected_loss, expected_v = 0.0, 0.0
    for h, t, r, m, rw in zip(full_heads, total_lengths, response_lengths, masks, rewards):
        f = h[t - r - 1 : t - 1]
        expected_loss = expected_loss + value_bce_loss(f, rw, m)
        expected_v += float((reconstruct_values(f.detach(), m) * m).sum() / m.sum().clamp_min(1))
    expected_loss.backward()
    assert sum(o["loss"].item() for o in outs) == pytest.approx(expected_loss.item(), rel=1e-5)
    assert sum(o["value_mean"].item() for o in outs) == pytest.approx(expected_v, rel=1e-5)

    for rank, out in enumerate(outs):
        offset = 0
        for i, t in enumerate(total_lengths):
            chunk = -(-t // (2 * cp_size))
            for k in (rank, 2 * cp_size - 1 - rank):
                got = out["grad"][offset : offset + chunk]
                want = torch.cat([full_heads[i].grad, torch.zeros(2 * cp_size * chunk - t)])[k * chunk : (k + 1) * chunk]
                torch.testing.assert_close(got, want, msg=f"rank {rank} sample {i} chunk {k}")
                offset += chunk
        assert offset == out["grad"].numel()

    for i, (h, t, r, m, rw) in enumerate(zip(heads, total_lengths, response_lengths, masks, rewards)):
        adv_full, ret_full = _full_core(h[t - r - 1 : t - 1], m, rw, case["gamma"], case["lambd"])
        torch.testing.assert_close(tppo.gather_full([o["advantages"][i] for o in outs], t, r), adv_full)
        torch.testing.assert_close(tppo.gather_full([o["returns"][i] for o in outs], t, r), ret_full)
