"""Shared fixtures, and where slime's source comes from.

``TEMPO_SLIME_SRC`` names a folder holding slime's source (its ``slime`` package, e.g. a checkout at
the pinned commit). When it is set, the folder goes first on ``sys.path`` and ``PYTHONPATH`` (for the
tests that run slime in a subprocess), and a slime-facing test (``tests/test_slime_*.py``) that
skips counts as a failure: CI sets it, so nothing of the slime glue goes untested there. Without it
the slime-facing tests use slime when it is importable and skip, with the reason, when not.
"""

import os
import sys
from pathlib import Path

import pytest
import torch

# The tools beside the package (eval/, analysis/) are imported as packages from the repository root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SLIME_SRC = os.environ.get("TEMPO_SLIME_SRC", "")
if SLIME_SRC:
    if not (Path(SLIME_SRC) / "slime" / "__init__.py").is_file():
        raise pytest.UsageError(f"TEMPO_SLIME_SRC={SLIME_SRC} holds no slime package (slime/__init__.py)")
    sys.path.insert(0, SLIME_SRC)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SLIME_SRC, os.environ.get("PYTHONPATH", "")) if p)


def _slime_facing(path: str) -> bool:
    return Path(str(path)).name.startswith("test_slime_")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if SLIME_SRC and report.skipped and _slime_facing(item.fspath) and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"slime-facing test skipped although TEMPO_SLIME_SRC is set: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if SLIME_SRC and report.skipped and _slime_facing(getattr(collector, "fspath", "")):
        report.outcome = "failed"
        report.longrepr = f"slime-facing test module skipped although TEMPO_SLIME_SRC is set: {report.longrepr}"


def pytest_terminal_summary(terminalreporter):
    """One line: what was skipped for want of an extra or slime's source, and the command that runs it."""
    from tests.extras import FULL_COMMAND, summary_key

    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        key = summary_key(reason)
        if key:
            counts[key] = counts.get(key, 0) + 1
    if counts:
        listed = ", ".join(f"{key} {n}" for key, n in sorted(counts.items()))
        terminalreporter.write_line(
            f"skipped for want of an optional install ({listed}); to run them: {FULL_COMMAND}")


@pytest.fixture()
def one_thread():
    """One torch thread: the tiny model gains nothing from more, and loses a lot when the cores are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny tokenizer, trained on texts of 30 vault games (T = 40)."""
    from tempo_plugin.tiny.bootstrap import tokenizer_corpus
    from tempo_plugin.tiny.model import build_tokenizer

    return build_tokenizer(tokenizer_corpus(40, games=30))


@pytest.fixture(scope="session")
def protocol(tokenizer):
    from tempo_plugin.rollout.protocol import ChatProtocol

    return ChatProtocol(tokenizer)


@pytest.fixture()
def tiny_model(tokenizer):
    from tempo_plugin.tiny.model import build_tiny_model

    torch.manual_seed(0)
    model = build_tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model.eval()
    return model


@pytest.fixture(scope="session")
def tokenizer_dir(tokenizer, tmp_path_factory):
    """The tiny tokenizer saved as a Hugging Face directory (what slime's --hf-checkpoint points to)."""
    path = tmp_path_factory.mktemp("hf_checkpoint")
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture()
def serve(tokenizer):
    """serve(sampler) -> base URL of an SGLang-compatible /generate server on loopback."""
    import threading

    from tempo_plugin.embedded.serve import make_server

    servers = []

    def start(sampler):
        server = make_server(sampler, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def slime_types(monkeypatch):
    """slime's Sample and rollout output classes when slime is importable, else stand-ins with the
    same fields, patched into the rollout hooks."""
    import enum
    from dataclasses import dataclass, field
    from types import SimpleNamespace

    from tempo_plugin.slime import rollout

    try:
        types = rollout.slime_types()
    except ImportError:

        @dataclass
        class Sample:
            class Status(enum.Enum):
                PENDING = "pending"
                COMPLETED = "completed"
                TRUNCATED = "truncated"
                ABORTED = "aborted"
                FAILED = "failed"

            group_index: int | None = None
            index: int | None = None
            rollout_id: int | None = None
            prompt: str = ""
            tokens: list = field(default_factory=list)
            response: str = ""
            response_length: int = 0
            reward: float | None = None
            loss_mask: list | None = None
            rollout_log_probs: list | None = None
            remove_sample: bool = False
            status: Status = Status.PENDING
            metadata: dict = field(default_factory=dict)

        @dataclass
        class TrainOutput:
            samples: list
            metrics: dict | None = None

        @dataclass
        class EvalOutput:
            data: dict
            metrics: dict | None = None

        types = SimpleNamespace(Sample=Sample, TrainOutput=TrainOutput, EvalOutput=EvalOutput)
        monkeypatch.setattr(rollout, "slime_types", lambda: types)
    return types
