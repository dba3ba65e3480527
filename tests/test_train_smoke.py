"""A short end-to-end run of the trainer CLI, then a resume from its checkpoint."""

import json

from tempo_plugin.updates import critic_calls
from tempo_plugin.metrics import read_metrics
from tempo_plugin.train import main

SMALL = [
    "--bootstrap-steps", "3", "--warmup-updates", "1", "--warmup-games-per-batch", "1",
    "--branches", "2", "--critic-samples", "2", "--endpoint-samples", "1", "--states-per-batch", "1",
    "--eval-games", "2", "--max-assistant-tokens", "8", "--critic-max-tokens", "8", "--save-every", "1",
]


def test_short_run_writes_outputs_and_resumes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    # A 3-step bootstrap's critic rarely writes a parseable <value>, and a state without one is not
    # recorded in critic_values.jsonl. Reading a value off every critic text (its length mod 11,
    # tenths: different texts give different values) makes every valued state recorded, so the
    # file's bookkeeping over the resume is checked on real records.
    monkeypatch.setattr(critic_calls, "parse_value", lambda text: (len(text) % 11) / 10)
    # --fresh-share 0: every TD start state comes from the store while it holds enough of them
    common = SMALL + ["--fresh-share", "0", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert main(common + ["--td-updates", "1"]) == 0
    printed = capsys.readouterr().out
    assert "critic/abs_error_mean" in printed and "eval/success_rate" in printed
    for name in ("config.yaml", "metrics.jsonl", "critic_values.jsonl", "curves.png", "summary.json"):
        assert (out / name).is_file(), name
    checkpoint = out / "checkpoints" / "latest"
    for name in ("model.safetensors", "optimizer.pt", "store.json", "rng.json", "progress.json", "tokenizer.json"):
        assert (checkpoint / name).is_file(), name
    records = read_metrics(out / "metrics.jsonl")
    assert [(r["phase"], r["update"]) for r in records] == [("eval", -1), ("warmup", 0), ("td", 1), ("eval", 2)]
    td = records[2]
    # the first TD update starts from fresh games only; an untrained policy never ends the game,
    # so both branches stop at the macro boundary and become store states
    assert td["td/fresh_states"] == 1.0
    assert td["actor/macro_boundary_rate"] == 1.0
    assert td["store/size"] == 2.0
    assert json.loads((checkpoint / "progress.json").read_text())["next_update"] == 2

    # an existing run is never overwritten silently
    assert main(common + ["--td-updates", "1"]) == 2
    assert "--resume" in capsys.readouterr().err

    assert main(common + ["--td-updates", "2", "--resume"]) == 0
    records = read_metrics(out / "metrics.jsonl")
    updates = [r["update"] for r in records if r["phase"] in ("warmup", "td")]
    assert updates == [0, 1, 2]
    # each valued state's critic estimate and target: one record per update, update 2's written once
    # although the resume replays it (the pairs themselves are pinned by
    # test_mc_refresh.test_warm_up_value_pairs_by_hand)
    values = read_metrics(out / "critic_values.jsonl")
    assert [r["update"] for r in values] == [0, 1, 2]
    for r in values:
        assert r["phase"] == ("warmup" if r["update"] == 0 else "td")
        assert len(r["estimate"]) == len(r["target"]) >= 1
        assert all(0.0 <= v <= 1.0 for v in r["estimate"] + r["target"])
    resumed = [r for r in records if r["update"] == 2 and r["phase"] == "td"][0]
    # the store came back from the checkpoint, so no fresh game was needed
    assert resumed["td/fresh_states"] == 0.0
    assert resumed["td/macro_index_mean"] == 1.0


def test_bad_flag_is_one_line_error_naming_the_flag(tmp_path, capsys):
    assert main(["--macro-rounds", "0", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--macro-rounds" in err
    assert main(["--resume", "--out", str(tmp_path / "missing")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_a_local_hugging_face_model_directory_runs_without_bootstrap(tmp_path, tiny_model, tokenizer, capsys):
    model_dir = tmp_path / "hf-model"
    tiny_model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "run"
    args = SMALL + ["--td-updates", "1", "--model", str(model_dir), "--out", str(out),
                    "--cache-dir", str(tmp_path / "cache")]
    assert main(args) == 0
    assert not (tmp_path / "cache").exists()  # a real model skips the tiny bootstrap
    phases = [r["phase"] for r in read_metrics(out / "metrics.jsonl")]
    assert phases == ["eval", "warmup", "td", "eval"]
    assert main(["--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r2")]) == 2
    assert "--model" in capsys.readouterr().err


def test_critic_epochs_add_steps_on_the_critic_samples_alone():
    """train_step with critic_epochs 3: the joint step on all samples, then 2 steps on the critic
    samples alone; no critic samples (GRPO batches): the joint step only."""
    from tempo_plugin.rollout.samples import ACTOR, CRITIC, TrainSample
    from tempo_plugin.embedded.multi_turn import train_step

    class Recorder:
        def __init__(self):
            self.calls = []

        def step(self, samples):
            self.calls.append([s.group for s in samples])
            return {"train/loss": float(len(self.calls))}

    def sample(role, group):
        return TrainSample(tokens=[1, 2], loss_mask=[0, 1], old_logprobs=[0.0, -1.0], advantages=[0.0, 1.0],
                           role=role, group=group, reward=0.0)

    batch = [sample(ACTOR, 0), sample(CRITIC, 1), sample(ACTOR, 2), sample(CRITIC, 3)]
    trainer = Recorder()
    assert train_step(trainer, batch, critic_epochs=3) == {"train/loss": 1.0}  # the joint step's metrics
    assert trainer.calls == [[0, 1, 2, 3], [1, 3], [1, 3]]
    trainer = Recorder()
    train_step(trainer, [sample(ACTOR, 0), sample(ACTOR, 1)], critic_epochs=3)
    assert trainer.calls == [[0, 1]]
    trainer = Recorder()
    train_step(trainer, batch)  # the default: one joint step
    assert trainer.calls == [[0, 1, 2, 3]]
