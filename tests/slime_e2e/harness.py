"""Processes of the slime end-to-end test: a Ray head on loopback, our SGLang-compatible server,
and slime's train.py (or a driver) run against them. Used by tests/test_slime_e2e.py.

Every process is started as the leader of a new session (``start_new_session``), and the session
ids are recorded; ``Session.stop_all`` kills exactly the processes in those sessions. Ray's helpers
(GCS, raylet, agents, workers) are descendants of ``ray start`` and stay in its session even after
``ray start`` itself has exited, so they are stopped too, while no other Ray cluster on the machine
is touched (``ray stop`` would stop them all). (An environment marker does not work: Ray's
processes rename themselves with setproctitle, which overwrites /proc/PID/environ.)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
STUBS = HERE / "stubs"
REPO = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"<{path} does not exist>"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def session_of(pid: int) -> int | None:
    """The session id of ``pid`` (field 6 of /proc/PID/stat), None if it is gone or a zombie
    (dead, waiting to be reaped by its parent: nothing left to stop)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]  # the fields after "(comm)"
    return None if state in ("Z", "X") else int(session)


def pids_in_sessions(sessions: set[int]) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and int(p.name) != os.getpid() and session_of(int(p.name)) in sessions]


def stop_sessions(sessions: set[int], timeout_s: float = 3.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``timeout_s``, every process of ``sessions``; the pids left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids_in_sessions(sessions):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while pids_in_sessions(sessions) and time.monotonic() < deadline:
            time.sleep(0.2)
    return pids_in_sessions(sessions)


def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.2):
    """Poll ``condition()`` until it returns something truthy; TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"{what}: not within {timeout_s:g} s")


@dataclass
class Session:
    """The environment every process of one test session is started with."""

    slime_src: str
    root: Path  # short folder for Ray's sockets (unix socket paths are limited to ~107 bytes)
    sessions: set[int] = field(default_factory=set)  # session ids of every process started

    @classmethod
    def create(cls, slime_src: str) -> "Session":
        return cls(slime_src, Path(tempfile.mkdtemp(prefix="tempo-e2e-", dir="/tmp")))

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        # stubs first (sitecustomize, sglang, megatron.training, torch_memory_saver), then this
        # repository (tempo_plugin, the test's rollout wrappers) and slime's source
        path = [str(STUBS), str(REPO), str(HERE), self.slime_src]
        env["PYTHONPATH"] = os.pathsep.join(path + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.update({
            "SLIME_ACCELERATOR": "cpu",  # selects stubs/cpu_accelerator.py (registered by stubs/sitecustomize.py)
            "RAY_USAGE_STATS_ENABLED": "0",
            # Ray replaces --node-ip-address 127.0.0.1 by the machine's routable address unless its
            # "no cluster" mode is on, in which it keeps every node address on the loopback
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # the address slime gives what it starts itself (the SGLang router), instead of the
            # machine's routable address; Ray's workers inherit it from `ray start`
            "SLIME_HOST_IP": "127.0.0.1",
            "RAY_DEDUP_LOGS": "0",
            "WANDB_MODE": "disabled",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",  # two cores shared by the server, Ray and the driver
            "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
        })
        env.pop("RAY_ADDRESS", None)
        env.update(extra)
        return env

    def popen(self, command: list[str], log: Path, mode: str = "w", **extra_env: str) -> subprocess.Popen:
        """Start ``command`` as a new session leader, output to ``log``; its session is recorded."""
        with open(log, mode) as out:
            process = subprocess.Popen(command, env=self.env(**extra_env), stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True, cwd=self.root)
        self.sessions.add(process.pid)
        return process

    def stop_all(self) -> list[int]:
        """Stop every process started in this session (Ray, servers, drivers); the pids left."""
        return stop_sessions(self.sessions)


@dataclass
class RayHead:
    address: str  # GCS address, host:port, for RAY_ADDRESS
    log: Path


def start_ray(session: Session, log: Path) -> RayHead:
    """A Ray head on 127.0.0.1 declaring four GPUs (slime's placement groups ask for {"GPU": 1}
    per train.py even in rollout-only mode; the test has up to three runs going side by side);
    returns once ``ray start`` has finished."""
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "ray"), "start", "--head",
        "--node-ip-address", "127.0.0.1", "--port", str(port),
        "--dashboard-agent-listen-port", str(free_port()),
        "--include-dashboard", "false",
        "--num-gpus", "4", "--num-cpus", "32",  # logical CPUs: actors reserve CPU shares, not cores
        "--object-store-memory", str(256 * 1024 * 1024),
        "--temp-dir", str(session.root / "ray"),
        "--disable-usage-stats",
    ]
    process = session.popen(command, log)
    if process.wait(timeout=180) != 0:
        raise RuntimeError(f"ray start exited {process.returncode}:\n{tail(log)}")
    return RayHead(f"127.0.0.1:{port}", log)


def server_alive(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with opener.open(url + "/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def start_server(session: Session, model_dir: str, port: int, log: Path, timeout_s: float = 120.0,
                 wait: bool = True) -> subprocess.Popen:
    """``python -m tempo_plugin.embedded.serve`` on 127.0.0.1:port, in its own process group;
    returns once ``/health`` answers (at once without ``wait``)."""
    command = [sys.executable, "-m", "tempo_plugin.embedded.serve", "--model", model_dir,
               "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    process = session.popen(command, log, mode="a")
    if not wait:
        return process
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited {process.returncode} before answering:\n{tail(log)}")
        return server_alive(url)

    wait_for(up, timeout_s, f"server on {url}")
    return process


def kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal ``process``'s process group (it was started in its own session) and reap it."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def start_driver(session: Session, command: list[str], log: Path, ray: RayHead) -> subprocess.Popen:
    """Start ``command``, a Ray driver (train.py, a test driver) of the cluster ``ray``."""
    return session.popen(command, log, RAY_ADDRESS=ray.address)


def finish(process: subprocess.Popen, timeout_s: float) -> int:
    """Wait for ``process``; past ``timeout_s`` its process group is killed and -9 returned."""
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(process)
        return -9
