"""The embedded runtime: one machine, one process, Hugging Face transformers.

``run_folder`` (--out, checkpoints, RNG, resume, the setup both loops share), ``multi_turn`` (TEMPO,
multi-turn GRPO, Temporal GRPO on an environment), ``single_turn`` (PPO, TPPO, GRPO on a task),
``trainer`` (the clipped policy-gradient step), ``value_model`` (the scalar critic of PPO and TPPO),
``model`` / ``lora`` / ``named_models`` (loading), ``serve`` (an SGLang-compatible /generate server).
The command line is ``tempo_plugin.train``.
"""
