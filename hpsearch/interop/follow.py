"""The `--follow` loop every mirror shares (`hpsearch optuna`, `tensorboard`, `mlflow`,
`dashboard`): sync, say what changed, wait, until the experiment's driver has ended."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hpsearch.interop.store_view import StoreView, read_view

Result = TypeVar("Result")


def follow(exp_dir: Path, sync: Callable[[StoreView], Result], interval: float,
           driver_running: Callable[[], bool], said: Callable[[Result], None],
           stop: Callable[[], bool] = lambda: False) -> Result:
    """Call sync(view of the store) every `interval` seconds until the driver has ended (the
    last sync comes after it ended, so it holds the final states), or `stop()` is true; each
    result goes to said(). Returns the last sync's result."""
    while True:
        running = driver_running()
        result = sync(read_view(exp_dir))
        said(result)
        if not running or stop():
            return result
        time.sleep(interval)
