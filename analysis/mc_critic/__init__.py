"""How good is a critic, measured against Monte Carlo: ``bash analysis/mc_critic/run.sh runs/<name>``.

Modules: ``metrics`` (the pure math), ``states`` (sampling states, forced actions), ``ground_truth``
(Monte-Carlo values), ``critics`` (generative and scalar critics), ``cache`` (the resumable JSONL
cache), ``report`` (summary.json, markdown table, plots), ``cli`` (the command line).
"""
