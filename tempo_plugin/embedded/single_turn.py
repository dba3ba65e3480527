"""Single-turn RL on the embedded runtime: GRPO, PPO and TPPO on a task (``--task``).

Per update, B = --states-per-batch problems x N = --branches responses sampled from the policy,
each scored R in {0, 1} by the task's verifier. Advantages per --advantage-estimator:

    grpo:  A_i = (R_i - mean_g R) / (std_g R + 1e-6), broadcast over the response tokens of i
    flash_reinforce: A_i = R_i - mean over the batch's responses (and the trainer's trajectory gate)
    ppo :  V_t = critic output at the prefix before token t; r_t = R at the last token, else 0
           (A, ret) = GAE(r, V; gamma, lambd);   critic loss = mean_t (V_t - ret_t)^2 / 2
    tppo:  V_t = sigmoid(sum_{i<=t} f_i)  (algorithms/tppo.py); (A, ret) = GAE(r, V; gamma, lambd)
           critic loss = BCE-with-logits(z_t, R), per-sample token mean
    bpco, easyppo: ppo with the estimator's PPOOptions (algorithms/ppo_variants.py): V_t in [0, 1],
           A = GAE(r, V; gamma, 1 - 1/(alpha L)), ret = GAE(r, V; gamma, 1), divergence clipping
           (bpco); only finished responses train the actor, critic loss weighted w_x = 1/max(sigma_x,
           0.1), 4 critic steps per pass each clipped on its own (easyppo); sao: tokens whose ratio
           leaves the clip band get no gradient, the critic's attention frozen, 2 critic passes

The actor takes one clipped policy-gradient step on A (slime's surrogate, ``PolicyTrainer``). For
PPO and TPPO the critic is a separate model (``critic/value_model.py``) with its own optimiser,
and the first --warmup-updates train the critic only.

Writes policy/ (the actor; with --lora-rank its adapters only) and, for PPO/TPPO, critic/ (``critic.safetensors`` + ``critic.json``,
``critic/value_model.save_value_model``) to --out.

Metrics per update: rollout/accuracy; critic/explained_variance = 1 - Var(R - V_t) / Var(R) over all
response tokens (the values before the update, against the terminal reward); critic/value_mean;
critic/bce (tppo) or critic/mse (ppo); actor/adv_mean; and the trainer's train/* metrics.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from tempo_plugin.algorithms.ppo_variants import adaptive_lambda, noise_weights, split_evenly
from tempo_plugin.algorithms.tppo import gae, reconstruct_values, value_bce_loss
from tempo_plugin.critic.value_model import (
    ValueModel,
    freeze_attention,
    save_value_model,
    token_increments,
    value_model_from_policy,
)
from tempo_plugin.embedded.lora import apply_lora, save_model
from tempo_plugin.embedded.model import resolve_device
from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.rollout.batches import chunk_by_token_budget, pad_rows
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.embedded.trainer import more_steps
from tempo_plugin.embedded.run_folder import (
    load_policy_with_progress,
    metrics_logs,
    policy_trainer,
    prepare_out,
    seed_everything,
    write_summary,
)
from tempo_plugin.estimators import ESTIMATORS, LOGIT_SUM, VALUE_MODEL
from tempo_plugin.metrics import format_table, summary_rows
from tempo_plugin.rollout.games import sampling_seed, sub_seed
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.sampler import Request, Sampler, SamplingParams
from tempo_plugin.rollout.samples import ACTOR, TrainSample

ACCURACY = "eval/accuracy"
EVAL_SEED = 2_000_000_000  # held-out problems, never reached by training seeds
SUMMARY: tuple[tuple[str, str | None], ...] = (
    ("rollout/accuracy", None),
    ("critic/explained_variance", None),
    ("critic/value_mean", None),
    ("critic/bce", None),
    ("critic/mse", None),
    ("actor/adv_mean", "train"),
)
PLOTTED = ("rollout/accuracy", "critic/explained_variance", "critic/value_mean", "critic/bce", "critic/mse",
           "actor/adv_abs_mean", "train/loss")


@dataclass
class Response:
    group: int
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    reward: float
    finished: bool = True  # ended by a stop token, not cut at --max-assistant-tokens


def make_task(cfg: TempoConfig) -> Any:
    from tempo_plugin.tiny.task_bootstrap import TINY_TASKS
    from tempo_plugin.tasks import make_task as make_named_task

    if cfg.task_name in TINY_TASKS and not cfg.model:
        return TINY_TASKS[cfg.task_name].make()  # the variant the built-in tiny model is bootstrapped on
    return make_named_task(cfg.task_name)


def sample_responses(
    sampler: Sampler, protocol: ChatProtocol, task: Any, problems: Sequence[Any], n: int,
    params: SamplingParams, max_new_tokens: int, seed: int,
) -> list[Response]:
    """n responses per problem (group g = problem g), scored by the task's verifier."""
    prompts = [protocol.render_prompt(task.messages(p)) for p in problems]
    requests = [Request(prompt, max_new_tokens) for prompt in prompts for _ in range(n)]
    completions = sampler.generate(requests, params, seed=seed)
    return [
        Response(i // n, prompts[i // n], list(c.token_ids), list(c.logprobs), c.text,
                 float(task.reward(c.text, problems[i // n].label)), c.finish_reason == "stop")
        for i, c in enumerate(completions)
    ]


def critic_outputs(critic: ValueModel, responses: Sequence[Response], pad_id: int) -> list[torch.Tensor]:
    """The head output f at the prefix before each response token, one tensor per response."""
    device = next(critic.parameters()).device
    rows = [r.prompt_ids + r.response_ids for r in responses]
    ids = pad_rows(rows, pad_id, torch.long, device)
    attention = pad_rows([[1] * len(row) for row in rows], 0, torch.long, device)
    increments = token_increments(critic, ids, attention)
    return [increments[i, len(r.prompt_ids):len(r.prompt_ids) + len(r.response_ids)] for i, r in enumerate(responses)]


def values_from_outputs(estimator: str, outputs: torch.Tensor) -> torch.Tensor:
    return reconstruct_values(outputs) if ESTIMATORS[estimator].value_readout == LOGIT_SUM else outputs


def actor_lambda(cfg: TempoConfig, length: int) -> float:
    """The actor's GAE lambda: --lambd, or BPCO's 1 - 1/(alpha L) for a response of L tokens."""
    alpha = ESTIMATORS[cfg.advantage_estimator].ppo.lambda_alpha
    return cfg.lambd if alpha is None else adaptive_lambda(length, alpha)


def terminal_rewards(response: Response, like: torch.Tensor) -> torch.Tensor:
    rewards = torch.zeros_like(like)
    rewards[-1] = response.reward
    return rewards


def critic_loss(estimator: str, outputs: Sequence[torch.Tensor], responses: Sequence[Response],
                returns: Sequence[torch.Tensor], weights: Sequence[float] | None = None) -> torch.Tensor:
    """The mean over responses of each one's loss, times its weight (EasyPPO's w_x; None: 1)."""
    if ESTIMATORS[estimator].value_readout == LOGIT_SUM:
        losses = [value_bce_loss(f, r.reward) for f, r in zip(outputs, responses)]
    else:
        losses = [0.5 * ((f - ret) ** 2).mean() for f, ret in zip(outputs, returns)]
    if weights is not None:
        losses = [loss * w for loss, w in zip(losses, weights)]
    return torch.stack(losses).mean()


def micro_batches(responses: Sequence[Response], tokens_per_micro_batch: int) -> list[list[Response]]:
    """Consecutive chunks (order kept: values are matched back to responses by position)."""
    return chunk_by_token_budget(responses, lambda r: len(r.prompt_ids) + len(r.response_ids), tokens_per_micro_batch)


def critic_step(
    critic: ValueModel, optimizer: torch.optim.Optimizer, estimator: str, chunks: Sequence[Sequence[Response]],
    returns: Sequence[torch.Tensor], pad_id: int, grad_clip: float, weights: Sequence[float] | None = None,
) -> float:
    """One optimiser step on the critic loss (mean over all responses), accumulated chunk by chunk;
    returns the loss before the step."""
    total = sum(len(chunk) for chunk in chunks)
    optimizer.zero_grad(set_to_none=True)
    loss_value, start = 0.0, 0
    for chunk in chunks:
        outputs = critic_outputs(critic, chunk, pad_id)
        part = slice(start, start + len(chunk))
        loss = critic_loss(estimator, outputs, chunk, returns[part], None if weights is None else weights[part])
        loss = loss * (len(chunk) / total)
        loss.backward()
        loss_value += loss.item()
        start += len(chunk)
    torch.nn.utils.clip_grad_norm_(critic.parameters(), grad_clip)
    optimizer.step()
    return loss_value


def critic_update(
    critic: ValueModel, optimizer: torch.optim.Optimizer, estimator: str, chunks: Sequence[Sequence[Response]],
    returns: Sequence[torch.Tensor], pad_id: int, grad_clip: float, epochs: int = 1,
    weights: Sequence[float] | None = None, minibatches: int = 1, tokens_per_micro_batch: int = 0,
) -> float:
    """``epochs`` passes over one batch; a pass is one critic step on all of it, or with
    ``minibatches`` > 1 one step per consecutive share of its responses (EasyPPO), each share's
    gradient clipped on its own. Returns the first pass's loss (the critic's loss before this batch
    trained it; with minibatches, the mean of its shares' first losses)."""
    critic.train()
    if minibatches == 1:
        parts = [(list(chunks), list(returns), weights)]
    else:
        responses = [r for chunk in chunks for r in chunk]
        parts = [(micro_batches([responses[i] for i in share], tokens_per_micro_batch), [returns[i] for i in share],
                  None if weights is None else [weights[i] for i in share])
                 for share in split_evenly(len(responses), minibatches)]
    def one_pass() -> list[float]:
        return [critic_step(critic, optimizer, estimator, part, rets, pad_id, grad_clip, w) for part, rets, w in parts]

    first = one_pass()
    for _ in range(epochs - 1):
        one_pass()
    critic.eval()
    return statistics.fmean(first)


def explained_variance(values: Sequence[torch.Tensor], responses: Sequence[Response]) -> float | None:
    """1 - Var(R - V_t) / Var(R) over all response tokens; None when R does not vary."""
    v = torch.cat([x.detach().float() for x in values])
    target = torch.cat([torch.full_like(x.detach().float(), r.reward) for x, r in zip(values, responses)])
    variance = target.var(unbiased=False)
    if variance.item() < 1e-12:
        return None
    return 1.0 - ((target - v).var(unbiased=False) / variance).item()


def actor_samples(responses: Sequence[Response], advantages: Sequence[torch.Tensor]) -> list[TrainSample]:
    samples = []
    for r, a in zip(responses, advantages):
        p, n = len(r.prompt_ids), len(r.response_ids)
        samples.append(TrainSample(
            tokens=r.prompt_ids + r.response_ids,
            loss_mask=[0] * p + [1] * n,
            old_logprobs=[0.0] * p + r.logprobs,
            advantages=[0.0] * p + [float(x) for x in a],
            role=ACTOR,
            group=r.group,
            reward=r.reward,
        ))
    return samples


def accuracy(sampler: Sampler, protocol: ChatProtocol, task: Any, cfg: TempoConfig, params: SamplingParams) -> float:
    problems = task.generate(EVAL_SEED, cfg.eval_games)
    responses = sample_responses(sampler, protocol, task, problems, 1, params, cfg.max_assistant_tokens, seed=EVAL_SEED + cfg.seed)
    return statistics.fmean(r.reward for r in responses)


def run(cfg: TempoConfig) -> dict[str, Any]:
    from tqdm import tqdm

    if cfg.resume:
        raise ConfigError(f"--resume is not supported for --advantage-estimator {cfg.advantage_estimator} yet")
    out = prepare_out(cfg)
    seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    task = make_task(cfg)
    model, tokenizer = load_policy_with_progress(cfg, device)
    model.eval()
    uses_critic = ESTIMATORS[cfg.advantage_estimator].critic == VALUE_MODEL
    # the critic copies the plain backbone before any LoRA wrapping: it trains in full
    critic = value_model_from_policy(model, init=cfg.critic_init) if uses_critic else None
    if critic is not None and ESTIMATORS[cfg.advantage_estimator].ppo.freeze_critic_attention:
        if not freeze_attention(critic):
            raise ConfigError(f"--advantage-estimator {cfg.advantage_estimator} freezes the critic's attention layers, "
                              f"but --model {cfg.model or 'tiny'} has no self_attn modules")
    critic_optimizer = (torch.optim.AdamW([p for p in critic.parameters() if p.requires_grad], lr=cfg.critic_learning_rate)
                        if critic else None)
    if cfg.lora_rank:
        model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, base=cfg.model)
    protocol = ChatProtocol(tokenizer)
    sampler = LocalSampler(model, tokenizer)
    params = SamplingParams(cfg.temperature, cfg.top_p, protocol.stop_token_ids)
    trainer = policy_trainer(cfg, model, tokenizer, cfg.td_learning_rate)
    log, wandb_run = metrics_logs(cfg, out)
    if cfg.eval_games > 0:
        print(f"measuring the base policy's accuracy on {cfg.eval_games} held-out problems ...", flush=True)
        log.log({"phase": "eval", "update": -1, ACCURACY: accuracy(sampler, protocol, task, cfg, params)})

    options = ESTIMATORS[cfg.advantage_estimator].ppo
    warmup = cfg.warmup_updates if uses_critic else 0
    total = warmup + cfg.td_updates
    name = cfg.advantage_estimator.upper()
    for update in (bar := tqdm(range(total), desc=name, unit="update")):
        tic = time.perf_counter()
        phase = "warmup" if update < warmup else "train"
        problems = task.generate(sub_seed(cfg.seed, update), cfg.states_per_batch)
        responses = sample_responses(sampler, protocol, task, problems, cfg.branches, params,
                                     cfg.max_assistant_tokens, seed=sampling_seed(cfg.seed, update))
        rollout_seconds = time.perf_counter() - tic
        metrics: dict[str, Any] = {"phase": phase, "update": update,
                                   "rollout/accuracy": statistics.fmean(r.reward for r in responses),
                                   "rollout/response_tokens_mean": statistics.fmean(len(r.response_ids) for r in responses)}
        if critic is None:
            outcome = ESTIMATORS[cfg.advantage_estimator].outcome_advantages([r.reward for r in responses], cfg.branches)
            advantages = [torch.full((len(r.response_ids),), a) for r, a in zip(responses, outcome)]
        else:
            chunks = micro_batches(responses, cfg.train_tokens_per_micro_batch)
            with torch.no_grad():
                outputs = [f for chunk in chunks for f in critic_outputs(critic, chunk, tokenizer.pad_token_id)]
            values = [values_from_outputs(cfg.advantage_estimator, f) for f in outputs]
            if options.bounded_values:
                values = [v.clamp(0.0, 1.0) for v in values]
            pairs = [gae(terminal_rewards(r, v), v, cfg.gamma, actor_lambda(cfg, len(r.response_ids)))
                     for r, v in zip(responses, values)]
            advantages = [a for a, _ in pairs]
            returns = ([ret for _, ret in pairs] if options.lambda_alpha is None else  # BPCO: the critic's lambda is 1
                       [gae(terminal_rewards(r, v), v, cfg.gamma, 1.0)[1] for r, v in zip(responses, values)])
            weights = noise_weights([r.reward for r in responses], cfg.branches) if options.noise_weighted_critic else None
            loss = critic_update(critic, critic_optimizer, cfg.advantage_estimator, chunks, returns,
                                 tokenizer.pad_token_id, cfg.grad_clip, cfg.critic_epochs * options.critic_passes, weights,
                                 options.critic_minibatches, cfg.train_tokens_per_micro_batch)
            metrics["critic/explained_variance"] = explained_variance(values, responses)
            metrics["critic/value_mean"] = torch.cat(values).mean().item()
            metrics["critic/bce" if ESTIMATORS[cfg.advantage_estimator].value_readout == LOGIT_SUM else "critic/mse"] = loss
        flat = torch.cat(advantages)
        metrics["actor/adv_mean"] = flat.mean().item()
        metrics["actor/adv_abs_mean"] = flat.abs().mean().item()
        if phase == "train":
            trained = [(r, a) for r, a in zip(responses, advantages) if r.finished or not options.finished_actor_only]
            if options.finished_actor_only:
                metrics["actor/truncated_responses"] = float(len(responses) - len(trained))  # critic-only
            samples = actor_samples([r for r, _ in trained], [a for _, a in trained])
            metrics.update(trainer.step(samples))
            metrics.update(more_steps(trainer, samples, cfg.policy_epochs - 1))
        metrics["time/rollout"] = rollout_seconds
        metrics["time/update"] = time.perf_counter() - tic
        log.log(metrics)
        ev = metrics.get("critic/explained_variance")
        bar.set_postfix(phase=phase, acc=f"{metrics['rollout/accuracy']:.2f}", ev="-" if ev is None else f"{ev:.2f}")

    if cfg.eval_games > 0:
        print(f"measuring the trained policy's accuracy on {cfg.eval_games} held-out problems ...", flush=True)
        log.log({"phase": "eval", "update": total, ACCURACY: accuracy(sampler, protocol, task, cfg, params)})
    log.close()
    rows = summary_rows(log.records, SUMMARY, ACCURACY)
    summary = write_summary(out, rows, log.records, wandb_run, PLOTTED)
    save_model(model, out / "policy")  # with LoRA: the adapters only
    tokenizer.save_pretrained(out / "policy")
    if critic is not None:  # loaded back onto the saved policy's backbone with load_value_model
        save_value_model(critic, out / "critic", cfg.advantage_estimator)
    print(format_table(rows))
    print(f"outputs: {out}/ (metrics.jsonl, curves.png, summary.json, config.yaml, policy/"
          f"{', critic/' if critic is not None else ''})")
    return summary

