"""Trial states, end reasons and failure classes are Literal types that mypy checks (issue 39
item 4): with the project's mypy settings (strict_equality), a misspelt one in a comparison
is an error, where a plain string compared false and the branch was silently dead."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from hpsearch.executors.base import END_REASONS, EndReason, end_reason
from hpsearch.spec.model import FAILURE_CLASSES, FailureClass
from hpsearch.store import rows

ROOT = Path(__file__).resolve().parent.parent

PLANTED = """
from hpsearch.driver.retry import classify
from hpsearch.executors.base import Ended
from hpsearch.store.rows import TrialRow


def misspelt(t: TrialRow, e: Ended) -> bool:
    return t.state == "complted" or e.reason == "exitted" or classify(e) == "timout"


def spelt_right(t: TrialRow, e: Ended) -> bool:
    return t.state == "completed" or e.reason == "exited" or classify(e) == "timeout"
"""


def test_mypy_finds_a_misspelt_state_reason_and_failure_class(tmp_path):
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.fail("mypy is not installed: scripts/setup.sh test")
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    # --no-site-packages: the installed packages (Optuna, pandas, NumPy) are not analysed
    # (they are Any here, ignore_missing_imports), which keeps a cold run to seconds.
    proc = subprocess.run([mypy, "--config-file", str(ROOT / "pyproject.toml"),
                           "--no-site-packages", "--cache-dir", str(tmp_path / "cache"),
                           str(planted)],
                          cwd=ROOT, capture_output=True, text=True,
                          env={"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["8", "8", "8"], proc.stdout
    for word in ("complted", "exitted", "timout"):
        assert any(f"Literal['{word}']" in line for line in errors), proc.stdout


def test_the_constants_are_the_literals():
    assert set(rows.IN_FLIGHT + rows.DONE + (rows.CANCELLED,)) == set(get_args(rows.TrialState))
    assert FAILURE_CLASSES == get_args(FailureClass)
    assert END_REASONS == get_args(EndReason)


def test_a_reason_read_from_a_file_is_one_of_them_or_the_default():
    assert end_reason("timeout", "lost") == "timeout"
    assert end_reason("rm -rf /", "lost") == "lost" and end_reason(None, "lost") == "lost"
