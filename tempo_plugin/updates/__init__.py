"""What one update of each multi-turn estimator plays, values and trains, for both drivers (the pure
math it uses is in ``algorithms/``; the registry of estimators is ``tempo_plugin.estimators``).

``schedule`` (which phase an update is, and the update that runs it), ``tempo`` (warm-up, TD update,
Monte-Carlo refresh), ``episodes`` (multi-turn GRPO, FlashREINFORCE, CoPE, SPO, Temporal GRPO),
``critic_calls`` (the generative critic), ``prefix_is`` (prefix importance weights), ``play``
(games, restores, episodes) and ``rollout`` (``TempoRollout``, all of them on one sampler and
environment pool).
"""
