"""A key/value cache that grows in chunks and is written in place.

Hugging Face's ``DynamicLayer`` appends each decoded token with ``torch.cat``, which copies the
whole cache of every layer at every step, a cost that grows with the context (``bench/kv_cache.py``
measures it). ``ChunkedLayer`` keeps each layer's keys and values in a buffer with room for
``CHUNK`` more positions, writes new positions into it and hands attention a view of the filled
part; the buffer is copied only when it is full, once per ``CHUNK`` positions.

The values are the same tensors a ``DynamicLayer`` would hold: only where they live changes. Any
operation that replaces ``keys`` / ``values`` (``batch_select_indices``, ``crop``, ...) is
inherited from ``DynamicLayer``; the next ``update`` sees that they are no longer the view of its
buffer and copies them into a new one.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

CHUNK = 64
"""Positions of room a buffer gets past what it holds: one copy per CHUNK decoded tokens, and at
most CHUNK unused positions per row and layer (an actor's turn, 12 tokens by default, and a critic
completion, 32, decode without one)."""


@functools.cache
def chunked_layer_class() -> type | None:
    """``ChunkedLayer``, built on first use (importing transformers only then), or None where
    transformers has no per-layer caches."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # transformers without per-layer caches: keep its own cache
        return None

    class ChunkedLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values are views of buffers with room to grow."""

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            views = getattr(self, "_views", None)
            replaced = views is None or views[0] is not self.keys or views[1] is not self.values  # or new
            held = self.get_seq_length()
            needed = held + key_states.shape[-2]
            if replaced or self._buffers[0].shape[-2] < needed:  # rebuild from keys/values, with room again
                self._buffers = tuple(
                    _grown(old if held else None, new, needed + CHUNK)
                    for old, new in ((self.keys, key_states), (self.values, value_states))
                )
            for buffer, new in zip(self._buffers, (key_states, value_states)):
                buffer[..., held:needed, :].copy_(new)
            self.keys, self.values = (buffer[..., :needed, :] for buffer in self._buffers)
            self._views = (self.keys, self.values)
            return self.keys, self.values

    return ChunkedLayer


def _grown(held: torch.Tensor | None, new: torch.Tensor, capacity: int) -> torch.Tensor:
    """A buffer of ``capacity`` positions shaped like ``new`` elsewhere, holding ``held`` first."""
    buffer = new.new_empty((*new.shape[:-2], capacity, new.shape[-1]))
    if held is not None:
        buffer[..., : held.shape[-2], :].copy_(held)
    return buffer


def chunked_cache(model: Any) -> Any | None:
    """An empty cache of ``ChunkedLayer`` for ``model``, or None where the model's own cache must be
    kept: transformers without per-layer caches, or a model with other layers than plain growing
    ones (sliding windows, linear attention), whose cache layers behave differently."""
    layer_class = chunked_layer_class()
    if layer_class is None:
        return None
    from transformers.cache_utils import DynamicCache, DynamicLayer

    config = getattr(model, "config", None)
    try:
        cache = DynamicCache(config=config) if config is not None else None
    except (TypeError, ValueError, KeyError, AttributeError):  # a config this transformers cannot build a cache from
        return None
    if cache is None or not getattr(cache, "layers", None) or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [layer_class() for _ in cache.layers]
    return cache
