"""LoRA (--lora-rank) on the embedded runtime: only the adapters train, checkpoints hold the adapters
alone and resume, and every inference path (eval, analysis, the /generate server) gets the merged model.

The tiny model has 4 layers, each with the 7 default targets (q, k, v, o, gate, up, down), so rank-R
LoRA adds 4 x 7 x 2 = 56 tensors (A: R x in, B: out x R). B starts at 0, so the wrapped model's
first outputs equal the base's, and the first step's gradient of every A is B^T(...) = 0.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from tests.extras import import_extra
import torch
import yaml

from tempo_plugin.embedded.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, apply_lora, save_model
from tempo_plugin.embedded.model import load_adapted, load_pretrained
from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.embedded.trainer import PolicyTrainer
from tempo_plugin.logprobs import cache_argument, token_logprobs
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.rollout.sampler import Request, SamplingParams
from tempo_plugin.rollout.samples import ACTOR, TrainSample
from tempo_plugin.runs import resolve_run

peft = import_extra("smollm2", "peft")

TARGETS = TempoConfig.lora_targets
CPU = torch.device("cpu")
SMALL = [  # tests/test_train_smoke.py's short run, without the success-rate measurements
    "--bootstrap-steps", "3", "--warmup-updates", "1", "--warmup-games-per-batch", "1",
    "--branches", "2", "--critic-samples", "2", "--endpoint-samples", "1", "--states-per-batch", "1",
    "--eval-games", "0", "--max-assistant-tokens", "8", "--critic-max-tokens", "8", "--save-every", "1",
    "--fresh-share", "0",
]


def base_state(model) -> dict[str, torch.Tensor]:
    """The base model's tensors under their plain names (a PeftModel's adapters left out)."""
    if isinstance(model, peft.PeftModel):
        model = model.get_base_model()
    return {k.replace(".base_layer", ""): v for k, v in model.state_dict().items() if "lora_" not in k}


def adapters(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def batch(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """Two right-padded rows of different lengths and their attention mask."""
    rows = [tokenizer.encode("Hall 2 of 9. You hold the red key."), tokenizer.encode("open the blue door")]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, attention


def logits(model, ids, attention) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=attention).logits[attention.bool()]


def test_lora_wraps_with_adapters_only_trainable(tiny_model):
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    model = apply_lora(tiny_model, 4, 0.0, TARGETS)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert len(trainable) == 4 * 7 * 2 and all("lora_" in n for n in trainable)
    q_a = [p for n, p in trainable.items() if "layers.0.self_attn.q_proj.lora_A" in n][0]
    k_b = [p for n, p in trainable.items() if "layers.0.self_attn.k_proj.lora_B" in n][0]
    assert q_a.shape == (4, 256) and k_b.shape == (2 * 64, 4)  # hidden 256; 2 KV heads x head_dim 64
    assert model.peft_config["default"].lora_alpha == 8 and model.peft_config["default"].lora_dropout == 0.0
    assert base_state(model).keys() == before.keys()
    # the kv cache keyword is the base model's (peft passes keywords on)
    assert cache_argument(model) == cache_argument(model.get_base_model())


def test_one_trainer_step_changes_only_adapter_tensors(tiny_model, tokenizer, one_thread):
    base_before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    ids, attention = batch(tokenizer)
    base_logits = logits(tiny_model, ids, attention)
    torch.manual_seed(0)
    model = apply_lora(tiny_model, 4, 0.0, TARGETS)
    assert torch.equal(logits(model, ids, attention), base_logits)  # B = 0: the adapters add exactly 0
    adapters_before = adapters(model)

    prompt = tokenizer.encode("Hall 2 of 9. You hold the red key.")
    samples = []
    for advantage, response in ((1.0, " open the red door"), (-1.0, " go north")):
        tokens = prompt + tokenizer.encode(response)
        with torch.no_grad():
            old = token_logprobs(model, torch.tensor([tokens]), torch.ones(1, len(tokens), dtype=torch.long), 1.0)[0]
        n = len(tokens) - len(prompt)
        samples.append(TrainSample(tokens=tokens, loss_mask=[0] * len(prompt) + [1] * n,
                                   old_logprobs=[0.0] * len(prompt) + old[len(prompt):].tolist(),
                                   advantages=[0.0] * len(prompt) + [advantage] * n, role=ACTOR, group=0, reward=0.0))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0)
    # the two samples share the prompt: the trainer runs it once and passes its cache on (through peft)
    metrics = PolicyTrainer(model, optimizer, tokenizer.pad_token_id).step(samples)
    assert metrics["train/sampler_logprob_abs_diff"] < 1e-5  # old log-probs came from this very model
    assert metrics["train/model_tokens"] < metrics["train/tokens"]  # the shared prompt ran once

    after = base_state(model)
    assert after.keys() == base_before.keys()
    assert all(torch.equal(after[k], base_before[k]) for k in base_before)  # every base tensor bit-identical
    now = adapters(model)
    for name, value in adapters_before.items():
        if "lora_A" in name:  # zero gradient in the first step (B = 0): AdamW leaves it as it was
            assert torch.equal(now[name], value), name
        else:
            assert not torch.equal(now[name], value), name

    # the sampler drives the adapted model with its kv cache; its log-probs are the trainer's
    sampler = LocalSampler(model, tokenizer)
    params = SamplingParams(1.0, 1.0, ())
    first = sampler.generate([Request(prompt, 5)], params, seed=3)[0]
    extended = prompt + first.token_ids + tokenizer.encode(" go")
    second = sampler.generate([Request(extended, 4)], params, seed=4)[0]
    assert sampler.reused_calls == 1  # the second call extended the kept cache
    for context, completion in ((prompt, first), (extended, second)):
        tokens = context + completion.token_ids
        with torch.no_grad():
            expected = token_logprobs(model, torch.tensor([tokens]), torch.ones(1, len(tokens), dtype=torch.long), 1.0)
        assert expected[0, len(context):].tolist() == pytest.approx(completion.logprobs, abs=1e-5)


@pytest.fixture()
def lora_run(tmp_path, tiny_model, tokenizer):
    """A run directory as a LoRA run writes it (config.yaml, checkpoints/latest with adapters and
    tokenizer), on a base model directory; B set to random values so the adapters matter."""
    base_dir = tmp_path / "base"
    tiny_model.save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    model = apply_lora(tiny_model, 4, 0.0, TARGETS, base=str(base_dir))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05)
    run = tmp_path / "run"
    latest = run / "checkpoints" / "latest"
    save_model(model, latest)
    tokenizer.save_pretrained(latest)
    (run / "config.yaml").write_text(yaml.safe_dump(TempoConfig(lora_rank=4).to_dict()))
    return run, model, base_dir


def test_merged_model_gives_the_adapted_logits(lora_run, tokenizer):
    from eval.targets import local_target

    run, adapted, base_dir = lora_run
    latest = run / "checkpoints" / "latest"
    assert (latest / ADAPTER_WEIGHTS).is_file() and not (latest / "model.safetensors").exists()
    assert json.loads((latest / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == str(base_dir.resolve())
    ids, attention = batch(tokenizer)
    expected = logits(adapted, ids, attention)
    base, _ = load_pretrained(str(base_dir), CPU)
    assert not torch.allclose(logits(base, ids, attention), expected, atol=1e-3)  # the adapters do change them

    merged, _ = load_pretrained(str(latest), CPU)
    assert not isinstance(merged, peft.PeftModel) and not any("lora_" in n for n, _ in merged.named_parameters())
    torch.testing.assert_close(logits(merged, ids, attention), expected, atol=1e-5, rtol=0)
    # merged weight = W + (alpha / R) B A, alpha = 2R by default
    q = adapted.get_base_model().model.layers[0].self_attn.q_proj
    by_hand = q.base_layer.weight + 2.0 * q.lora_B["default"].weight @ q.lora_A["default"].weight
    torch.testing.assert_close(merged.model.layers[0].self_attn.q_proj.weight, by_hand, atol=1e-6, rtol=0)

    # new adapters on the merged checkpoint record the checkpoint (base + old adapters) as their base
    assert merged.name_or_path == str(latest.resolve())
    again = apply_lora(merged, 2, 0.0, "q_proj", base=str(latest))
    assert again.peft_config["default"].base_model_name_or_path == str(latest.resolve())

    # what eval (eval/targets.py) and analysis (resolve_run + load_pretrained) open for the run directory
    assert resolve_run(run).model_dir == latest
    policy = local_target(str(run), "cpu").open()
    assert policy.config.lora_rank == 4
    torch.testing.assert_close(logits(policy.sampler.model, ids, attention), expected, atol=1e-5, rtol=0)

    # adapters whose base is gone: a one-line error naming it
    import shutil

    shutil.rmtree(base_dir)
    with pytest.raises(ConfigError, match="base model") as error:
        load_pretrained(str(latest), CPU)
    assert "\n" not in str(error.value) and str(base_dir.resolve()) in str(error.value)


def test_generate_server_on_a_lora_run_serves_the_merged_model(lora_run, tokenizer, monkeypatch):
    from tempo_plugin.embedded import serve

    run, adapted, _ = lora_run
    latest = run / "checkpoints" / "latest"
    servers = []
    make_server = serve.make_server
    monkeypatch.setattr(serve, "make_server", lambda *a, **k: servers.append(make_server(*a, **k)) or servers[-1])
    thread = threading.Thread(target=serve.main, args=(["--model", str(latest), "--port", "0", "--device", "cpu"],),
                              daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not servers and time.time() < deadline:
        time.sleep(0.05)
    assert servers, "the server did not start"
    url = f"http://127.0.0.1:{servers[0].server_address[1]}"
    try:
        prompt = tokenizer.encode("Hall 2 of 9. You hold the red key.")
        payload = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                   "logprob_start_len": 0}
        request = urllib.request.Request(url + "/generate", data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            scored = json.loads(response.read())["meta_info"]["input_token_logprobs"]
        with torch.no_grad():
            expected = token_logprobs(adapted, torch.tensor([prompt]), torch.ones(1, len(prompt), dtype=torch.long), 1.0)
        assert scored[0][0] is None and [t[1] for t in scored] == prompt
        assert [t[0] for t in scored[1:]] == pytest.approx(expected[0, 1:].tolist(), abs=1e-5)
    finally:
        servers[0].shutdown()
        servers[0].server_close()


def test_lora_run_checkpoints_adapters_and_resumes(tmp_path, monkeypatch, capsys, one_thread):
    from safetensors.torch import load_file

    from tempo_plugin import train
    from tempo_plugin.embedded import multi_turn
    from tempo_plugin.metrics import read_metrics

    out = tmp_path / "run"
    common = SMALL + ["--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--lora-rank", "4"]
    assert train.main(common + ["--td-updates", "1"]) == 0
    latest = out / "checkpoints" / "latest"
    for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG, "optimizer.pt", "store.json", "rng.json", "progress.json", "tokenizer.json"):
        assert (latest / name).is_file(), name
    assert not (latest / "model.safetensors").exists() and not (latest / "config.json").exists()
    saved = load_file(str(latest / ADAPTER_WEIGHTS))
    assert len(saved) == 56 and all("lora_" in k for k in saved)
    base = json.loads((latest / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    assert base.startswith(str((tmp_path / "cache").resolve())) and "tiny-" in base  # the bootstrapped tiny model
    optimizer = torch.load(latest / "optimizer.pt", weights_only=True)
    assert len(optimizer["param_groups"][0]["params"]) == 56  # AdamW holds the adapters only
    assert json.loads((latest / "progress.json").read_text())["next_update"] == 2

    # resuming with another kind of weights is refused before anything is written
    capsys.readouterr()
    assert train.main(common[:-2] + ["--td-updates", "2", "--resume", "--allow-config-change"]) == 2
    err = capsys.readouterr().err.strip()
    assert "LoRA adapters" in err and "--lora-rank" in err and "\n" not in err

    loaded = []

    def recording_load_adapted(*args, **kwargs):
        model, tokenizer = load_adapted(*args, **kwargs)
        loaded.append((adapters(model), {n for n, p in model.named_parameters() if p.requires_grad}))
        return model, tokenizer

    monkeypatch.setattr(multi_turn, "load_adapted", recording_load_adapted)
    assert train.main(common + ["--td-updates", "2", "--resume"]) == 0
    (weights, trainable), = loaded
    assert len(trainable) == 56 and all("lora_" in n for n in trainable)
    as_saved = {k.replace(".default", ""): v for k, v in weights.items()}  # peft saves without the adapter name
    assert as_saved.keys() == saved.keys()
    assert all(torch.equal(as_saved[k], saved[k]) for k in saved)
    assert json.loads((latest / "progress.json").read_text())["next_update"] == 3
    updates = [r["update"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] in ("warmup", "td")]
    assert updates == [0, 1, 2]
    assert not (latest / "model.safetensors").exists()
    # the run directory opens as the merged model
    merged, _ = load_pretrained(str(resolve_run(out).model_dir), CPU)
    assert not isinstance(merged, peft.PeftModel)


def test_single_turn_lora_run_saves_adapters_and_a_full_critic(tmp_path, tiny_model, tokenizer, one_thread):
    from tempo_plugin import train
    from tempo_plugin.critic.value_model import load_value_model

    model_dir = tmp_path / "hf-model"
    tiny_model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "run"
    assert train.main(["--advantage-estimator", "tppo", "--task", "countdown", "--model", str(model_dir),
                       "--states-per-batch", "1", "--branches", "2", "--warmup-updates", "0", "--td-updates", "1",
                       "--max-assistant-tokens", "4", "--eval-games", "0", "--lora-rank", "2",
                       "--out", str(out)]) == 0
    policy = out / "policy"
    assert (policy / ADAPTER_WEIGHTS).is_file() and not (policy / "model.safetensors").exists()
    assert json.loads((policy / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == str(model_dir.resolve())
    ref = resolve_run(out)
    assert ref.model_dir == policy and ref.critic_dir == out / "critic"
    merged, _ = load_pretrained(str(ref.model_dir), CPU)
    critic = load_value_model(ref.critic_dir, merged)  # the critic trained its own full backbone copy
    assert not any("lora_" in n for n, _ in critic.named_parameters())


def test_recorded_base_is_what_the_policy_was_loaded_from(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    from tempo_plugin.embedded.named_models import NAMED_MODELS

    model = apply_lora(tiny_model, 2, 0.0, "q_proj,v_proj", base="smollm2-135m")  # built in memory
    assert model.peft_config["default"].base_model_name_or_path == "smollm2-135m"
    assert len([n for n, p in model.named_parameters() if p.requires_grad]) == 4 * 2 * 2
    model = model.unload()
    # a named model's converted folder is recorded by the name; any other folder it was loaded from
    # (e.g. a warm start's cache) by its absolute path
    for folder, expected in ((NAMED_MODELS["smollm2-135m"].folder, "smollm2-135m"), ("warm-smollm2-135m-0123", None)):
        model.save_pretrained(tmp_path / folder)
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path / folder)
        wrapped = apply_lora(loaded, 2, 0.0, "q_proj", base="smollm2-135m")
        recorded = wrapped.peft_config["default"].base_model_name_or_path
        assert recorded == (expected or str((tmp_path / folder).resolve()))


def test_lora_settings_errors_are_one_line(tmp_path, capsys, monkeypatch, tiny_model):
    from tempo_plugin import train

    with pytest.raises(ConfigError, match="--lora-rank") as error:
        TempoConfig(lora_rank=-1).validate()
    assert "\n" not in str(error.value)
    assert train.main(["--lora-rank", "-1", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--lora-rank" in err and "\n" not in err
    assert TempoConfig(lora_rank=0).validate().lora_rank == 0
    with pytest.raises(ConfigError, match="--lora-targets"):
        TempoConfig(lora_rank=2, lora_targets=" , ").validate()
    with pytest.raises(ConfigError, match="--lora-targets"):  # names no module of the model
        apply_lora(tiny_model, 2, 0.0, "nowhere")

    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else find_spec(name, *a))
    with pytest.raises(ConfigError) as error:
        TempoConfig(lora_rank=4).validate()
    assert "pip install -e '.[smollm2]'" in str(error.value) and "\n" not in str(error.value)


def test_a_lora_run_with_a_separate_critic_keeps_its_adapters_apart(tmp_path, one_thread):
    """--critic-weights separate with LoRA: the critic's own adapters (on the same base) and their
    optimiser in generative_critic/, loaded trainable on --resume, merged by the tools."""
    from safetensors.torch import load_file

    from tempo_plugin import train
    from tempo_plugin.runs import GENERATIVE_CRITIC_DIR

    out = tmp_path / "run"
    common = SMALL + ["--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--lora-rank", "4",
                      "--critic-weights", "separate", "--critic-value", "expected"]
    assert train.main(common + ["--td-updates", "1"]) == 0
    latest = out / "checkpoints" / "latest"
    critic_dir = latest / GENERATIVE_CRITIC_DIR
    for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG, "optimizer.pt", "tokenizer.json"):
        assert (critic_dir / name).is_file(), name
    actor, critic = load_file(str(latest / ADAPTER_WEIGHTS)), load_file(str(critic_dir / ADAPTER_WEIGHTS))
    assert actor.keys() == critic.keys() and any(not torch.equal(actor[k], critic[k]) for k in actor)
    base = json.loads((critic_dir / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    assert base == json.loads((latest / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    assert train.main(common + ["--td-updates", "2", "--resume"]) == 0
    merged, _ = load_pretrained(str(resolve_run(out).generative_critic_dir), CPU)
    assert not isinstance(merged, peft.PeftModel)
