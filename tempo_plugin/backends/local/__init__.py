"""Embedded single-machine runtime: HF causal LM, batched KV-cache sampler, clipped-PG trainer."""
