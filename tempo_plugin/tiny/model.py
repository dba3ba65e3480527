"""The built-in tiny model: a byte-level BPE tokenizer trained locally with a ChatML template,
and a small Qwen3-architecture causal LM built from a config (random init, no download).

The tokenizer's pre-tokenizer splits words (GPT-2 style), isolates digits, chat markers and tags, so
a colour in an observation and in an action is the same token (a small model copies it easily) and
the critic's value is written digit by digit.
"""

from __future__ import annotations

from typing import Iterable

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
FORMAT_TAGS = ["<action>", "</action>", "<value>", "</value>"]


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 1024, tags: Iterable[str] = ()):
    """Train a byte-level BPE on ``corpus`` and wrap it as a HF fast tokenizer with a chat template.

    ``FORMAT_TAGS`` and any extra ``tags`` become whole tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d|<\|[a-z_]+\|>|\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=24,
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.add_tokens(FORMAT_TAGS + list(tags))  # whole tokens, matched before pre-tokenisation, kept when decoding
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        bos_token=None,
        unk_token=None,
    )
    wrapped.chat_template = CHATML_TEMPLATE
    return wrapped


def build_tiny_model(vocab_size: int, pad_token_id: int, eos_token_id: int, max_positions: int = 4096):
    """A ~3M-parameter Qwen3 causal LM (hidden 256, 4 layers, 4 heads / 2 KV heads), random init."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=640,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )
    return Qwen3ForCausalLM(config)
