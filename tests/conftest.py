"""Shared fixtures: run the real `hpsearch` CLI as a subprocess, in a temporary folder."""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys
import textwrap
import types
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


# --- Tiers (docs/testing.md#tiers) ------------------------------------------------------------
# Every test is marked at collection, so a new test lands in its tier without anyone marking it:
#   cluster:  needs the emulated Slurm cluster: anything under tests/slurm/, or any test that
#             uses the slurm_cluster / slurm_flat_cluster / slurm_bound_cluster fixture.
#   external: runs a program that scripts/test.sh installs with apt as root (a browser, a
#             container runtime, a real terminal, MPI): the test, a fixture it uses, or a
#             helper under tests/ that they call names one of EXTERNAL_TOOLS as a string and
#             looks a program up (shutil.which, itself or through another helper).
#   slow:     long end-to-end tests, and those over about 3 s in the quick tier: marked in
#             their file, @pytest.mark.slow (or pytestmark), the reason in a comment beside it.
# `scripts/test.sh --quick` deselects all three; plain `scripts/test.sh` runs everything.

TESTS = Path(__file__).resolve().parent
CLUSTER_FIXTURES = frozenset({"slurm_cluster", "slurm_flat_cluster", "slurm_bound_cluster"})
EXTERNAL_TOOLS = frozenset({"chromium", "chromium-browser", "google-chrome", "ch-run", "tmux",
                            "mpirun"})


def _test_side(obj) -> bool:
    """Whether obj is a function or class defined in a file under tests/."""
    if inspect.isfunction(obj):
        return _under_tests(inspect.unwrap(obj).__code__.co_filename)
    if inspect.isclass(obj):
        return _under_tests(getattr(sys.modules.get(obj.__module__), "__file__", None))
    return False


@functools.cache
def _under_tests(filename: str | None) -> bool:
    return bool(filename) and TESTS in Path(filename).resolve().parents


def _code_facts(code: types.CodeType, tools: set[str], names: set[str]) -> None:
    """The EXTERNAL_TOOLS among code's string constants, and the names it uses, with those
    of the functions nested in it (no source parsing: the compiled code has both)."""
    names.update(code.co_names)
    todo = list(code.co_consts)
    while todo:
        const = todo.pop()
        if isinstance(const, types.CodeType):
            _code_facts(const, tools, names)
        elif isinstance(const, (tuple, frozenset)):
            todo.extend(const)
        elif isinstance(const, str) and const in EXTERNAL_TOOLS:
            tools.add(const)


@functools.cache
def _unit(obj) -> tuple[frozenset[str], bool, tuple]:
    """For a function or class defined under tests/: the tool names it holds as strings,
    whether it calls `which` (shutil.which or a name `which`), and the functions and
    classes under tests/ it refers to by name."""
    tools: set[str] = set()
    names: set[str] = set()
    if inspect.isclass(obj):
        for attr in vars(obj).values():
            attr = getattr(attr, "__func__", attr)  # staticmethod, classmethod
            for func in (attr, getattr(attr, "fget", None)):  # property
                if inspect.isfunction(func):
                    _code_facts(func.__code__, tools, names)
        scope = vars(sys.modules[obj.__module__]) if obj.__module__ in sys.modules else {}
    else:
        func = inspect.unwrap(obj)
        _code_facts(func.__code__, tools, names)
        scope = func.__globals__
    refs = tuple(scope[n] for n in sorted(names)
                 if n in scope and scope[n] is not obj and _test_side(scope[n]))
    return frozenset(tools), "which" in names, refs


@functools.cache
def _looks_up(obj, depth: int = 3) -> bool:
    """Whether obj calls `which`, itself or through helpers under tests/ (a few levels)."""
    _, which, refs = _unit(obj)
    return which or (depth > 0 and any(_looks_up(r, depth - 1) for r in refs))


@functools.cache
def _tools_run_by(root) -> frozenset[str]:
    """The EXTERNAL_TOOLS that this function (a test or a fixture), or the helpers under
    tests/ that it reaches, name as a string where they also look a program up."""
    needed: set[str] = set()
    seen: set[int] = set()
    todo = [(root, 0)]
    while todo:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > 4:
            continue
        seen.add(id(obj))
        tools, _, refs = _unit(obj)
        if tools and _looks_up(obj):
            needed |= tools
        todo.extend((r, depth + 1) for r in refs)
    return frozenset(needed)


@functools.cache
def _under_tests_slurm(filename: str) -> bool:
    return TESTS / "slurm" in Path(filename).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if _under_tests_slurm(str(item.path)) or fixtures & CLUSTER_FIXTURES:
            item.add_marker(pytest.mark.cluster)
        roots = [getattr(item, "function", None)]
        info = getattr(item, "_fixtureinfo", None)
        for name in fixtures:
            for fixturedef in (info.name2fixturedefs.get(name, ()) if info else ()):
                roots.append(fixturedef.func)
        tools = set().union(*(_tools_run_by(r) for r in roots if _test_side(r)))
        if tools:
            item.add_marker(pytest.mark.external(*sorted(tools)))


# Issue 23 item 5: an empty store.sqlite once appeared in the repository root during a
# parallel run. Nothing hpsearch or a test does may write there (every test works under its
# tmp_path), so each test checks that the root gained no entry while it ran and names what
# appeared. Under xdist the other worker's test ran at the same time: the message says so.
# the test tools' own caches, made where they run: pytest, mypy, ruff, grimp (import-linter,
# tests/test_architecture.py) and hypothesis' example database
_ROOT_LEFT_ALONE = frozenset({".pytest_cache", "__pycache__", ".mypy_cache", ".ruff_cache",
                              ".grimp_cache", ".hypothesis"})


@pytest.fixture(autouse=True)
def _repository_root_gains_nothing(request: pytest.FixtureRequest):
    before = set(os.listdir(ROOT))
    yield
    new = sorted(set(os.listdir(ROOT)) - before - _ROOT_LEFT_ALONE)
    if new:
        other = " (or the other xdist worker's test running meanwhile)" \
            if os.environ.get("PYTEST_XDIST_WORKER") else ""
        pytest.fail(f"{request.node.nodeid}{other} left {', '.join(new)} in the repository "
                    f"root {ROOT}: tests and hpsearch write only under tmp_path / runs dirs"
                    f"{_sqlite_hint(new)}", pytrace=False)


def _sqlite_hint(new: list[str]) -> str:
    """What made an empty *.sqlite, when a command outside the tests may have: any
    read-write SQLite open of a path that does not exist creates it, empty (the sqlite3
    shell, sqlite_utils.Database, sqlite3.connect), where the read-only ones create
    nothing (docs/testing.md#tiers)."""
    empty = [n for n in new if n.endswith(".sqlite") and (ROOT / n).is_file()
             and (ROOT / n).stat().st_size == 0]
    return (f" ({', '.join(empty)} is empty: a read-write SQLite open of a missing path makes "
            "that, e.g. `sqlite3 store.sqlite` or sqlite_utils.Database('store.sqlite') run "
            "here; open stores with `sqlite3 -readonly`)") if empty else ""


_root_at_start: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _root_at_start.update(os.listdir(ROOT))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The same check over the whole run, in the process that started it (the xdist
    controller): what appeared between tests or after them (a process that outlived its
    test) fails the run too."""
    if hasattr(session.config, "workerinput"):
        return
    new = sorted(set(os.listdir(ROOT)) - _root_at_start - _ROOT_LEFT_ALONE)
    if new:
        print(f"\nFAILED: the repository root {ROOT} gained {', '.join(new)} during this "
              "run, outside any one test (between tests, from a process that outlived "
              f"its test, or from a command run meanwhile){_sqlite_hint(new)}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
