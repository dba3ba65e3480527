"""bench/credit.py reuses a finished run only if it was made with the same arguments and bootstrap."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_credit", ROOT / "bench" / "credit.py")
credit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(credit)


def finished_run(folder: Path, key: dict | None) -> Path:
    folder.mkdir()
    (folder / "summary.json").write_text("{}")
    if key is not None:
        credit.record_key(folder, key)
    return folder


def test_a_recorded_key_reads_back_equal_whatever_sequence_held_the_arguments(tmp_path):
    # JSON turns tuples into lists: a key built from a tuple must still match what was recorded
    arguments = ("-m", "tempo_plugin.train", "--seed", "1")
    folder = finished_run(tmp_path / "run", credit.run_key(arguments, tiny_version=12))
    assert json.loads((folder / credit.RUN_KEY_FILE).read_text()) == {"trainer_args": list(arguments), "tiny_version": 12}
    assert credit.reusable(folder, credit.run_key(arguments, tiny_version=12))


def test_a_finished_run_is_reused_only_with_the_same_key(tmp_path):
    key = credit.run_key(["--seed", "0", "--max-env-steps", "5000"], tiny_version=12)
    assert credit.reusable(finished_run(tmp_path / "same", key), key)
    older_bootstrap = credit.run_key(["--seed", "0", "--max-env-steps", "5000"], tiny_version=11)
    assert not credit.reusable(finished_run(tmp_path / "old-bootstrap", older_bootstrap), key)
    other_budget = credit.run_key(["--seed", "0", "--max-env-steps", "4000"], tiny_version=12)
    assert not credit.reusable(finished_run(tmp_path / "other-args", other_budget), key)
    assert not credit.reusable(finished_run(tmp_path / "no-key", None), key)  # made before keys were recorded


def test_an_unfinished_run_is_not_reused(tmp_path):
    key = credit.run_key(["--seed", "2"], tiny_version=12)
    folder = tmp_path / "interrupted"
    credit.record_key(folder, key)  # written before the run starts; no summary.json yet
    assert not credit.reusable(folder, key)
