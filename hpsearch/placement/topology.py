"""The cluster's switch tree, and live node state per leaf switch.

Sources, all ending in one `Topology`:
- `scontrol show topology` (the tree plugin's view; parsed by hpsearch.slurm.parse),
- a topology.conf file (`SwitchName=s1 Nodes=n[1-2]`, `SwitchName=spine Switches=s[1-4]`),
- Slurm 25.05's topology.yaml (a list of topologies; the tree or block one is used),
- a plain YAML map `{leaf: hostlist or [nodes], parents: {switch: parent}}`.

A leaf is a switch that holds nodes. A node listed under two leaves is kept under the first
in sorted leaf-name order (a warning says so), so every node has at most one leaf. Malformed
files raise BadInput naming the file, line and what was expected (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from hpsearch.errors import BadInput
from hpsearch.slurm.hostlist import expand
from hpsearch.slurm.parse import NodeState, Switch, parse_topology
from hpsearch.spec.yamlpos import dotted, load_yaml_with_lines


@dataclass(frozen=True)
class Topology:
    """Leaf switches and their nodes (in file order), each switch's parent, and warnings
    met while reading (e.g. a node under two leaves)."""

    leaves: dict[str, tuple[str, ...]]
    parents: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @cached_property
    def _leaf_by_node(self) -> dict[str, str]:
        return {node: leaf for leaf, nodes in self.leaves.items() for node in nodes}

    def leaf_of(self, node: str) -> str | None:
        """The leaf switch a node hangs off, or None if it is under no leaf."""
        return self._leaf_by_node.get(node)

    def unplaced(self, nodes: list[str]) -> list[str]:
        """Those of `nodes` under no leaf, in their order, each once."""
        return [n for n in dict.fromkeys(nodes) if n not in self._leaf_by_node]

    def leaves_spanned(self, nodes: list[str]) -> set[str]:
        """The leaf switches that `nodes` hang off (unplaced nodes add none)."""
        return {self._leaf_by_node[n] for n in nodes if n in self._leaf_by_node}

    def path_to_root(self, switch: str) -> list[str]:
        """[switch, its parent, ..., the top switch]. KeyError for an unknown switch."""
        if switch not in self.leaves and switch not in self.parents \
                and switch not in set(self.parents.values()):
            raise KeyError(f"unknown switch {switch!r}")
        path = [switch]
        while path[-1] in self.parents and len(path) <= len(self.parents):
            path.append(self.parents[path[-1]])
        return path


def _build(leaf_nodes: dict[str, list[str]], children: dict[str, list[str]],
           source: str) -> Topology:
    """Leaves and child-switch lists -> Topology: one leaf per node, parents per switch."""
    warnings: list[str] = []
    owner: dict[str, str] = {}
    for leaf in sorted(leaf_nodes):
        for node in leaf_nodes[leaf]:
            if node in owner:
                warnings.append(f"{source}: node {node} is under leaves {owner[node]} and "
                                f"{leaf}; using {owner[node]}")
            else:
                owner[node] = leaf
    leaves = {leaf: tuple(n for n in nodes if owner[n] == leaf)
              for leaf, nodes in leaf_nodes.items()}
    parents: dict[str, str] = {}
    for parent, kids in children.items():
        for kid in kids:
            if kid in parents and parents[kid] != parent:
                warnings.append(f"{source}: switch {kid} is under switches {parents[kid]} "
                                f"and {parent}; using {parents[kid]}")
                continue
            parents[kid] = parent
    return Topology(leaves=leaves, parents=parents, warnings=tuple(warnings))


def topology_from_switches(switches: list[Switch], source: str) -> Topology:
    """`scontrol show topology` switches -> Topology. Leaves are level-0 switches (and any
    switch with nodes but no child switches); upper switches list every node below them,
    which is not membership."""
    leaf_nodes = {s.name: list(s.nodes) for s in switches
                  if s.level == 0 or (s.nodes and not s.switches)}
    children = {s.name: list(s.switches) for s in switches if s.switches}
    return _build(leaf_nodes, children, source)


# -- topology.conf -------------------------------------------------------------------------

_CONF_KEYS = {"switchname": "SwitchName", "nodes": "Nodes", "switches": "Switches",
              "linkspeed": "LinkSpeed"}
_CONF_EXPECTED = "expected SwitchName=NAME with Nodes=HOSTLIST or Switches=HOSTLIST " \
                 "(LinkSpeed=N optional)"


def _conf_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line): comments cut, `\\`-continued lines joined."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        more = line.endswith("\\")
        if more:
            line = line[:-1]
        if pending is not None:
            pending = (pending[0], pending[1] + " " + line)
        else:
            pending = (number, line)
        if not more:
            if pending[1].strip():
                out.append(pending)
            pending = None
    if pending is not None and pending[1].strip():
        out.append(pending)
    return out


def _hostlist(value: str, file: str, line: int | None, key: str) -> list[str]:
    try:
        names = expand(value)
    except ValueError as exc:
        raise BadInput(f"bad hostlist: {exc}", file, line, key) from None
    if not names:
        raise BadInput("empty hostlist (expected names such as n[001-016],gpu1)", file, line,
                       key)
    return names


def parse_topology_conf(text: str, file: str) -> Topology:
    """A Slurm topology.conf (tree plugin) -> Topology. Keys are case-insensitive; `#`
    starts a comment; a line ending in `\\` continues on the next. Each switch has exactly
    one of Nodes= (a leaf) or Switches= (a parent), as Slurm requires."""
    leaf_nodes: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    defined_at: dict[str, int] = {}
    for number, line in _conf_lines(text):
        fields: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            canonical = _CONF_KEYS.get(key.lower())
            if not sep or canonical is None:
                raise BadInput(f"unknown word {word!r}: {_CONF_EXPECTED}", file, number)
            if canonical in fields:
                raise BadInput(f"{canonical} given twice on one line", file, number,
                               canonical)
            if not value:
                raise BadInput(f"{canonical}= has no value", file, number, canonical)
            fields[canonical] = value
        name = fields.get("SwitchName")
        if name is None:
            raise BadInput(f"no SwitchName: {_CONF_EXPECTED}", file, number)
        if name in defined_at:
            raise BadInput(f"switch {name} already defined on line {defined_at[name]}",
                           file, number, "SwitchName")
        if "LinkSpeed" in fields and not fields["LinkSpeed"].isdigit():
            raise BadInput("LinkSpeed must be a whole number", file, number, "LinkSpeed")
        has_nodes, has_switches = "Nodes" in fields, "Switches" in fields
        if has_nodes == has_switches:
            what = "both" if has_nodes else "neither"
            raise BadInput(f"switch {name} has {what} of Nodes= and Switches= (expected "
                           "exactly one: Nodes for a leaf, Switches for a parent)",
                           file, number)
        defined_at[name] = number
        if has_nodes:
            leaf_nodes[name] = _hostlist(fields["Nodes"], file, number, "Nodes")
        else:
            children[name] = _hostlist(fields["Switches"], file, number, "Switches")
    _check_children(children, defined_at, file, lambda parent, kid: defined_at[parent])
    return _build(leaf_nodes, children, file)


def _check_children(children: dict[str, list[str]], known: Any, file: str,
                    line_of: Any) -> None:
    """Every child switch is defined, and no switch is its own ancestor."""
    for parent, kids in children.items():
        for kid in kids:
            if kid not in known:
                raise BadInput(f"switch {parent} lists undefined switch {kid} (expected a "
                               "SwitchName defined in this file)", file,
                               line_of(parent, kid), "Switches")
    parent_of = {kid: parent for parent, kids in children.items() for kid in kids}
    for start in parent_of:
        seen, at = {start}, start
        while at in parent_of:
            at = parent_of[at]
            if at in seen:
                raise BadInput(f"switch {start} is its own ancestor (a cycle; expected a "
                               "tree)", file, line_of(start, start), "Switches")
            seen.add(at)


# -- YAML: Slurm's topology.yaml and the plain map ----------------------------------------

def _names(value: Any, file: str, lines: dict, path: tuple) -> list[str]:
    """A hostlist string, or a list of names/hostlists -> node or switch names."""
    line = lines.get(path)
    where = dotted(path)
    if isinstance(value, str):
        return _hostlist(value, file, line, where)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        names: list[str] = []
        for i, item in enumerate(value):
            names.extend(_hostlist(item, file, lines.get(path + (i,), line),
                                   dotted(path + (i,))))
        return list(dict.fromkeys(names))
    raise BadInput("expected a hostlist such as n[01-04] or a non-empty list of names",
                   file, line, where)


def _slurm_yaml(data: list, lines: dict, file: str) -> Topology:
    """Slurm 25.05 topology.yaml: the first topology with `cluster_default: true`, else the
    first; a tree's switches, or a block topology's blocks (as leaves)."""
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or "topology" not in entry:
            raise BadInput("expected a topology: a mapping with `topology: NAME` and one of "
                           "tree, block or flat", file, lines.get((i,)), dotted((i,)))
    chosen = next((i for i, e in enumerate(data) if e.get("cluster_default") is True), 0)
    entry, base = data[chosen], (chosen,)
    kinds = [k for k in ("tree", "block", "flat") if k in entry]
    if len(kinds) != 1:
        raise BadInput("expected exactly one of tree, block or flat", file,
                       lines.get(base), dotted(base))
    kind = kinds[0]
    if kind == "flat":
        return Topology(leaves={}, warnings=(f"{file}: topology {entry['topology']} is flat "
                                             "(no switches)",))
    list_key, name_key = ("switches", "switch") if kind == "tree" else ("blocks", "block")
    body = entry[kind]
    if not isinstance(body, dict) or not isinstance(body.get(list_key), list):
        raise BadInput(f"expected `{list_key}:` a list of {{{name_key}: NAME, ...}}", file,
                       lines.get(base + (kind,)), dotted(base + (kind,)))
    leaf_nodes: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    line_of_switch: dict[str, int | None] = {}
    allowed = {name_key, "nodes", "children", "link_speed"} if kind == "tree" \
        else {name_key, "nodes"}
    for j, item in enumerate(body[list_key]):
        path = base + (kind, list_key, j)
        if not isinstance(item, dict) or not isinstance(item.get(name_key), str):
            raise BadInput(f"expected a mapping with `{name_key}: NAME`", file,
                           lines.get(path), dotted(path))
        name = item[name_key]
        unknown = sorted(set(item) - allowed, key=str)
        if unknown:
            raise BadInput(f"unknown key {unknown[0]!r} (expected {', '.join(sorted(allowed))})",
                           file, lines.get(path + (unknown[0],)), dotted(path + (unknown[0],)))
        if name in line_of_switch:
            raise BadInput(f"{name_key} {name} defined twice", file,
                           lines.get(path + (name_key,)), dotted(path + (name_key,)))
        line_of_switch[name] = lines.get(path + (name_key,))
        if ("nodes" in item) == ("children" in item):
            raise BadInput(f"{name_key} {name}: expected exactly one of nodes or children",
                           file, lines.get(path), dotted(path))
        if "nodes" in item:
            leaf_nodes[name] = _names(item["nodes"], file, lines, path + ("nodes",))
        else:
            children[name] = _names(item["children"], file, lines, path + ("children",))
    _check_children(children, line_of_switch, file,
                    lambda parent, kid: line_of_switch.get(parent))
    return _build(leaf_nodes, children, file)


def _plain_map(data: dict, lines: dict, file: str) -> Topology:
    """{leaf: hostlist or [names], ..., parents: {switch: parent switch}}."""
    leaf_nodes = {}
    for leaf, nodes in data.items():
        if leaf == "parents":
            continue
        leaf_nodes[str(leaf)] = _names(nodes, file, lines, (leaf,))
    parents = data.get("parents", {})
    if not isinstance(parents, dict):
        raise BadInput("expected a mapping {switch: parent switch}", file,
                       lines.get(("parents",)), "parents")
    children: dict[str, list[str]] = {}
    for kid, parent in parents.items():
        if not isinstance(parent, str) or not parent:
            raise BadInput("expected the name of the parent switch", file,
                           lines.get(("parents", kid)), dotted(("parents", kid)))
        children.setdefault(parent, []).append(str(kid))
    known = set(leaf_nodes) | set(children) | {str(k) for k in parents}
    _check_children(children, known, file,
                    lambda parent, kid: lines.get(("parents", kid)))
    return _build(leaf_nodes, children, file)


def parse_topology_yaml(text: str, file: str) -> Topology:
    """Slurm's topology.yaml (a list of topologies) or a plain map of leaf -> nodes,
    told apart by shape: a list is Slurm's, a mapping the plain map."""
    data, lines = load_yaml_with_lines(text, file)
    if isinstance(data, list):
        return _slurm_yaml(data, lines, file)
    if isinstance(data, dict):
        return _plain_map(data, lines, file)
    raise BadInput("expected Slurm's topology.yaml (a list of `- topology: NAME`) or a "
                   "map of leaf switch -> hostlist", file, lines.get(()))


_SCONTROL_LINE = re.compile(r"^\s*SwitchName=\S+\s+Level=\d+", re.MULTILINE)


def load_topology(path: str | Path) -> Topology:
    """Read a topology file: .yaml/.yml as YAML, .conf as topology.conf; otherwise saved
    `scontrol show topology` output if it looks like that (SwitchName=.. Level=..), then
    topology.conf if a line starts with SwitchName=, else YAML."""
    path = Path(path)
    file = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInput(f"cannot read topology file: {exc.strerror}", file) from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return parse_topology_yaml(text, file)
    if suffix == ".conf":
        return parse_topology_conf(text, file)
    if _SCONTROL_LINE.search(text):
        try:
            return topology_from_switches(parse_topology(text), file)
        except ValueError as exc:
            raise BadInput(str(exc), file) from None
    if re.search(r"^\s*switchname\s*=", text, re.MULTILINE | re.IGNORECASE):
        return parse_topology_conf(text, file)
    return parse_topology_yaml(text, file)


def cluster_topology(slurm, sources: Iterable[str | Path | None] = ()) -> Topology | None:
    """The first of `sources` that is set, read as a topology file; else the tree plugin's
    topology from `scontrol show topology`; None where Slurm shows none. Callers list their
    files in their order of precedence (a command-line flag, $HPSEARCH_TOPOLOGY, the
    experiment's placement.topology); a generator's later entries are looked up only if
    needed."""
    for source in sources:
        if source:
            return load_topology(source)
    switches = slurm.topology()
    return topology_from_switches(switches, "scontrol show topology") if switches else None


# -- live state per leaf -------------------------------------------------------------------

@dataclass(frozen=True)
class LeafState:
    """A leaf's nodes by what they can do now. free: idle and usable; mixed: usable, some
    cores busy; allocated: busy; drained: held out of new work (drain, maintenance,
    reservation, reboot, power saving); down: not working, or unknown to sinfo."""

    leaf: str
    free: tuple[str, ...]
    mixed: tuple[str, ...]
    allocated: tuple[str, ...]
    drained: tuple[str, ...]
    down: tuple[str, ...]


_DOWN_WORDS = frozenset({"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND",
                         "UNKNOWN", "INVAL", "INVALID", "*"})
_HELD_WORDS = frozenset({"DRAIN", "DRAINING", "DRAINED", "MAINT", "$", "RESERVED", "RESV",
                         "FUTURE", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN",
                         "POWERING_UP", "REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED",
                         "~", "#", "!", "%", "@", "^"})


def node_category(node: NodeState) -> str:
    """free, mixed, allocated, drained or down (see LeafState)."""
    words = {node.state} | set(node.flags)
    if words & _DOWN_WORDS:
        return "down"
    if node.available:
        return "free" if node.state == "IDLE" else "mixed"
    if words & _HELD_WORDS:
        return "drained"
    return "allocated"


def leaf_states(topology: Topology, nodes: list[NodeState]) -> dict[str, LeafState]:
    """Each leaf's nodes sorted by live state. A node listed twice (one sinfo line per
    partition) counts once, as its first record; a leaf node sinfo does not list is down."""
    by_name: dict[str, NodeState] = {}
    for node in nodes:
        by_name.setdefault(node.name, node)
    out = {}
    for leaf, members in topology.leaves.items():
        groups: dict[str, list[str]] = {k: [] for k in
                                        ("free", "mixed", "allocated", "drained", "down")}
        for name in members:
            state = by_name.get(name)
            groups["down" if state is None else node_category(state)].append(name)
        out[leaf] = LeafState(leaf=leaf, **{k: tuple(v) for k, v in groups.items()})
    return out
