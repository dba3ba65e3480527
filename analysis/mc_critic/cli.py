"""The command line of ``bash analysis/mc_critic/run.sh`` (``python -m analysis.mc_critic``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tempo_plugin.algorithms.tempo import Calibration
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.envs import HELD_OUT_SPLITS
from tempo_plugin.run_lock import run_folder_lock, writer_lock
from tempo_plugin.runs import OneLineParser, UsageError, resolve_run
from tempo_plugin.rollout.games import sub_seed

from analysis.mc_critic.ground_truth import DEFAULT_BATCH_TOKENS

PROG = "analysis/mc_critic/run.sh"
DESCRIPTION = """\
How good is a critic, measured against Monte Carlo. Samples states with the run's actor, estimates
each state's value by M Monte-Carlo continuations with the same actor (the ground truth), values the
same states with the critics, and reports MAE, RMSE, Pearson, Spearman, explained variance,
calibration (ECE), error by position, tracking along trajectories and (agent environments) whether
the critic ranks forced first actions as Monte Carlo does. Writes summary.json, summary.md and PNG
plots to --out; per-state results go to cache.jsonl there, and a rerun skips what is in it."""
EPILOG = """\
states:
  agent environments (the run's --env, default vaults): one episode of the run's actor on each of
  the first --games held-out games (textworld: <games>/eval; alfworld: the run's --eval-split,
  valid_unseen by default; never a training game); states at rounds 0, E, 2E, ... (E = --every-rounds).
  single-turn runs (--task, PPO/TPPO/GRPO): one answer to each of the first --games held-out
  problems; states every --every-tokens answer tokens.
critics:
  agent environments: the generative critic of the run's model ("generative"; mean of
  --critic-samples parsed answers, through the run's calibration map where it has one: then the
  raw critic is "generative (uncalibrated)") and of every --critic-model ("generative:<name>").
  single-turn: the run's scalar critic (critic/, "tppo" = sigmoid of the accumulated logit, or
  "ppo" = value head) and that of every --critic-model run.
action ranking (agent environments):
  at --action-states sampled states with >= 2 admissible actions, each of up to
  --candidate-actions admissible actions is forced as the next step; the state after it is valued
  by each critic and rolled out --mc-samples times.

examples:
  bash analysis/mc_critic/run.sh runs/seed0
  bash analysis/mc_critic/run.sh runs/seed0 --critic-model ~/.cache/tempo_plugin/tiny-d691aba8cff6
  bash analysis/mc_critic/run.sh runs/tppo --every-tokens 2 --mc-samples 32

output (--out, default RUN/mc_critic/):
  summary.json, summary.md (the table, also printed), calibration.png, scatter.png,
  error_vs_position.png, tracking.png, action_ranking.png (agent environments); cache.jsonl and
  states.json, which a rerun with the same settings reuses (an interrupted run continues; a rerun
  with another --critic-model computes only that critic). --fresh starts over."""

UNCALIBRATED = "generative (uncalibrated)"
"""The run's generative critic without its calibration map (--critic-calibration platt)."""
DEFAULT_GAMES = 8
DEFAULT_MC_SAMPLES = 16
DEFAULT_CRITIC_SAMPLES = 8
DEFAULT_ACTION_STATES = 4




def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN", help="a run directory (runs/<name>) or a Hugging Face model directory "
                   "(then TempoConfig's defaults: vaults, T = 30)")
    p.add_argument("--out", metavar="DIR", default="", help="output directory (default: RUN/mc_critic)")
    p.add_argument("--games", metavar="N", type=int, default=DEFAULT_GAMES,
                   help="held-out games (agent) or problems (single-turn) whose trajectories give the states "
                        "(default: %(default)s)")
    p.add_argument("--every-rounds", metavar="E", type=int, default=0,
                   help="agent: a state every this many rounds of an episode (default: the run's --macro-rounds H)")
    p.add_argument("--every-tokens", metavar="K", type=int, default=4,
                   help="single-turn: a state every this many answer tokens (default: %(default)s)")
    p.add_argument("--mc-samples", metavar="M", type=int, default=DEFAULT_MC_SAMPLES,
                   help="M: Monte-Carlo continuations per state (default: %(default)s)")
    p.add_argument("--critic-samples", metavar="K", type=int, default=DEFAULT_CRITIC_SAMPLES,
                   help="K: generative critic answers averaged per state (default: %(default)s)")
    p.add_argument("--candidate-actions", metavar="C", type=int, default=4,
                   help="agent: actions forced per action-ranking state, at most (default: %(default)s; "
                        "below 2 turns action ranking off)")
    p.add_argument("--action-states", metavar="N", type=int, default=DEFAULT_ACTION_STATES,
                   help="agent: sampled states (with >= 2 admissible actions) used for action ranking "
                        "(default: %(default)s; 0 turns it off)")
    p.add_argument("--critic-model", action="append", default=[], metavar="DIR",
                   help="also measure this model's critic on the same states and MC values (repeatable): agent: "
                        "a model or run directory, its generative critic; single-turn: a PPO/TPPO run directory, "
                        "its scalar critic. The actor stays RUN's.")
    p.add_argument("--rows", metavar="N", type=int, default=64,
                   help="sampler batch rows: continuations rolled out together (default: %(default)s)")
    p.add_argument("--batch-tokens", metavar="N", type=int, default=DEFAULT_BATCH_TOKENS,
                   help="rows x (prefix + answer tokens) of one sampler batch, at most (default: %(default)s); "
                        "fewer rows go together when prefixes are long")
    p.add_argument("--threads", metavar="N", type=int, default=1,
                   help="CPU threads of torch (default: %(default)s: the tiny model gains little from more, and "
                        "several threads slow down many times over when another job shares the cores; 0: torch's "
                        "own choice)")
    p.add_argument("--seed", metavar="N", type=int, default=0, help="seed of the episodes, the rollouts and the choices (default: %(default)s)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="(default: %(default)s)")
    p.add_argument("--fresh", action="store_true", help="ignore and delete the cache in --out and start over")
    return p


def validate(args: argparse.Namespace) -> None:
    for name in ("games", "every_tokens", "mc_samples", "critic_samples", "rows", "batch_tokens"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    for name in ("every_rounds", "candidate_actions", "action_states", "threads"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0 (got {getattr(args, name)})")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        validate(args)
        with writer_lock(run_folder_lock(output_dir(args)), "mc-critic analysis"):  # one writer per --out
            run(args)
    except (UsageError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: finished states are in the cache; rerun the same command to continue", file=sys.stderr)
        return 130
    return 0


# -- the run ----------------------------------------------------------------------------------------------


def _generation(cfg: TempoConfig) -> dict[str, Any]:
    keys = ("env", "env_data", "task", "max_episode_steps", "max_trajectory_tokens", "max_assistant_tokens",
            "critic_max_tokens", "temperature", "top_p", "restore")
    generation = {k: getattr(cfg, k) for k in keys}
    splits = HELD_OUT_SPLITS.get(cfg.env, ()) if cfg.multi_turn else ()
    if splits:  # the states come from the held-out folder (earlier versions played the training games)
        generation["held_out_split"] = cfg.eval_split if cfg.eval_split in splits else splits[0]
    return generation


def _unique(states: Sequence[Any]) -> list[Any]:
    seen, out = set(), []
    for state in states:
        if state.id not in seen and not state.terminal:
            seen.add(state.id)
            out.append(state)
    return out


def _critic_name(names: set[str], base: str) -> str:
    name, i = base, 2
    while name in names:
        name, i = f"{base}#{i}", i + 1
    names.add(name)
    return name


def output_dir(args: argparse.Namespace) -> Path:
    """--out, by default RUN/mc_critic."""
    return Path(args.out) if args.out else resolve_run(args.run).path / "mc_critic"


def run(args: argparse.Namespace) -> dict:
    import torch
    from tqdm import tqdm

    from tempo_plugin.embedded.model import load_pretrained, resolve_device
    from tempo_plugin.samplers.local import LocalSampler
    from tempo_plugin.rollout.protocol import ChatProtocol
    from tempo_plugin.rollout.sampler import SamplingParams

    from tempo_plugin.embedded.run_folder import checkpoint_calibration

    from analysis.mc_critic import report
    from analysis.mc_critic.cache import ResultCache, settings_key, weights_identity

    tic = time.perf_counter()
    ref = resolve_run(args.run)
    critic_refs = [resolve_run(path) for path in args.critic_model]  # fail on a bad path before any work
    cfg = ref.config or TempoConfig()
    out = output_dir(args)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out {out}: cannot create it ({error.strerror})") from None
    if args.fresh:
        for name in ("cache.jsonl", "states.json"):
            (out / name).unlink(missing_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = resolve_device(args.device)

    if not cfg.multi_turn:  # single-turn: scalar critics only, checked before any work
        for critic_ref in critic_refs:
            if critic_ref.critic_dir is None:
                raise UsageError(f"--critic-model {critic_ref.path}: no scalar critic there "
                                 "(critic/critic.safetensors of a PPO/TPPO run)")
        if ref.critic_dir is None and not critic_refs:
            raise UsageError(f"{args.run}: no critic to measure: a single-turn run keeps its PPO/TPPO critic in "
                             "critic/critic.safetensors (GRPO has none); pass --critic-model RUN")
    print(f"loading the actor from {ref.model_dir} ...", flush=True)
    model, tokenizer = load_pretrained(str(ref.model_dir), device)
    protocol = ChatProtocol(tokenizer)
    sampler = LocalSampler(model, tokenizer, max_batch_size=max(64, args.rows), max_batch_tokens=args.batch_tokens)
    params = SamplingParams(cfg.temperature, cfg.top_p, protocol.stop_token_ids)
    actor = weights_identity(ref.model_dir)
    generation = _generation(cfg)
    multi_turn = cfg.multi_turn
    critics: list[Any] = []
    names: set[str] = set()

    if multi_turn:
        from tempo_plugin.envs import eval_env_factory
        from tempo_plugin.rollout.games import eval_games
        from tempo_plugin.updates.rollout import TempoRollout

        from analysis.mc_critic.critics import GenerativeCritic
        from analysis.mc_critic.ground_truth import agent_mc
        from analysis.mc_critic.states import action_children, agent_states

        try:  # held-out games, as the trainer's evaluation: TextWorld's <games>/eval, ALFWorld's --eval-split
            make_env = eval_env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data, cfg.vaults, cfg.eval_split)
        except (ValueError, ImportError, FileNotFoundError) as error:
            raise UsageError(f"{args.run}: environment {cfg.env!r}: {error}") from None
        critic_sampler, critic_identity = None, actor
        if ref.generative_critic_dir is not None:  # --critic-weights separate: the critic's own weights
            print(f"loading the run's critic from {ref.generative_critic_dir} ...", flush=True)
            critic_model, _ = load_pretrained(str(ref.generative_critic_dir), device)
            critic_sampler = LocalSampler(critic_model, tokenizer, max_batch_size=max(64, args.rows),
                                          max_batch_tokens=args.batch_tokens)
            critic_identity = weights_identity(ref.generative_critic_dir)
        rollout = TempoRollout(cfg, sampler, protocol, make_env, critic_sampler=critic_sampler)
        every = args.every_rounds or cfg.macro_rounds
        state_key = settings_key(actor=actor, games=args.games, every=every, seed=args.seed, generation=generation)
        base = _cached_states(out / "states.json", state_key)
        if base is None:
            print(f"playing {args.games} held-out games for the states ...", flush=True)
            base = agent_states(rollout, eval_games(args.games), every, args.seed, args.rows)
            _save_states(out / "states.json", state_key, base)
        candidates = args.candidate_actions if args.action_states else 0
        children = action_children(base, make_env, protocol, cfg, args.action_states, candidates, args.seed)
        critics.append(GenerativeCritic(_critic_name(names, "generative"), rollout, args.critic_samples, critic_identity))
        for critic_ref in critic_refs:
            print(f"loading the critic model {critic_ref.model_dir} ...", flush=True)
            other, other_tokenizer = load_pretrained(str(critic_ref.model_dir), device)
            other_protocol = ChatProtocol(other_tokenizer)
            other_sampler = LocalSampler(other, other_tokenizer, max_batch_size=max(64, args.rows),
                                         max_batch_tokens=args.batch_tokens)
            other_rollout = TempoRollout(cfg, other_sampler, other_protocol, make_env)
            critics.append(GenerativeCritic(_critic_name(names, f"generative:{critic_ref.name}"), other_rollout,
                                            args.critic_samples, weights_identity(critic_ref.model_dir)))
        mc_work = lambda pending, on_round: agent_mc(rollout, pending, args.mc_samples, args.seed, args.rows,  # noqa: E731
                                                     on_round=on_round, batch_tokens=args.batch_tokens)
        position_label = "round index"
        mode = {"mode": "agent", "env": cfg.env, "every_rounds": every}
    else:
        from tempo_plugin.critic.value_model import critic_estimator, load_value_model
        from tempo_plugin.embedded.single_turn import EVAL_SEED, make_task, sample_responses

        from analysis.mc_critic.critics import ScalarCritic
        from analysis.mc_critic.ground_truth import token_mc
        from analysis.mc_critic.states import token_states

        task = make_task(cfg)
        state_key = settings_key(actor=actor, games=args.games, every=args.every_tokens, seed=args.seed,
                                 generation=generation)
        base = _cached_states(out / "states.json", state_key)
        if base is None:
            print(f"answering {args.games} held-out problems for the states ...", flush=True)
            problems = task.generate(EVAL_SEED, args.games)
            responses = sample_responses(sampler, protocol, task, problems, 1, params, cfg.max_assistant_tokens, args.seed)
            base = token_states(responses, args.every_tokens, cfg.max_assistant_tokens, [p.label for p in problems])
            _save_states(out / "states.json", state_key, base)
        children = []
        sources = ([(ref, model)] if ref.critic_dir is not None else []) + [(r, None) for r in critic_refs]
        for source, policy in sources:
            if policy is None:
                policy, _ = load_pretrained(str(source.model_dir), device)
            estimator = critic_estimator(source.critic_dir)
            value_model = load_value_model(source.critic_dir, policy)
            base_name = estimator if source is ref else f"{estimator}:{source.name}"
            critics.append(ScalarCritic(_critic_name(names, base_name), value_model, estimator,
                                        tokenizer.pad_token_id, weights_identity(source.critic_dir)))
        mc_work = lambda pending, on_round: token_mc(sampler, protocol, task, params, pending,  # noqa: E731
                                                     args.mc_samples, args.seed, args.rows)
        position_label = "answer tokens"
        mode = {"mode": "single_turn", "task": cfg.task_name, "every_tokens": args.every_tokens}

    cache = ResultCache(out / "cache.jsonl")
    mc_key = settings_key(kind="mc", actor=actor, samples=args.mc_samples, seed=args.seed, generation=generation)
    critic_keys = {c.name: settings_key(kind=c.kind, critic=c.identity, samples=getattr(c, "samples", 1),
                                        seed=args.seed, generation=generation,
                                        **({"readout": cfg.critic_value} if cfg.critic_value != "sampled" else {}))
                   for c in critics}
    measured = _unique(list(base) + list(children))
    pending_mc = [s for s in measured if not cache.has("mc", mc_key, s.id)]
    pending_critic = {c.name: [s for s in measured if not cache.has(f"critic:{c.name}", critic_keys[c.name], s.id)]
                      for c in critics}
    weight = {c.name: getattr(c, "samples", 1) for c in critics}
    total = len(pending_mc) * args.mc_samples + sum(len(p) * weight[n] for n, p in pending_critic.items())
    cached = ", ".join([f"Monte Carlo {len(measured) - len(pending_mc)}/{len(measured)}"]
                       + [f"{n} {len(measured) - len(p)}/{len(measured)}" for n, p in pending_critic.items()])
    print(f"{len(base)} states on {len({s.trajectory for s in base})} trajectories, {len(children)} action children; "
          f"in the cache ({out / 'cache.jsonl'}): {cached}", flush=True)
    bar = tqdm(total=total, desc="mc-critic", unit="sample", dynamic_ncols=True)
    try:
        for critic in critics:
            pending = pending_critic[critic.name]
            step = critic.batch_size(args.rows)
            for start in range(0, len(pending), step):
                chunk = pending[start:start + step]
                for state, result in zip(chunk, critic.evaluate(chunk, seed=sub_seed(args.seed, start))):
                    cache.put(f"critic:{critic.name}", critic_keys[critic.name], state.id, result)
                bar.update(len(chunk) * weight[critic.name])
                bar.set_postfix(stage=critic.name)
        def on_round(round_no: int) -> None:
            bar.set_postfix(stage=f"monte carlo, round {round_no + 1}")

        for state, result in mc_work(pending_mc, on_round):
            cache.put("mc", mc_key, state.id, result)
            bar.update(args.mc_samples)
            bar.set_postfix(stage="monte carlo")
    finally:
        bar.close()
        cache.close()

    mc = {s.id: cache.get("mc", mc_key, s.id) for s in measured}
    values = {c.name: {s.id: cache.get(f"critic:{c.name}", critic_keys[c.name], s.id) for s in measured} for c in critics}
    calibration = checkpoint_calibration(ref.model_dir, cfg) if multi_turn and ref.config is not None else Calibration()
    if calibration != Calibration():  # the run values states through its calibration map: measure that, and the raw critic beside it
        raw = values["generative"]
        level = {s.id: s.macro.milestones_left if s.macro is not None else None for s in measured}
        values = {"generative": {i: calibrated(r, calibration, level[i]) for i, r in raw.items()},
                  UNCALIBRATED: raw, **{n: v for n, v in values.items() if n != "generative"}}
    summary = report.summarize(base, children, mc, values, args.mc_samples)
    seconds = time.perf_counter() - tic
    summary = {
        "run": str(ref.path), "actor": str(ref.model_dir), **mode,
        "settings": {"games": args.games, "mc_samples": args.mc_samples, "critic_samples": args.critic_samples,
                     "every_tokens": args.every_tokens, "batch_tokens": args.batch_tokens, "threads": args.threads,
                     "candidate_actions": args.candidate_actions, "action_states": args.action_states,
                     "critic_models": [str(r.model_dir) for r in critic_refs], "seed": args.seed, "rows": args.rows},
        "wall_seconds": round(seconds, 1),
        "calibration": {"slope": calibration.a, "intercept": calibration.b,
                        **({"level_intercepts": dict(calibration.levels)} if calibration.levels else {})},
        **summary,
    }
    summary["plots"] = report.plot_all(summary, base, children, mc, values, out, position_label)
    table = report.markdown_table(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(f"# Critic against Monte Carlo: {ref.path}\n\n{table}")
    print(table)
    print(f"outputs: {out}/ (summary.json, summary.md, {', '.join(summary['plots'])}, cache.jsonl) "
          f"in {seconds:.0f} s")
    return summary


def calibrated(result: dict | None, calibration: Calibration, level: int | None = None) -> dict | None:
    """A generative critic's cached result with its value through the run's calibration map, at a
    state with ``level`` milestones left."""
    if result is None or result.get("value") is None:
        return result
    return {**result, "value": calibration(result["value"], level)}


def _cached_states(path: Path, key: str) -> list | None:
    """The states saved by an earlier run with the same settings (JSON: loading runs no code), else None."""
    from analysis.mc_critic.states import State
    from tempo_plugin.states.store import state_from_dict

    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text())
        if payload.get("key") != key:
            return None
        return [State(**{**s, "macro": state_from_dict(s["macro"]) if s.get("macro") else None}) for s in payload["states"]]
    except (ValueError, TypeError, KeyError, AttributeError):  # an unreadable file is resampled
        return None


def _save_states(path: Path, key: str, states: list) -> None:
    from tempo_plugin.states.store import state_to_dict

    rows = [{**dataclasses.asdict(s), "macro": state_to_dict(s.macro) if s.macro is not None else None} for s in states]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"key": key, "states": rows}))
    tmp.replace(path)
