"""slime's own train.py, Ray RolloutManager and sample-to-train-data conversion, end to end on CPU,
with our hooks and our SGLang-compatible server (tempo_plugin.embedded.serve) as the engine.

Set-up (module fixture ``e2e``): a Ray head on 127.0.0.1 declaring four GPUs, and our server serving
a briefly bootstrapped tiny model (tests/slime_e2e/tiny_model.py, cached under $TEMPO_CACHE). The
stand-ins for slime's GPU-only imports (SGLang, Megatron-LM's training package, torch_memory_saver,
a CPU accelerator) are in tests/slime_e2e/stubs and reach slime's processes through PYTHONPATH.
Every process started here runs in its own session and is stopped by session id at the end
(tests/slime_e2e/harness.py); each run's output is in a log file under the test's tmp folder, and a
failing assertion shows its last 40 lines.

The runs (S = 2 start states or games, N = 2 branches, K = critic_samples of tests/slime_e2e/tempo.yaml):
  TEMPO           3 rollouts: 0 the warm-up (S*K samples), 1 and 2 TD updates (S*(N+K)); eval at rollout 0
  resume          TEMPO from --start-rollout-id 3 to 5 on the first run's save folder: loads its state store
  multi-turn GRPO 3 rollouts of S*N complete episodes, reward post-process as TEMPO's
  Temporal GRPO   3 rollouts of S*N episodes with per-token advantages
  train data      slime's RolloutManager with rollout-only off, compared field by field with the
                  embedded runtime's TrainSamples for the same rollout (tests/slime_e2e/train_data_driver.py)
  faults          two runs, each with its own server SIGKILLed during rollout 1: restarted on its port
                  (the run goes on), or not (the run stops, its last line naming the server); the
                  state files stay whole. They start with the TEMPO run and go on beside the others.
All but the fault runs go through the sglang-router slime launches (on 127.0.0.1), as in production;
the fault runs talk to their server directly (it stands in for the router).

Without TEMPO_SLIME_SRC it skips. With it, ray or sglang_router missing (the slime-test extra) skips the
module, which tests/conftest.py turns into a failure, as for every slime-facing test.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.extras import SLIME_REASON, import_extra
import yaml

SLIME_SRC = os.environ.get("TEMPO_SLIME_SRC", "")
if not SLIME_SRC:
    pytest.skip(SLIME_REASON, allow_module_level=True)
import_extra("slime-test", "ray")
import_extra("slime-test", "sglang_router")

E2E_DIR = Path(__file__).resolve().parent / "slime_e2e"
sys.path.insert(0, str(E2E_DIR))
import compare  # noqa: E402
import harness  # noqa: E402
import tiny_model  # noqa: E402

TRAIN_PY = Path(SLIME_SRC) / "train.py"
TEMPO_YAML = E2E_DIR / "tempo.yaml"
TEMPO_CFG = yaml.safe_load(TEMPO_YAML.read_text())
S, N, K = 2, 2, TEMPO_CFG["critic_samples"]
WARMUP = TEMPO_CFG["warmup_updates"]
GLOBAL_BATCH = 4  # samples per optimiser step: divides every rollout's count (S*K, S*(N+K), S*N), else slime drops some
EVAL_GAMES = TEMPO_CFG["eval_games"]
WARMUP_COUNT, TD_COUNT, EPISODE_COUNT = S * K, S * (N + K), S * N
assert WARMUP_COUNT % GLOBAL_BATCH == TD_COUNT % GLOBAL_BATCH == EPISODE_COUNT % GLOBAL_BATCH == 0

HOOKS = "tempo_plugin.slime"
ROLLOUT = {
    "tempo": f"{HOOKS}.rollout.generate_rollout",
    "grpo": f"{HOOKS}.rollout.generate_grpo_rollout",
    "temporal_grpo": f"{HOOKS}.rollout.generate_temporal_grpo_rollout",
}
PLUGIN_FLAGS = {  # as scripts/qwen3-4B/{tempo,grpo,temporal_grpo}.sh pass them
    "tempo": ["--custom-reward-post-process-path", f"{HOOKS}.reward.post_process"],
    "grpo": ["--custom-reward-post-process-path", f"{HOOKS}.reward.post_process"],
    "temporal_grpo": ["--custom-reward-post-process-path", f"{HOOKS}.temporal_grpo.post_process",
                      "--custom-advantage-function-path", f"{HOOKS}.temporal_grpo.advantages"],
}


@dataclass
class E2E:
    session: harness.Session
    ray: harness.RayHead
    model: str
    port: int  # the shared server's
    logs: Path


@dataclass
class Run:
    name: str
    returncode: int
    log: Path
    seconds: float
    save: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def why(self) -> str:
        return f"{self.name} (exit {self.returncode}, {self.seconds:.0f} s), last lines of {self.log}:\n{harness.tail(self.log)}"


@contextlib.contextmanager
def explained(run: Run):
    """A failing assertion inside also shows the run's exit code and the last 40 lines of its log."""
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n{run.why()}") from None


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    logs = tmp_path_factory.mktemp("slime_e2e")
    tic = time.monotonic()
    model = str(tiny_model.ensure_model())
    print(f"\n[slime e2e] model {model} ready after {time.monotonic() - tic:.0f} s", flush=True)
    session = harness.Session.create(SLIME_SRC)
    try:
        ray = harness.start_ray(session, logs / "ray.log")
        port = harness.free_port()
        harness.start_server(session, model, port, logs / "server.log")
        yield E2E(session, ray, model, port, logs)
    finally:
        left = session.stop_all()
        shutil.rmtree(session.root, ignore_errors=True)
        assert not left, f"processes of the test still running after SIGKILL: {left}"


def slime_flags(e2e: E2E, method: str, save: Path, *, port: int | None = None, num_rollout: int = 3,
                evaluate: bool = True, router: bool = True) -> list[str]:
    """train.py's flags for a rollout-only run of ``method`` against our server on ``port``.

    ``router``: slime launches the real sglang-router on 127.0.0.1 (SLIME_HOST_IP) and registers our
    server with it as its one worker, as in production; the rollouts' requests go through it.
    Otherwise our server stands in for the router (slime launches none, registers the engine with
    our server's POST /workers, and the rollouts talk to the server directly)."""
    port = port or e2e.port
    flags = [
        "--debug-rollout-only",
        "--rollout-external-engine-addrs", f"127.0.0.1:{port}",
        *(["--sglang-router-port", str(harness.free_port()), "--router-prometheus-host", "127.0.0.1"] if router
          else ["--sglang-router-ip", "127.0.0.1", "--sglang-router-port", str(port)]),
        "--hf-checkpoint", e2e.model,
        "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "1", "--num-gpus-per-node", "1",
        "--advantage-estimator", "grpo",
        "--rollout-function-path", ROLLOUT[method], *PLUGIN_FLAGS[method],
        "--data-source-path", f"{HOOKS}.data_source.TempoDataSource",
        "--custom-config-path", str(TEMPO_YAML),
        "--num-rollout", str(num_rollout), "--rollout-batch-size", str(S), "--n-samples-per-prompt", str(N),
        "--rollout-temperature", "1.0", "--global-batch-size", str(GLOBAL_BATCH), "--seed", "0",
        "--save", str(save), "--load", str(save), "--save-interval", "1",
        "--save-debug-rollout-data", str(save / "debug" / "rollout_{rollout_id}.pt"),
    ]
    if evaluate:
        # eval before rollout 0 only (the next would be after rollout 99); slime wants a named eval
        # dataset, which the tempo_plugin rollout functions never read (they play eval_games games)
        flags += ["--eval-interval", "100", "--eval-prompt-data", "tempo", "held-out"]
    return flags


def start_train(e2e: E2E, name: str, flags: list[str]):
    log = e2e.logs / f"{name}.log"
    return harness.start_driver(e2e.session, [sys.executable, str(TRAIN_PY), *flags], log, e2e.ray), log


def train(e2e: E2E, name: str, flags: list[str], save: Path, timeout_s: float = 300) -> Run:
    tic = time.monotonic()
    process, log = start_train(e2e, name, flags)
    returncode = harness.finish(process, timeout_s)
    run = Run(name, returncode, log, time.monotonic() - tic, save)
    print(f"[slime e2e] {name}: exit {returncode} after {run.seconds:.0f} s", flush=True)
    return run


def load_dump(path: Path) -> dict:
    import torch

    assert path.is_file(), f"no debug rollout dump {path}"
    return torch.load(path, weights_only=False)  # written by slime in this test: plain dicts and lists


def role(sample: dict) -> str:
    return sample["metadata"]["tempo_role"]


def check_sample(sample: dict) -> None:
    """slime's invariants for a sample (tokens = prompt + response; mask and log-probs cover the
    response), and ours: padding is removed with mask 0, a real sample trains tokens whose log-probs
    came from the server (<= 0), and carries log-prob 0 where it does not train."""
    n = sample["response_length"]
    assert n >= 1 and len(sample["tokens"]) > n, sample
    assert len(sample["loss_mask"]) == len(sample["rollout_log_probs"]) == n, sample
    if role(sample) == compare.PADDING:
        assert sample["remove_sample"] and not any(sample["loss_mask"])
        return
    assert not sample["remove_sample"] and any(sample["loss_mask"])
    assert all(lp <= 0.0 if m else lp == 0.0 for lp, m in zip(sample["rollout_log_probs"], sample["loss_mask"]))


def perf_metrics(log_text: str, rollout_id: int) -> dict:
    """The metrics slime logged for rollout ``rollout_id`` ("perf <id>: {...}" in the RolloutManager's log)."""
    match = re.search(rf"perf {rollout_id}: (\{{.*\}})", log_text)
    assert match, f"no 'perf {rollout_id}:' line in the log"
    return ast.literal_eval(match.group(1))


def check_rollouts(run: Run, counts: dict[int, int]) -> dict[int, list[dict]]:
    """Every rollout id has a dump with its expected sample count, each sample consistent; returns them."""
    out = {}
    for rollout_id, count in counts.items():
        dump = load_dump(run.save / "debug" / f"rollout_{rollout_id}.pt")
        assert dump["rollout_id"] == rollout_id
        samples = dump["samples"]
        assert len(samples) == count, f"rollout {rollout_id}: {len(samples)} samples, expected {count}"
        for sample in samples:
            check_sample(sample)
        # the trained tokens' log-probs are the model's, not placeholders: not all 0 over a rollout
        trained = [lp for s in samples for lp, m in zip(s["rollout_log_probs"], s["loss_mask"]) if m]
        assert not trained or min(trained) < 0.0
        # slime's index is ours: consecutive from rollout_id * count
        assert [s["index"] for s in samples] == list(range(rollout_id * count, (rollout_id + 1) * count))
        out[rollout_id] = samples
    return out


def check_eval(run: Run) -> None:
    """The eval before rollout 0 ran: eval_games held-out episodes, each a complete actor sample."""
    samples = load_dump(run.save / "debug" / "rollout_eval_0.pt")["samples"]
    assert len(samples) == EVAL_GAMES
    for sample in samples:
        assert role(sample) == "actor"
        check_sample(sample)
    assert re.search(r"eval 0: \{'eval/success_rate': ", run.text()), "slime did not log eval/success_rate"


def state_files(save: Path) -> list[Path]:
    return sorted((save / "tempo").glob("state_*.json"))


def check_state_files_whole(save: Path) -> None:
    """Every state file TempoDataSource.save left is complete JSON (written to a .tmp, then renamed)."""
    for path in state_files(save):
        payload = json.loads(path.read_text())  # raises on a half-written file
        assert set(payload) == {"game_cursor", "store"}, path


# -- A: train.py end to end ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tempo_run(e2e, faults):
    # ``faults``: the fault runs start here, with the first run, and go on beside the others
    save = e2e.logs / "tempo"
    return train(e2e, "tempo", slime_flags(e2e, "tempo", save), save)


def test_tempo_warmup_then_td_through_train_py(tempo_run):
    run = tempo_run
    assert run.returncode == 0, run.why()
    with explained(run):
        check_eval(run)
        counts = {r: WARMUP_COUNT if r < WARMUP else TD_COUNT for r in range(3)}
        rollouts = check_rollouts(run, counts)
        log = run.text()
        metrics = {r: perf_metrics(log, r) for r in range(3)}
        # warm-up: critic samples and padding, as many critic samples as the update logged; none only
        # where every valued state's K answers were identical (e.g. both episodes lost and the critic
        # said 0 each time: error 0, nothing to learn). TD: actor samples, critic samples and padding
        warmup_roles = [role(s) for s in rollouts[0]]
        assert set(warmup_roles) <= {"critic", compare.PADDING}, warmup_roles
        assert warmup_roles.count("critic") == metrics[0]["rollout/train/critic_samples"], warmup_roles
        assert "critic" in warmup_roles or metrics[0]["rollout/critic/identical_group_rate"] == 1.0, metrics[0]
        # the rollouts went through the sglang-router slime launched, on the loopback
        assert "Router launched at 127.0.0.1:" in run.text()
        for r in range(WARMUP, 3):
            td_roles = [role(s) for s in rollouts[r]]
            assert set(td_roles) <= {"actor", "critic", compare.PADDING}, td_roles
            for kind in ("actor", "critic"):
                assert td_roles.count(kind) == metrics[r][f"rollout/train/{kind}_samples"], (r, td_roles)
        # actor samples in the TD rollouts unless every start state's N branches had equal advantages
        td_roles = [role(s) for r in range(WARMUP, 3) for s in rollouts[r]]
        assert "actor" in td_roles or all(metrics[r]["rollout/actor/degenerate_group_rate"] == 1.0
                                          for r in range(WARMUP, 3)), f"no actor sample in the TD rollouts: {td_roles}"
        # the state store: saved after every rollout, the newest 2 files kept (KEEP_STATE_FILES), and
        # the TD rollouts' endpoints went in (each TD branch that stopped at its macro-step boundary)
        assert [p.name for p in state_files(run.save)] == ["state_1.json", "state_2.json"]
        check_state_files_whole(run.save)
        assert metrics[0]["rollout/store/size"] == 0.0  # the warm-up adds no state
        stored = json.loads((run.save / "tempo" / "state_2.json").read_text())["store"]["states"]
        assert len(stored) == metrics[2]["rollout/store/size"] > 0


def test_tempo_resume_loads_the_saved_state_store(e2e, tempo_run):
    assert tempo_run.returncode == 0, tempo_run.why()
    save = tempo_run.save
    saved = json.loads((save / "tempo" / "state_2.json").read_text())
    # what a training run's Megatron checkpoint leaves in --load; slime then keeps --load (instead of
    # falling back to --ref-load) and the data source loads SAVE/tempo/state_<start - 1>.json
    (save / "latest_checkpointed_iteration.txt").write_text("3")
    flags = slime_flags(e2e, "tempo", save, num_rollout=5, evaluate=False) + ["--start-rollout-id", "3"]
    run = train(e2e, "tempo_resume", flags, save)
    assert run.returncode == 0, run.why()
    with explained(run):
        log = run.text()
        states, cursor = len(saved["store"]["states"]), saved["game_cursor"]
        assert f"loaded {states} TEMPO states and game cursor {cursor} from {save / 'tempo' / 'state_2.json'}" in log
        check_rollouts(run, {3: TD_COUNT, 4: TD_COUNT})
        # with the store loaded, rollout 3 takes S - ceil(fresh_share * S) = 2 - 1 start states from it
        # and plays 1 fresh game; an empty store would have made both fresh
        metrics = perf_metrics(log, 3)
        assert (metrics["rollout/td/fresh_states"], metrics["rollout/td/restore_failures"]) == (1.0, 0.0)
        assert [p.name for p in state_files(save)] == ["state_3.json", "state_4.json"]
        check_state_files_whole(save)


def test_multi_turn_grpo_through_train_py(e2e):
    save = e2e.logs / "grpo"
    run = train(e2e, "grpo", slime_flags(e2e, "grpo", save), save)
    assert run.returncode == 0, run.why()
    with explained(run):
        check_eval(run)
        rollouts = check_rollouts(run, {r: EPISODE_COUNT for r in range(3)})
        for samples in rollouts.values():
            assert {role(s) for s in samples} <= {"actor", compare.PADDING}
            # each real sample is a whole episode from the game's first prompt: reward = its advantage,
            # and a game's advantages sum to 0 (group-relative)
            by_group: dict[int, float] = {}
            for s in samples:
                if role(s) == "actor":
                    by_group[s["group_index"]] = by_group.get(s["group_index"], 0.0) + s["reward"]
            assert all(abs(total) < 1e-4 for total in by_group.values()), by_group


def test_temporal_grpo_through_train_py(e2e):
    save = e2e.logs / "temporal_grpo"
    run = train(e2e, "temporal_grpo", slime_flags(e2e, "temporal_grpo", save), save)
    assert run.returncode == 0, run.why()
    with explained(run):
        check_eval(run)
        rollouts = check_rollouts(run, {r: EPISODE_COUNT for r in range(3)})
        for samples in rollouts.values():
            for s in samples:
                advantages = s["metadata"]["tempo_token_advantages"]
                # per-token advantages, one per response token, 0 where no loss
                assert len(advantages) == s["response_length"]
                assert all(a == 0.0 for a, m in zip(advantages, s["loss_mask"]) if not m)


# -- B: slime's train data against the embedded runtime -------------------------------------------------


def test_train_data_matches_the_embedded_runtime(e2e):
    save = e2e.logs / "train_data"
    out = e2e.logs / "train_data.json"
    flags = slime_flags(e2e, "tempo", save, evaluate=False)
    # the warm-up, two TD rollouts, then three multi-turn GRPO rollouts: a rollout whose groups all
    # came out degenerate (equal returns) is all padding, and with several one with actor samples is
    # near certain (each is about a second)
    phases = ("warmup:generate_rollout:0,td1:generate_rollout:1,td2:generate_rollout:2,"
              "grpo0:generate_grpo_rollout:0,grpo1:generate_grpo_rollout:1,grpo2:generate_grpo_rollout:2")
    command = [sys.executable, str(E2E_DIR / "train_data_driver.py"), str(out), phases, "--", *flags]
    tic = time.monotonic()
    process = harness.start_driver(e2e.session, command, e2e.logs / "train_data.log", e2e.ray)
    returncode = harness.finish(process, 300)
    run = Run("train_data", returncode, e2e.logs / "train_data.log", time.monotonic() - tic, save)
    print(f"[slime e2e] train data driver: exit {returncode} after {run.seconds:.0f} s", flush=True)
    assert returncode == 0, run.why()
    with explained(run):
        result = json.loads(out.read_text())
        assert list(result) == ["warmup", "td1", "td2", "grpo0", "grpo1", "grpo2"]
        kinds = {"warmup": ("warmup_update", WARMUP_COUNT), "td": ("td_update", TD_COUNT),
                 "grpo": ("episode_update", EPISODE_COUNT)}
        roles = set()
        for name, phase in result.items():
            method, rows = kinds[name.rstrip("0123456789")]
            data = phase["train_data"]
            assert phase["num_ranks"] == 1
            # exactly one update of the expected kind ran for this rollout
            assert [r["method"] for r in phase["recorded"]] == [method], phase["recorded"]
            samples = phase["recorded"][0]["samples"]
            assert len(data["tokens"]) == rows
            problems = compare.mismatches(data, samples)
            assert not problems, f"{name}: " + "\n".join(problems)
            matches = compare.match_rows(data, samples)
            assert sum(j is not None for j in matches) == len(samples)
            # one data-parallel rank: its partition is every row, in order; slime numbers the rows in
            # order (every sample its own rollout id) and keeps our index
            assert data["partition"] == list(range(rows))
            assert data["rollout_ids"] == list(range(rows))
            first = phase["rollout_id"] * rows
            assert data["sample_indices"] == list(range(first, first + rows))
            # the optimiser steps: every row in exactly one step of --global-batch-size rows
            steps = phase["roles_per_step"]
            assert [len(step) for step in steps] == [GLOBAL_BATCH] * (rows // GLOBAL_BATCH)
            # ... each holding every role (actor, critic, padding) within one sample of its share
            for kind in {role for step in steps for role in step}:
                share = sum(step.count(kind) for step in steps) / len(steps)
                assert all(abs(step.count(kind) - share) <= 1 for step in steps), (name, kind, steps)
            roles |= {(name[:2], s["role"]) for s in samples}
            print(f"[slime e2e] {name}: {len(samples)} real samples of {rows}; roles per step {steps}")
        # what was compared: critic samples of the warm-up, actor samples of TD and GRPO
        assert {("td", "actor"), ("gr", "actor")} <= roles, f"no actor sample compared: {sorted(roles)}"


def test_the_comparison_finds_each_kind_of_disagreement():
    """compare.mismatches on a hand-made rollout: one actor sample (prompt of 2 tokens, response of 3
    with 2 trained, advantage 0.5) and one padding row; agreeing data passes, each altered field fails."""
    samples = [{"tokens": [1, 2, 3, 4, 5], "loss_mask": [0, 0, 1, 0, 1], "old_logprobs": [0, 0, -0.1, 0, -0.2],
                "advantages": [0, 0, 0.5, 0, 0.5], "role": "actor", "group": 0, "reward": 1.0, "prompt_length": 2}]
    good = {"tokens": [[1, 2, 3, 4, 5], [9, 9]], "response_lengths": [3, 1], "loss_masks": [[1, 0, 1], [0]],
            "rollout_log_probs": [[-0.1, 0.0, -0.2], [0.0]], "rewards": [0.5, 0.0], "raw_reward": [0.5, 0.0],
            "truncated": [0, 0], "total_lengths": [5, 2], "rollout_ids": [0, 1], "rollout_mask_sums": [2, 0],
            "sample_indices": [10, 11]}
    assert compare.mismatches(good, samples) == []
    assert compare.match_rows(good, samples) == [0, None]
    assert compare.roles_per_step(good, samples, [0, None], 1) == [["actor"], ["padding"]]
    altered = {
        "rewards": [0.4, 0.0], "raw_reward": [0.6, 0.0], "rollout_log_probs": [[-0.1, 0.0, -0.3], [0.0]],
        "loss_masks": [[1, 0, 1], [1]], "tokens": [[1, 2, 3, 4, 6], [9, 9]], "truncated": [0, 1],
        "total_lengths": [5, 3], "rollout_mask_sums": [2, 2], "rollout_ids": [0, 0], "sample_indices": [11, 10],
    }
    for key, value in altered.items():
        assert compare.mismatches({**good, key: value}, samples), f"a changed {key} went unnoticed"
    # a TrainSample without its row (the real sample replaced by padding) is a mismatch too
    padded = {**good, "tokens": [[9, 9], [9, 9]], "response_lengths": [1, 1], "loss_masks": [[0], [0]],
              "rollout_log_probs": [[0.0], [0.0]], "rewards": [0.0, 0.0], "raw_reward": [0.0, 0.0],
              "total_lengths": [2, 2], "rollout_mask_sums": [0, 0]}
    assert any("no train-data row" in p for p in compare.mismatches(padded, samples))


# -- C: the server killed during a rollout ------------------------------------------------------------


@dataclass
class Fault:
    name: str
    restart: bool
    port: int
    server: object  # subprocess.Popen
    save: Path
    process: object = None  # subprocess.Popen of train.py
    log: Path | None = None
    killed: bool = False
    rollout_1_done_before_kill: bool = False


class FaultRuns:
    """Two TEMPO runs, each against its own server, which is SIGKILLed as soon as rollout 0 is saved
    (rollout 1 has started, and cannot finish without the server): "fault_restart" gets a new server
    on the same port, "fault_dead" does not. A thread watches them, so they go on beside the other
    runs of the module: the dead run waits out slime's --rollout-health-check-timeout (30 s)."""

    def __init__(self, e2e: E2E) -> None:
        self.e2e = e2e
        self.cases: list[Fault] = []
        self.runs: dict[str, tuple[Run, int]] = {}
        self.error: BaseException | None = None
        self.tic = time.monotonic()
        for name, restart in (("fault_restart", True), ("fault_dead", False)):
            port = harness.free_port()
            server = harness.start_server(e2e.session, e2e.model, port, e2e.logs / f"{name}_server.log")
            case = Fault(name, restart, port, server, e2e.logs / name)
            # no router in between: the process killed is the one the rollout's HTTP sampler talks to
            flags = slime_flags(e2e, "tempo", case.save, port=port, evaluate=False, router=False)
            if restart:  # a restart on a loaded CI machine can take longer than slime's default 30 s
                flags += ["--rollout-health-check-timeout", "120"]
            case.process, case.log = start_train(e2e, name, flags)
            self.cases.append(case)
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _kill_when_rollout_0_saved(self) -> bool:
        for case in self.cases:
            if case.killed or case.process.poll() is not None:
                continue
            if (case.save / "tempo" / "state_0.json").exists():
                harness.kill_group(case.server, signal.SIGKILL)
                case.killed = True
                case.rollout_1_done_before_kill = (case.save / "debug" / "rollout_1.pt").exists()
                if case.restart:  # not waited for: the other run's server may be due for its kill
                    harness.start_server(self.e2e.session, self.e2e.model, case.port,
                                         self.e2e.logs / f"{case.name}_server.log", wait=False)
        return all(case.killed or case.process.poll() is not None for case in self.cases)

    def _watch(self) -> None:
        try:
            harness.wait_for(self._kill_when_rollout_0_saved, 300, "rollout 0 saved by both fault runs", interval_s=0.02)
            for case in self.cases:
                returncode = harness.finish(case.process, 400)
                run = Run(case.name, returncode, case.log, time.monotonic() - self.tic, case.save)
                print(f"[slime e2e] {case.name}: exit {returncode} after {run.seconds:.0f} s", flush=True)
                self.runs[case.name] = (run, case.port)
        except BaseException as error:  # handed to the test that asks for the result
            self.error = error

    def result(self, name: str) -> tuple[Run, int]:
        """The run ``name`` and its server's port, once both runs have ended."""
        self.thread.join(timeout=800)
        if self.error is not None:
            raise self.error
        run, port = self.runs[name]
        case = next(c for c in self.cases if c.name == name)
        # the server died while rollout 1 was running
        assert case.killed and not case.rollout_1_done_before_kill, run.why()
        return run, port

    def stop(self) -> None:
        for case in self.cases:
            if case.process is not None and case.process.poll() is None:
                harness.kill_group(case.process)
        self.thread.join(timeout=60)


@pytest.fixture(scope="module")
def faults(e2e):
    runs = FaultRuns(e2e)
    yield runs
    runs.stop()


def test_server_killed_mid_rollout_and_restarted_the_run_goes_on(faults):
    run, _ = faults.result("fault_restart")
    # the HTTP sampler re-sends requests that failed to connect (max_retries x retry_delay_s = 60 s)
    # while /health comes back within --rollout-health-check-timeout: rollout 1 completes, and so does the run
    assert run.returncode == 0, run.why()
    with explained(run):
        check_rollouts(run, {0: WARMUP_COUNT, 1: TD_COUNT, 2: TD_COUNT})
        check_state_files_whole(run.save)
        assert [p.name for p in state_files(run.save)] == ["state_1.json", "state_2.json"]


def test_server_killed_for_good_the_run_stops_naming_the_server(faults):
    run, port = faults.result("fault_dead")
    assert run.returncode != 0, run.why()
    with explained(run):
        lines = [line for line in run.text().splitlines() if line.strip()]
        assert f"http://127.0.0.1:{port}/generate" in lines[-1]
        # nothing after rollout 0 was saved, and what was saved is whole
        check_state_files_whole(run.save)
        assert [p.name for p in state_files(run.save)] == ["state_0.json"]
        assert not (run.save / "debug" / "rollout_1.pt").exists()
