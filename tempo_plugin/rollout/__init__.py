"""Runtime-agnostic macro-step engine: the chat protocol, N branches x H rounds through a Sampler."""
