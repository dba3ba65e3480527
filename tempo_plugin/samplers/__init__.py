"""Samplers (the ``rollout.sampler.Sampler`` contract): ``local`` (this process's model),
``sglang_http`` (an SGLang /generate server or router), ``openai`` (an OpenAI-style server)."""
