"""What a test needs beyond the default install, and the one way it skips without it.

``bash scripts/test.sh`` installs the ``test`` and ``math`` extras. A test that needs more (another
extra, or slime's source) skips with a reason made here, "needs the <extra> extra (<module>)" or
"needs slime's source (TEMPO_SLIME_SRC)", and ``tests/conftest.py`` sums those reasons up in one
line at the end of the run with the command that runs them.
"""

import importlib.util

import pytest

# Everything the optional tests need: the extras (pyproject.toml) and slime's source.
FULL_COMMAND = ("TEMPO_EXTRAS=test,math,textworld,alfworld,slime-test,smollm2 "
                "TEMPO_SLIME_SRC=<slime's source at the pinned commit> bash scripts/test.sh")
EXTRA_PREFIX = "needs the "
SLIME_REASON = "needs slime's source (TEMPO_SLIME_SRC)"


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def extra_reason(extra: str, module: str) -> str:
    return f"{EXTRA_PREFIX}{extra} extra ({module})"


def missing_extra(extra: str, *modules: str) -> str:
    """The skip reason when one of ``modules`` (installed by ``extra``) is missing, else ''."""
    absent = [m for m in modules if not importable(m)]
    return extra_reason(extra, ", ".join(absent)) if absent else ""


def needs_extra(extra: str, *modules: str) -> pytest.MarkDecorator:
    """Mark a test (or, as ``pytestmark``, a module) that needs ``extra``'s ``modules``."""
    reason = missing_extra(extra, *modules)
    return pytest.mark.skipif(bool(reason), reason=reason or "installed")


def import_extra(extra: str, module: str):
    """Import ``module`` (of ``extra``) or skip the test, or the module when called at import."""
    return pytest.importorskip(module, reason=extra_reason(extra, module))


HAVE_SLIME = importable("slime")
needs_slime = pytest.mark.skipif(not HAVE_SLIME, reason=SLIME_REASON)


def skip_module_without_slime() -> None:
    if not HAVE_SLIME:
        pytest.skip(SLIME_REASON, allow_module_level=True)


def summary_key(reason: str) -> str:
    """What a skip reason says is missing ('smollm2 extra', "slime's source"), '' for other skips."""
    reason = reason.removeprefix("Skipped: ")
    if reason.startswith(SLIME_REASON):
        return "slime's source"
    if reason.startswith(EXTRA_PREFIX) and " extra (" in reason:
        return reason[len(EXTRA_PREFIX):reason.index(" extra (")] + " extra"
    return ""
