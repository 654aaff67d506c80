"""The package's plan holds (docs/architecture.md): no import cycles, layers respected (the
import-linter contract in pyproject.toml), a short root, and no function or module too long
to read (MAX_FUNCTION_LINES, MAX_MODULE_LINES).

Lazy imports inside functions count: a cycle hidden in a function still ties two modules
together. Imports under `if TYPE_CHECKING:` do not (they never run)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hpsearch"
MAX_FUNCTION_LINES = 80  # def line to last line, decorators left out (ast's lineno)
MAX_MODULE_LINES = 600


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_another_that_imports_it_back():
    graph = grimp.build_graph("hpsearch", exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The test above could pass by finding nothing: here it must find a planted cycle."""
    pkg = tmp_path / "cyclic_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyclic_pkg import b\n")
    (pkg / "b.py").write_text("from cyclic_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("cyclic_pkg")) == [["cyclic_pkg.a", "cyclic_pkg.b"]]


def test_every_module_imports_only_from_layers_below_it():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports (import-linter) is not installed: scripts/setup.sh test")
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout


def test_the_root_is_a_table_of_contents():
    """What users import (trial, api, errors) and a few leaves; everything else is in a
    subpackage named for what it holds."""
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 12, modules


def _too_long(package: Path) -> list[str]:
    """Each module of `package` over MAX_MODULE_LINES lines and each function (methods and
    nested functions included) over MAX_FUNCTION_LINES, as "path:line name (N lines)"."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(package.parent)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{where} ({lines} lines)")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_or_module_is_too_long():
    """A function over MAX_FUNCTION_LINES does several things: extract a helper. A module
    over MAX_MODULE_LINES holds several: split it along a seam (docs/architecture.md)."""
    found = _too_long(PACKAGE)
    assert not found, (f"over {MAX_FUNCTION_LINES} lines (a function) or {MAX_MODULE_LINES} "
                       "(a module): extract a helper, or split the module along a seam:\n"
                       + "\n".join(found))


def test_the_size_check_finds_a_long_module_and_a_long_function(tmp_path):
    """The test above could pass by finding nothing: here it must find both planted, and
    neither of those exactly at the limits."""
    pkg = tmp_path / "long_pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (pkg / "sub" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    statements = [f"y{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1)]
    funcs = ("def at_the_limit():\n" + "".join("    " + line for line in statements)
             + "\n\nclass C:\n    def long(self):\n"
             + "".join("        " + line for line in statements) + "        pass\n")
    (pkg / "sub" / "funcs.py").write_text(funcs)
    line = funcs.splitlines().index("    def long(self):") + 1
    assert _too_long(pkg) == [
        f"long_pkg/sub/funcs.py:{line} long ({MAX_FUNCTION_LINES + 1} lines)",
        f"long_pkg/sub/long.py ({MAX_MODULE_LINES + 1} lines)"]
