"""TPPO math (algorithms/tppo.py) against hand-computed values, finite differences and a brute-force GAE."""

import math

import pytest
import torch

from tempo_plugin.algorithms.tppo import accumulated_logits, gae, reconstruct_values, value_bce_loss

LN3 = math.log(3.0)


def test_values_are_the_sigmoid_of_the_running_sum():
    f = torch.tensor([0.0, LN3, -LN3], dtype=torch.float64)
    # z = [0, ln 3, 0] -> V = [1/2, 3/4, 1/2]
    assert reconstruct_values(f).tolist() == pytest.approx([0.5, 0.75, 0.5])
    # a masked-out token (an observation) adds nothing: z = [0, 0, -ln 3] -> V = [1/2, 1/2, 1/4]
    mask = torch.tensor([1, 0, 1])
    assert accumulated_logits(f, mask).tolist() == pytest.approx([0.0, 0.0, -LN3])
    assert reconstruct_values(f, mask).tolist() == pytest.approx([0.5, 0.5, 0.25])


def test_zero_increments_give_one_half_everywhere_and_a_bias_drifts():
    assert reconstruct_values(torch.zeros(5)).tolist() == [0.5] * 5
    # a shared bias b on every output drifts the accumulated logit by t * b
    b = 0.1
    z = accumulated_logits(torch.full((4,), b, dtype=torch.float64))
    assert z.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_bce_of_accumulated_logits_by_hand():
    f = torch.tensor([0.0, LN3], dtype=torch.float64)
    # V = [1/2, 3/4]; R = 1: mean(-ln 1/2, -ln 3/4) = ln(8/3) / 2
    assert value_bce_loss(f, 1.0).item() == pytest.approx(math.log(8 / 3) / 2)
    # R = 0: mean(-ln 1/2, -ln 1/4) = 3 ln 2 / 2
    assert value_bce_loss(f, 0.0).item() == pytest.approx(1.5 * math.log(2))
    # mask [1, 0]: z = [0, 0], only the first token counts: ln 2
    assert value_bce_loss(f, 1.0, torch.tensor([1, 0])).item() == pytest.approx(math.log(2))
    # a fractional reward is a soft target: R = 1/2 at V = 1/2 gives ln 2
    assert value_bce_loss(torch.zeros(3, dtype=torch.float64), 0.5).item() == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match=r"terminal reward in \[0, 1\]"):
        value_bce_loss(f, 2.0)


def test_bce_gradient_collects_the_later_residuals():
    f = torch.tensor([0.0, LN3], dtype=torch.float64, requires_grad=True)
    value_bce_loss(f, 1.0).backward()
    # residuals sigmoid(z_t) - R = [-1/2, -1/4]; dL/df_1 = (-1/2 - 1/4) / 2, dL/df_2 = (-1/4) / 2
    assert f.grad.tolist() == pytest.approx([-0.375, -0.125])


def test_bce_gradient_matches_finite_differences():
    torch.manual_seed(0)
    f = torch.randn(7, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([1, 1, 0, 1, 0, 1, 1])
    value_bce_loss(f, 1.0, mask).backward()
    eps = 1e-6
    numeric = []
    for i in range(7):
        plus, minus = f.detach().clone(), f.detach().clone()
        plus[i] += eps
        minus[i] -= eps
        numeric.append((value_bce_loss(plus, 1.0, mask) - value_bce_loss(minus, 1.0, mask)).item() / (2 * eps))
    assert f.grad.tolist() == pytest.approx(numeric, abs=1e-8)
    assert f.grad[2].item() == 0.0 and f.grad[4].item() == 0.0  # masked outputs get no gradient


def test_gae_by_hand():
    rewards = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    values = torch.tensor([0.5, 0.75, 0.5], dtype=torch.float64)
    # gamma = lambda = 1: A_t = R - V_t, returns = R
    adv, ret = gae(rewards, values, 1.0, 1.0)
    assert adv.tolist() == pytest.approx([0.5, 0.25, 0.5]) and ret.tolist() == pytest.approx([1.0, 1.0, 1.0])
    # lambda = 0: A_t = delta_t = V_{t+1} - V_t, the last one R - V_T
    adv, ret = gae(rewards, values, 1.0, 0.0)
    assert adv.tolist() == pytest.approx([0.25, -0.25, 0.5]) and ret.tolist() == pytest.approx([0.75, 0.5, 1.0])
    # gamma = lambda = 1/2: deltas [-1/8, -1/2, 1/2]; A_3 = 1/2, A_2 = -1/2 + 1/8, A_1 = -1/8 + 1/4 * A_2
    adv, _ = gae(rewards, values, 0.5, 0.5)
    assert adv.tolist() == pytest.approx([-0.21875, -0.375, 0.5])


def test_gae_matches_a_brute_force_sum():
    torch.manual_seed(1)
    rewards, values = torch.randn(9, dtype=torch.float64), torch.rand(9, dtype=torch.float64)
    gamma, lambd = 0.9, 0.7
    next_values = torch.cat([values[1:], torch.zeros(1, dtype=torch.float64)])
    deltas = rewards + gamma * next_values - values
    expected = [sum((gamma * lambd) ** (k - t) * deltas[k].item() for k in range(t, 9)) for t in range(9)]
    adv, ret = gae(rewards, values, gamma, lambd)
    assert adv.tolist() == pytest.approx(expected)
    assert ret.tolist() == pytest.approx((adv + values).tolist())


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="1-D"):
        reconstruct_values(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="mask shape"):
        reconstruct_values(torch.zeros(3), torch.ones(2))
    with pytest.raises(ValueError, match="equal 1-D"):
        gae(torch.zeros(3), torch.zeros(4), 1.0, 1.0)
