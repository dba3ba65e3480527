"""slime rollout hooks end to end over real HTTP on loopback: an SGLang-compatible /generate server,
the HTTP Sampler, TempoDataSource and the rollout functions, producing slime Samples.

Uses slime's own Sample when slime is importable (its source on PYTHONPATH), stand-ins otherwise.
"""

import dataclasses
import random
import re
import zlib
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.logprobs import token_logprobs
from tempo_plugin.slime import settings
from tempo_plugin.slime.data_source import TempoDataSource, state_path
from tempo_plugin.slime.reward import post_process
from tempo_plugin.slime.samples import RETURN, sample_advantage
from tempo_plugin.slime.rollout import generate_grpo_rollout, generate_rollout
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.envs.pool import EnvPool
from tempo_plugin.rollout.games import train_game
from tempo_plugin.critic.prompt import CRITIC_SYSTEM_PROMPT
from tempo_plugin.rollout.sampler import Completion

VALUES = ("0", "0.25", "0.5", "0.75", "1")
SCRIPT_SEED = 1
"""Salt of ScriptedPolicy's draws. The tests assert the situations they need (a degenerate warm-up
critic group, actor signal in TD); with this salt the text-seeded script produces them."""


def scripted_logprob(position: int) -> float:
    return -0.01 * (position + 1)


class ScriptedPolicy:
    """A deterministic stand-in for a trained model, served over HTTP: the critic writes a value
    drawn from VALUES, the actor takes a random action from the last 'Actions:' list it was shown,
    except "open vault": it wanders and takes keys, so no episode ends before T and every TD branch
    reaches its macro-step boundary.
    The log-prob of the i-th generated token is scripted_logprob(i), so the test can trace them.

    Each draw is seeded by the prompt's text and by how often it was asked before, so the
    rollouts do not depend on the order in which concurrent HTTP requests reach the server."""

    def __init__(self, tokenizer, protocol, invalid_share: float = 0.0):
        self.invalid_share = invalid_share  # share of actor turns that name an action the game refuses
        self.tokenizer = tokenizer
        self.end = protocol.stop_token_ids[0]
        self.seen = Counter()

    def generate(self, requests, params, seed):
        out = []
        for request in requests:
            # seeded by the prompt's text, not its token ids, so a retrained tiny tokenizer does not change the script
            prompt = self.tokenizer.decode(list(request.prompt_ids))
            rng = random.Random(zlib.crc32(repr((SCRIPT_SEED, prompt, self.seen[prompt])).encode()))
            self.seen[prompt] += 1
            if CRITIC_SYSTEM_PROMPT[:30] in prompt:
                text = f"<value>{rng.choice(VALUES)}</value>"
            else:
                actions = [a for a in re.findall(r"Actions: ([^<\n]*)", prompt)[-1].split(", ") if a != "open vault"]
                text = f"<action>{rng.choice(actions)}</action>"
                if self.invalid_share and rng.random() < self.invalid_share:
                    text = "<action>dance</action>"
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.end]
            finish = "stop"
            if len(ids) > request.max_new_tokens:
                ids, finish = ids[: request.max_new_tokens], "length"
            out.append(Completion(ids, [scripted_logprob(i) for i in range(len(ids))],
                                  self.tokenizer.decode(ids, skip_special_tokens=True), finish))  # as SGLang returns it
        return out


def write_yaml(path, **values):
    path.write_text(yaml.safe_dump(values))
    return str(path)


def slime_args(tmp_path, tokenizer_dir, url, tempo=None, **overrides):
    """slime's arguments; ``tempo`` adds TEMPO settings to the custom config file."""
    host, port = url.removeprefix("http://").split(":")
    values = dict(
        custom_config_path=write_yaml(tmp_path / "tempo.yaml", **{
            "macro_rounds": 5, "max_episode_steps": 40, "critic_samples": 2, "endpoint_samples": 1,
            "warmup_updates": 1, "warmup_games_per_batch": 1, "max_assistant_tokens": 16, "critic_max_tokens": 12,
            "eval_games": 3, **(tempo or {}),
        }),
        rollout_batch_size=2, n_samples_per_prompt=2, rollout_temperature=1.0, rollout_top_p=1.0, seed=0,
        num_rollout=3, global_batch_size=4, hf_checkpoint=tokenizer_dir, sglang_router_ip=host,
        sglang_router_port=int(port), save=str(tmp_path / "ckpt"), load=str(tmp_path / "ckpt"),
        rollout_function_path="tempo_plugin.slime.rollout.generate_rollout",
        n_samples_per_prompt_eval=1, reward_key=None,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def check_sample_arrays(sample):
    """slime's invariants: tokens = prompt + response; mask and log-probs cover the response."""
    assert sample.response_length >= 1 and len(sample.tokens) > sample.response_length
    assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
    assert isinstance(sample.response, str) and sample.reward is not None
    assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask) if not m)


def flat(groups):
    return [s for g in groups for s in g]


def scripted_turns(sample):
    """Split the response's trained positions into turns and check each turn's scripted log-probs."""
    turns, current = [], []
    for lp, m in zip(sample.rollout_log_probs, sample.loss_mask):
        if m:
            current.append(lp)
        elif current:
            turns.append(current)
            current = []
    if current:
        turns.append(current)
    for turn in turns:
        assert turn == pytest.approx([scripted_logprob(i) for i in range(len(turn))])
    return turns


def test_tempo_warmup_then_td_over_http(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    url = serve(ScriptedPolicy(tokenizer, protocol))
    # --fresh-share 0: once the store holds S states, a TD batch takes all its start states from it
    args = slime_args(tmp_path, tokenizer_dir, url, tempo={"fresh_share": 0.0})
    source = TempoDataSource(args)

    # rollout 0: warm-up. S = 2 boundary states x K = 2 critic samples = 4 samples, all critic or padding
    out = generate_rollout(args, 0, source)
    samples = flat(out.samples)
    assert len(samples) == 4 and out.metrics["rollout/warmup/boundary_states"] == 2.0
    assert out.metrics["rollout/train/removed_samples"] == 4 - sum(not s.remove_sample for s in samples) < 4
    # every metric under a prefix slime's wandb binds to the rollout step; all padding in one group
    assert all(k.startswith(("rollout/", "perf/", "multi_turn/", "passrate/")) for k in out.metrics)
    assert len({s.group_index for s in samples if s.remove_sample}) == 1
    for sample in samples:
        check_sample_arrays(sample)
        if sample.remove_sample:
            assert sample.metadata["tempo_role"] == "padding" and sample.reward == 0.0
            continue
        assert sample.metadata["tempo_role"] == "critic" and sample.group_index % 2 == 1
        assert all(sample.loss_mask) and re.search(r"<value>[0-9.]+</value>", sample.response)
        assert len(scripted_turns(sample)) == 1
        # r_k = -(V_k - G)^2 / R_max^2 (the default "squared"), V_k in VALUES, G = 1[won] in {0, 1}
        assert sample.metadata[RETURN] in (0.0, -0.0625, -0.25, -0.5625, -1.0)
    # the reward is the warm-up's critic advantage A_k = r_k - mean_j r_j over the state's K samples
    # (a group whose K rewards are equal is degenerate and all padding)
    for group in {s.group_index for s in samples if not s.remove_sample}:
        members = [s for s in samples if s.group_index == group]
        assert len(members) == 2
        mean_r = sum(s.metadata[RETURN] for s in members) / 2
        assert [s.reward for s in members] == pytest.approx([s.metadata[RETURN] - mean_r for s in members], abs=1e-12)
    assert source.game_cursor == 1

    # rollout 1: TD. S = 2 start states x (N = 2 branches + K = 2 critic samples) = 8 samples
    assert len(source.store) == 0
    out = generate_rollout(args, 1, source)
    samples = flat(out.samples)
    assert len(samples) == 8 and out.metrics["rollout/td/fresh_states"] == 2.0
    assert sorted({s.index for s in samples}) == list(range(8, 16))
    actors = [s for s in samples if s.metadata["tempo_role"] == "actor"]
    assert actors, "the scripted critic's values differ between branches, so some actor group has signal"
    for sample in actors:
        check_sample_arrays(sample)
        assert sample.group_index % 2 == 0
        turns = scripted_turns(sample)
        # a macro-step of H = 5 rounds: 5 actor turns separated by observations (mask 0)
        assert len(turns) == 5 and 0 in sample.loss_mask
        # the prompt is the start state's saved prefix: the game's first prompt here
        prompt = sample.tokens[: len(sample.tokens) - sample.response_length]
        assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n")
    assert len(source.store) == out.metrics["rollout/store/size"] == out.metrics["rollout/td/new_endpoints"] == 4.0

    # each sample's reward is its advantage, already centred within its group (actor 2g, critic
    # 2g+1), so the reward post-process hands the rewards to slime unchanged
    raw, centred = post_process(args, samples)
    assert raw == [s.reward for s in samples]
    assert centred == pytest.approx(raw, abs=1e-9)
    for group in {s.group_index for s in samples}:
        assert sum(s.reward for s in samples if s.group_index == group) == pytest.approx(0.0, abs=1e-9)

    # rollout 2: TD from stored states; the prompt is now a mid-episode prefix (5 rounds in)
    out = generate_rollout(args, 2, source)
    assert out.metrics["rollout/td/fresh_states"] == 0.0 and out.metrics["rollout/td/macro_index_mean"] == 1.0
    for sample in flat(out.samples):
        check_sample_arrays(sample)
        if sample.metadata["tempo_role"] == "actor":
            prompt = sample.tokens[: len(sample.tokens) - sample.response_length]
            assert tokenizer.decode(prompt).count("<|im_start|>assistant") == 6


def test_store_survives_a_slime_checkpoint_round_trip(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url, num_rollout=4)
    source = TempoDataSource(args)
    generate_rollout(args, 0, source)
    generate_rollout(args, 1, source)
    source.save(1)
    assert state_path(args.save, 1).exists()

    resumed = TempoDataSource(args)
    resumed.load(0)  # no state saved at rollout 0: starts empty, with a warning
    assert len(resumed.store) == 0 and resumed.game_cursor == 0
    resumed.load(1)
    assert resumed.game_cursor == source.game_cursor == 3
    assert [s.token_prefix for s in resumed.store] == [s.token_prefix for s in source.store]
    # the sampling RNG came back too: both draw the same start states next
    assert [s.action_history for s in resumed.store.sample(2)] == [s.action_history for s in source.store.sample(2)]

    # slime points --load at --ref-load when --save holds no Megatron checkpoint: the states are read from --save
    args.load = str(tmp_path / "ref")
    from_save = TempoDataSource(args)
    from_save.load(1)
    assert from_save.game_cursor == 3 and len(from_save.store) == len(source.store) > 0


def test_evaluation_returns_slimes_eval_format(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url)
    out = generate_rollout(args, 0, TempoDataSource(args), evaluation=True)
    data = out.data["success_rate"]  # slime logs it as eval/success_rate
    assert len(data["rewards"]) == len(data["truncated"]) == len(data["samples"]) == 3
    assert set(data["rewards"]) <= {0.0, 1.0}
    for sample, reward in zip(data["samples"], data["rewards"]):
        check_sample_arrays(sample)
        assert sample.reward == reward


def test_episodes_carry_the_models_logprobs(tmp_path, tiny_model, tokenizer, tokenizer_dir, serve, slime_types):
    """The served log-probs of complete episodes (here the evaluation's, which keeps every episode:
    the untrained tiny model's training groups are degenerate) are the model's."""
    url = serve(LocalSampler(tiny_model, tokenizer))
    args = slime_args(
        tmp_path, tokenizer_dir, url, rollout_function_path="tempo_plugin.slime.rollout.generate_grpo_rollout"
    )
    args.custom_config_path = write_yaml(tmp_path / "grpo.yaml", max_episode_steps=16, macro_rounds=8,
                                         max_assistant_tokens=4, eval_games=2)
    out = generate_grpo_rollout(args, 0, TempoDataSource(args), evaluation=True)
    samples = out.data["success_rate"]["samples"]
    assert len(samples) == 2
    for sample in samples:
        check_sample_arrays(sample)
        ids = torch.tensor([sample.tokens])
        with torch.no_grad():
            reference = token_logprobs(tiny_model, ids, torch.ones_like(ids), 1.0)[0]
        start = len(sample.tokens) - sample.response_length
        mask = torch.tensor(sample.loss_mask).bool()
        served = torch.tensor(sample.rollout_log_probs)
        assert mask.any() and torch.allclose(reference[start:][mask], served[mask], atol=1e-4)


class RaisesOnGame(VaultChainEnv):
    """The vault chain, except that every action in game ``DOOMED`` raises (a crashed simulator)."""

    DOOMED = -1

    def step(self, action):
        if self.game.seed == self.DOOMED:
            raise RuntimeError("simulator crashed")
        return super().step(action)


def test_grpo_on_slime_is_the_embedded_episode_update(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types,
                                                      monkeypatch):
    """The slime rollout runs the embedded runtime's ``episode_update``: the same samples and
    advantages (the reward), and a game whose environment raised is dropped, not trained with a
    response cut short (at round 0: an empty one)."""
    games = [train_game(0, 0), train_game(0, 1)]
    monkeypatch.setattr(RaisesOnGame, "DOOMED", games[0])

    def grpo_source(name):
        # each source gets a fresh scripted policy: the same episodes for the same games
        args = slime_args(tmp_path / name, tokenizer_dir, serve(ScriptedPolicy(tokenizer, protocol, 0.3)),
                          rollout_function_path="tempo_plugin.slime.rollout.generate_grpo_rollout")
        source = TempoDataSource(args)
        source.rollout().envs = EnvPool(lambda: RaisesOnGame(max_steps=40))  # T = 40, as slime_args sets it
        return args, source

    for name in ("slime", "embedded"):
        (tmp_path / name).mkdir()
    args, source = grpo_source("slime")
    out = generate_grpo_rollout(args, 0, source)
    embedded = grpo_source("embedded")[1].rollout().episode_update(0, games)

    samples = flat(out.samples)
    assert len(samples) == 4 and out.metrics["rollout/env_errors"] == 2.0
    real = [s for s in samples if not s.remove_sample]
    assert all(s.group_index != 0 for s in samples if not s.remove_sample)  # game 0's group (actor group 0)
    assert len(real) == len(embedded.samples) == 2, "game 1's two episodes differ in refused actions"
    for sample in real:
        check_sample_arrays(sample)
    by_tokens = {tuple(s.tokens): s for s in real}
    for train_sample in embedded.samples:
        sample = by_tokens[tuple(train_sample.tokens)]
        assert sample.reward == pytest.approx(sample_advantage(train_sample))
        assert sample.loss_mask == train_sample.loss_mask[train_sample.prompt_length:]
    assert out.metrics["rollout/train/removed_samples"] == 2.0


def test_settings_errors_name_the_key_or_flag(tmp_path, tokenizer_dir):
    args = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1")
    args.custom_config_path = write_yaml(tmp_path / "bad.yaml", branches=4)
    with pytest.raises(ConfigError, match="'branches' is set by --n-samples-per-prompt"):
        TempoDataSource(args)
    args.custom_config_path = write_yaml(tmp_path / "seed.yaml", seed=3)
    with pytest.raises(ConfigError, match="--seed"):
        TempoDataSource(args)
    # the Monte-Carlo refresh is embedded-only: refused in the YAML, and 0 when the YAML leaves it out
    args.custom_config_path = write_yaml(tmp_path / "refresh.yaml", mc_refresh_every=4)
    with pytest.raises(ConfigError, match="mc_refresh_every 4: .* embedded runtime only"):
        TempoDataSource(args)
    # so are LoRA (slime trains full weights) and the warm start
    args.custom_config_path = write_yaml(tmp_path / "lora.yaml", lora_rank=8)
    with pytest.raises(ConfigError, match="lora_rank 8: .*LoRA is embedded-only"):
        TempoDataSource(args)
    args.custom_config_path = write_yaml(tmp_path / "warm.yaml", warm_start_steps=5)
    with pytest.raises(ConfigError, match="warm_start_steps 5: .*embedded runtime only"):
        TempoDataSource(args)
    args.custom_config_path = write_yaml(tmp_path / "plain.yaml", critic_samples=2)
    assert settings.tempo_config_from_args(args).mc_refresh_every == 0
    args.custom_config_path = write_yaml(tmp_path / "ok.yaml", critic_samples=2, warmup_updates=1)
    args.n_samples_per_prompt = 1
    with pytest.raises(ConfigError, match="--n-samples-per-prompt must be >= 2"):
        TempoDataSource(args)
    args.n_samples_per_prompt = 2
    # S = 2, N = 2, K = 2: warm-up 4 samples, TD 8: 8 does not divide the warm-up rollout
    args.global_batch_size = 8
    with pytest.raises(ConfigError, match="--global-batch-size 8 does not divide the 4 samples of a warm-up rollout"):
        TempoDataSource(args)
    args.global_batch_size = 3
    args.rollout_function_path = "tempo_plugin.slime.rollout.generate_grpo_rollout"
    with pytest.raises(ConfigError, match="4 samples of a GRPO episode rollout"):
        TempoDataSource(args)
    args.global_batch_size = 4
    args.rollout_top_p = 0.9  # slime would then demand per-token top-p token ids on every sample
    with pytest.raises(ConfigError, match="--rollout-top-p 0.9 is not supported"):
        TempoDataSource(args)
    args.rollout_top_p = 1.0
    args.num_rollout = None
    with pytest.raises(ConfigError, match="--num-rollout"):
        TempoDataSource(args)
    args.num_rollout = 3
    # the rollout function names the estimator; multi-turn GRPO has no warm-up: every rollout is an update
    cfg = TempoDataSource(args).cfg
    assert (cfg.advantage_estimator, cfg.td_updates, cfg.total_updates) == ("grpo", 3, 3)
    args.rollout_function_path = "tempo_plugin.slime.rollout.generate_rollout"
    source = TempoDataSource(args)
    # slime's flags fill the slime-owned settings; TD updates are the rollouts after the warm-up
    assert (source.cfg.states_per_batch, source.cfg.branches, source.cfg.td_updates, source.cfg.warmup_updates) == (2, 2, 2, 1)
    assert source.cfg.advantage_estimator == "tempo"


@pytest.mark.parametrize("key, value, says", [
    ("wandb", True, "'wandb' is set by --use-wandb on slime"),
    ("wandb_project", "tempo", "'wandb_project' is set by --wandb-project on slime"),
    ("eval_every", 5, "'eval_every' is set by --eval-interval on slime"),
    ("max_env_steps", 1000, "'max_env_steps' has no effect on slime: .*--num-rollout"),
    ("lora_alpha", 16, "'lora_alpha' has no effect on slime: LoRA is embedded-only"),
    ("lora_targets", "q_proj", "'lora_targets' has no effect on slime: LoRA is embedded-only"),
    ("allow_config_change", True, "'allow_config_change' has no effect on slime"),
    ("readiness_gate", False, "'readiness_gate' has no effect on slime: .*embedded runtime only"),
    ("warm_start_seed", 0, "'warm_start_seed' has no effect on slime: .*embedded runtime only"),
    ("critic_calibration", "none", "'critic_calibration' has no effect on slime: .*embedded runtime only"),
    ("audit_boundaries", True, "'audit_boundaries' has no effect on slime: .*embedded runtime only"),
    ("value_loss_weight", 2.0, "'value_loss_weight' has no effect on slime: .*embedded runtime only"),
    ("trajectory_kl_gate", 0.02, "'trajectory_kl_gate' has no effect on slime: FlashREINFORCE runs on the embedded"),
    ("forecast_weight", 0.2, "'forecast_weight' has no effect on slime: CoPE runs on the embedded"),
    ("spo_discount", 0.8, "'spo_discount' has no effect on slime: SPO runs on the embedded"),
    ("score_centering", 8, "'score_centering' has no effect on slime: score centering needs"),
    ("audit_weight", 1.0, "audit_weight 1.0: the audit branches .* embedded runtime only"),
    ("critic_value", "expected", "critic_value 'expected': .*the slime rollout reads and trains the sampled critic only"),
    ("critic_value", "expected-readout",
     "critic_value 'expected-readout': .*the slime rollout reads and trains the sampled critic only"),
    ("critic_weights", "separate", "critic_weights 'separate': .*the slime rollout's critic is the actor model itself"),
])
def test_settings_slime_would_ignore_are_refused(tmp_path, tokenizer_dir, key, value, says):
    args = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1")
    args.custom_config_path = write_yaml(tmp_path / "t.yaml", **{key: value})
    with pytest.raises(ConfigError, match=says) as error:
        settings.tempo_config_from_args(args)
    assert "\n" not in str(error.value) and "remove it from the YAML" in str(error.value)


READ_ON_SLIME = {
    "preset", "macro_rounds", "critic_samples", "endpoint_samples", "warmup_updates", "warmup_games_per_batch",
    "state_store_capacity", "fresh_share", "max_state_uses", "max_episode_steps", "r_max", "critic_reward",
    "invalid_action_penalty", "prefix_is_clip", "prefix_is_normalise", "prefix_is_max_staleness",
    "normalise_advantages", "critic_advantage_std", "unvalued_endpoint", "warmup_start_states", "critic_prompt",
    "policy_loss", "restore", "env", "env_data", "vaults", "max_trajectory_tokens", "max_assistant_tokens",
    "critic_max_tokens", "eval_games", "eval_split", "critic_value", "critic_weights", "train_games",
}
"""The TEMPO YAML keys the slime rollout reads (written out by hand: a new field must be placed)."""


def test_every_setting_is_read_on_slime_or_refused_there():
    fields = {f.name for f in dataclasses.fields(TempoConfig)}
    refused = set(settings.SLIME_OWNED) | set(settings.EMBEDDED_ONLY) | set(settings.NOT_ON_SLIME)
    assert not refused & READ_ON_SLIME
    assert fields - refused == READ_ON_SLIME


def test_rollout_function_needs_the_tempo_data_source(slime_types):
    with pytest.raises(ConfigError, match="--data-source-path tempo_plugin.slime.data_source.TempoDataSource"):
        generate_rollout(SimpleNamespace(), 0, object())


def test_hook_signatures_match_slimes_default():
    import inspect

    for fn in (generate_rollout, generate_grpo_rollout):
        parameters = inspect.signature(fn).parameters
        assert list(parameters) == ["args", "rollout_id", "data_source", "evaluation"]
        assert parameters["evaluation"].default is False


def test_hook_modules_import_nothing_heavy():
    """slime's workers import the hooks by dotted path: importing them must not pull in slime, torch or numpy."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import tempo_plugin.slime.rollout, tempo_plugin.slime.reward\n"
        "import tempo_plugin.slime.data_source\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'slime', 'torch', 'numpy', 'transformers', 'sglang', 'ray'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_data_source_refuses_a_save_dir_this_node_cannot_see(tmp_path, tokenizer_dir, monkeypatch):
    """Multi-node: the recipe writes SAVE_DIR/tempo_launch_id on the head node and passes the id as
    TEMPO_LAUNCH_ID; a RolloutManager whose node does not see that file stops with one line."""
    from tempo_plugin.config import ConfigError

    args = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1")
    monkeypatch.setenv("TEMPO_LAUNCH_ID", "tempo-123")
    with pytest.raises(ConfigError, match=r"does not hold this launch's tempo_launch_id \(missing.*shares"):
        TempoDataSource(args)
    Path(args.save).mkdir(parents=True)
    (Path(args.save) / "tempo_launch_id").write_text("tempo-999\n")  # a stale id from another launch
    with pytest.raises(ConfigError, match="'tempo-999', expected 'tempo-123'"):
        TempoDataSource(args)
    (Path(args.save) / "tempo_launch_id").write_text("tempo-123\n")
    TempoDataSource(args)  # seen: fine
    monkeypatch.delenv("TEMPO_LAUNCH_ID")
    (Path(args.save) / "tempo_launch_id").unlink()
    TempoDataSource(args)  # not launched by our recipes: no check


def test_config_file_missing_on_this_node_is_one_line(tmp_path, tokenizer_dir):
    from tempo_plugin.config import ConfigError

    args = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1", custom_config_path=str(tmp_path / "nowhere.yaml"))
    with pytest.raises(ConfigError, match=r"--custom-config-path .*nowhere.yaml does not exist on this node .*same path on every node"):
        TempoDataSource(args)


def test_state_files_are_json_and_only_the_newest_are_kept(tmp_path, tokenizer, protocol, tokenizer_dir, serve, slime_types):
    import json

    from tempo_plugin.slime.data_source import KEEP_STATE_FILES, prune_state_files

    url = serve(ScriptedPolicy(tokenizer, protocol))
    args = slime_args(tmp_path, tokenizer_dir, url, num_rollout=4)
    source = TempoDataSource(args)
    generate_rollout(args, 0, source)
    for rollout_id in (3, 10, 7, 11):  # saved out of order: the rollout id decides, not the time
        source.save(rollout_id)
    folder = state_path(args.save, 0).parent
    assert KEEP_STATE_FILES == 2
    # .lock: the data source's writer lock (tempo_plugin.run_lock), never pruned
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "state_10.json", "state_11.json"]
    payload = json.loads(state_path(args.save, 11).read_text())  # plain data: nothing runs when it loads
    assert payload["game_cursor"] == source.game_cursor and len(payload["store"]["states"]) == len(source.store)
    (folder / "state_notes.json").write_text("{}")  # not a state file: left alone
    assert prune_state_files(folder, keep=1) == [folder / "state_10.json"]
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "state_11.json", "state_notes.json"]


def test_the_http_sampler_takes_slimes_seeding_and_health_check_flags(tmp_path, tokenizer_dir):
    """As slime's own rollout: per-request sampling seeds only with --sglang-enable-deterministic-inference;
    the server counts as dead once /health has not answered for --rollout-health-check-timeout."""
    url = "http://127.0.0.1:9"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = TempoDataSource(slime_args(tmp_path / "a", tokenizer_dir, url)).rollout().sampler
    seeded = TempoDataSource(slime_args(tmp_path / "b", tokenizer_dir, url, rollout_health_check_timeout=90.0,
                                        sglang_enable_deterministic_inference=True)).rollout().sampler
    assert (plain.seed_requests, seeded.seed_requests) == (False, True)
    assert (plain.health_timeout_s, seeded.health_timeout_s) == (30.0, 90.0)


def test_a_tempo_sample_hands_slime_its_advantage_not_its_return(slime_types):
    """What the TD update put in the advantages (here: the return 1.0 less a penalty, centred, scaled
    by a prefix weight: A = 0.35) is the slime reward; the raw return stays in the metadata; a
    sample whose trained tokens carry different advantages (Temporal GRPO's kind) is refused."""
    from tempo_plugin.slime.samples import slime_groups
    from tempo_plugin.rollout.samples import ACTOR, CRITIC, make_sample

    actor = make_sample([5, 6, 7, 8, 9], [0, 1, 1, 0, 1], [0.0, -0.1, -0.2, 0.0, -0.3], 0.35, ACTOR, 3, 1.0)
    critic = make_sample([5, 6, 7], [0, 1, 1], [0.0, -0.5, -0.5], -0.04, CRITIC, 3, -0.09)
    groups = slime_groups([actor, critic], 3, slime_types.Sample, lambda ids: "", pad_token_id=0)
    (a,), (c,), (pad,) = groups
    assert (a.group_index, a.reward, a.metadata[RETURN]) == (6, 0.35, 1.0)
    assert (c.group_index, c.reward, c.metadata[RETURN]) == (7, -0.04, -0.09)
    assert pad.remove_sample and pad.reward == 0.0
    uneven = make_sample([5, 6, 7, 8], [0, 1, 0, 1], [0.0, -0.1, 0.0, -0.2], [0.5, -0.5], ACTOR, 0, 1.0)
    with pytest.raises(ValueError, match="2 different advantages"):
        slime_groups([uneven], 1, slime_types.Sample, lambda ids: "", pad_token_id=0)


def test_a_decaying_learning_rate_needs_tempos_step_count(tmp_path, tokenizer_dir):
    """slime sizes Megatron's schedule for --num-rollout x S x N / --global-batch-size steps; a TEMPO
    run of the recipe's sizes takes 20 warm-up rollouts of 32 x 8 = 256 samples (1 step each) and 280
    TD rollouts of 32 x (8 + 8) = 512 (2 steps each): 580, not 300."""
    recipe = dict(rollout_batch_size=32, n_samples_per_prompt=8, num_rollout=300, global_batch_size=256)
    tempo = dict(critic_samples=8, warmup_updates=20)
    args = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1", tempo=tempo, **recipe)
    cfg = settings.tempo_config_from_args(args)
    counts = settings.sample_counts(cfg, args.rollout_function_path)
    assert settings.optimiser_steps(cfg, counts, 256, 300) == 20 * 1 + 280 * 2 == 580
    assert settings.optimiser_steps(cfg, counts, 256, 10) == 10  # all warm-up
    TempoDataSource(args)  # no decay style given: constant, nothing depends on the count

    args.lr_decay_style = "cosine"
    with pytest.raises(ConfigError, match=r"sizes the schedule for 300 optimiser steps but this run takes 580.*"
                                          r"pass --lr-decay-iters 580$"):
        TempoDataSource(args)
    args.lr_decay_iters = 580
    TempoDataSource(args)
    args.weight_decay_incr_style = "linear"
    with pytest.raises(ConfigError, match="no flag corrects that; use --weight-decay-incr-style constant"):
        TempoDataSource(args)

    # multi-turn GRPO's rollouts hold S x N samples: slime's count is right, any schedule goes
    grpo = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1", tempo=tempo, lr_decay_style="cosine",
                      rollout_function_path="tempo_plugin.slime.rollout.generate_grpo_rollout", **recipe)
    TempoDataSource(grpo)


def test_preset_reference_on_slime_needs_the_unclipped_per_token_loss(tmp_path, tokenizer_dir):
    """``preset: reference`` in the YAML gives the method's settings on slime too; its loss is slime's
    own with the clip opened and per-token aggregation, so other slime loss flags are refused."""
    args = slime_args(tmp_path, tokenizer_dir, "http://127.0.0.1:1", tempo={"preset": "reference"},
                      eps_clip=0.2, eps_clip_high=None, calculate_per_token_loss=False)
    with pytest.raises(ConfigError, match="pass --eps-clip 1e9 --eps-clip-high 1e9 --calculate-per-token-loss"):
        settings.tempo_config_from_args(args)
    args.eps_clip, args.calculate_per_token_loss = 1e9, True  # --eps-clip-high unset: slime copies --eps-clip
    cfg = settings.tempo_config_from_args(args)
    assert (cfg.unvalued_endpoint, cfg.warmup_start_states, cfg.critic_prompt, cfg.critic_reward) == (
        "zero", False, "reference", "abs")
    args.eps_clip_high = 0.28  # a clip left on the high side
    with pytest.raises(ConfigError, match="policy_loss importance_sampling"):
        settings.tempo_config_from_args(args)
