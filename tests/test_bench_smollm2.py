"""bench/smollm2.py: the comparison table, with the critic's part in each TEMPO run."""

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
_spec = importlib.util.spec_from_file_location("bench_smollm2", ROOT / "bench" / "smollm2.py")
smollm2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(smollm2)


def row(base: float, final: float, **checks: float) -> dict:
    return {"base": base, "final": final, "env_steps": 2400.0, "actor_samples_min": 4.0,
            "degenerate_group_rate": 0.25, "critic": None, **checks}


def test_table_rows_by_hand():
    summary = {
        "TEMPO (fresh starts)": {0: row(0.5, 0.75, endpoints_valued_share=0.1, gate_open_share=0.0),
                                 1: row(0.4, 0.45, endpoints_valued_share=0.3, gate_open_share=0.5)},
        "GRPO (multi-turn)": {0: row(0.5, 0.625)},
    }
    lines = smollm2.table(summary, argparse.Namespace(vaults=1, env_steps=2400, eval_games=128)).splitlines()
    tempo = [c.strip() for c in lines[4].split("|")[1:-1]]
    # seeds, env steps, base mean, finals, changes, change mean, seeds gaining >= 0.10, actor samples min,
    # degenerate groups, endpoints valued (mean of 0.1, 0.3), gate open (mean of 0, 0.5), no critic measured
    assert tempo == ["TEMPO (fresh starts)", "0, 1", "2400", "0.450", "0.750 / 0.450", "+0.250 / +0.050", "+0.150",
                     "1/2", "4", "0.25", "0.20", "0.25", "-", "-"]
    grpo = [c.strip() for c in lines[5].split("|")[1:-1]]
    assert grpo[7:] == ["1/1", "4", "0.25", "-", "-", "-", "-"]


def test_every_tempo_variant_is_the_recipe_plus_its_own_flags():
    recipe = smollm2.recipe("SMOLLM2_TEMPO_ARGS")
    short = smollm2.METHODS["TEMPO (3-round macro-steps)"]
    assert short[2:2 + len(recipe)] == recipe
    assert short[2 + len(recipe):] == ["--macro-rounds", "3", "--audit-boundaries"]
    ungated = smollm2.METHODS["TEMPO (3-round macro-steps, no gate)"]
    assert ungated[:len(short)] == short and ungated[len(short):] == ["--readiness-gate", "false"]
    assert smollm2.METHODS["TEMPO (calibrated audits)"][-2:] == ["--fresh-share", "0.25"]


def test_merge_keeps_recorded_rows_and_replaces_the_measured_ones(capsys):
    args = argparse.Namespace(vaults=1, env_steps=2400, eval_games=128)
    settings = {"vaults": 1, "env_steps": 2400, "eval_games": 128}
    # as read back from smollm2.json: seeds are strings
    recorded = {"GRPO (multi-turn)": {"0": row(0.5, 0.6), "1": row(0.4, 0.5)},
                "Temporal GRPO": {"1": row(0.3, 0.4)}}
    measured = {"Temporal GRPO": {2: row(0.4, 0.55)}, "GRPO (multi-turn)": {1: row(0.4, 0.7)}}
    merged = smollm2.merge(recorded, settings, measured, args)
    assert merged["GRPO (multi-turn)"] == {0: row(0.5, 0.6), 1: row(0.4, 0.7)}
    assert list(merged["Temporal GRPO"]) == [1, 2] and merged["Temporal GRPO"][2]["final"] == 0.55
    # rows recorded with another budget are not mixed in
    other = smollm2.merge(recorded, {**settings, "env_steps": 1200}, measured, args)
    assert other == {"Temporal GRPO": {2: row(0.4, 0.55)}, "GRPO (multi-turn)": {1: row(0.4, 0.7)}}
    said = capsys.readouterr().out
    assert "(GRPO (multi-turn), Temporal GRPO) were measured with {'vaults': 1, 'env_steps': 1200" in said
    assert "replaced" in said
