"""One writer per folder: a second trainer, evaluation, analysis or slime data source writing where a
live process writes stops at once with one line naming it; a killed holder leaves nothing that blocks."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tempo_plugin.config import ConfigError
from tempo_plugin.run_lock import acquire, release, run_folder_lock, writer_lock

# Takes the lock file argv[1] for "training", says so, and holds it until stdin closes or it is killed.
HOLDER = r"""
import sys
from pathlib import Path
from tempo_plugin.run_lock import acquire
acquire(Path(sys.argv[1]), "training")
print("held", flush=True)
sys.stdin.read()
"""


class Holder:
    """A live process of ours holding a lock file."""

    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "held"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture
def holder(tmp_path):
    holders: list[Holder] = []

    def hold(path: Path) -> Holder:
        holders.append(Holder(path))
        return holders[-1]

    yield hold
    for h in holders:
        if h.process.poll() is None:
            h.kill()


def can_take_elsewhere(path: Path) -> bool:
    """Whether another process can take the lock file now."""
    code = f"from pathlib import Path; from tempo_plugin.run_lock import acquire; acquire(Path({str(path)!r}), 'probe')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0


def refused_line(error: str, pid: int) -> None:
    line = error.strip()
    assert line.count("\n") == 0, line
    assert f"in use by pid {pid} on " in line and "(training" in line and "one writer per folder" in line, line


def test_a_second_writer_is_refused_naming_the_live_process_and_a_killed_one_blocks_nothing(tmp_path, holder):
    lock = run_folder_lock(tmp_path / "run")
    assert lock == tmp_path / "run" / ".lock"
    first = holder(lock)
    with pytest.raises(ConfigError) as error:
        acquire(lock, "training")
    refused_line(str(error.value), first.process.pid)
    assert str(tmp_path / "run") in str(error.value)
    first.kill()  # kill -9: no cleanup ran, the lock file is still there
    assert lock.is_file()
    with writer_lock(lock, "training"):
        assert not can_take_elsewhere(lock)
    assert can_take_elsewhere(lock)


def test_the_lock_is_re_entrant_within_a_process(tmp_path):
    lock = run_folder_lock(tmp_path)
    acquire(lock, "training")
    acquire(lock, "evaluation into the run's own folder")
    release(lock)
    assert not can_take_elsewhere(lock)  # one acquire is still held
    release(lock)
    assert can_take_elsewhere(lock)
    release(lock)  # releasing what is not held does nothing


def test_a_lock_file_that_cannot_be_created_is_one_line_naming_the_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError) as error:
        acquire(run_folder_lock(blocker / "run"), "training")
    assert str(error.value).count("\n") == 0 and str(blocker / "run") in str(error.value)


def test_resume_of_a_run_still_training_is_refused_before_any_work(tmp_path, holder, capsys):
    from tempo_plugin.train import main

    out = tmp_path / "run"
    first = holder(run_folder_lock(out))
    assert main(["--resume", "--out", str(out)]) == 2
    refused_line(capsys.readouterr().err.removeprefix("error: "), first.process.pid)
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written besides the holder's lock


def test_resume_of_a_missing_folder_creates_nothing(tmp_path, capsys):
    from tempo_plugin.train import main

    assert main(["--resume", "--out", str(tmp_path / "missing")]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


def test_analysis_into_a_folder_being_written_is_refused(tmp_path, holder, capsys):
    from analysis.mc_critic.cli import main

    out = tmp_path / "mc"
    first = holder(run_folder_lock(out))
    assert main([str(tmp_path / "run"), "--out", str(out)]) == 2
    refused_line(capsys.readouterr().err.removeprefix("error: "), first.process.pid)


def test_evaluation_into_a_results_file_being_written_is_refused(tmp_path, holder, capsys, tokenizer_dir):
    from eval.cli import main

    out = tmp_path / "eval"
    first = holder(out / ".results.json.lock")
    assert main(["--server", "http://127.0.0.1:9", "--tokenizer", str(tokenizer_dir), "--out", str(out)]) == 2
    refused_line(capsys.readouterr().err.removeprefix("eval: error: "), first.process.pid)
    assert not (out / "results.json").exists()


def test_a_second_slime_data_source_on_one_save_dir_is_refused(tmp_path, holder):
    from tempo_plugin.slime.data_source import TempoDataSource

    save = tmp_path / "save"
    first = holder(run_folder_lock(save / "tempo"))
    config = tmp_path / "tempo.yaml"
    config.write_text(yaml.safe_dump({"warmup_updates": 1}))
    args = SimpleNamespace(custom_config_path=str(config), rollout_batch_size=2, n_samples_per_prompt=2,
                           rollout_temperature=1.0, rollout_top_p=1.0, seed=0, num_rollout=3, global_batch_size=None,
                           rollout_function_path="tempo_plugin.slime.rollout.generate_rollout", eval_interval=None,
                           save=str(save))
    with pytest.raises(ConfigError) as error:
        TempoDataSource(args)
    refused_line(str(error.value), first.process.pid)
