"""docs/architecture.md tells the truth about the package: its module tree names every module
in the block of its package, its layers picture has the rows of the import-linter contract,
and every package's __init__.py says what the package holds.

The module tree is the page's first ``` block. A package's block is its line (two spaces, the
name, a slash: `  driver/`) and the lines under it that are indented further (a subpackage
such as `    sim/` is listed in its parent's block); the root's modules are named on the
`hpsearch/` line and the other two-space lines that are not a package's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hpsearch"
PAGE = ROOT / "docs" / "architecture.md"


def _blocks(tree: str) -> dict[str, str]:
    """The module tree's text by top-level package ("" for the root's lines)."""
    blocks: dict[str, str] = {"": ""}
    current: str | None = None
    for line in tree.splitlines():
        package = re.match(r"^  ([a-z_]+)/", line)
        if package:
            current = package.group(1)
            blocks.setdefault(current, "")
        elif re.match(r"^  \S", line) or line.startswith("hpsearch/"):
            current = None
            blocks[""] += line + "\n"
        if current:
            blocks[current] += line + "\n"
    return blocks


def unlisted(package: Path, page: str) -> tuple[int, list[str]]:
    """(how many modules `package` has, those the page's module tree does not name in the
    block of their top-level package). A module is every .py file but __init__.py, named
    by its stem, with or without .py, not as part of a longer word or a path."""
    blocks = _blocks(page.split("```", 2)[1])
    modules = sorted(p.relative_to(package) for p in package.rglob("*.py")
                     if p.name != "__init__.py")
    missing = []
    for rel in modules:
        block = blocks.get(rel.parts[0] if len(rel.parts) > 1 else "", "")
        if not re.search(rf"(?<![\w/.]){re.escape(rel.stem)}(\.py)?\b", block):
            missing.append(rel.as_posix())
    return len(modules), missing


def test_every_module_is_on_the_architecture_page():
    total, missing = unlisted(PACKAGE, PAGE.read_text())
    assert total > 100
    assert missing == [], (f"{len(missing)} of {total} modules are not in the module tree of "
                           f"docs/architecture.md (name each, with a few words, in the block "
                           f"of its package): {' '.join(missing)}")


def test_the_check_finds_a_module_missing_from_the_page(tmp_path):
    """The test above could pass by reading nothing: here a page must miss what it misses."""
    pkg = tmp_path / "pkg"
    for path in ("__init__.py", "top.py", "parts/__init__.py", "parts/first.py",
                 "parts/second.py", "parts/inner/__init__.py", "parts/inner/deep.py",
                 "other/__init__.py", "other/lone.py"):
        (pkg / path).parent.mkdir(parents=True, exist_ok=True)
        (pkg / path).write_text("")
    page = ("# Layout\n\n```\nhpsearch/\n  top.py  a root module (and `second` named here)\n"
            "  parts/       first.py (the first part), firsts\n"
            "    inner/     deep: below parts\n"
            "  other/       lonely, parts/second.py, other.second\n"
            "```\n\n```\nsecond lone\n```\n")
    assert unlisted(pkg, page) == (5, ["other/lone.py", "parts/second.py"])
    fixed = page.replace("firsts", "second").replace("lonely", "lone")
    assert unlisted(pkg, fixed) == (5, [])


def _contract_layers() -> list[set[str]]:
    """The layers of the import-linter contract in pyproject.toml, top first."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = re.search(r"^layers = \[(.*?)^\]", text, re.S | re.M)
    assert listed, "no layers list in pyproject.toml's [tool.importlinter]"
    return [{name.strip().removeprefix("hpsearch.") for name in row.split(":")}
            for row in re.findall(r'"([^"]+)"', listed.group(1))]


def _pictured_layers() -> list[set[str]]:
    """The rows of the picture under "## Layers" in docs/architecture.md, top first."""
    section = PAGE.read_text().split("\n## Layers\n", 1)[1]
    picture = section.split("```", 2)[1]
    rows = []
    for line in picture.splitlines():
        row = re.match(r"^\s*[|v]?\s*\| (.+?) \|$", line)
        if row:
            names = row.group(1).strip().split("  ")[0]
            rows.append({name.strip() for name in names.split("|")})
    return rows


def test_the_layers_picture_has_the_contract_s_layers():
    assert _pictured_layers() == _contract_layers()


def test_every_package_says_what_it_holds():
    missing = [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("__init__.py"))
               if not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == [], f"packages without a docstring in __init__.py: {missing}"


def test_no_reference_to_a_design_doc_outside_the_repository():
    """The design doc the project started from is not in the repository: the rules it set
    are in docs/architecture.md (the invariants, the layers), which is what to cite."""
    name = "DESIGN" + ".md"
    places = [*PACKAGE.rglob("*.py"), *(ROOT / "docs").rglob("*.md"), *ROOT.glob("tests/**/*"),
              ROOT / "README.md"]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in places if p.is_file()
             and p.suffix in (".py", ".md", ".txt", "")
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if name in line]
    assert found == [], f"{name} is not in the repository; cite docs/architecture.md: {found}"
