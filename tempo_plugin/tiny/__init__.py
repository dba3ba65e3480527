"""The built-in tiny model: its tokenizer and config (``model``) and the supervised format
bootstraps that make it playable (``bootstrap``; per game ``env_bootstrap``, per task ``task_bootstrap``)."""
