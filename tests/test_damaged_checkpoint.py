"""A damaged checkpoint is named in one line and never loaded: --resume takes the previous whole
checkpoint and says so, or stops when there is none; nothing the run wrote is deleted or shortened."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from tempo_plugin.embedded.checkpoint_integrity import checkpoint_damage, file_damage
from tempo_plugin.metrics import read_metrics
from tempo_plugin.train import main
from tests.test_train_smoke import SMALL


def cut(path: Path, drop: int) -> int:
    """Shorten ``path`` by ``drop`` bytes (a torn copy); returns its new size."""
    data = path.read_bytes()[:-drop]
    path.write_bytes(data)
    return len(data)


def test_a_safetensors_file_is_checked_against_its_own_header(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(4, 4), "b": torch.zeros(4)}, str(path))
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    whole = 8 + header_len + (16 + 4) * 4  # 20 float32 values after the header
    assert path.stat().st_size == whole and file_damage(path) == ""
    cut(path, 10)
    assert file_damage(path) == f"cut short: {whole - 10} of {whole} bytes"
    path.write_bytes(path.read_bytes() + b"\0" * 13)
    assert file_damage(path) == "3 bytes longer than its header says"
    path.write_bytes(path.read_bytes()[:20])
    assert file_damage(path) == f"cut short: 20 bytes, its header alone says {8 + header_len}"
    path.write_bytes(b"1234")
    assert file_damage(path) == "cut short: 4 bytes, no header"


def test_an_optimizer_file_is_checked_by_its_archive_checksums(tmp_path):
    path = tmp_path / "optimizer.pt"
    values = torch.arange(256, dtype=torch.float32)
    torch.save({"state": values}, path)
    assert file_damage(path) == ""
    data = bytearray(path.read_bytes())
    data[data.find(values.numpy().tobytes()) + 500] ^= 0xFF  # one flipped byte inside the tensor's data
    path.write_bytes(bytes(data))
    member = next(n for n in zipfile.ZipFile(path).namelist() if "/data/" in n)
    assert file_damage(path) == f"checksum mismatch in {member}"
    torch.save({"state": values}, path)
    cut(path, 100)
    assert file_damage(path) == "cut short or not a torch.save archive: its zip directory is unreadable"


def test_json_files_must_parse_and_a_checkpoint_lists_what_it_lacks(tmp_path):
    (tmp_path / "progress.json").write_text('{"next_update": 3')
    assert file_damage(tmp_path / "progress.json").startswith("not valid JSON (")
    assert checkpoint_damage(tmp_path) == [
        f"{tmp_path / 'rng.json'} is missing", f"{tmp_path / 'store.json'} is missing",
        f"{tmp_path / 'optimizer.pt'} is missing", f"{tmp_path} holds no weights (*.safetensors)",
        f"{tmp_path / 'progress.json'} is damaged ({file_damage(tmp_path / 'progress.json')})",
    ]


def sizes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_resume_skips_a_torn_checkpoint_for_the_previous_one_and_stops_when_none_is_whole(tmp_path, capsys):
    out = tmp_path / "run"
    common = SMALL + ["--fresh-share", "0", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert main(common + ["--td-updates", "2"]) == 0  # checkpoints after updates 0, 1, 2
    checkpoints = out / "checkpoints"
    latest, prev = checkpoints / "latest", checkpoints / "latest.prev"
    assert [json.loads((c / "progress.json").read_text())["next_update"] for c in (latest, prev)] == [3, 2]
    weights = latest / "model.safetensors"
    torn = cut(weights, 1000)  # a copy that stopped 1000 bytes short
    capsys.readouterr()

    assert main(common + ["--td-updates", "3", "--resume"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: --resume")]
    assert warnings == [f"warning: --resume: {weights} is damaged (cut short: {torn} of {torn + 1000} bytes); the run's "
                        "other files are intact; resuming from the earlier checkpoint latest.prev (update 2) instead; "
                        f"the damaged one is kept as {checkpoints / 'latest.damaged'}"]
    assert (checkpoints / "latest.damaged" / "model.safetensors").stat().st_size == torn  # kept as it was
    assert [r["update"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] in ("warmup", "td")] == [0, 1, 2, 3]
    assert json.loads((latest / "progress.json").read_text())["next_update"] == 4
    assert checkpoint_damage(latest) == [] and checkpoint_damage(prev) == []

    # both whole checkpoints torn: nothing to fall back on, so the run stops and changes nothing
    cut(latest / "optimizer.pt", 50)
    cut(prev / "model.safetensors", 1000)
    before = sizes(out)
    assert main(common + ["--td-updates", "4", "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(f"error: --resume: {latest / 'optimizer.pt'} is damaged (cut short or not a torch.save archive")
    assert "no earlier checkpoint is whole (latest, latest.prev checked)" in err
    assert sizes(out) == before
