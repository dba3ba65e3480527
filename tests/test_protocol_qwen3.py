"""ChatProtocol with a real Qwen3 chat template (data in the shared fixtures, not part of the project).

Qwen3 renders an assistant turn after the last user query with a <think></think> block only while it
is the last message, so a closed [user, assistant] render is not a prefix of the next turn's prompt.
The protocol must read the between-turn tokens from history turns instead.
"""

import copy
import os
from pathlib import Path

import pytest

from tempo_plugin.rollout.protocol import ChatProtocol, parse_action

ROOT = Path(__file__).resolve().parents[1]


def qwen3_template() -> str:
    shared = Path(os.environ.get("TEMPO_SHARED_DIR", ROOT.parent / "shared"))
    path = shared / "fixtures" / "chat_templates" / "qwen3-thinking-2507.jinja"
    if not path.is_file():
        pytest.skip(f"no Qwen3 template at {path} (set TEMPO_SHARED_DIR to the shared material)")
    return path.read_text()


@pytest.fixture()
def qwen3_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = qwen3_template()
    return tok


def test_the_template_breaks_the_naive_prefix_rule(qwen3_tokenizer):
    user, assistant = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}
    closed = qwen3_tokenizer.apply_chat_template([user, assistant], tokenize=False)
    extended = qwen3_tokenizer.apply_chat_template([user, assistant, user], tokenize=False, add_generation_prompt=True)
    assert "<think>" in closed and not extended.startswith(closed)  # why the history render is needed


def test_between_turn_tokens_come_from_history_turns(qwen3_tokenizer):
    protocol = ChatProtocol(qwen3_tokenizer)
    assert qwen3_tokenizer.decode(protocol.closing_ids) == "<|im_end|>\n"
    assert protocol._turn_head == "<|im_start|>user\n"
    assert protocol._turn_tail == "<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>") in protocol.stop_token_ids


def test_three_round_episode_extends_and_keeps_every_turn_in_order(qwen3_tokenizer):
    protocol = ChatProtocol(qwen3_tokenizer)
    end = qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompt = protocol.render_prompt(protocol.initial_messages("open the vault", "You are in a hall."))
    assert protocol.decode(prompt).endswith("assistant\n<think>\n")
    observations = ["You see a door.", "The door is locked.", "You win."]
    completions = ["\n</think>\n\n<action>go north</action>", "<action>open door</action>", "<action>take key</action>"]
    for i, (completion, observation) in enumerate(zip(completions, observations)):
        ids = protocol.encode(completion) + ([end] if i != 1 else [])  # round 1: cut before the end token
        before = list(prompt)
        prompt, completion_end = protocol.extend(prompt, ids, observation)
        assert prompt[: len(before)] == before and prompt[len(before):completion_end] == ids
        assert parse_action(protocol.decode(ids)) == parse_action(completion)
    text = qwen3_tokenizer.decode(prompt)
    pieces = ["open the vault", "You are in a hall."] + [p for pair in zip(completions, observations) for p in pair]
    positions = [text.index(piece) for piece in pieces]
    assert positions == sorted(positions)
    # every history turn is closed exactly once and followed by a rendered user turn
    assert text.count("</action><|im_end|>\n<|im_start|>user\n") == 3
    assert text.endswith("You win.<|im_end|>\n<|im_start|>assistant\n<think>\n")
