"""bench/credit.py reuses a finished run only if it was made with the same settings and bootstrap."""

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
    arguments = ("--seed", "1", "--out", "runs/x")
    folder = finished_run(tmp_path / "run", credit.run_key(arguments, tiny_version=12))
    recorded = json.loads((folder / credit.RUN_KEY_FILE).read_text())
    assert recorded["tiny_version"] == 12 and recorded["settings"]["seed"] == 1
    assert credit.reusable(folder, credit.run_key(list(arguments), tiny_version=12))


def test_the_key_holds_the_resolved_settings_so_a_changed_default_reruns(tmp_path):
    from tempo_plugin.config import TempoConfig

    default = TempoConfig().invalid_action_penalty
    implicit = credit.run_key(["--seed", "0"], tiny_version=12)
    assert implicit == credit.run_key(["--seed", "0", "--invalid-action-penalty", str(default)], tiny_version=12)
    # a run made when the default was another value is not reused
    made_before = credit.run_key(["--seed", "0", "--invalid-action-penalty", str(default + 0.05)], tiny_version=12)
    assert not credit.reusable(finished_run(tmp_path / "old-default", made_before), implicit)


def test_a_finished_run_is_reused_only_with_the_same_key(tmp_path):
    key = credit.run_key(["--seed", "0", "--max-env-steps", "5000"], tiny_version=12)
    assert credit.reusable(finished_run(tmp_path / "same", key), key)
    older_bootstrap = credit.run_key(["--seed", "0", "--max-env-steps", "5000"], tiny_version=11)
    assert not credit.reusable(finished_run(tmp_path / "old-bootstrap", older_bootstrap), key)
    other_budget = credit.run_key(["--seed", "0", "--max-env-steps", "4000"], tiny_version=12)
    assert not credit.reusable(finished_run(tmp_path / "other-args", other_budget), key)
    assert not credit.reusable(finished_run(tmp_path / "no-key", None), key)  # made before keys were recorded
    trainer_args_only = {"trainer_args": ["--seed", "0", "--max-env-steps", "5000"], "tiny_version": 12}
    assert not credit.reusable(finished_run(tmp_path / "old-key", trainer_args_only), key)  # the previous key format


def test_an_unfinished_run_is_not_reused(tmp_path):
    key = credit.run_key(["--seed", "2"], tiny_version=12)
    folder = tmp_path / "interrupted"
    credit.record_key(folder, key)  # written before the run starts; no summary.json yet
    assert not credit.reusable(folder, key)


def test_a_setting_added_after_a_run_matches_only_at_its_default(tmp_path):
    key = credit.run_key(["--seed", "0"], tiny_version=12)
    older = json.loads(json.dumps(key))
    del older["settings"]["score_centering"]  # as a run recorded before the setting existed
    assert credit.reusable(finished_run(tmp_path / "older", older), key)
    centred = credit.run_key(["--seed", "0", "--score-centering", "8"], tiny_version=12)
    assert not credit.reusable(tmp_path / "older", centred)  # the older run ran without it


def test_an_interrupted_run_with_a_checkpoint_is_resumed_not_restarted(tmp_path):
    key = credit.run_key(["--seed", "3"], tiny_version=12)
    folder = tmp_path / "interrupted"
    credit.record_key(folder, key)
    assert not credit.resumable(folder, key)  # no checkpoint yet: start again
    (folder / "checkpoints" / "latest").mkdir(parents=True)
    (folder / "checkpoints" / "latest" / "progress.json").write_text("{}")
    assert credit.resumable(folder, key)
    assert not credit.resumable(folder, credit.run_key(["--seed", "4"], tiny_version=12))
    (folder / "summary.json").write_text("{}")
    assert not credit.resumable(folder, key) and credit.reusable(folder, key)  # finished: read, not resumed


def test_a_finished_run_of_another_study_is_copied_once_without_its_checkpoints(tmp_path):
    arguments = ["--seed", "5"]
    source = finished_run(tmp_path / "study-run", credit.run_key(arguments))
    (source / "metrics.jsonl").write_text('{"phase": "eval"}\n')
    (source / "checkpoints").mkdir()
    out = tmp_path / "new" / "run"
    assert credit.reuse_from(source, out, arguments)
    assert (out / "metrics.jsonl").read_text() == '{"phase": "eval"}\n' and not (out / "checkpoints").exists()
    assert credit.reusable(out, credit.run_key(arguments))
    assert not credit.reuse_from(source, out, arguments)  # there already: nothing copied
    assert not credit.reuse_from(source, tmp_path / "other", ["--seed", "6"])  # other settings: nothing to copy
