"""Tests for the clipped policy-gradient loss on tiny hand-computed tensors."""

from __future__ import annotations

import math

import pytest
import torch

from tempo_plugin.algorithms.losses import clipped_policy_loss


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_ratio_one_gives_minus_mean_advantage_per_sample_then_mean_over_samples():
    lp = t([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1]])
    adv = t([[1.0, 2.0, 0.0], [-1.0, 3.0, 5.0]])
    mask = t([[1, 1, 0], [1, 1, 1]])
    out = clipped_policy_loss(lp, lp.clone(), adv, mask)
    # sample 0: -(1 + 2) / 2 = -1.5 ; sample 1: -(-1 + 3 + 5) / 3 = -7/3
    # loss = (-1.5 - 7/3) / 2 = -23/12 (a token mean would be -(1+2-1+3+5)/5 = -2)
    assert out.loss.item() == pytest.approx(-23 / 12, abs=1e-12)
    assert out.clip_fraction.item() == 0.0
    assert out.approx_kl.item() == pytest.approx(0.0, abs=1e-12)


def test_ratio_above_one_plus_eps_with_positive_advantage_is_clipped():
    old = t([[0.0, 0.0]])
    lp = t([[math.log(1.5), 0.0]]).requires_grad_(True)
    adv = t([[1.0, 1.0]])
    mask = t([[1, 1]])
    out = clipped_policy_loss(lp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    # token 0: rho = 1.5 > 1.2 -> max(-1.5, -1.2) = -1.2 (clipped); token 1: rho = 1 -> -1
    # loss = (-1.2 - 1) / 2 = -1.1
    assert out.loss.item() == pytest.approx(-1.1, abs=1e-12)
    # one of the two loss tokens is clipped
    assert out.clip_fraction.item() == pytest.approx(0.5)
    # approx_kl = mean over tokens of (rho - 1) - log rho = ((0.5 - log 1.5) + 0) / 2
    assert out.approx_kl.item() == pytest.approx((0.5 - math.log(1.5)) / 2, abs=1e-12)
    out.loss.backward()
    # d/d lp_0 = 0 (clipped constant); d/d lp_1 = -rho_1 * A_1 / 2 = -0.5
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(-0.5, abs=1e-12)


def test_clipping_with_negative_advantage_and_asymmetric_eps():
    old = t([[0.0, 0.0, 0.0]])
    lp = t([[math.log(0.5), math.log(1.5), math.log(1.25)]]).requires_grad_(True)
    adv = t([[-1.0, -1.0, 1.0]])
    mask = t([[1, 1, 1]])
    out = clipped_policy_loss(lp, old, adv, mask, eps_low=0.2, eps_high=0.3)
    # token 0: rho 0.5, A -1: max(0.5, 0.8) = 0.8 (clipped at 1 - 0.2)
    # token 1: rho 1.5, A -1: max(1.5, 1.3) = 1.5 (not clipped: pessimistic side)
    # token 2: rho 1.25 < 1 + 0.3, A 1: max(-1.25, -1.25) = -1.25 (within range)
    # loss = (0.8 + 1.5 - 1.25) / 3 = 0.35
    assert out.loss.item() == pytest.approx(0.35, abs=1e-12)
    assert out.clip_fraction.item() == pytest.approx(1 / 3)
    out.loss.backward()
    # grads: token 0 clipped -> 0; token 1: -rho A / 3 = 1.5 / 3 = 0.5; token 2: -1.25 / 3
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(0.5, abs=1e-12)
    assert lp.grad[0, 2].item() == pytest.approx(-1.25 / 3, abs=1e-12)


def test_masked_tokens_contribute_nothing():
    old = t([[0.0, 0.0, 0.0]])
    lp = t([[0.0, 3.0, 0.0]]).requires_grad_(True)
    adv = t([[2.0, 100.0, 4.0]])
    mask = t([[1, 0, 1]])
    out = clipped_policy_loss(lp, old, adv, mask)
    # only tokens 0 and 2 (rho 1): (-2 - 4) / 2 = -3; the masked rho = e^3 and A = 100 are ignored
    assert out.loss.item() == pytest.approx(-3.0, abs=1e-12)
    assert out.clip_fraction.item() == 0.0
    assert out.approx_kl.item() == pytest.approx(0.0, abs=1e-12)
    out.loss.backward()
    assert lp.grad[0, 1].item() == 0.0
    # unmasked: -A / 2 -> -1 and -2
    assert lp.grad[0, 0].item() == pytest.approx(-1.0)
    assert lp.grad[0, 2].item() == pytest.approx(-2.0)


def test_samples_without_loss_tokens_are_left_out_of_the_mean():
    lp = t([[0.0, 0.0], [0.0, 0.0], [0.5, 0.1]])
    adv = t([[1.0, 3.0], [0.0, 0.0], [7.0, 7.0]])
    mask = t([[1, 1], [0, 0], [0, 0]])
    out = clipped_policy_loss(lp, torch.zeros_like(lp), adv, mask)
    # only sample 0 counts: -(1 + 3) / 2 = -2 (not -2 / 3 over all three samples)
    assert out.loss.item() == pytest.approx(-2.0, abs=1e-12)


def test_all_masked_batch_gives_zero_loss():
    lp = t([[0.3, 0.2]]).requires_grad_(True)
    out = clipped_policy_loss(lp, t([[0.0, 0.0]]), t([[1.0, 1.0]]), t([[0, 0]]))
    assert out.loss.item() == 0.0
    assert out.clip_fraction.item() == 0.0
    out.loss.backward()
    assert torch.all(lp.grad == 0)


def test_clip_fraction_counts_clipped_loss_tokens_over_all_loss_tokens():
    old = torch.zeros(2, 3, dtype=torch.float64)
    lp = t([[math.log(2.0), 0.0, math.log(2.0)], [math.log(0.1), math.log(0.1), 0.0]])
    adv = t([[1.0, 1.0, 1.0], [-1.0, 1.0, 1.0]])
    mask = t([[1, 1, 0], [1, 1, 1]])
    out = clipped_policy_loss(lp, old, adv, mask)
    # clipped: (0,0) rho 2 A>0 ; (1,0) rho 0.1 A<0. Not: (0,1) rho 1 ; (1,1) rho 0.1 A>0 ; (1,2) rho 1
    # (0,2) would be clipped but is masked -> 2 / 5 loss tokens
    assert out.clip_fraction.item() == pytest.approx(2 / 5)
    # sample 0: (-1.2 - 1) / 2 = -1.1 ; sample 1: (max(0.1, 0.8) + max(-0.1, -0.8) - 1) / 3 = (0.8 - 0.1 - 1) / 3 = -0.1
    assert out.loss.item() == pytest.approx((-1.1 - 0.1) / 2, abs=1e-12)
