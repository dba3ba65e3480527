"""What is evaluated: a run directory, a Hugging Face model directory, or a server.

A target is described (and its paths checked) when the command line is read, and opened (its
model loaded, or its tokenizer) only when its turn comes, then closed, so one model at a time is
in memory. Generation settings come from the run's ``config.yaml`` when there is one (for a
server, from the run given as ``--tokenizer``), else from ``TempoConfig``'s defaults.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.runs import resolve_run

from eval.benchmarks import Policy

LOCAL_BATCH_ROWS = 64  # LocalSampler's batch size: larger calls drop its kept KV cache
SERVER_BATCH_ROWS = 256  # concurrent requests per round for a server
SERVER_RETRIES = 5  # /generate: retries of a refused connection or a 5xx answer, a second apart


@dataclass
class Target:
    name: str
    kind: str  # run, model, server (SGLang /generate) or openai (/v1/completions)
    location: str  # the path or URL as given
    config: TempoConfig  # generation settings
    from_run: bool  # config comes from a run's config.yaml
    opener: Callable[[], Policy] = field(repr=False)

    def open(self) -> Policy:
        return self.opener()

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "name": self.name, "kind": self.kind, "location": self.location,
            "settings_from": "run config.yaml" if self.from_run else "TempoConfig defaults",
            "env": cfg.env if self.from_run else None,
            "max_episode_steps": cfg.max_episode_steps, "max_assistant_tokens": cfg.max_assistant_tokens,
            "max_trajectory_tokens": cfg.max_trajectory_tokens, "temperature": cfg.temperature, "top_p": cfg.top_p,
        }

    @property
    def own_env(self) -> str | None:
        """The environment a multi-turn run trained on; None for a model, server or single-turn run."""
        return self.config.env if self.from_run and self.config.multi_turn else None


def release() -> None:
    """Free what a closed target left (call after dropping the last reference to its Policy)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def local_target(path: str, device: str) -> Target:
    """A run directory or a model directory; ConfigError (one line, naming the path) otherwise."""
    ref = resolve_run(path)

    def opener() -> Policy:
        from tempo_plugin.embedded.model import load_pretrained, resolve_device
        from tempo_plugin.samplers.local import LocalSampler

        model, tokenizer = load_pretrained(str(ref.model_dir), resolve_device(device))
        return Policy(LocalSampler(model, tokenizer), protocol_for(tokenizer, str(ref.model_dir)),
                      ref.config or TempoConfig(), LOCAL_BATCH_ROWS)

    return Target(ref.name, "run" if ref.config is not None else "model", path, ref.config or TempoConfig(),
                  ref.config is not None, opener)


def protocol_for(tokenizer: Any, where: str) -> ChatProtocol:
    try:
        return ChatProtocol(tokenizer)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def tokenizer_source(path: str) -> tuple[Path, TempoConfig | None]:
    """(tokenizer directory, run config) of ``--tokenizer``: a run, a model or a tokenizer directory."""
    root = Path(path)
    if root.is_dir() and (root / "tokenizer_config.json").is_file() \
            and not (root / "config.json").is_file() and not (root / "config.yaml").is_file():
        return root, None  # a tokenizer alone (save_pretrained of a tokenizer)
    try:
        ref = resolve_run(path)
    except ConfigError as error:
        raise ConfigError(f"--tokenizer {error}") from None
    return ref.model_dir, ref.config


def load_tokenizer(directory: Path, given: str) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise ConfigError(f"--tokenizer {given}: cannot load a tokenizer from {directory} ({one_line(error)})") from None
    if tokenizer.chat_template is None:
        raise ConfigError(f"--tokenizer {given}: the tokenizer has no chat template")
    return tokenizer


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def server_name(url: str) -> str:
    parsed = urlparse(url)
    return parsed.netloc or url


def check_url(url: str, flag: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"{flag} {url}: expected an http(s):// URL such as http://127.0.0.1:30000")


def generate_url(url: str) -> str:
    base = url.rstrip("/")
    return base if base.endswith("/generate") else base + "/generate"


def server_target(url: str, kind: str, tokenizer_path: str | None, openai_model: str = "") -> Target:
    """An SGLang ``/generate`` server (kind ``server``) or an OpenAI-style one (kind ``openai``)."""
    flag = "--server" if kind == "server" else "--openai"
    check_url(url, flag)
    if not tokenizer_path:
        raise ConfigError(f"{flag} {url} needs --tokenizer DIR (the served model's Hugging Face directory, or a run) to render prompts")
    directory, config = tokenizer_source(tokenizer_path)

    def opener() -> Policy:
        tokenizer = load_tokenizer(directory, tokenizer_path)
        if kind == "server":
            from tempo_plugin.samplers.sglang_http import HTTPSampler

            sampler: Any = HTTPSampler(generate_url(url), max_retries=SERVER_RETRIES)
        else:
            from tempo_plugin.samplers.openai import OpenAISampler

            sampler = OpenAISampler(url, openai_model, tokenizer)
            if not sampler.model:
                models = sampler.list_models()
                if not models:
                    raise ConfigError(f"--openai {url}: the server lists no model; pass --openai-model NAME")
                sampler.model = models[0]
        return Policy(sampler, protocol_for(tokenizer, str(directory)), config or TempoConfig(), SERVER_BATCH_ROWS)

    return Target(server_name(url), kind, url, config or TempoConfig(), config is not None, opener)


def unique_names(targets: list[Target]) -> None:
    """Make the column names distinct: a repeated name gets #2, #3, ..."""
    seen: dict[str, int] = {}
    for target in targets:
        count = seen.get(target.name, 0) + 1
        seen[target.name] = count
        if count > 1:
            target.name = f"{target.name}#{count}"
