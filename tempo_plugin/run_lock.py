"""One writer per run folder: a lock file that dies with the process holding it.

``flock`` on ``<folder>/.lock``: the kernel drops the lock when its holder exits, however it exits
(a crash, SIGKILL, an out-of-memory kill), so a stale lock from a killed run never blocks
``--resume``. The holder writes its pid, host, command and start time into the file, so a second
writer stops at once with one line naming the live process. Within one process the lock is
re-entrant (a run that evaluates into its own folder, tests that resume in-process).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tempo_plugin.config import ConfigError

LOCK_NAME = ".lock"

_held: dict[str, tuple[int, int]] = {}
"""Lock files this process holds: resolved path -> (file descriptor, times taken). The kernel's
flock state is per process too, so this mirrors it rather than adding state of our own."""


def holder_info(path: Path) -> str:
    """Who holds the lock file ``path``, as its holder wrote it ('' when unreadable)."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return ""
    return (f"pid {info.get('pid')} on {info.get('host')} ({info.get('what')}: {info.get('command')}, "
            f"since {info.get('started')})") if info else ""


def acquire(path: Path, what: str) -> None:
    """Take the lock file ``path`` (its folder is created) for ``what`` writes there, or raise
    ConfigError naming the process that holds it."""
    key = str(path.resolve())
    if key in _held:
        fd, count = _held[key]
        _held[key] = (fd, count + 1)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise ConfigError(f"{path.parent}: cannot create its lock file {path.name} ({error.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = holder_info(path) or "another process"
        raise ConfigError(f"{path.parent} is in use by {holder}: one writer per folder; wait for it to end "
                          f"or stop it, then run again ({path} is released when its process exits)") from None
    info = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300],
            "what": what, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    _held[key] = (fd, 1)


def release(path: Path) -> None:
    """Give back one ``acquire`` of ``path``; the lock goes when the last one is given back."""
    key = str(path.resolve())
    if key not in _held:
        return
    fd, count = _held[key]
    if count > 1:
        _held[key] = (fd, count - 1)
        return
    del _held[key]
    os.close(fd)  # closing the only descriptor drops the flock; the file stays (removing it would race)


@contextmanager
def writer_lock(path: Path, what: str) -> Iterator[None]:
    """Hold the lock file ``path`` while the block runs."""
    acquire(path, what)
    try:
        yield
    finally:
        release(path)


def run_folder_lock(folder: str | Path) -> Path:
    """The lock file of a run folder."""
    return Path(folder) / LOCK_NAME
