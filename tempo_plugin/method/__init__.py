"""The methods: what one update of each estimator plays, values and trains, for both drivers.

``estimators`` (the registry), ``schedule`` (which phase an update is), ``tempo`` (warm-up, TD
update, Monte-Carlo refresh), ``episodes`` (multi-turn GRPO, Temporal GRPO), ``critic_calls`` (the
generative critic), ``prefix_is`` (prefix importance weights), ``play`` (games, restores, episodes)
and ``rollout`` (``TempoRollout``, all of them on one sampler and environment pool).
"""
