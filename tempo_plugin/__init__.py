"""tempo_plugin: long-horizon credit assignment (TEMPO and friends) for LLM agents.

Runs embedded on one machine (``python -m tempo_plugin.train``) or as a plugin of the slime RL
framework. Importing the package never imports slime, Megatron or SGLang.
"""

__version__ = "0.1.0"
