"""Tests for the token-level chat protocol, action parsing and the training-sample masks."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import pytest

from tempo_plugin.config import TempoConfig
from tempo_plugin.envs.vault import VaultEnv
from tempo_plugin.rollout.engine import MACRO_BOUNDARY, Branch, RolloutLimits, fresh_state, run_branches
from tempo_plugin.rollout.protocol import (
    INVALID_ACTION,
    PrefixViolation,
    check_extends,
    parse_action,
)
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams
from tempo_plugin.rollout.samples import ACTOR, CRITIC, make_sample
from tempo_plugin.updates.critic_calls import CriticCall
from tempo_plugin.updates.rollout import TempoRollout

MAX_STEPS = 40
USER_HEAD = "<|im_start|>user\n"
USER_TAIL = "<|im_end|>\n<|im_start|>assistant\n"


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def ids_of(tokenizer):
    return tokenizer.convert_tokens_to_ids("<|im_end|>"), encode(tokenizer, "\n")


# ----------------------------------------------------------------------------------- extension


def test_closing_ids_are_im_end_and_newline(tokenizer, protocol):
    im_end, newline = ids_of(tokenizer)
    assert len(newline) == 1
    # ChatML closes an assistant turn with '<|im_end|>\n'
    assert protocol.closing_ids == [im_end] + newline
    assert im_end in protocol.stop_token_ids


def test_extend_starts_with_prompt_and_completion_and_skips_duplicate_end_token(tokenizer, protocol):
    im_end, newline = ids_of(tokenizer)
    env = VaultEnv(max_steps=MAX_STEPS)
    state = fresh_state(env, 4, protocol)
    prompt = list(state.token_prefix)
    completion = encode(tokenizer, "<action>north</action>") + [im_end]  # ended by the stop token
    observation = "Nothing happens. " + state.observation
    next_prompt, completion_end = protocol.extend(prompt, completion, observation)
    assert next_prompt[: len(prompt) + len(completion)] == prompt + completion
    assert completion_end == len(prompt) + len(completion)
    # the completion's own <|im_end|> is kept, only '\n' is added, then the user turn
    obs_ids = encode(tokenizer, USER_HEAD + observation + USER_TAIL)
    assert next_prompt == prompt + completion + newline + obs_ids
    assert next_prompt.count(im_end) == prompt.count(im_end) + 2  # completion's + user turn's
    # text-level: the sequence renders the same conversation as the chat template
    messages = state.message_dicts() + [
        {"role": "assistant", "content": "<action>north</action>"},
        {"role": "user", "content": observation},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(next_prompt) == rendered


def test_extend_adds_closing_tokens_to_a_cut_completion(tokenizer, protocol):
    im_end, newline = ids_of(tokenizer)
    prompt = encode(tokenizer, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    completion = encode(tokenizer, "<action>nor")  # cut by the token budget: no stop token
    next_prompt, completion_end = protocol.extend(prompt, completion, "Hall 1 of 9.")
    assert completion_end == len(prompt) + len(completion)
    obs_ids = encode(tokenizer, USER_HEAD + "Hall 1 of 9." + USER_TAIL)
    assert next_prompt == prompt + completion + [im_end] + newline + obs_ids


def test_closing_tokens_overlap(tokenizer, protocol):
    im_end, newline = ids_of(tokenizer)
    body = encode(tokenizer, "<action>wait</action>")
    assert protocol.closing_tokens(body) == [im_end] + newline
    assert protocol.closing_tokens(body + [im_end]) == newline
    assert protocol.closing_tokens(body + [im_end] + newline) == []
    assert protocol.closing_tokens([]) == [im_end] + newline


def test_check_extends():
    check_extends([1, 2, 3], [1, 2, 3, 4])
    check_extends([1, 2, 3], [1, 2, 3])
    check_extends([], [5])
    with pytest.raises(PrefixViolation):
        check_extends([1, 2, 3], [1, 3, 2, 4])
    with pytest.raises(PrefixViolation):
        check_extends([1, 2, 3], [1, 2])
    with pytest.raises(PrefixViolation):
        check_extends([1, 2, 3], [9, 2, 3, 4])


# ---------------------------------------------------------------------------------- parse_action


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<action>North </action>", "north"),
        ("<action>  Take   RED </action>\n", "take red"),
        ("I will move. <ACTION>open vault</ACTION>", "open vault"),
        ("<action>wait</action><action>north</action>", "north"),
        ("north", INVALID_ACTION),
        ("", INVALID_ACTION),
        ("<action>north</action> and then more text", INVALID_ACTION),
        ("<action>north", INVALID_ACTION),
        ("<action></action>", INVALID_ACTION),
        ("<action>   </action>", INVALID_ACTION),
        ("<action>nor\nth</action>", INVALID_ACTION),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text) == expected


# ------------------------------------------------------------------------- branches and samples


class ScriptedSampler:
    """Each request gets the next (text, ends_with_stop) of ``script``; records every completion."""

    def __init__(self, tokenizer, script):
        self.tokenizer = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.script = list(script)
        self.completions: list[Completion] = []

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        out = []
        for request in requests:
            text, stop = self.script[len(self.completions) % len(self.script)]
            ids = encode(self.tokenizer, text) + ([self.im_end] if stop else [])
            assert len(ids) <= request.max_new_tokens
            k = len(self.completions)
            logprobs = [-(k + 1) / 8 - j / 64 for j in range(len(ids))]  # exact binary fractions
            completion = Completion(ids, logprobs, text, "stop" if stop else "length")
            self.completions.append(completion)
            out.append(completion)
        return out


@pytest.fixture
def two_branches(tokenizer, protocol):
    """Two branches x 3 rounds from game 21, with hand-built expectations for each branch."""
    seed = 21
    probe = VaultEnv(max_steps=MAX_STEPS)
    probe.reset(seed)
    keys = probe.game.keys
    # request order is round-major: round 0 -> (b0, b1), round 1 -> (b0, b1), ...
    script = [
        (f"<action>take {keys[0]}</action>", True), (f"<action>take {keys[-1]}</action>", False),
        ("<action>north</action>", True), ("no tag here", True),
        ("<action>wait</action>", False), ("<action>north</action>", True),
    ]
    actions = [[f"take {keys[0]}", "north", "wait"], [f"take {keys[-1]}", INVALID_ACTION, "north"]]
    sampler = ScriptedSampler(tokenizer, script)
    start = dataclasses.replace(fresh_state(VaultEnv(max_steps=MAX_STEPS), seed, protocol), prefix_logprob_sum=0.5)
    branches = []
    for _ in range(2):
        env = VaultEnv(max_steps=MAX_STEPS)
        env.restore(start.snapshot)
        branches.append(Branch.from_state(start, env, group=0))
    limits = RolloutLimits(horizon=3, max_episode_steps=MAX_STEPS, max_trajectory_tokens=2048, max_assistant_tokens=32)
    run_branches(branches, sampler, protocol, SamplingParams(stop_token_ids=protocol.stop_token_ids), limits, seed=0)

    im_end, newline = ids_of(tokenizer)
    expected = []
    for b in range(2):
        env = VaultEnv(max_steps=MAX_STEPS)
        env.reset(seed)
        tokens = list(start.token_prefix)
        trained, round_ends, completions, observations = [], [], [], []
        for r in range(3):
            completion = sampler.completions[2 * r + b]
            observation = env.step(actions[b][r]).observation
            closing = newline if completion.token_ids[-1] == im_end else [im_end] + newline
            trained.append(range(len(tokens), len(tokens) + len(completion.token_ids)))
            tokens += completion.token_ids + closing + encode(tokenizer, USER_HEAD + observation + USER_TAIL)
            round_ends.append(len(tokens))
            completions.append(completion)
            observations.append(observation)
        expected.append(dict(tokens=tokens, trained=trained, round_ends=round_ends,
                             completions=completions, observations=observations, actions=actions[b]))
    return start, branches, expected


def test_branches_follow_the_script(two_branches):
    start, branches, expected = two_branches
    for branch, exp in zip(branches, expected):
        assert branch.stop_reason == MACRO_BOUNDARY
        assert [r.action for r in branch.rounds] == exp["actions"]
        assert [r.observation for r in branch.rounds] == exp["observations"]
        assert branch.tokens == exp["tokens"]
        assert [r.prompt_length for r in branch.rounds] == exp["round_ends"]
        assert len(branch.loss_mask) == len(branch.logprobs) == len(branch.tokens)
    assert branches[1].rounds[1].parsed is False and branches[1].rounds[1].admissible is False


def test_actor_sample_mask_advantages_and_logprobs(two_branches):
    start, branches, expected = two_branches
    for branch, exp in zip(branches, expected):
        sample = make_sample(branch.tokens, branch.loss_mask, branch.logprobs, 0.7, ACTOR, 0, 0.0)
        positions = [i for rng in exp["trained"] for i in rng]
        # trimmed after the last completion token: the last round's closing + observation are gone
        end = exp["trained"][-1].stop
        assert end < len(branch.tokens)
        assert sample.tokens == exp["tokens"][:end]
        assert len(sample.loss_mask) == len(sample.advantages) == len(sample.old_logprobs) == end
        assert [i for i, m in enumerate(sample.loss_mask) if m == 1] == positions
        assert set(sample.loss_mask) == {0, 1}
        # the saved prefix is context
        assert sample.prompt_length == len(start.token_prefix)
        assert sample.loss_mask[: len(start.token_prefix)] == [0] * len(start.token_prefix)
        fake = {}
        for rng, completion in zip(exp["trained"], exp["completions"]):
            fake.update(zip(rng, completion.logprobs))
        for i in range(end):
            if i in fake:
                assert sample.advantages[i] == 0.7
                assert sample.old_logprobs[i] == fake[i]
            else:
                assert sample.advantages[i] == 0.0
                assert sample.old_logprobs[i] == 0.0
        assert sample.role == ACTOR and sample.group == 0


def test_state_after_cuts_tokens_and_sums_logprobs(two_branches):
    start, branches, expected = two_branches
    for branch, exp in zip(branches, expected):
        for k in (1, 2, 3):
            state = branch.state_after(k, macro_index=3, policy_version=5)
            assert list(state.token_prefix) == exp["tokens"][: exp["round_ends"][k - 1]]
            # start sum 0.5 plus every fake log-prob of the first k completions
            want = 0.5 + sum(lp for c in exp["completions"][:k] for lp in c.logprobs)
            assert state.prefix_logprob_sum == pytest.approx(want, abs=1e-12)
            assert state.action_history == tuple(exp["actions"][:k])
            assert state.observation == exp["observations"][k - 1]
            assert state.round_index == k
            assert (state.macro_index, state.policy_version) == (3, 5)
            assert len(state.messages) == len(start.messages) + 2 * k
        with pytest.raises(ValueError):
            branch.state_after(0, 1, 0)
        with pytest.raises(ValueError):
            branch.state_after(4, 1, 0)
    # the script's first completion (k = 0) carries log-probs -1/8 - j/64 for its tokens j = 0, 1, ...
    c0 = expected[0]["completions"][0]
    assert c0.logprobs == [-(1 / 8) - j / 64 for j in range(len(c0.token_ids))]


def test_make_sample_rejects_no_trained_tokens_and_bad_lengths():
    with pytest.raises(ValueError):
        make_sample([1, 2, 3], [0, 0, 0], [0.0, 0.0, 0.0], 1.0, ACTOR, 0, 0.0)
    with pytest.raises(ValueError):
        make_sample([], [], [], 1.0, ACTOR, 0, 0.0)
    with pytest.raises(ValueError):
        make_sample([1, 2, 3], [0, 1], [0.0, 0.0, 0.0], 1.0, ACTOR, 0, 0.0)


def test_make_sample_trims_trailing_context_by_hand():
    sample = make_sample([10, 11, 12, 13, 14, 15], [0, 1, 1, 0, 1, 0], [9.0, -1.0, -2.0, 9.0, -3.0, 9.0], -0.25, CRITIC, 3, 1.5)
    # last trained token at index 4 -> keep 5 tokens
    assert sample.tokens == [10, 11, 12, 13, 14]
    assert sample.loss_mask == [0, 1, 1, 0, 1]
    assert sample.old_logprobs == [0.0, -1.0, -2.0, 0.0, -3.0]
    assert sample.advantages == [0.0, -0.25, -0.25, 0.0, -0.25]
    assert (sample.role, sample.group, sample.reward, sample.prompt_length) == (CRITIC, 3, 1.5, 1)


@pytest.mark.parametrize(
    ("reward", "advantages", "rewards"),
    [
        # e = [|0.2-0.5|, |0.6-0.5|] = [0.3, 0.1]; r = [-0.3, -0.1]; mean -0.2; A = [-0.1, 0.1]
        ("abs", (-0.1, 0.1), (-0.3, -0.1)),
        # r = [-0.3^2, -0.1^2] = [-0.09, -0.01]; mean -0.05; A = [-0.04, 0.04]
        ("squared", (-0.04, 0.04), (-0.09, -0.01)),
    ],
)
def test_critic_samples_mask_prompt_and_train_completion(tokenizer, protocol, reward, advantages, rewards):
    cfg = TempoConfig(branches=2, critic_samples=2, states_per_batch=2, macro_rounds=5, max_episode_steps=MAX_STEPS,
                      critic_reward=reward)
    rollout = TempoRollout(cfg, ScriptedSampler(tokenizer, []), protocol, make_env=lambda: VaultEnv(max_steps=MAX_STEPS))
    state = fresh_state(VaultEnv(max_steps=MAX_STEPS), 13, protocol)
    prompt = rollout.critic_prompt(state)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def completion(text, logprob):
        ids = encode(tokenizer, text) + [im_end]
        return Completion(ids, [logprob] * len(ids), text, "stop")

    call = CriticCall(prompt, [completion("<value>0.20</value>", -0.5), completion("<value>0.60</value>", -0.25)])
    signals = rollout.critic_signals(call, target=0.5)
    samples = rollout.critic_samples(call, signals, group=4)
    assert signals.errors == pytest.approx([0.3, 0.1])  # the errors are |V - G| / R_max for either reward
    assert signals.advantages == pytest.approx(advantages)
    assert len(samples) == 2
    for sample, c, adv, r in zip(samples, call.completions, advantages, rewards):
        n = len(c.token_ids)
        assert sample.role == CRITIC and sample.group == 4
        assert sample.tokens == prompt + c.token_ids
        assert sample.loss_mask == [0] * len(prompt) + [1] * n
        assert sample.prompt_length == len(prompt)
        assert sample.advantages[: len(prompt)] == [0.0] * len(prompt)
        assert sample.advantages[len(prompt):] == pytest.approx([adv] * n)
        assert sample.old_logprobs == [0.0] * len(prompt) + c.logprobs
        assert sample.reward == pytest.approx(r)

    # equal errors (0.3 and 0.3) -> degenerate -> no samples, errors still reported
    call = CriticCall(prompt, [completion("<value>0.20</value>", -0.5), completion("<value>0.80</value>", -0.5)])
    signals = rollout.critic_signals(call, target=0.5)
    samples = rollout.critic_samples(call, signals, group=0)
    assert samples == []
    assert signals.errors == pytest.approx([0.3, 0.3])


def test_the_expected_readout_values_a_state_and_the_written_values_train_it(tokenizer, protocol):
    """--critic-value expected-readout: the state's value is the mean of its readouts, while each
    sample's reward and the lock check come from the value it wrote (its sampled action)."""
    from tempo_plugin.updates.critic_calls import Readout

    cfg = TempoConfig(branches=2, critic_samples=2, states_per_batch=2, macro_rounds=5, max_episode_steps=MAX_STEPS,
                      critic_reward="abs", critic_value="expected-readout")
    rollout = TempoRollout(cfg, ScriptedSampler(tokenizer, []), protocol, make_env=lambda: VaultEnv(max_steps=MAX_STEPS))
    prompt = rollout.critic_prompt(fresh_state(VaultEnv(max_steps=MAX_STEPS), 13, protocol))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def call(texts, readouts):
        completions = [Completion(encode(tokenizer, t) + [im_end], [-0.5] * (len(encode(tokenizer, t)) + 1), t, "stop")
                       for t in texts]
        return CriticCall(prompt, completions, tuple(Readout([], "", v) for v in readouts))

    # written 0.20 and 0.60 towards G = 0.5: errors [0.3, 0.1], A = [-0.1, 0.1]; the readouts 0.9 and 0.7 value it 0.8
    written = call(["<value>0.20</value>", "<value>0.60</value>"], [0.9, 0.7])
    samples, errors, _, degenerate = rollout.critic_training([(written, 0.5, 3)])
    assert errors == pytest.approx([0.3, 0.1]) and degenerate == [0.0]
    assert [s.role for s in samples] == [CRITIC, CRITIC]
    assert [s.advantages[-1] for s in samples] == pytest.approx([-0.1, 0.1])
    assert rollout.value_pairs([written], [0.5]) == [(pytest.approx(0.8), 0.5)]

    # one written value twice: the identical-group lock (no samples), however the readouts differ
    locked = call(["<value>0.20</value>", "<value>0.20</value>"], [0.3, 0.1])
    samples, errors, _, degenerate = rollout.critic_training([(locked, 0.5, 0)])
    assert samples == [] and degenerate == [1.0] and errors == pytest.approx([0.3, 0.3])
