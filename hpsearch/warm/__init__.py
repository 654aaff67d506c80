"""Warm starts for Python trials: a server that has imported the trials' heavy modules (torch,
scikit-learn, ...) before anything touches CUDA, and forks a fresh process per trial.

A promoted segment pays its process start again: a Python interpreter, torch's import, CUDA
and the process group. Through `python -m hpsearch.warm run -- script.py args` (what
`{python}` becomes with `executor.warm`), the client hands its script, arguments,
environment, working directory and stdin/stdout/stderr to the server over a Unix socket;
the server forks, and the child runs the script as `__main__` with the modules already
imported. The client stays the trial's process: it forwards signals to the child, ends with
its exit status, and if the client dies the server kills the child's process group. Without
a server (the first trial, or the server gone) the client starts one for the next trial and
runs this one cold, by exec.

Only the standard library is imported here (the client must start fast).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path


def socket_path(preload: list[str]) -> Path:
    """Where the server for these preloads and this interpreter listens: one per user, per
    interpreter and per preload list (short: a Unix socket path has ~100 bytes)."""
    key = hashlib.sha256(f"{sys.executable}\0{','.join(preload)}".encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    return base / f"hpsearch-warm-{os.getuid()}" / f"{key}.sock"
