"""No two packages import each other (issue 39 item 1): the graph of hpsearch's subpackages,
drawn from grimp's module graph (a module's package is its first name under hpsearch; a
root module is its own node), has no cycle; and the import-linter contract names whole
packages (or root modules) only, no slice of one."""

from __future__ import annotations

import grimp

from tests.test_architecture import _cycles
from tests.test_architecture_docs import _contract_layers


def package_graph(package: str) -> grimp.ImportGraph:
    """A graph whose modules are `package`'s subpackages and root modules, with an edge
    where any module of one imports any module of another."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    packages = grimp.ImportGraph()

    def node(module: str) -> str:
        return ".".join(module.split(".")[:2])

    for module in graph.modules:
        packages.add_module(node(module))
        for imported in graph.find_modules_directly_imported_by(module):
            if node(imported) != node(module):
                packages.add_import(importer=node(module), imported=node(imported))
    return packages


def test_no_package_imports_another_that_imports_it_back():
    assert _cycles(package_graph("hpsearch")) == []


def test_the_package_cycle_finder_finds_a_cycle_no_module_cycle_shows(tmp_path, monkeypatch):
    """a.one imports b.two, b.three imports a.four: no two modules import each other, but
    the packages a and b do."""
    for name, text in {"a/one.py": "from cyc import b\nfrom cyc.b import two\n",
                       "a/four.py": "", "b/two.py": "",
                       "b/three.py": "from cyc.a import four\n"}.items():
        path = tmp_path / "cyc" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    (tmp_path / "cyc" / "__init__.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("cyc")) == []
    assert _cycles(package_graph("cyc")) == [["cyc.a", "cyc.b"]]


def test_the_layers_contract_names_whole_packages_only():
    names = ["hpsearch." + name for layer in _contract_layers() for name in sorted(layer)]
    graph = grimp.build_graph("hpsearch", exclude_type_checking_imports=True)
    nodes = {".".join(module.split(".")[:2]) for module in graph.modules} - {"hpsearch"}
    assert [n for n in names if n not in nodes] == []  # no hpsearch.spec.model and the like
    assert sorted(nodes - set(names)) == ["hpsearch.__main__"]  # every package has its layer
