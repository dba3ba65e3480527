"""Whether a saved checkpoint reads back whole, checked before ``--resume`` loads anything from it.

A torn copy or a full disk leaves files cut short or garbled; loading them gives a raw traceback
from deep inside safetensors or torch, or worse, loads. Each check reads what the format itself
records about its own length and contents, so it needs no second copy:

- ``*.safetensors``: an 8-byte little-endian header length, a JSON header whose ``data_offsets``
  say where each tensor's bytes end; the file is exactly 8 + header + the largest end offset long.
- ``*.pt`` (``torch.save``): a zip archive; its central directory sits at the end (a cut file has
  none) and each member carries a CRC-32, which ``testzip`` checks against the bytes.
- ``*.json``: parses.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

REQUIRED = ("progress.json", "rng.json", "store.json", "optimizer.pt")
"""Files every embedded checkpoint holds besides its weights (``run_folder.save_checkpoint``)."""


def safetensors_damage(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"cut short: {size} bytes, no header"
        (header_len,) = struct.unpack("<Q", head)
        if 8 + header_len > size:
            return f"cut short: {size} bytes, its header alone says {8 + header_len}"
        try:
            header = json.loads(handle.read(header_len))
        except (ValueError, UnicodeDecodeError):
            return "its header is not valid JSON"
    try:
        end = max((int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"), default=0)
    except (TypeError, KeyError, IndexError, ValueError, AttributeError):
        return "its header lists no tensor offsets"
    expected = 8 + header_len + end
    if size < expected:
        return f"cut short: {size} of {expected} bytes"
    if size > expected:
        return f"{size - expected} bytes longer than its header says"
    return ""


def torch_archive_damage(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError):
        return "cut short or not a torch.save archive: its zip directory is unreadable"
    return f"checksum mismatch in {bad}" if bad else ""


def json_damage(path: Path) -> str:
    try:
        json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        return f"not valid JSON ({str(error).splitlines()[0]})"
    return ""


CHECKS = {".safetensors": safetensors_damage, ".pt": torch_archive_damage, ".json": json_damage}


def file_damage(path: Path) -> str:
    """What is wrong with one checkpoint file ('' when it reads back whole or has no check)."""
    check = CHECKS.get(path.suffix)
    try:
        return check(path) if check else ""
    except OSError as error:
        return f"unreadable ({error.strerror})"


def checkpoint_damage(directory: Path) -> list[str]:
    """Every problem of the checkpoint folder ``directory``, each naming its file; [] when whole."""
    problems = [f"{directory / name} is missing" for name in REQUIRED if not (directory / name).is_file()]
    if not any(directory.glob("*.safetensors")):
        problems.append(f"{directory} holds no weights (*.safetensors)")
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):  # a separate critic's folder too
        damage = file_damage(path)
        if damage:
            problems.append(f"{path} is damaged ({damage})")
    return problems
