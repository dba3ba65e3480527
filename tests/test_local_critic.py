"""The embedded runtime's scalar critic: construction, initialisation, alignment, independence from the policy."""

import pytest
import torch

from tempo_plugin.algorithms.tppo import reconstruct_values, value_bce_loss
from tempo_plugin.critic.value_model import ValueModel, token_increments, value_model_from_policy


def test_zero_init_values_every_prefix_at_one_half(tiny_model):
    critic = value_model_from_policy(tiny_model)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    f = token_increments(critic, ids, torch.ones_like(ids))
    assert f.shape == (1, 5) and f.abs().max().item() == 0.0
    assert reconstruct_values(f[0]).tolist() == [0.5] * 5
    assert critic.head.bias is None  # a shared bias would drift z_t by t * b


def test_small_init_and_bad_init_name(tiny_model):
    torch.manual_seed(0)
    critic = value_model_from_policy(tiny_model, init="small", std=1e-3)
    std = critic.head.weight.std().item()
    assert 5e-4 < std < 2e-3
    with pytest.raises(ValueError, match="zero, small"):
        ValueModel(torch.nn.Identity(), 4, init="xavier")


def test_increment_of_token_t_sees_only_the_tokens_before_it(tiny_model):
    torch.manual_seed(0)
    critic = value_model_from_policy(tiny_model, init="small", std=0.1)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    changed = ids.clone()
    changed[0, 2] = 11
    attention = torch.ones_like(ids)
    with torch.no_grad():
        a, b = token_increments(critic, ids, attention), token_increments(critic, changed, attention)
    # column t comes from the position before token t: changing token 2 moves columns 3 and 4 only
    assert torch.equal(a[0, :3], b[0, :3])
    assert not torch.allclose(a[0, 3:], b[0, 3:])


def test_training_the_critic_leaves_the_policy_untouched(tiny_model):
    critic = value_model_from_policy(tiny_model)
    before = [p.detach().clone() for p in tiny_model.parameters()]
    optimizer = torch.optim.SGD(critic.parameters(), lr=0.5)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    f = token_increments(critic, ids, torch.ones_like(ids))[0, 2:]
    loss = value_bce_loss(f, 1.0)
    loss.backward()
    assert critic.head.weight.grad.abs().sum().item() > 0  # the zero head still gets a gradient
    optimizer.step()
    with torch.no_grad():
        after = reconstruct_values(token_increments(critic, ids, torch.ones_like(ids))[0, 2:])
    assert (after > 0.5).all()  # R = 1 pushes every prefix value up
    assert all(torch.equal(p, q) for p, q in zip(before, tiny_model.parameters()))
