"""Test-only stand-in for megatron.training.tokenizer (Megatron-LM only): a namespace for tokenizer."""
