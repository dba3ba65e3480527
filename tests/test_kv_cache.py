"""The in-place key/value cache: the same keys and values as Hugging Face's growing cache, copied once per chunk."""

import pytest
import torch

from tempo_plugin.rollout.sampler import Request, SamplingParams
from tempo_plugin.samplers import kv_cache
from tempo_plugin.samplers.kv_cache import CHUNK, chunked_cache, chunked_layer_class
from tempo_plugin.samplers.local import LocalSampler

CHUNKED_LAYER = chunked_layer_class()
pytestmark = pytest.mark.skipif(CHUNKED_LAYER is None, reason="transformers has no per-layer caches")


def _kv(batch: int, positions: int, start: float) -> torch.Tensor:
    """[batch, 2 heads, positions, 3]: entry (b, h, p, d) = start + 1000 b + 100 h + p + d / 10."""
    b, h, p, d = torch.meshgrid(torch.arange(batch), torch.arange(2), torch.arange(positions), torch.arange(3),
                                indexing="ij")
    return start + 1000 * b + 100 * h + p + d / 10


def test_a_chunked_layer_holds_what_was_appended_and_copies_only_when_full():
    layer = CHUNKED_LAYER()
    prompt = _kv(2, 5, 0.0)
    keys, values = layer.update(prompt, -prompt)
    assert torch.equal(keys, prompt) and torch.equal(values, -prompt)
    buffer = layer._buffers[0]
    assert buffer.shape[-2] == 5 + CHUNK  # room for CHUNK more positions
    steps = [_kv(2, 1, 10.0 * (i + 1)) for i in range(CHUNK)]
    for step in steps:  # CHUNK decoded positions fit the room: written in place, no new buffer
        keys, values = layer.update(step, -step)
        assert layer._buffers[0].data_ptr() == buffer.data_ptr()
    expected = torch.cat([prompt, *steps], dim=-2)
    assert torch.equal(keys, expected) and torch.equal(values, -expected)
    assert layer.get_seq_length() == 5 + CHUNK
    one_more = _kv(2, 1, -7.0)
    keys, _ = layer.update(one_more, -one_more)  # full: one copy into a buffer with room again
    assert layer._buffers[0].data_ptr() != buffer.data_ptr()
    assert layer._buffers[0].shape[-2] == 5 + CHUNK + 1 + CHUNK
    assert torch.equal(keys, torch.cat([expected, one_more], dim=-2))


def test_a_chunked_layer_follows_a_row_selection_and_a_crop():
    layer = CHUNKED_LAYER()
    prompt = _kv(3, 4, 0.0)
    layer.update(prompt, -prompt)
    layer.batch_select_indices(torch.tensor([2, 0, 2]))  # the kept cache's rows, reordered and shared
    step = _kv(3, 1, 50.0)
    keys, values = layer.update(step, -step)
    expected = torch.cat([prompt[[2, 0, 2]], step], dim=-2)
    assert torch.equal(keys, expected) and torch.equal(values, -expected)
    layer.crop(-2)
    keys, _ = layer.update(step, -step)
    assert torch.equal(keys, torch.cat([prompt[[2, 0, 2], :, :3], step], dim=-2))


def test_the_sampler_samples_the_same_with_the_in_place_cache(tiny_model, tokenizer):
    assert all(type(layer) is CHUNKED_LAYER for layer in chunked_cache(tiny_model).layers)
    texts = ["Hall 3 of 17. You hold the red key.", "Key room.", "Actions: north, south, wait"]
    params = SamplingParams(stop_token_ids=())
    rounds = {}
    for in_place in (False, True):
        sampler = LocalSampler(tiny_model, tokenizer, in_place_cache=in_place)
        prompts = [tokenizer.encode(t) for t in texts]
        first = sampler.generate([Request(p, 6) for p in prompts], params, seed=4)
        second = sampler.generate([Request(p + c.token_ids + [7, 8], 5) for p, c in zip(prompts, first)], params, seed=5)
        assert sampler.reused_calls == 1  # the second round extended the kept cache
        rounds[in_place] = [(c.token_ids, c.logprobs) for c in first + second]
    assert rounds[True] == rounds[False]


def test_a_model_with_sliding_window_layers_keeps_its_own_cache():
    from types import SimpleNamespace

    from transformers import MistralConfig

    config = MistralConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, vocab_size=50, sliding_window=4)
    assert chunked_cache(SimpleNamespace(config=config)) is None


def test_without_per_layer_caches_the_sampler_keeps_the_models_own(monkeypatch, tiny_model, tokenizer):
    from transformers.cache_utils import DynamicLayer

    monkeypatch.setattr(kv_cache, "chunked_layer_class", lambda: None)  # a transformers older than its per-layer caches
    assert chunked_cache(tiny_model) is None
    sampler = LocalSampler(tiny_model, tokenizer)
    sampler.generate([Request(tokenizer.encode("Key room."), 3)], SamplingParams(stop_token_ids=()), seed=0)
    assert all(type(layer) is DynamicLayer for layer in sampler._kept.cache.layers)


def test_the_bench_decodes_the_same_tokens_from_both_caches(tiny_model, tokenizer):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_kv_cache", Path(__file__).resolve().parents[1] / "bench" / "kv_cache.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.measure(tiny_model, tokenizer, rows=2, context=12, new_tokens=3, repeats=1)
    assert result["same_tokens"] is True
    assert (len(result["seconds_copying"]), len(result["seconds_in_place"])) == (1, 1)  # the warm-up is not counted
    assert result["tokens_per_s_in_place"] == pytest.approx(2 * 3 / result["seconds_in_place"][0])
