"""The refresh loop: a rich Live display redrawn from a fresh snapshot every `refresh`
seconds (0.5 s by default: at least once a second).

Two ways in:
- `watch(exp_dir)`: `hpsearch watch NAME`. Only reads the store; `q` or Ctrl-C
  (KeyboardInterrupt) leaves the view and nothing else: the driver, a separate process,
  goes on.
- `drive_with_view(spec, create)`: `hpsearch submit` / `resume` attached to a terminal. The
  driver keeps the main thread (it owns the SIGINT/SIGTERM handlers: Ctrl-C cancels the
  running trials, as without the view) and the view runs in a thread until the driver ends.

The view uses the terminal's alternate screen, so leaving it gives the shell back as it was;
it needs nothing but a terminal that understands ANSI escapes (plain SSH is enough).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path

from hpsearch.store.lockfile import DriverLock
from hpsearch.store.runs import STORE_FILE

REFRESH = 0.5  # seconds between redraws
WATCH_FOOTER = "q or Ctrl-C leaves the view; the search goes on"
QUIT_KEYS = frozenset("qQ")
SUBMIT_FOOTER = ("Ctrl-C stops the search (cancels running trials; twice: exits at once); "
                 "to only watch, use `hpsearch watch NAME`")


def _console():
    from rich.console import Console
    return Console()


def topology_file(exp_dir: Path) -> str | None:
    """$HPSEARCH_TOPOLOGY, else the experiment's placement.topology (docs/placement.md)."""
    import os

    from hpsearch.driver.session import placement_topology
    return os.environ.get("HPSEARCH_TOPOLOGY") or placement_topology(exp_dir.parent,
                                                                      exp_dir.name)


def render_once(exp_dir: Path, width: int | None = None, height: int | None = None,
                console=None) -> None:
    """Print one snapshot (for `watch --once`, and where stdout is not a terminal)."""
    from hpsearch.tui.model import ClusterWatch, SnapshotSource
    from hpsearch.tui.view import render
    console = console or _console()
    source = SnapshotSource(exp_dir)
    try:
        cluster = ClusterWatch(topology_file=topology_file(exp_dir))._query() \
            if source.learn_on_slurm() else None
        width = width or console.width
        height = height or (console.height if console.is_terminal else 200)
        snap = source.snapshot(cluster or (None, None), rows=max(1, height))
        console.print(render(snap, width, height), width=width)
    finally:
        source.close()


def _run_view(exp_dir: Path, stop: threading.Event, footer: str, refresh: float,
              console=None) -> None:
    """Redraw until `stop` is set (or KeyboardInterrupt, which propagates)."""
    from rich.live import Live

    from hpsearch.tui.model import ClusterWatch, SnapshotSource
    from hpsearch.tui.view import render

    console = console or _console()
    while not (exp_dir / STORE_FILE).exists():  # submit: the driver creates it first
        if stop.wait(0.1):
            return
    source = SnapshotSource(exp_dir)
    # asked only once the experiment shows Slurm jobs
    cluster = ClusterWatch(topology_file=topology_file(exp_dir))
    try:
        with Live(console=console, auto_refresh=False, screen=True,
                  redirect_stdout=False, redirect_stderr=False) as live:
            while True:
                width, height = console.size
                try:
                    snap = source.snapshot(cluster.get() if source.on_slurm
                                           else (None, None), rows=max(1, height))
                    live.update(render(snap, width, height, footer), refresh=True)
                except sqlite3.Error:
                    pass  # a moment the file cannot be read (replaced, checkpointed): next turn
                if stop.wait(refresh):
                    return
    finally:
        source.close()


def watch(exp_dir: Path, refresh: float = REFRESH, console=None) -> int:
    """`hpsearch watch`: show the experiment until Ctrl-C; returns 0. Never touches the
    driver or the store (read-only)."""
    console = console or _console()
    stop = threading.Event()
    keys = threading.Thread(target=_quit_on_key, args=(stop,), name="hpsearch-keys",
                            daemon=True)
    try:
        with _keys_unbuffered() as reading:
            if reading:
                keys.start()
            _run_view(exp_dir, stop, WATCH_FOOTER, refresh, console)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if keys.is_alive():
            keys.join(timeout=1)
    pid = DriverLock(exp_dir).holder()
    name = exp_dir.name
    if pid:
        console.print(f"left the view of {name}; the search goes on (driver pid {pid}). "
                      f"Again: hpsearch watch {name}   stop it: hpsearch cancel {name}")
    else:
        console.print(f"left the view of {name} (no driver running). "
                      f"hpsearch status {name} lists its trials")
    return 0


@contextlib.contextmanager
def _keys_unbuffered():
    """stdin in cbreak mode (keys arrive one by one, not echoed; Ctrl-C still signals) while
    the view runs; yields whether keys can be read at all (stdin is a terminal)."""
    import sys
    import termios
    import tty
    try:
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except (OSError, ValueError, termios.error):  # not a terminal: Ctrl-C only
        yield False
        return
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_on_key(stop: threading.Event) -> None:
    """Set `stop` when a quit key is pressed on stdin (or stdin closes)."""
    import os
    import select
    import sys
    fd = sys.stdin.fileno()
    while not stop.is_set():
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            key = os.read(fd, 32).decode(errors="replace")
            if not key or QUIT_KEYS & set(key):
                stop.set()


def drive_with_view(spec, create: bool, refresh: float = REFRESH) -> int:
    """Run the driver in this (main) thread with the live view in another; returns the
    driver's exit code once it ended and the view has given the screen back."""
    from hpsearch.driver import session

    stop = threading.Event()
    failure: list[BaseException] = []

    def show() -> None:
        try:
            _run_view(spec.experiment_dir, stop, SUBMIT_FOOTER, refresh)
        except BaseException as exc:  # noqa: BLE001 - reported after the driver ends
            failure.append(exc)

    view = threading.Thread(target=show, name="hpsearch-view", daemon=True)
    view.start()
    began = time.monotonic()
    try:
        return session.drive(spec, create, lambda line: None)
    finally:
        # Let the last state show for a moment when the search was quick.
        if time.monotonic() - began < refresh:
            time.sleep(refresh)
        stop.set()
        view.join(timeout=10)
        if failure:
            import sys
            print(f"hpsearch: the live view failed ({failure[0]!r}); the search was not "
                  "affected", file=sys.stderr)
