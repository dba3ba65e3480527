"""The critic's calibration map (--critic-calibration platt and levels, ``algorithms.tempo.fit_calibration``):
the fit against cases whose optimum is known, the audit window's prequential scores, the map in a
TD update's endpoint values, and a checkpoint's map as analysis/mc_critic reads it."""

from __future__ import annotations

import json
import math

import pytest

from tempo_plugin.algorithms.tempo import CALIBRATION_SLOPE_MAX, Calibration, fit_calibration
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.updates.tempo import AUDITS_MIN, AuditWindow

from tests.test_start_states import T, Games, config, waiting_rollout

TINY_PRIOR = 1e-9  # the unpenalised maximum-likelihood fit, to compare with its closed form
LEFT = 6  # milestones left in a waiting game of the 3-vault chain: 2 per vault, none reached


def sigmoid(t: float) -> float:
    return 1 / (1 + math.exp(-t))


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def states(value: float, rate: float, n: int = 10) -> list[tuple[float, float]]:
    """n audits of states the critic values ``value``, ``rate`` x n of them won."""
    wins = round(rate * n)
    return [(value, 1.0)] * wins + [(value, 0.0)] * (n - wins)


def test_the_identity_map_returns_every_value_unchanged():
    assert [Calibration()(v) for v in (0.0, 0.004, 0.5, 1.0)] == [0.0, 0.004, 0.5, 1.0]
    # any other map reads the value in logit space, clipped to [0.01, 0.99]
    assert Calibration(1.0, 1e-12)(0.0) == pytest.approx(0.01) and Calibration(2.0, 0.0)(0.5) == 0.5
    assert Calibration(1.0, math.log(3))(0.5) == pytest.approx(0.75)  # sigmoid(log 3) = 3 / 4


def test_a_calibrated_critic_keeps_the_identity():
    # states valued 0.2 win 2 of 10, states valued 0.8 win 8 of 10: the score equations hold at
    # (1, 0), where the prior's gradient is 0 too, so the fit is the identity whatever the prior
    fit = fit_calibration(states(0.2, 0.2) + states(0.8, 0.8))
    assert (fit.a, fit.b) == pytest.approx((1.0, 0.0), abs=1e-9)


def test_a_shifted_critic_is_shifted_back():
    # every estimate one logit below the state's rate: the maximum-likelihood map is a = 1, b = 1
    pairs = states(sigmoid(logit(0.2) - 1), 0.2) + states(sigmoid(logit(0.8) - 1), 0.8)
    fit = fit_calibration(pairs, prior=TINY_PRIOR)
    assert (fit.a, fit.b) == pytest.approx((1.0, 1.0), abs=1e-6)
    assert fit(sigmoid(logit(0.2) - 1)) == pytest.approx(0.2, abs=1e-6)
    # the default prior shrinks the map a little towards the identity, and towards it only
    default = fit_calibration(pairs)
    assert 0.5 < default.b < 1.0 and default(sigmoid(logit(0.8) - 1)) < 0.8


def test_a_critic_that_cannot_tell_states_apart_falls_back_to_the_audits_rate():
    # states valued 0.3 and 0.7 both win half the time: a = 0, and sigmoid(b) = 0.5
    fit = fit_calibration(states(0.3, 0.5) + states(0.7, 0.5), prior=TINY_PRIOR)
    assert (fit.a, fit.b) == pytest.approx((0.0, 0.0), abs=1e-6)
    assert (fit(0.3), fit(0.7)) == pytest.approx((0.5, 0.5))


def test_an_inverted_critic_is_clipped_to_the_constant_guess():
    # valued 0.8 but won 1 in 4, valued 0.2 but won 3 in 4: the unconstrained slope is -1; clipped to
    # a = 0, b is refitted to the overall rate 1/2 (b = 0, where the prior agrees)
    fit = fit_calibration(states(0.8, 0.25, 8) + states(0.2, 0.75, 8), prior=TINY_PRIOR)
    assert fit.a == 0.0 and fit.b == pytest.approx(0.0, abs=1e-9)
    skewed = fit_calibration(states(0.8, 0.25, 8) + states(0.2, 0.75, 8) + [(0.5, 1.0)] * 4, prior=TINY_PRIOR)
    assert skewed.a == 0.0 and sigmoid(skewed.b) == pytest.approx(12 / 20, abs=1e-6)


def test_a_critic_that_separates_the_audits_perfectly_gets_the_largest_slope():
    assert 1.0 < fit_calibration(states(0.9, 1.0) + states(0.1, 0.0)).a < CALIBRATION_SLOPE_MAX  # the prior holds it
    fit = fit_calibration(states(0.9, 1.0) + states(0.1, 0.0), prior=TINY_PRIOR)  # the likelihood alone: a -> infinity
    assert fit.a == CALIBRATION_SLOPE_MAX and fit.b == pytest.approx(0.0, abs=1e-9)  # symmetric: b stays 0
    assert fit(0.9) == pytest.approx(sigmoid(CALIBRATION_SLOPE_MAX * logit(0.9)))


def test_a_critic_at_its_floor_everywhere_gets_the_audits_rate_and_no_runaway_map():
    """Every estimate 0.00 (logit clipped to c = logit(0.01)), 31 of 64 audits won. Only t = a c + b
    is identified; the penalty's minimum on that line is (t - c)^2 / (2 (1 + c^2)), so the optimum
    solves 64 (sigmoid(t) - 31/64) + (t - c) / (1 + c^2) = 0, here by bisection. Newton's full steps
    ran away on this window (a = 4, b = -33: every value 0) during a 6-vault run."""
    c = logit(0.01)
    low, high = -5.0, 5.0
    for _ in range(200):
        t = (low + high) / 2
        if 64 * (sigmoid(t) - 31 / 64) + (t - c) / (1 + c * c) > 0:
            high = t
        else:
            low = t
    fit = fit_calibration([(0.0, 1.0)] * 31 + [(0.0, 0.0)] * 33)
    assert fit(0.0) == pytest.approx(sigmoid(t), abs=1e-9) and fit(0.0) == pytest.approx(31 / 64, abs=0.01)
    assert fit.a * c + fit.b == pytest.approx(t, abs=1e-9) and 0 <= fit.a < 1


def test_fit_calibration_refuses_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        fit_calibration([])
    with pytest.raises(ValueError, match="positive prior"):
        fit_calibration([(0.5, 1.0)], prior=0.0)


def test_the_window_scores_each_audit_with_the_map_it_was_valued_with():
    cfg = TempoConfig(audit_weight=1.0)
    window = AuditWindow()
    window.add(states(0.2, 0.5, AUDITS_MIN - 2), Calibration())
    assert window.calibration(cfg) == Calibration()  # fewer than AUDITS_MIN audits: the identity
    window.add([(0.2, 1.0), (0.2, 0.0)], Calibration())
    fitted = window.calibration(cfg)
    same = fit_calibration(states(0.2, 0.5, AUDITS_MIN))
    assert (fitted.a, fitted.b) == pytest.approx((same.a, same.b))
    assert 0.45 < fitted(0.2) < 0.5  # a 0.2 critic of a 0.5 rate, moved most of the way (the prior keeps the rest)
    assert window.calibration(TempoConfig(audit_weight=1.0, critic_calibration="none")) == Calibration()
    # rows valued with the map in use: the gate scores their calibrated column, not the raw one
    window.add([(0.2, 1.0), (0.2, 0.0)], Calibration(0.0, 0.0))
    assert window.rows[-2:] == [(0.2, 0.5, 1.0, None, None), (0.2, 0.5, 0.0, None, None)]
    gate = window.gate(cfg)
    # 16 rows scored 0.2 (half won: (0.64 + 0.04) / 2 = 0.34 each) and 2 scored 0.5 (0.25 each)
    assert gate.scores.critic == pytest.approx((16 * 0.34 + 2 * 0.25) / 18)
    assert gate.scores.constant == pytest.approx(0.25) and not gate.ready


def test_a_checkpoint_from_before_calibration_levels_or_updates_restores_its_pairs():
    window = AuditWindow()
    window.restore([[0.3, 1.0], [0.6, 0.7, 0.0], [0.4, 0.5, 1.0, 3], [0.4, 0.5, 1.0, None], [0.4, 0.5, 0.0, 2, 7]])
    assert window.rows == [(0.3, 0.3, 1.0, None, None), (0.6, 0.7, 0.0, None, None), (0.4, 0.5, 1.0, 3, None),
                           (0.4, 0.5, 1.0, None, None), (0.4, 0.5, 0.0, 2, 7)]


def test_td_endpoints_are_valued_through_the_map(tokenizer, protocol):
    """Waiting actors end no game within a macro-step, the critic always answers 0.50: every
    endpoint's value is the map's sigmoid(a logit(0.5) + b) = sigmoid(log 3) = 0.75."""
    cfg = config(audit_weight=1.0, readiness_gate=False, max_episode_steps=10)
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg)
    rollout.sampler.critic_texts = ["<value>0.50</value>"]
    rollout.audits.calibration = lambda _cfg: Calibration(1.0, math.log(3))
    batch = rollout.td_update(0, [], Games())
    assert batch.metrics["critic/endpoint_value_mean"] == pytest.approx(0.75)
    assert "critic/calibration_level_range" not in batch.metrics  # platt: no levels
    assert (batch.metrics["critic/calibration_slope"], batch.metrics["critic/calibration_intercept"]) == \
        pytest.approx((1.0, math.log(3)))
    # each start state's audit waited until the game's end and lost; the window keeps the raw 0.5
    # estimate and the 0.75 it was valued with
    assert rollout.audits.rows == [(0.5, pytest.approx(0.75), 0.0, LEFT, 0)] * 4  # played in TD update 0
    # without the map the same update values every endpoint 0.5
    plain, _ = waiting_rollout(tokenizer, protocol, config(audit_weight=1.0, readiness_gate=False,
                                                           max_episode_steps=10, critic_calibration="none"))
    plain.sampler.critic_texts = ["<value>0.50</value>"]
    assert plain.td_update(0, [], Games()).metrics["critic/endpoint_value_mean"] == pytest.approx(0.5)


def test_a_checkpoints_map_is_fitted_on_its_audits(tmp_path):
    from tempo_plugin.embedded.run_folder import checkpoint_calibration

    cfg = TempoConfig(audit_weight=1.0)
    assert checkpoint_calibration(tmp_path, cfg) == Calibration()  # no progress.json
    rows = [[0.2, 0.2, 1.0], [0.2, 0.2, 0.0]] * (AUDITS_MIN // 2)
    (tmp_path / "progress.json").write_text(json.dumps({"audits": rows}))
    assert checkpoint_calibration(tmp_path, cfg) == fit_calibration([(0.2, 1.0), (0.2, 0.0)] * (AUDITS_MIN // 2))
    assert checkpoint_calibration(tmp_path, TempoConfig(audit_weight=1.0, critic_calibration="none")) == Calibration()


def test_the_calibration_setting_is_checked():
    with pytest.raises(ConfigError, match="critic.calibration"):
        TempoConfig(critic_calibration="isotonic").validate()


def test_audit_boundaries_audit_and_train_the_critic_on_the_states_an_audit_passed(tokenizer, protocol):
    """--audit-boundaries, H = 5, T = 10: 4 fresh start states, each audit waits from round 0 to the
    episode's end and loses, passing one macro-step boundary (round 5, macro-step 1) on the way.
    The critic's texts cycle 0.50, 0.20, 0.90 through the calls in order: 8 endpoints x 2 samples
    (16 texts), 4 start states x 2 (estimates 0.55, 0.35, 0.70, 0.55), then the 4 passed states x 2
    (0.35, 0.70, 0.55, 0.35), each an audit of outcome 0."""
    cfg = config(audit_weight=1.0, readiness_gate=False, max_episode_steps=10, audit_boundaries=True)
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg)
    valued: list[list[tuple[int, int, int]]] = []
    call_critic = rollout.call_critic

    def recording(states, samples, seed):
        valued.append([(s.env_seed, s.round_index, s.macro_index) for s in states])
        return call_critic(states, samples, seed)

    rollout.call_critic = recording
    batch = rollout.td_update(0, [], Games())
    assert valued[-1] == [(game, 5, 1) for game in (100, 101, 102, 103)]
    assert batch.metrics["audit/boundary_states"] == 4.0
    estimates = [0.55, 0.35, 0.70, 0.55] + [0.35, 0.70, 0.55, 0.35]
    assert rollout.audits.rows == [(pytest.approx(e), pytest.approx(e), 0.0, LEFT, 0) for e in estimates]
    # the passed states' two critic samples each are trained too (towards 0): 8 samples beside the
    # start states' 8; no extra environment step
    assert batch.metrics["train/critic_samples"] == 16.0
    plain, _ = waiting_rollout(tokenizer, protocol, config(audit_weight=1.0, readiness_gate=False, max_episode_steps=10))
    without = plain.td_update(0, [], Games())
    assert without.metrics["train/critic_samples"] == 8.0 and len(plain.audits.rows) == 4
    assert without.metrics["rollout/rounds"] == batch.metrics["rollout/rounds"] == 4 * 2 * 5 + 4 * 10


# ------------------------------------------------------------------- --critic-calibration levels


def test_a_critic_that_does_not_value_progress_gets_it_from_the_levels():
    """The critic answers 0.5 at every state (logit 0: its slope multiplies nothing); audits at 1
    milestone left win 8 of 10, at 3 left 2 of 10. Unpenalised, b + c_L is the logit of each level's
    rate; the symmetric rates put b at 0, so c_1 = log 4 = -c_3, and a level no audit has keeps b."""
    pairs = states(0.5, 0.8) + states(0.5, 0.2)
    fit = fit_calibration(pairs, prior=TINY_PRIOR, levels=[1] * 10 + [3] * 10, level_prior=TINY_PRIOR)
    assert dict(fit.levels) == pytest.approx({1: math.log(4), 3: -math.log(4)}, abs=1e-6)
    assert fit.b == pytest.approx(0.0, abs=1e-6)
    assert (fit(0.5, 1), fit(0.5, 3)) == pytest.approx((0.8, 0.2), abs=1e-6)
    assert fit(0.5, 5) == fit(0.5) == pytest.approx(0.5, abs=1e-6)
    plain = fit_calibration(pairs, prior=TINY_PRIOR)  # platt: one rate for all, 1/2
    assert plain.levels == () and plain(0.5) == pytest.approx(0.5, abs=1e-6)


def test_the_level_prior_shrinks_each_intercept_towards_the_shared_one():
    """With rho_L = 1 the intercepts are pulled towards 0: at c_1 the penalised stationarity
    sum_i (p - z_i) + rho_L c_1 = 0, i.e. 10 sigmoid(c_1) - 8 + c_1 = 0 (b = 0 by symmetry)."""
    pairs = states(0.5, 0.8) + states(0.5, 0.2)
    fit = fit_calibration(pairs, prior=TINY_PRIOR, levels=[1] * 10 + [3] * 10, level_prior=1.0)
    c1 = dict(fit.levels)[1]
    assert 10 * sigmoid(c1) - 8 + c1 == pytest.approx(0.0, abs=1e-9)
    assert 0 < c1 < math.log(4) and dict(fit.levels)[3] == pytest.approx(-c1, abs=1e-9)


def test_levels_keep_the_slope_that_tells_lost_from_open():
    """At each level the critic gives 0.1 to states that lose and 0.9 to states that win 3 in 4:
    the slope must carry that, the levels only their mix. Unknown levels are left out of the c's."""
    lost = states(0.1, 0.0, 8)
    pairs = lost + states(0.9, 0.75, 8) + lost + states(0.9, 0.75, 8)
    levels = [1] * 16 + [None] * 16
    fit = fit_calibration(pairs, levels=levels)
    assert [lv for lv, _ in fit.levels] == [1]
    assert fit(0.1, 1) < 0.1 and fit(0.9, 1) > 0.5 and fit.a > 1.0


def test_fit_calibration_refuses_levels_that_do_not_match_the_pairs():
    with pytest.raises(ValueError, match="2 levels for 1 pairs"):
        fit_calibration([(0.5, 1.0)], levels=[1, 2])
    with pytest.raises(ValueError, match="positive priors"):
        fit_calibration([(0.5, 1.0)], levels=[1], level_prior=0.0)


def test_the_window_fits_levels_only_under_the_levels_setting():
    window = AuditWindow()
    window.add(states(0.5, 0.8, AUDITS_MIN), Calibration(), [1] * AUDITS_MIN)
    window.add(states(0.5, 0.2, AUDITS_MIN), Calibration(), [3] * AUDITS_MIN)
    levels = window.calibration(TempoConfig(audit_weight=1.0, critic_calibration="levels"))
    assert levels == fit_calibration([(e, z) for e, _, z, *_ in window.rows], levels=[1] * 16 + [3] * 16)
    assert levels(0.5, 1) > 0.7 and levels(0.5, 3) < 0.3
    assert window.calibration(TempoConfig(audit_weight=1.0)).levels == ()  # platt ignores them
    with pytest.raises(ValueError):
        window.add([(0.5, 1.0)], Calibration(), [1, 2])


def test_td_endpoints_and_audits_carry_their_levels(tokenizer, protocol):
    """Waiting actors never take a key: every endpoint and start state has all 6 milestones left,
    so a map with c_6 = log 3 (a = 1, b = 0) values each 0.5 endpoint sigmoid(log 3) = 0.75."""
    cfg = config(audit_weight=1.0, readiness_gate=False, max_episode_steps=10, critic_calibration="levels")
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg)
    rollout.sampler.critic_texts = ["<value>0.50</value>"]
    rollout.audits.calibration = lambda _cfg: Calibration(1.0, 0.0, ((LEFT, math.log(3)), (LEFT - 1, -5.0)))
    batch = rollout.td_update(0, [], Games())
    assert batch.metrics["critic/endpoint_value_mean"] == pytest.approx(0.75)
    assert batch.metrics["critic/calibration_level_range"] == pytest.approx(math.log(3) + 5.0)
    assert rollout.audits.rows == [(0.5, pytest.approx(0.75), 0.0, LEFT, 0)] * 4


def test_levels_refuse_an_environment_without_milestones(tokenizer, protocol):
    class NoMilestones(VaultChainEnv):
        @property
        def stage_count(self) -> int:  # hasattr() is then False: the environment reports no milestones
            raise AttributeError("stage_count")

    cfg = config(audit_weight=1.0, critic_calibration="levels")
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg, make_env=lambda: NoMilestones(max_steps=T))
    with pytest.raises(ConfigError, match="critic-calibration levels: --env .* reports no milestones"):
        rollout.td_update(0, [], Games())
    platt, _ = waiting_rollout(tokenizer, protocol, config(audit_weight=1.0), make_env=lambda: NoMilestones(max_steps=T))
    platt.td_update(0, [], Games())
    assert {lv for _, _, _, lv, _ in platt.audits.rows} == {None}


def test_states_record_their_milestones_left(protocol):
    """A fresh 3-vault game has all 6 left; the state after taking the first vault's key has 5
    (as analysis/mc_critic builds an action's child), after a wrong key still 6."""
    from analysis.mc_critic.states import force_action
    from tempo_plugin.rollout.engine import fresh_state

    make_env = lambda: VaultChainEnv(max_steps=T)  # noqa: E731
    env = make_env()
    start = fresh_state(env, 7, protocol)
    right, wrong = env.vault.correct, next(k for k in env.vault.keys if k != env.vault.correct)
    assert start.milestones_left == LEFT
    assert force_action(start, f"take {right}", make_env, protocol)[0].milestones_left == LEFT - 1
    assert force_action(start, f"take {wrong}", make_env, protocol)[0].milestones_left == LEFT


def test_mc_critic_values_each_state_at_its_level():
    from analysis.mc_critic.cli import calibrated

    cal = Calibration(1.0, 0.0, ((3, math.log(3)),))
    assert calibrated({"value": 0.5, "n": 2}, cal, 3) == {"value": pytest.approx(0.75), "n": 2}
    assert calibrated({"value": 0.5}, cal, 4)["value"] == calibrated({"value": 0.5}, cal)["value"] == 0.5
    assert calibrated(None, cal, 3) is None and calibrated({"value": None}, cal, 3) == {"value": None}

# ------------------------------------------------------------------- --calibration-drift


def test_the_drift_reads_the_map_at_the_newest_update():
    """The critic answers 0.5 everywhere; the audits of update 3 (age -1) win 2 of 10, those of update
    4 (age 0) 8 of 10. Unpenalised, sigmoid(b) = 0.8 and sigmoid(b - d) = 0.2: b = log 4, d = 2 log 4,
    so the map reads 0.8 at the newest update, where the window's average (no drift) reads 0.5."""
    pairs = states(0.5, 0.2) + states(0.5, 0.8)
    ages = [-1] * 10 + [0] * 10
    fit = fit_calibration(pairs, prior=TINY_PRIOR, ages=ages, drift_prior=TINY_PRIOR)
    assert (fit.b, fit.drift) == pytest.approx((math.log(4), 2 * math.log(4)), abs=1e-6)
    assert fit(0.5) == pytest.approx(0.8, abs=1e-6)
    assert fit_calibration(pairs, prior=TINY_PRIOR)(0.5) == pytest.approx(0.5, abs=1e-6)
    # rho_d = 2 pulls d towards 0: the stationarity in b, 10 (sigmoid(b) - 0.8) + 10 (sigmoid(b - d) - 0.2) = 0,
    # and in d, -10 (sigmoid(b - d) - 0.2) + 2 d = 0
    shrunk = fit_calibration(pairs, prior=TINY_PRIOR, ages=ages, drift_prior=2.0)
    b, d = shrunk.b, shrunk.drift
    assert 10 * (sigmoid(b) - 0.8) + 10 * (sigmoid(b - d) - 0.2) == pytest.approx(0.0, abs=1e-9)
    assert -10 * (sigmoid(b - d) - 0.2) + 2 * d == pytest.approx(0.0, abs=1e-9)
    assert 0 < d < 2 * math.log(4) and 0.5 < shrunk(0.5) < 0.8
    with pytest.raises(ValueError, match="1 ages for 20 pairs"):
        fit_calibration(pairs, ages=[0])
    with pytest.raises(ValueError, match="positive priors"):
        fit_calibration(pairs, ages=ages, drift_prior=0.0)


def test_the_window_fits_the_drift_on_its_updates_only_when_asked():
    window = AuditWindow()
    window.add(states(0.5, 0.2), Calibration(), [2] * 10, update=3)
    window.add(states(0.5, 0.8), Calibration(), [2] * 10, update=4)
    pairs = [(e, z) for e, _, z, *_ in window.rows]
    drift = TempoConfig(audit_weight=1.0, critic_calibration="levels", calibration_drift=True)
    assert window.calibration(drift) == fit_calibration(pairs, levels=[2] * 20, ages=[-1] * 10 + [0] * 10)
    assert window.calibration(drift).drift > 0
    assert window.calibration(TempoConfig(audit_weight=1.0)) == fit_calibration(pairs)  # platt, no drift
    # rows restored from a checkpoint that kept no update: no drift to fit
    old = AuditWindow()
    old.restore([[e, c, z, lv] for e, c, z, lv, _ in window.rows])
    assert old.calibration(drift) == fit_calibration(pairs, levels=[2] * 20)


def test_the_drift_needs_a_calibration_map():
    with pytest.raises(ConfigError, match="--calibration-drift .* set --critic-calibration platt or levels"):
        TempoConfig(audit_weight=1.0, critic_calibration="none", calibration_drift=True).validate()


def test_a_refresh_audits_under_the_td_update_it_follows_and_the_drift_is_logged(tokenizer, protocol):
    from tempo_plugin.rollout.games import MC_REFRESH_OFFSET

    cfg = config(audit_weight=1.0, readiness_gate=False, max_episode_steps=10, calibration_drift=True)
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg)
    rollout.warmup_update(5 + MC_REFRESH_OFFSET, [100, 101])  # the refresh after TD update 5, on its own seeds
    assert rollout.audits.rows and {u for *_, u in rollout.audits.rows} == {5}
    rollout.audits.calibration = lambda _cfg: Calibration(1.0, 0.0, (), 0.25)
    batch = rollout.td_update(6, [], Games())
    assert batch.metrics["critic/calibration_drift"] == 0.25
    assert {u for *_, u in rollout.audits.rows} == {5, 6}
