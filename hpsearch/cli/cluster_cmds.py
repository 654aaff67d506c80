"""`hpsearch topology`: each leaf switch, its free, used and down nodes, and the trials on it."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from hpsearch.cli.common import add_command, add_runs_dir, print_table, runs_dir_of
from hpsearch.errors import HpsearchError
from hpsearch.store import runs


def register(sub) -> None:
    p = add_command(sub, "topology", "Show each leaf switch of the Slurm cluster: its free, "
                    "used, drained and down nodes (live, from sinfo) and the hpsearch trials "
                    "running on it.",
                    "  hpsearch topology                         # tree plugin's topology\n"
                    "  hpsearch topology digits                  # only this experiment's "
                    "trials\n"
                    "  hpsearch topology --topology topology.conf  # where Slurm has none",
                    topology)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="experiments whose trials to show (default: all under the runs dir)")
    p.add_argument("--topology", type=Path, metavar="FILE",
                   help="topology.conf, topology.yaml, saved `scontrol show topology` output "
                        "or a YAML map (default: $HPSEARCH_TOPOLOGY, else the experiment's "
                        "placement.topology, else `scontrol show topology`)")
    add_runs_dir(p)


def topology(args) -> int:
    from hpsearch.placement.topology import leaf_states
    from hpsearch.slurm.commands import Slurm
    from hpsearch.slurm.hostlist import compress

    slurm = Slurm()
    runs_dir = runs_dir_of(args)
    names = args.names or [d.name for d in runs.list_experiments(runs_dir)]
    topo = _load(args, slurm, runs_dir, names)
    states = leaf_states(topo, slurm.sinfo_nodes())
    on_node = _trials_by_node(runs_dir, names)
    rows = []
    for leaf, st in states.items():
        used = st.mixed + st.allocated
        trials = sorted({t for n in topo.leaves[leaf] for t in on_node.get(n, ())})
        rows.append([leaf, _count(st.free, compress), _count(used, compress),
                     _count(st.drained, compress), _count(st.down, compress),
                     " ".join(trials) or "-"])
    print_table(["leaf", "free", "used", "drained", "down", "trials"], rows)
    for warning in topo.warnings:
        print(f"warning: {warning}")
    return 0


def _count(nodes: tuple[str, ...], compress) -> str:
    return f"{len(nodes)} {compress(list(nodes))}" if nodes else "0"


def _load(args, slurm, runs_dir: Path, names: list[str]):
    from hpsearch.driver.session import placement_topology
    from hpsearch.placement.topology import cluster_topology

    stored = (placement_topology(runs_dir, name) for name in names)  # read only if needed
    topo = cluster_topology(slurm, itertools.chain(
        (args.topology, os.environ.get("HPSEARCH_TOPOLOGY")), stored))
    if topo is None:
        raise HpsearchError("Slurm shows no topology here (no tree plugin); name a file with "
                            "--topology FILE or $HPSEARCH_TOPOLOGY")
    return topo


def _trials_by_node(runs_dir: Path, names: list[str]) -> dict[str, set[str]]:
    """node -> {"experiment#trial"} for trials running now (from each store, read-only)."""
    from hpsearch.slurm.hostlist import expand
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE

    found: dict[str, set[str]] = {}
    for name in names:
        with Reader(runs.existing_experiment_dir(runs_dir, name) / STORE_FILE) as reader:
            trials = reader.trials(["running"])
        for t in trials:
            for node in expand(t.nodes) if t.nodes else ():
                found.setdefault(node, set()).add(f"{name}#{t.id}")
    return found
