"""The repository-root guard of tests/conftest.py (issue 23 item 5): a test during which the
root gains an entry fails and names it, and an empty *.sqlite gets the likely cause (a
read-write SQLite open of a missing path, as the sqlite3 shell and sqlite_utils.Database
make one) and the read-only way instead.

The real conftest runs in a pytest of its own, copied into a folder that stands for the
repository root (its ROOT is the folder above the conftest's own)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

TESTS = textwrap.dedent("""
    import sqlite3
    from pathlib import Path

    ROOT = Path(__file__).resolve().parent.parent

    def test_opens_a_missing_store_read_write():
        sqlite3.connect(ROOT / "store.sqlite").execute("select 1").fetchall()

    def test_opens_a_missing_store_read_only():
        try:
            sqlite3.connect(f"file:{ROOT}/other.sqlite?mode=ro", uri=True)
        except sqlite3.OperationalError:
            pass  # "unable to open database file": nothing made

    def test_writes_a_file():
        (ROOT / "notes.txt").write_text("x")
""")


def test_a_test_that_writes_in_the_root_fails_naming_what_it_left(tmp_path):
    (tmp_path / "tests").mkdir()
    shutil.copy(CONFTEST, tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_writes.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # no xdist
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "no:randomly", "tests"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "3 passed, 2 errors" in out, out  # the guard fails a test at its teardown
    assert ("test_opens_a_missing_store_read_write left store.sqlite in the repository root"
            in out), out
    assert "store.sqlite is empty: a read-write SQLite open of a missing path" in out, out
    assert "sqlite3 -readonly" in out, out
    assert "test_writes_a_file left notes.txt" in out, out
    assert not (tmp_path / "other.sqlite").exists()
    assert (tmp_path / "store.sqlite").stat().st_size == 0  # what the open made: empty
