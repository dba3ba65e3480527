"""TPPO's init hook gives the critic a bias-free, zero-initialised head, checked on slime's real
model code (``model_provider.LinearForLastLayer`` and ``model._reinitialize_critic_output_layer``)
with megatron-core from the package index, in a subprocess (tests/slime_critic_head_check.py).

Why it matters: with slime's head (bias b, N(0, 0.02) weights) the accumulated logit
z_t = sum_{i<=t} f_i drifts by t * b and starts as a random walk over the response, so V_t is
saturated from the first token instead of 1/2.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.extras import HAVE_SLIME, needs_extra, needs_slime

ROOT = Path(__file__).resolve().parents[1]

needs = needs_slime if not HAVE_SLIME else needs_extra("slime-test", "megatron.core")


@needs
def test_init_makes_the_critic_head_bias_free_and_zero():
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "slime_critic_head_check.py")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    # slime's own head, built before the hook: a bias and N(0, 0.02) weights
    assert seen["before_bias"] and seen["before_weight_abs_sum"] > 0
    # after tppo.init: no bias, zero weight, still slime's layer type and trainable; f = 0 so V = 1/2
    assert not seen["after_bias"] and seen["after_weight_abs_sum"] == 0.0
    assert seen["after_is_linear_for_last_layer"] and seen["after_requires_grad"]
    assert seen["logits"] == [0.0] * 5
    assert seen["again_mro_depth"] == 0  # a second init does not wrap the class again
    # slime's re-draw after loading REF_CKPT (no head in it) now zeroes instead of sampling
    assert seen["redrawn_weight_abs_sum"] == 0.0 and seen["redrawn_bias_abs_sum"] == 0.0
    assert seen["value_loss_patched"]
