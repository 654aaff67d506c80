"""Shared fixtures: run the real `hpsearch` CLI as a subprocess, in a temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


class Cli:
    """Runs `python -m hpsearch ...` in `cwd` with runs kept under cwd/hpsearch-runs."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.runs = cwd / "hpsearch-runs"
        self.env = {**os.environ, "HPSEARCH_RUNS_DIR": str(self.runs), "PYTHONUNBUFFERED": "1"}
        self.env.pop("HPSEARCH_FAULT", None)

    def __call__(self, *args: str, env: dict | None = None, timeout: float = 120,
                 check: int | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "hpsearch", *map(str, args)], cwd=self.cwd,
                              env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    def popen(self, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "hpsearch", *map(str, args)],
                                cwd=self.cwd, env={**self.env, **(env or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def write_spec(self, text: str, name: str = "spec.yaml") -> Path:
        path = self.cwd / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)
