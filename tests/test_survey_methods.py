"""FlashREINFORCE and CoPE (the survey's critic-free methods): their pure functions against
hand-computed cases, their episode updates on the scripted chain, and the trainer's gate and
forecast rows against losses computed by hand."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch

from tempo_plugin.algorithms.cope import forecast_weight
from tempo_plugin.algorithms.flash_reinforce import batch_centred_advantages, bernoulli_kl, trajectory_gate
from tempo_plugin.algorithms.lvrl import anchored_round_advantages, normalised_by_group_steps
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.critic.readout import expected_value_by_tenths
from tempo_plugin.embedded.trainer import PolicyTrainer
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.estimators import ESTIMATORS
from tempo_plugin.logprobs import token_logprobs
from tempo_plugin.updates.rollout import TempoRollout
from tempo_plugin.rollout.samples import ACTOR, FORECAST, make_sample

from test_episode_update import T, ChainSampler, expert_actions, losing_actions, trained_tokens


def test_batch_centred_advantages_subtract_the_whole_batch_mean():
    # returns of 2 games x 3 episodes: mean 4/6 over all six, no division by a std
    assert batch_centred_advantages([1, 0, 0, 1, 1, 1], 3) == pytest.approx([1 / 3, -2 / 3, -2 / 3, 1 / 3, 1 / 3, 1 / 3])
    # a game that always wins still gets credit against the batch (GRPO gives it 0)
    assert batch_centred_advantages([1, 1, 0, 0], 2) == pytest.approx([0.5, 0.5, -0.5, -0.5])
    assert batch_centred_advantages([], 4) == []
    with pytest.raises(ValueError, match="groups of 4"):
        batch_centred_advantages([1, 0, 1], 4)


def test_bernoulli_kl_by_hand():
    # p = 0.5, q = 0.25: 0.5 ln 2 + 0.5 ln(0.5 / 0.75) = 0.5 (0.693147 - 0.405465)
    d = bernoulli_kl(torch.tensor([0.5, 0.3]), torch.tensor([0.25, 0.3]))
    assert d[0].item() == pytest.approx(0.5 * (math.log(2) - math.log(1.5)), rel=1e-6)
    assert d[1].item() == pytest.approx(0.0, abs=1e-7)


def test_the_gate_keeps_rows_whose_mean_bernoulli_kl_is_at_most_delta():
    # row 0: sampler and policy agree (p = q = 0.5) on both loss tokens: D = 0
    # row 1: tokens p = 0.5 -> q = 0.25 (d = 0.143841) and p = q = 0.5 (d = 0) -> D = 0.071921;
    #        its third column is context (mask 0): not counted even though p and q differ there
    half, quarter = math.log(0.5), math.log(0.25)
    old = torch.tensor([[half, half, 0.0], [half, half, half]])
    new = torch.tensor([[half, half, 0.0], [quarter, half, quarter]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    d01 = 0.5 * (math.log(2) - math.log(1.5))
    keep, kl = trajectory_gate(new, old, mask, delta=0.05)
    assert kl.tolist() == pytest.approx([0.0, d01 / 2], abs=1e-6)
    assert keep.tolist() == [True, False]
    assert trajectory_gate(new, old, mask, delta=0.08)[0].tolist() == [True, True]


def test_forecast_weight_is_eta_n_over_the_games_successes():
    assert forecast_weight(2, 4, 0.1) == pytest.approx(0.2)
    assert forecast_weight(4, 4, 0.1) == pytest.approx(0.1)
    assert forecast_weight(0, 4, 0.1) == pytest.approx(0.4)  # max(1, |S_x|): no success, no forecast anyway
    with pytest.raises(ValueError):
        forecast_weight(-1, 4, 0.1)


def test_the_registry_carries_both_methods():
    flash, cope = ESTIMATORS["flash_reinforce"], ESTIMATORS["cope"]
    assert flash.outcome_advantages is batch_centred_advantages and flash.trajectory_gate and not flash.forecasts
    assert cope.forecasts and not cope.trajectory_gate
    assert flash.slime_rollout is None and cope.slime_rollout is None  # embedded only
    assert TempoConfig(advantage_estimator="flash_reinforce", td_updates=2).validate().episode_estimator
    assert not TempoConfig(advantage_estimator="flash_reinforce", task="letters").validate().multi_turn  # one answer
    with pytest.raises(ConfigError, match="--trajectory-kl-gate"):
        TempoConfig(advantage_estimator="flash_reinforce", trajectory_kl_gate=-0.1).validate()
    with pytest.raises(ConfigError, match="--forecast-weight"):
        TempoConfig(advantage_estimator="cope", forecast_weight=-1.0).validate()


def _rollout(tokenizer, protocol, estimator: str, wrong_first: set[int]) -> TempoRollout:
    cfg = TempoConfig(advantage_estimator=estimator, branches=4, states_per_batch=2, macro_rounds=5,
                      max_episode_steps=T, forecast_weight=0.1).validate()
    return TempoRollout(cfg, ChainSampler(tokenizer, wrong_first), protocol, make_env=lambda: VaultChainEnv(max_steps=T))


def test_flash_reinforce_centres_on_the_batch_so_an_all_won_game_still_trains(tokenizer, protocol):
    # game 0: 4 wins; game 2: episodes 4, 5 take a wrong key. R = [1,1,1,1, 0,0,1,1], mean 3/4
    rollout = _rollout(tokenizer, protocol, "flash_reinforce", wrong_first={4, 5})
    batch = rollout.episode_update(0, [0, 2])
    want = [0.25] * 4 + [-0.75, -0.75, 0.25, 0.25]
    assert len(batch.samples) == 8
    for sample, advantage in zip(batch.samples, want):
        assert sample.role == ACTOR
        trained = [a for a, m in zip(sample.advantages, sample.loss_mask) if m]
        assert trained == pytest.approx([advantage] * len(trained))
    assert "train/forecast_samples" not in batch.metrics  # no forecasts: GRPO's metrics stay as they were
    # GRPO on the same episodes: game 0 is degenerate (no samples), game 2 gives +-1
    assert len(_rollout(tokenizer, protocol, "grpo", wrong_first={4, 5}).episode_update(0, [0, 2]).samples) == 4


def test_cope_adds_each_won_episode_as_a_forecast_weighted_eta_n_over_the_games_wins(tokenizer, protocol):
    # game 0: episodes 2, 3 lose -> GRPO +-1 on 4 episodes, 2 forecasts of weight 0.1 x 4 / 2 = 0.2;
    # game 2: all 4 win -> no GRPO samples, 4 forecasts of weight 0.1 x 4 / 4 = 0.1
    rollout = _rollout(tokenizer, protocol, "cope", wrong_first={2, 3})
    batch = rollout.episode_update(0, [0, 2])
    actor = [s for s in batch.samples if s.role == ACTOR]
    forecasts = [s for s in batch.samples if s.role == FORECAST]
    assert len(actor) == 4 and all(s.group == 0 for s in actor)
    assert [(s.group, s.reward) for s in forecasts] == [(0, 1.0)] * 2 + [(1, 1.0)] * 4
    for sample, weight in zip(forecasts, [0.2] * 2 + [0.1] * 4):
        trained = [a for a, m in zip(sample.advantages, sample.loss_mask) if m]
        assert len(trained) == trained_tokens(tokenizer, expert_actions(0 if sample.group == 0 else 2))
        assert trained == pytest.approx([weight] * len(trained))
    m = batch.metrics
    assert (m["train/actor_samples"], m["train/forecast_samples"]) == (4.0, 6.0)
    assert m["actor/degenerate_group_rate"] == 0.5
    assert losing_actions(0)[0] != expert_actions(0)[0]  # the losing episodes really differ


def _sample_pair(tokenizer, model):
    prompt = tokenizer.encode("Task: open the vault", add_special_tokens=False)
    action = tokenizer.encode("<action>go east</action>", add_special_tokens=False)
    tokens, mask = prompt + action, [0] * len(prompt) + [1] * len(action)
    with torch.no_grad():
        ids = torch.tensor([tokens])
        current = token_logprobs(model, ids, torch.ones_like(ids), 1.0)[0].tolist()
    return prompt, action, tokens, mask, current


def _sgd_trainer(model, tokenizer, **kwargs):
    params = [p for p in model.parameters() if p.requires_grad]
    return PolicyTrainer(model, torch.optim.SGD(params, lr=0.1), tokenizer.pad_token_id, grad_clip=1e9, **kwargs)


def _step_by_hand(model, loss_of):
    loss_of(model).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.1 * p.grad


def test_the_gate_leaves_a_diverged_episode_out_of_the_loss_but_in_the_mean(tokenizer, tiny_model):
    # sample a: the sampler's log-probs are the policy's own (D = 0); sample b: the sampler's are
    # log 0.999 on every token, far from the tiny model's (D >> 0.01): gated. L = (l_a + 0) / 2
    prompt, action, tokens, mask, current = _sample_pair(tokenizer, tiny_model)
    a = make_sample(tokens, mask, [lp if m else 0.0 for lp, m in zip(current, mask)], 0.7, ACTOR, 0, 1.0)
    b = make_sample(tokens, mask, [math.log(0.999) if m else 0.0 for m in mask], -0.4, ACTOR, 1, 0.0)
    by_hand = copy.deepcopy(tiny_model)
    metrics = _sgd_trainer(tiny_model, tokenizer, trajectory_kl_gate=0.01).step([a, b])
    assert metrics["train/gated_samples"] == 1.0
    assert metrics["train/trajectory_kl"] > 0.01 / 2

    def loss(model):  # at ratio 1 the clipped loss of a is -A x mean log pi over its action tokens
        lp = token_logprobs(model, torch.tensor([tokens]), torch.ones(1, len(tokens), dtype=torch.long), 1.0)[0]
        return -0.7 * lp[len(prompt):].mean() / 2

    _step_by_hand(by_hand, loss)
    for mine, theirs in zip(tiny_model.parameters(), by_hand.parameters()):
        assert torch.allclose(mine, theirs, atol=1e-5)


def test_without_the_gate_the_same_episode_trains(tokenizer, tiny_model):
    _, _, tokens, mask, _ = _sample_pair(tokenizer, tiny_model)
    # A > 0 at ratio << 1: the unclipped term -rho A is the larger one, so the episode has a gradient
    b = make_sample(tokens, mask, [math.log(0.999) if m else 0.0 for m in mask], 0.4, ACTOR, 1, 0.0)
    metrics = _sgd_trainer(tiny_model, tokenizer).step([b])
    assert "train/gated_samples" not in metrics and metrics["train/grad_norm"] > 0


def test_a_forecast_row_takes_minus_w_times_the_sum_of_its_log_probs(tokenizer, tiny_model):
    prompt, action, tokens, mask, current = _sample_pair(tokenizer, tiny_model)
    old = [lp if m else 0.0 for lp, m in zip(current, mask)]
    actor = make_sample(tokens, mask, old, 0.7, ACTOR, 0, 1.0)
    forecast = make_sample(tokens, mask, old, 0.2, FORECAST, 0, 1.0)
    by_hand = copy.deepcopy(tiny_model)
    metrics = _sgd_trainer(tiny_model, tokenizer).step([actor, forecast])
    assert metrics["train/value_loss"] == 0.0 and metrics["train/forecast_loss"] > 0

    def loss(model):  # (policy row -A mean log pi + forecast row -w sum log pi) / 2 samples
        lp = token_logprobs(model, torch.tensor([tokens]), torch.ones(1, len(tokens), dtype=torch.long), 1.0)[0]
        return (-0.7 * lp[len(prompt):].mean() - 0.2 * lp[len(prompt):].sum()) / 2

    _step_by_hand(by_hand, loss)
    for mine, theirs in zip(tiny_model.parameters(), by_hand.parameters()):
        assert torch.allclose(mine, theirs, atol=1e-5)


# ------------------------------------------------------------------------------------------- SPO

def test_the_beta_tracker_forgets_by_rho_and_counts_outcomes():
    from tempo_plugin.algorithms.spo import PRIOR, tracker_update, tracker_value

    assert tracker_value(PRIOR, PRIOR) == 0.5
    # rho 0.9: alpha = 0.45 + 2 wins, beta = 0.45 + 1 loss -> v = 2.45 / 3.9
    alpha, beta = tracker_update(0.5, 0.5, [1.0, 1.0, 0.0], 0.9)
    assert (alpha, beta) == pytest.approx((2.45, 1.45))
    assert tracker_value(alpha, beta) == pytest.approx(0.628205, abs=1e-6)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        tracker_update(0.5, 0.5, [1.5], 0.9)


def test_spo_advantages_are_returns_less_baselines_normalised_over_the_batch():
    from tempo_plugin.algorithms.spo import spo_advantages

    # A = (0.5, -0.5, 0.2): mean 0.066667, population std 0.418994
    assert spo_advantages([1.0, 0.0, 1.0], [0.5, 0.5, 0.8]) == pytest.approx([1.034222, -1.352444, 0.318222], abs=1e-6)
    with pytest.raises(ValueError):
        spo_advantages([1.0], [0.5, 0.5])


def test_prioritised_draws_favour_uncertain_games_and_never_repeat_one():
    from tempo_plugin.algorithms.spo import draw_prioritised, priority

    assert priority(0.5) == pytest.approx(0.55) and priority(1.0) == pytest.approx(0.05)
    # game 20 (v = 0.5, w = 0.55) is drawn first with probability 0.55 / 0.60 = 0.9167 against game 10 (v = 1)
    draws = [draw_prioritised([10, 20], [1.0, 0.5], 2, seed) for seed in range(4000)]
    assert all(sorted(d) == [10, 20] for d in draws)
    assert sum(d[0] == 20 for d in draws) / 4000 == pytest.approx(0.55 / 0.60, abs=0.015)
    assert draw_prioritised(list(range(8)), [0.5] * 8, 3, 7) == draw_prioritised(list(range(8)), [0.5] * 8, 3, 7)
    with pytest.raises(ValueError, match="pool of 2"):
        draw_prioritised([10, 20], [0.5, 0.5], 3, 0)


def test_a_pool_of_training_games_cycles():
    from tempo_plugin.rollout.games import train_game, train_pool

    assert [train_game(1, c, 3) for c in range(5)] == [train_game(1, 0), train_game(1, 1), train_game(1, 2),
                                                      train_game(1, 0), train_game(1, 1)]
    assert train_pool(1, 3) == [train_game(1, c) for c in range(3)]
    assert train_game(1, 7) == train_game(1, 7, 0)  # no pool: a fresh game every time


def test_spo_needs_a_pool_and_plays_single_episodes():
    with pytest.raises(ConfigError, match="--train-games"):
        TempoConfig(advantage_estimator="spo", states_per_batch=8).validate()
    with pytest.raises(ConfigError, match="--spo-discount"):
        TempoConfig(advantage_estimator="spo", train_games=8, spo_discount=0.0).validate()
    assert TempoConfig(advantage_estimator="spo", train_games=8, branches=1).validate().branches == 1
    with pytest.raises(ConfigError, match="--branches must be >= 2"):
        TempoConfig(advantage_estimator="grpo", branches=1).validate()


def test_spo_baselines_each_game_on_its_past_so_a_surprising_win_gets_the_credit(tokenizer, protocol):
    cfg = TempoConfig(advantage_estimator="spo", branches=2, states_per_batch=2, train_games=2, macro_rounds=5,
                      max_episode_steps=T, spo_discount=0.9).validate()
    # first call: requests 2, 3 (game 2's episodes) take a wrong key; every later call plays the expert
    rollout = TempoRollout(cfg, ChainSampler(tokenizer, {2, 3}), protocol, make_env=lambda: VaultChainEnv(max_steps=T))
    first = rollout.episode_update(0, [0, 2])
    # R = (1, 1, 0, 0) against the prior 1/2: A = +-0.5, mean 0, std 0.5 -> +-1
    assert [s.advantages[-1] for s in first.samples] == pytest.approx([1, 1, -1, -1], abs=1e-5)
    assert first.metrics["spo/baseline_mean"] == 0.5
    # trackers: game 0 (0.45 + 2, 0.45) -> 0.844828; game 2 (0.45, 0.45 + 2) -> 0.155172
    assert rollout.trackers.value(0) == pytest.approx(0.844828, abs=1e-6)
    assert rollout.trackers.value(2) == pytest.approx(0.155172, abs=1e-6)
    second = rollout.episode_update(1, [0, 2])
    # all four win: A = 1 - v = (0.155, 0.155, 0.845, 0.845), mean 0.5, std 0.345 -> (-1, -1, +1, +1):
    # the expected win of game 0 is pushed down, the surprising one of game 2 up (GRPO: no samples)
    assert [s.advantages[-1] for s in second.samples] == pytest.approx([-1, -1, 1, 1], abs=1e-5)
    assert second.metrics["rollout/success_rate"] == 1.0
    restored = TempoRollout(cfg, rollout.sampler, protocol, make_env=rollout.make_env)
    restored.trackers.restore(rollout.trackers.rows())  # what a checkpoint keeps
    assert restored.trackers.table == rollout.trackers.table


def test_spo_draws_its_games_from_the_pool(tokenizer, protocol):
    from tempo_plugin.updates.schedule import run_update
    from tempo_plugin.rollout.games import train_pool

    cfg = TempoConfig(advantage_estimator="spo", branches=1, states_per_batch=2, train_games=3, macro_rounds=5,
                      max_episode_steps=T).validate()
    rollout = TempoRollout(cfg, ChainSampler(tokenizer, set()), protocol, make_env=lambda: VaultChainEnv(max_steps=T))
    games = rollout.prioritised_games(4)
    assert len(set(games)) == 2 and set(games) <= set(train_pool(0, 3))
    batch = run_update(rollout, "spo", 4, lambda: pytest.fail("SPO draws from its pool, not the game cursor"), None)
    assert set(rollout.trackers.table) == set(games) and batch.metrics["spo/tracked_games"] == 2.0


# ------------------------------------------------------------------------------ BPCO and EasyPPO

def test_bpco_lambda_grows_with_the_response_length():
    from tempo_plugin.algorithms.ppo_variants import adaptive_lambda

    assert adaptive_lambda(4, 1.0) == pytest.approx(0.75)
    assert adaptive_lambda(100, 2.0) == pytest.approx(0.995)
    assert adaptive_lambda(1, 0.5) == 0.0  # 1 - 2 < 0: clipped
    with pytest.raises(ValueError):
        adaptive_lambda(0, 1.0)


def test_easyppo_weights_quiet_prompts_up():
    from tempo_plugin.algorithms.ppo_variants import noise_weights, split_evenly

    # prompt 0 (1, 1): sigma 0 -> 1 / 0.1 = 10; prompt 1 (0, 1): sigma 0.5 -> 2; mean 6 -> (10, 10, 2, 2) / 6
    assert noise_weights([1, 1, 0, 1], 2) == pytest.approx([5 / 3, 5 / 3, 1 / 3, 1 / 3])
    with pytest.raises(ValueError):
        noise_weights([1, 0, 1], 2)
    assert split_evenly(5, 2) == [range(0, 3), range(3, 5)]
    assert split_evenly(1, 4) == [range(0, 1)]


def test_divergence_clipping_bounds_the_probability_change():
    from tempo_plugin.algorithms.losses import clipped_policy_loss

    # both tokens: ratio 1.5, A = 1. Sampler p = 0.5: bound 1 + 0.2 / 0.5 = 1.4 -> l = -1.4 (clipped);
    # p = 0.05: bound 1 + 0.2 / 0.05 = 5 -> l = -1.5 (free). Loss = mean of the two over one sample
    old = torch.log(torch.tensor([[0.5, 0.05]]))
    new = old + math.log(1.5)
    eps = 0.2 / old.exp()
    out = clipped_policy_loss(new, old, torch.ones(1, 2), torch.ones(1, 2), eps, eps)
    assert out.loss.item() == pytest.approx((-1.4 - 1.5) / 2, rel=1e-6)
    assert out.clip_fraction.item() == pytest.approx(0.5)
    plain = clipped_policy_loss(new, old, torch.ones(1, 2), torch.ones(1, 2), 0.2, 0.2)
    assert plain.loss.item() == pytest.approx(-1.2, rel=1e-6)  # the fixed band clips both at 1.2


def test_weighted_critic_loss_by_hand():
    from tempo_plugin.embedded.single_turn import Response, critic_loss

    responses = [Response(0, [1], [2], [0.0], "", 1.0), Response(0, [1], [2], [0.0], "", 0.0)]
    outputs, returns = [torch.tensor([0.5]), torch.tensor([0.5])], [torch.tensor([1.0]), torch.tensor([0.0])]
    # each (0.5 - ret)^2 / 2 = 0.125; weights 3 and 1: (0.375 + 0.125) / 2
    assert critic_loss("easyppo", outputs, responses, returns, [3.0, 1.0]).item() == pytest.approx(0.25)
    assert critic_loss("easyppo", outputs, responses, returns).item() == pytest.approx(0.125)


def test_critic_minibatches_are_steps_on_consecutive_shares(tiny_model):
    from tempo_plugin.critic.value_model import value_model_from_policy
    from tempo_plugin.embedded.single_turn import Response, critic_step, critic_update

    torch.manual_seed(0)
    critic = value_model_from_policy(tiny_model, init="small", std=0.05)
    twin = copy.deepcopy(critic)
    responses = [Response(i, [5, 6, 7], [20 + i] * (i + 1), [0.0] * (i + 1), "", float(i % 2)) for i in range(4)]
    returns = [torch.full((len(r.response_ids),), r.reward) for r in responses]
    weights = [1.0, 2.0, 0.5, 0.5]
    loss = critic_update(critic, torch.optim.SGD(critic.parameters(), lr=0.1), "easyppo", [responses], returns, 0, 0.05,
                         weights=weights, minibatches=2, tokens_per_micro_batch=1000)
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    twin.train()
    first = critic_step(twin, optimizer, "easyppo", [responses[:2]], returns[:2], 0, 0.05, weights[:2])
    second = critic_step(twin, optimizer, "easyppo", [responses[2:]], returns[2:], 0, 0.05, weights[2:])
    assert loss == pytest.approx((first + second) / 2, rel=1e-6)
    for p, q in zip(critic.parameters(), twin.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_the_ppo_variants_are_registered_single_turn():
    from tempo_plugin.estimators import VALUE_MODEL

    for name in ("bpco", "easyppo"):
        assert ESTIMATORS[name].critic == VALUE_MODEL and ESTIMATORS[name].on_task and not ESTIMATORS[name].on_env
    assert ESTIMATORS["bpco"].ppo.divergence_clip and ESTIMATORS["bpco"].ppo.lambda_alpha == 1.0
    assert ESTIMATORS["easyppo"].ppo.critic_minibatches == 4 and ESTIMATORS["easyppo"].ppo.finished_actor_only
    assert ESTIMATORS["ppo"].ppo == ESTIMATORS["tppo"].ppo  # plain: every option off
    assert not TempoConfig(advantage_estimator="bpco", task="letters").validate().multi_turn


# -------------------------------------------------------------------------------------------- SAO

def test_sao_masks_tokens_outside_the_band_instead_of_clipping():
    from tempo_plugin.algorithms.losses import ratio_masked_policy_loss

    # ratios 1.1 (inside 0.8..1.2: l = -1.1 A) and 1.5 (outside: l = 0, where clipping gives -1.2 A); A = 2
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.1, 1.5]]))
    out = ratio_masked_policy_loss(new, old, torch.full((1, 2), 2.0), torch.ones(1, 2))
    assert out.loss.item() == pytest.approx((-1.1 * 2 + 0.0) / 2, rel=1e-6)
    assert out.clip_fraction.item() == pytest.approx(0.5)
    # the masked token has no gradient at all, whatever the sign of A
    new.requires_grad_(True)
    ratio_masked_policy_loss(new, old, torch.full((1, 2), -2.0), torch.ones(1, 2)).loss.backward()
    assert new.grad[0, 1].item() == 0.0 and new.grad[0, 0].item() != 0.0


def test_sao_freezes_the_critics_attention(tiny_model):
    from tempo_plugin.critic.value_model import freeze_attention, value_model_from_policy

    critic = value_model_from_policy(tiny_model)
    layers = tiny_model.config.num_hidden_layers
    frozen = freeze_attention(critic)
    assert frozen == 6 * layers  # q, k, v, o projections and the q, k norms of every layer
    assert all(not p.requires_grad for n, p in critic.named_parameters() if "self_attn" in n)
    assert all(p.requires_grad for n, p in critic.named_parameters() if "self_attn" not in n)
    sao = ESTIMATORS["sao"]
    assert sao.ppo.ratio_band_mask and sao.ppo.critic_passes == 2 and not sao.needs_groups
    assert TempoConfig(advantage_estimator="sao", task="letters", branches=1).validate().branches == 1


# ------------------------------------------------------------------ score centering (StableReinforce)

def test_centring_leaves_only_the_chosen_and_drawn_tokens_in_the_logit_gradient():
    from tempo_plugin.logprobs import picked_logprobs

    torch.manual_seed(3)
    logits = torch.randn(1, 1, 12, requires_grad=True)
    target, advantage, k = torch.tensor([[4]]), 0.7, 8
    both = picked_logprobs(None, logits, target, 1.0, centre_samples=k)
    assert both.shape == (1, 1, 2)
    assert both[..., 0].item() == pytest.approx(picked_logprobs(None, logits, target, 1.0).item())
    (-advantage * both[..., 0] + advantage * both[..., 1]).sum().backward()
    grad = logits.grad[0, 0]
    # -A (e_a - (1/K) sum_k e_{u_k}): the dense -p term cancels, entries are multiples of A / K, sum 0
    assert grad.sum().item() == pytest.approx(0.0, abs=1e-6)
    counts = torch.round(grad / (advantage / k))
    assert torch.allclose(grad, counts * advantage / k, atol=1e-6)
    drawn = counts.clone()
    drawn[4] += k  # the chosen token's -A e_a, taken out: what is left counts the draws
    assert drawn.sum().item() == k and (drawn >= 0).all()


def test_centring_is_unbiased_its_mean_gradient_is_the_plain_one():
    from tempo_plugin.logprobs import picked_logprobs

    torch.manual_seed(4)
    base = torch.randn(1, 1, 6)
    target = torch.tensor([[2]])
    plain = base.clone().requires_grad_(True)
    (-picked_logprobs(None, plain, target, 1.0)).sum().backward()  # -(e_a - p)
    total = torch.zeros(6)
    for _ in range(2000):
        logits = base.clone().requires_grad_(True)
        both = picked_logprobs(None, logits, target, 1.0, centre_samples=8)
        (-both[..., 0] + both[..., 1]).sum().backward()
        total += logits.grad[0, 0]
    # centred: -(e_a - p) + mean_k (e_{u_k} - p) = -e_a + mean_k e_{u_k}, whose mean is -e_a + p: the plain gradient
    assert torch.allclose(total / 2000, plain.grad[0, 0], atol=0.02)
    assert not torch.allclose(logits.grad[0, 0], plain.grad[0, 0], atol=0.02)  # one draw is not the mean


def test_a_centred_step_scores_the_same_tokens_and_moves_the_model(tokenizer, tiny_model):
    prompt, action, tokens, mask, current = _sample_pair(tokenizer, tiny_model)
    ids = torch.tensor([tokens])
    with torch.no_grad():
        both = token_logprobs(tiny_model, ids, torch.ones_like(ids), 1.0, first=len(prompt), centre_samples=8)
        plain = token_logprobs(tiny_model, ids, torch.ones_like(ids), 1.0, first=len(prompt))
    assert both.shape == (1, len(tokens), 2) and torch.allclose(both[..., 0], plain)
    sample = make_sample(tokens, mask, [lp if m else 0.0 for lp, m in zip(current, mask)], 0.7, ACTOR, 0, 1.0)
    before = [p.detach().clone() for p in tiny_model.parameters()]
    metrics = _sgd_trainer(tiny_model, tokenizer, score_centering=8).step([sample])
    assert metrics["train/grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, tiny_model.parameters()))
    with pytest.raises(ConfigError, match="--score-centering"):
        TempoConfig(score_centering=-1).validate()


# ------------------------------------------------------------------------------------ policy epochs

class _RecordingTrainer:
    def __init__(self):
        self.calls: list[list[str]] = []

    def step(self, samples):
        self.calls.append([s.role for s in samples])
        return {"train/loss": float(len(self.calls))}


def test_policy_epochs_take_more_steps_on_the_actors_samples_only():
    from tempo_plugin.embedded.multi_turn import train_step
    from tempo_plugin.rollout.samples import CRITIC

    samples = [make_sample([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], a, role, 0, 0.0)
               for a, role in ((0.5, ACTOR), (-0.5, ACTOR), (0.2, CRITIC))]
    trainer = _RecordingTrainer()
    metrics = train_step(trainer, samples, critic_epochs=2, policy_epochs=3)
    # the joint step, 2 more on the actor's two samples, 1 more on the critic's
    assert trainer.calls == [[ACTOR, ACTOR, CRITIC], [ACTOR, ACTOR], [ACTOR, ACTOR], [CRITIC]]
    assert metrics["train/loss"] == 1.0  # the joint step's, and what the last actor step saw:
    assert {"train/last_epoch_clip_fraction", "train/last_epoch_approx_kl"} <= set(metrics)
    critic_only = _RecordingTrainer()
    train_step(critic_only, samples[2:], critic_epochs=1, policy_epochs=3)
    assert critic_only.calls == [[CRITIC]]  # a critic-only update takes no actor steps
    with pytest.raises(ConfigError, match="--policy-epochs"):
        TempoConfig(policy_epochs=0).validate()


def test_a_second_step_on_the_same_batch_moves_ratios_off_one(tokenizer, tiny_model):
    prompt, action, tokens, mask, current = _sample_pair(tokenizer, tiny_model)
    sample = make_sample(tokens, mask, [lp if m else 0.0 for lp, m in zip(current, mask)], 1.0, ACTOR, 0, 1.0)
    params = [p for p in tiny_model.parameters() if p.requires_grad]
    trainer = PolicyTrainer(tiny_model, torch.optim.SGD(params, lr=5.0), tokenizer.pad_token_id, grad_clip=1e9)
    first = trainer.step([sample])
    second = trainer.step([sample])
    assert first["train/approx_kl"] == pytest.approx(0.0, abs=1e-9)  # on-policy: every ratio is 1
    assert second["train/approx_kl"] > 1e-4  # the same batch after one step: off-policy


# -- LVRL ------------------------------------------------------------------------------------------

def test_anchored_advantages_run_from_the_group_mean_to_the_outcome():
    # V~ = [0.25, 0.5, 0.8, 1.0]: A = [0.25, 0.3, 0.2], summing to R - R_bar = 0.75
    assert anchored_round_advantages([0.5, 0.8], 1.0, 0.25) == pytest.approx([0.25, 0.3, 0.2])
    assert anchored_round_advantages([], 0.0, 0.5) == pytest.approx([-0.5])  # one round: the outcome alone
    # a valuer with one answer c everywhere: all credit on the first and the last action
    assert anchored_round_advantages([0.1, 0.1, 0.1], 1.0, 0.5) == pytest.approx([-0.4, 0.0, 0.0, 0.9])
    with pytest.raises(ValueError, match="finite"):
        anchored_round_advantages([float("nan")], 1.0, 0.5)


def test_group_step_normalisation_divides_by_the_root_mean_square():
    # rms of (3, 4, 0) = sqrt(25 / 3) = 2.88675
    rows = normalised_by_group_steps([[3.0, 4.0], [0.0]], eps=0.0)
    assert rows[0] == pytest.approx([3 / math.sqrt(25 / 3), 4 / math.sqrt(25 / 3)])
    assert rows[1] == [0.0]
    assert normalised_by_group_steps([[0.0, 0.0]]) == [[0.0, 0.0]]


def test_the_tenths_readout_by_hand():
    sure = [0.0 if i == 4 else -60.0 for i in range(11)]  # all on "<value>0.4": the mean of 0.40 .. 0.49
    assert expected_value_by_tenths(sure) == pytest.approx(0.445)
    halves = [0.0 if i in (4, 10) else -60.0 for i in range(11)]  # half 0.4x, half 1.00
    assert expected_value_by_tenths(halves) == pytest.approx((0.445 + 1.0) / 2)
    with pytest.raises(ValueError, match="11 prefix"):
        expected_value_by_tenths([0.0] * 101)


class _RoundScorer:
    """A frozen valuer that answers the tenth t (t = the round it is asked about, at most 9): V~_t = t / 10 + 0.045.
    Each row is the end of one hindsight prompt and one answer prefix."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.rounds: list[int] = []

    def answer_logprobs(self, prompt, rows):
        out = []
        for row in rows:
            text = self.tokenizer.decode(list(prompt) + list(row))
            t = int(re.search(r"after round (\d+)\?", text)[1])
            if text.endswith("<value>0.0"):
                self.rounds.append(t)  # one per prompt: its first answer
            out.append(0.0 if text.endswith(f"<value>0.{min(t, 9)}") else -60.0)
        return out


def _round_runs(sample) -> list[float]:
    """The advantage of each round (run of trained tokens) of a sample."""
    runs, previous = [], 0
    for a, m in zip(sample.advantages, sample.loss_mask):
        if m and not previous:
            runs.append(a)
        previous = m
    return runs


def test_lvrl_spreads_each_episodes_outcome_over_its_rounds_by_the_frozen_values(tokenizer, protocol):
    # game 0: episodes 2, 3 take a wrong key and lose, so R_bar = 0.5; game 2: all four win, R_bar = 1
    rollout = _rollout(tokenizer, protocol, "lvrl", wrong_first={2, 3})
    scorer = _RoundScorer(tokenizer)
    rollout.hindsight_sampler = scorer
    assert len(rollout.hindsight_answers()[0]) == 11  # the tiny tokenizer splits the answers at the tenths
    batch = rollout.hindsight_update(0, [0, 2])
    assert len(batch.samples) == 8  # an all-won game still trains: its rounds get credit that sums to 0
    for sample in batch.samples:
        runs = _round_runs(sample)
        r_bar = 0.5 if sample.group == 0 else 1.0
        total = sample.reward - r_bar  # sum_t A_t = R - R_bar, before the group's sigma
        v1 = 0.145  # V~_1: the tenth of round 1
        if total:  # the shares are sigma-free: A_0 / sum_t A_t = (V~_1 - R_bar) / (R - R_bar)
            assert runs[0] / sum(runs) == pytest.approx((v1 - r_bar) / total)
        else:
            assert sum(runs) == pytest.approx(0.0, abs=1e-9) and runs[0] < 0 < runs[-1]
    # every boundary 1 .. T-1 of every episode was read once
    assert len(scorer.rounds) == batch.metrics["hindsight/values"] == sum(len(_round_runs(s)) - 1 for s in batch.samples)
    assert batch.metrics["actor/degenerate_group_rate"] == 0.0
    assert batch.metrics["train/critic_samples"] == 0.0


class _OutcomeScorer:
    """A frozen valuer that reads the outcome line: the tenth 9 for a won episode, 0 for a lost one
    (``constant``: 4 for both)."""

    def __init__(self, tokenizer, constant: bool = False):
        self.tokenizer, self.constant = tokenizer, constant

    def answer_logprobs(self, prompt, rows):
        out = []
        for row in rows:
            text = self.tokenizer.decode(list(prompt) + list(row))
            tenth = 4 if self.constant else 9 if "Outcome: won" in text else 0
            out.append(0.0 if text.endswith(f"<value>0.{tenth}") else -60.0)
        return out


def test_the_outcome_correlation_tells_a_valuer_that_reads_the_outcome_from_one_that_does_not(tokenizer, protocol):
    rollout = _rollout(tokenizer, protocol, "lvrl", wrong_first={2, 3})  # game 0: two wins, two losses
    rollout.hindsight_sampler = _OutcomeScorer(tokenizer)
    assert rollout.hindsight_update(0, [0]).metrics["hindsight/outcome_corr"] == pytest.approx(1.0)
    rollout = _rollout(tokenizer, protocol, "lvrl", wrong_first={2, 3})
    rollout.hindsight_sampler = _OutcomeScorer(tokenizer, constant=True)
    metrics = rollout.hindsight_update(0, [0]).metrics
    assert "hindsight/outcome_corr" not in metrics and metrics["hindsight/value_std"] == pytest.approx(0.0, abs=1e-9)


def test_lvrl_is_an_episode_estimator_embedded_only():
    lvrl = ESTIMATORS["lvrl"]
    assert lvrl.hindsight and lvrl.on_env and not lvrl.on_task and lvrl.slime_rollout is None
    cfg = TempoConfig(advantage_estimator="lvrl", td_updates=2).validate()
    assert cfg.episode_estimator and cfg.total_updates == 2  # no critic warm-up
    with pytest.raises(ConfigError, match="--branches must be >= 2"):
        TempoConfig(advantage_estimator="lvrl", branches=1).validate()  # R_bar needs a group


def test_the_shared_context_readout_equals_one_prompt_at_a_time(tokenizer, protocol, tiny_model, monkeypatch):
    from tempo_plugin.critic.prompt import hindsight_messages
    from tempo_plugin.samplers.local import LocalSampler
    from tempo_plugin.updates import hindsight
    from tempo_plugin.updates.hindsight import common_prefix_length

    monkeypatch.setattr(hindsight, "HINDSIGHT_PROMPTS_PER_CALL", 2)  # several calls per episode

    assert common_prefix_length([[1, 2, 3], [1, 2, 4]]) == 2
    assert common_prefix_length([[1, 2], [1, 2, 5]]) == 1  # the shorter row keeps a token of its own
    rollout = _rollout(tokenizer, protocol, "lvrl", wrong_first={1})
    rollout.hindsight_sampler = LocalSampler(tiny_model, tokenizer)
    episode = rollout.play_groups([0], 0)[0][1]  # the episode that took a wrong key
    answers, read = rollout.hindsight_answers()
    by_prompt = []
    for t in range(1, len(episode.rounds)):
        prompt = protocol.render_prompt(hindsight_messages(episode.start.task, episode.start.privileged_info,
                                                           [r.action for r in episode.rounds], episode.won, t, 3, 4))
        with torch.no_grad():
            by_prompt.append(read(rollout.hindsight_sampler.answer_logprobs(prompt, answers)))
    with torch.no_grad():
        assert rollout.hindsight_values(episode, 3, 4) == pytest.approx(by_prompt, abs=1e-5)
    assert len(by_prompt) > 2  # more than one call's worth of boundaries

