"""Evaluate runs, models and servers side by side: ``bash eval/eval.sh MODEL_OR_RUN [...]``.

* ``eval.benchmarks``: the estimators (pass@k, standard errors) and the two kinds of benchmark,
  agent games (held-out games of an environment) and math problems (a local JSONL file);
* ``eval.targets``: what is evaluated (a run directory, a model directory, an SGLang ``/generate``
  server or an OpenAI-style ``/v1/completions`` server);
* ``eval.report``: the results as JSON and as a markdown table;
* ``eval.cli``: the command line (``python -m eval --help``).
"""
