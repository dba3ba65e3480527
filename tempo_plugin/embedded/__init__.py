"""The embedded runtime: one machine, one process. ``run_folder`` (--out, checkpoints, RNG,
resume), ``multi_turn`` (TEMPO, multi-turn GRPO, Temporal GRPO on an environment) and
``single_turn`` (PPO, TPPO, GRPO on a task). The command line is ``tempo_plugin.train``."""
