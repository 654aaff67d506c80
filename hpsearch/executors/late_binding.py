"""Late binding across the partitions of one cluster (`executor.bind: late`, issue 40,
docs/brokerage.md#late-binding).

The broker picks a site when a trial is launched, from queues up to LOOK_EVERY seconds old;
the moves correct a bad pick seconds later. Slurm's own multi-partition job
(`sbatch --partition=a,b`) waits in both queues and starts wherever a node frees first:
benchmarks/brokerage.py's busy scenario measured it 2-4 s ahead of the broker over 24
trials. With `bind: late`, a single-node job sent to a site also names every other open
site of the same cluster, account and qos (`partners`); Slurm picks, and the attempt's site
is the one whose partition holds the node it ran on (`NodePartitions.site_of`), which the
sites executor then tells the store. Multi-node trials and pilots stay early-bound: their
placement plans within one partition's leaf switches.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from hpsearch.spec.model import Site

REFRESH_AFTER = 30.0  # seconds: a node not in the map is looked up again at most this often


def partners(site: Site, open_sites: Sequence[Site]) -> list[Site]:
    """The other open sites a single-node job sent to `site` may start at too: the same
    cluster, account and qos, each with a partition of its own. Sites with pilot settings
    of their own differ by more than a partition, and are left out."""
    if not site.partition or site.pilots is not None:
        return []
    return [s for s in open_sites if s.name != site.name and s.partition
            and s.partition != site.partition and s.pilots is None
            and (s.cluster, s.account, s.qos) == (site.cluster, site.account, site.qos)]


def partition_list(site: Site, others: Sequence[Site]) -> str:
    """`--partition=` for a job sent to `site` with `others`: its own partition first."""
    names = [site.partition or ""] + [s.partition or "" for s in others]
    return ",".join(dict.fromkeys(n for n in names if n))


class NodePartitions:
    """Which partitions each node of one cluster is in (sinfo), to tell where a
    multi-partition job ran. Asked once, and again for a node it does not know (a node
    added to the cluster) at most every REFRESH_AFTER seconds."""

    def __init__(self, slurm) -> None:
        self.slurm = slurm
        self.partitions: dict[str, tuple[str, ...]] = {}
        self.asked = -REFRESH_AFTER

    def _ask(self) -> None:
        from hpsearch.slurm.failures import SlurmError
        self.asked = time.monotonic()
        try:
            nodes = self.slurm.sinfo_nodes()
        except SlurmError:
            return  # not known now: asked again later
        self.partitions = {n.name: tuple(p.rstrip("*") for p in n.partitions) for n in nodes}

    def site_of(self, node: str, home: Site, candidates: Sequence[Site]) -> Site | None:
        """The site among `home` and `candidates` whose partition holds `node`: `home`
        where its own does (a node in both partitions ran it where it was sent), else the
        first candidate's; None while the node's partitions are not known."""
        if node not in self.partitions and time.monotonic() >= self.asked + REFRESH_AFTER:
            self._ask()
        held = self.partitions.get(node)
        if held is None:
            return None
        for site in (home, *candidates):
            if site.partition in held:
                return site
        return None
