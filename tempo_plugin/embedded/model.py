"""Load the policy: a local Hugging Face model directory, or the built-in tiny model.

The tiny model is built from a config, given the supervised format bootstrap and cached on disk
under ``<cache-dir>/tiny-<key>/`` (the key hashes everything that determines it), so later runs
start in seconds. A real model directory is loaded as it is and skips the bootstrap.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.embedded.lora import ADAPTER_CONFIG, adapter_base, is_adapter_dir
from tempo_plugin.envs import BUILT_IN

TINY_VERSION = 12  # bump when the tiny model, its tokenizer or its bootstrap data change
TINY_TASK_VERSION = 2  # the same for the single-turn tiny models (per task: TINY_TASKS[task].version)
TINY_ENV_VERSION = 2  # the same for the tiny model of the other environments (TextWorld, ALFWorld)
# 2: the bootstrap plays the training split only (ALFWorld's train/, TextWorld's <games>/train), never held-out games


def resolve_device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda was requested but torch sees no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


def tiny_cache_dir(cfg: TempoConfig) -> Path:
    root = Path(cfg.cache_dir or os.environ.get("TEMPO_CACHE", Path.home() / ".cache" / "tempo_plugin"))
    if cfg.multi_turn:
        what = {"env": cfg.env, "T": cfg.bootstrap_t}
        if cfg.env not in BUILT_IN:
            what.update(env_data=str(Path(cfg.env_data).resolve()) if cfg.env_data else "", env_version=TINY_ENV_VERSION)
    else:
        from tempo_plugin.tiny.task_bootstrap import TINY_TASKS

        entry = TINY_TASKS.get(cfg.task_name)
        what = {"task": cfg.task_name, "task_version": TINY_TASK_VERSION, "task_demo_version": entry.version if entry else 0}
    key = json.dumps({"v": TINY_VERSION, **what, "steps": cfg.bootstrap_steps, "seed": cfg.seed}, sort_keys=True)
    return root / f"tiny-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def load_pretrained(directory: str, device: torch.device, cache_dir: str = "") -> tuple[Any, Any]:
    """A Hugging Face model directory, or a named model (``smollm2-135m``: converted once, then cached)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tempo_plugin.embedded.named_models import model_directory

    if is_adapter_dir(directory):  # a LoRA checkpoint: its base plus the adapters, merged
        return load_adapted(directory, device, trainable=False, cache_dir=cache_dir)
    directory = model_directory(directory, cache_dir)
    path = Path(directory)
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {directory}: not a Hugging Face model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.chat_template is None:
        raise ConfigError(f"--model {directory}: the tokenizer has no chat template")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    model.eval()
    return model, tokenizer



def load_adapted(directory: str | Path, device: torch.device, trainable: bool, cache_dir: str = "") -> tuple[Any, Any]:
    """(model, tokenizer) of an adapter directory: the base it names, loaded with
    ``load_pretrained``, plus the adapters. ``trainable``: a PeftModel whose adapters train;
    else the adapters merged into the base, a plain Hugging Face model."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    from tempo_plugin.embedded.named_models import NAMED_MODELS

    base = adapter_base(directory)
    if base not in NAMED_MODELS and not (Path(base) / "config.json").is_file() and not is_adapter_dir(base):
        raise ConfigError(f"{directory}: the base model of its LoRA adapters, {base} "
                          f"({ADAPTER_CONFIG} base_model_name_or_path), is not there")
    model, tokenizer = load_pretrained(base, device, cache_dir)
    if (Path(directory) / "tokenizer_config.json").is_file():  # the checkpoint's own copy
        tokenizer = AutoTokenizer.from_pretrained(directory)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    model = PeftModel.from_pretrained(model, str(directory), is_trainable=trainable, torch_device=str(device))
    if trainable:
        for name, parameter in model.named_parameters():
            parameter.requires_grad_("lora_" in name)
        model.peft_config["default"].base_model_name_or_path = base
    else:
        model = model.merge_and_unload()
        # adapters trained on this model record this directory as their base (it holds the merge)
        model.name_or_path = model.config.name_or_path = str(Path(directory).resolve())
    model.eval()
    return model, tokenizer


def build_bootstrapped_tiny(
    cfg: TempoConfig, device: torch.device, progress: Callable[[int, float], None] | None = None
) -> tuple[Any, Any]:
    """Load the cached bootstrapped tiny model, building and caching it first if needed."""
    from tempo_plugin.tiny.bootstrap import supervised_bootstrap, tokenizer_corpus
    from tempo_plugin.tiny.model import build_tiny_model, build_tokenizer
    from tempo_plugin.rollout.protocol import ChatProtocol

    single_turn = not cfg.multi_turn
    if single_turn:
        from tempo_plugin.tiny.task_bootstrap import TINY_TASKS

        if cfg.task_name not in TINY_TASKS:
            raise ConfigError(f"the built-in tiny model is bootstrapped on {', '.join(sorted(TINY_TASKS))} only; "
                              f"pass --model DIR for --task {cfg.task_name}")
    cache = tiny_cache_dir(cfg)
    if (cache / "config.json").is_file():
        return load_pretrained(str(cache), device)
    torch.manual_seed(cfg.seed)
    if single_turn:
        from tempo_plugin.tiny.task_bootstrap import ANSWER_TAGS, task_bootstrap, task_corpus, tiny_task

        entry = tiny_task(cfg.task_name)
        task = entry.make()
        corpus, tags = task_corpus(task, entry.demo), ANSWER_TAGS
        bootstrap = lambda model, protocol: task_bootstrap(  # noqa: E731
            model, protocol, task, entry.demo, cfg.bootstrap_steps, cfg.seed, progress=progress)
    elif cfg.env not in BUILT_IN:
        from tempo_plugin.tiny.env_bootstrap import env_bootstrap, env_corpus
        from tempo_plugin.envs import env_factory

        make_env = env_factory(cfg.env, cfg.bootstrap_t, cfg.env_data)
        corpus, tags = env_corpus(make_env, cfg.bootstrap_t), ()
        bootstrap = lambda model, protocol: env_bootstrap(  # noqa: E731
            model, protocol, make_env, cfg.bootstrap_steps, cfg.bootstrap_t, cfg.seed, progress=progress)
    else:
        corpus, tags = tokenizer_corpus(cfg.bootstrap_t), ()
        bootstrap = lambda model, protocol: supervised_bootstrap(  # noqa: E731
            model, protocol, cfg.env, cfg.bootstrap_steps, cfg.bootstrap_t, cfg.seed, progress=progress)
    tokenizer = build_tokenizer(corpus, tags=tags)
    model = build_tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).to(device)
    bootstrap(model, ChatProtocol(tokenizer))
    tmp = cache.with_name(cache.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(cache, ignore_errors=True)
    tmp.rename(cache)
    return load_pretrained(str(cache), device)


WARM_START_VERSION = 3  # bump when the warm start's data or settings change
WARM_START_LR = 2e-4  # AdamW peak learning rate, full fine-tuning
WARM_START_RAMP = 2  # steps of linear ramp to the peak rate, then linear decay (the tiny bootstrap: 20)
WARM_START_KEY_ROOMS = 64  # key-room decisions per step, as the tiny bootstrap: the sign rule is learnt from them
WARM_START_CRITIC = 4  # critic demonstrations per step (the tiny bootstrap: 12)


def set_activation_checkpointing(model: Any, on: bool) -> None:
    """--activation-checkpointing: each layer's activations recomputed in the backward pass, not kept.
    Non-reentrant, so that frozen embeddings' outputs need no requires_grad; transformers 5 names
    it activation_checkpointing_enable, 4.x gradient_checkpointing_enable."""
    if not on:
        disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
        disable()
    elif hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def warm_start_seed(cfg: TempoConfig) -> int:
    """The seed of the warm start: --warm-start-seed, else --seed."""
    return cfg.seed if cfg.warm_start_seed < 0 else cfg.warm_start_seed


def warm_start_cache_dir(cfg: TempoConfig) -> Path:
    root = Path(cfg.cache_dir or os.environ.get("TEMPO_CACHE", Path.home() / ".cache" / "tempo_plugin"))
    source = cfg.model if "/" not in cfg.model and not Path(cfg.model).exists() else str(Path(cfg.model).resolve())
    what = {"v": WARM_START_VERSION, "model": source, "env": cfg.env, "T": cfg.max_episode_steps,
            "env_data": str(Path(cfg.env_data).resolve()) if cfg.env_data else "", "steps": cfg.warm_start_steps,
            "seed": warm_start_seed(cfg)}
    if cfg.env not in BUILT_IN:  # its demonstrations come from the training split only (TINY_ENV_VERSION 2)
        what["env_version"] = TINY_ENV_VERSION
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]
    return root / f"warm-{Path(source).name}-{digest}"


def load_warm_started(cfg: TempoConfig, device: torch.device,
                      progress: Callable[[int, float], None] | None = None) -> tuple[Any, Any]:
    """``--model`` after ``--warm-start-steps`` supervised steps on the environment's noisy expert
    demonstrations (the tiny model's bootstrap data at a smaller batch), built once and cached.
    The token embeddings stay fixed: the demonstrations use a handful of tokens, and Adam would
    move the rest of a pretrained vocabulary for nothing."""
    from tempo_plugin.tiny.bootstrap import supervised_bootstrap
    from tempo_plugin.tiny.env_bootstrap import env_bootstrap
    from tempo_plugin.envs import env_factory
    from tempo_plugin.rollout.protocol import ChatProtocol

    if not cfg.multi_turn:
        raise ConfigError("--warm-start-steps plays an environment's demonstrations: drop it for a single-turn --task")
    cache = warm_start_cache_dir(cfg)
    if (cache / "config.json").is_file():
        return load_pretrained(str(cache), device)
    model, tokenizer = load_pretrained(cfg.model, device, cfg.cache_dir)
    protocol = ChatProtocol(tokenizer)
    seed = warm_start_seed(cfg)
    torch.manual_seed(seed)
    embeddings = [m.weight for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None]
    for weight in embeddings:
        weight.requires_grad_(False)
    if cfg.activation_checkpointing:  # the memory settings of the run hold for its warm start too
        set_activation_checkpointing(model, True)
    if cfg.env in BUILT_IN:
        supervised_bootstrap(model, protocol, cfg.env, cfg.warm_start_steps, cfg.max_episode_steps, seed,
                             learning_rate=WARM_START_LR, key_rooms_per_step=WARM_START_KEY_ROOMS,
                             critic_per_step=WARM_START_CRITIC, progress=progress, ramp_steps=WARM_START_RAMP,
                             tokens_per_micro_batch=cfg.train_tokens_per_micro_batch)
    else:
        make_env = env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data)
        env_bootstrap(model, protocol, make_env, cfg.warm_start_steps, cfg.max_episode_steps, seed,
                      learning_rate=WARM_START_LR, progress=progress, ramp_steps=WARM_START_RAMP)
    for weight in embeddings:
        weight.requires_grad_(True)
    if cfg.activation_checkpointing:
        set_activation_checkpointing(model, False)
    tmp = cache.with_name(cache.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps({"model": cfg.model, "env": cfg.env, "steps": cfg.warm_start_steps,
                                                      "seed": seed, "version": WARM_START_VERSION}))
    shutil.rmtree(cache, ignore_errors=True)
    tmp.rename(cache)
    return load_pretrained(str(cache), device)


def load_policy(cfg: TempoConfig, device: torch.device, progress: Callable[[int, float], None] | None = None):
    if cfg.model and cfg.warm_start_steps > 0:
        return load_warm_started(cfg, device, progress)
    if cfg.model:
        return load_pretrained(cfg.model, device, cfg.cache_dir)
    return build_bootstrapped_tiny(cfg, device, progress)


def sampling_copy(model: Any, dtype: str) -> Any:
    """The model the sampler runs: ``model`` itself for float32, else a frozen copy in ``dtype``
    (``--sampler-dtype``) that ``refresh_sampling_copy`` keeps equal to it."""
    if dtype == "float32":
        return model
    import copy

    mirror = copy.deepcopy(model).to(getattr(torch, dtype))
    mirror.eval()
    mirror.requires_grad_(False)
    return mirror


@torch.no_grad()
def refresh_sampling_copy(mirror: Any, model: Any) -> None:
    """Copy ``model``'s current weights into its sampling copy (cast to the copy's dtype); nothing
    when the sampler runs ``model`` itself."""
    if mirror is model:
        return
    for (name, target), (source_name, source) in zip(mirror.named_parameters(), model.named_parameters()):
        if name != source_name:
            raise RuntimeError(f"the sampling copy's parameter {name} does not match the policy's {source_name}")
        target.copy_(source)
