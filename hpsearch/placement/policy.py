"""Where a multi-node trial should run: one leaf switch, best fit.

A pure function of the topology, the live per-leaf node state and the trial's size, so it is
tested without a cluster and used by the Slurm executor as it submits (`place`). Policies:

- `leaf-switch`: a trial of k nodes goes under one leaf, best fit: the leaf with the fewest
  free nodes that still holds k, which keeps the big holes for big trials. Single-node trials
  are packed the same way, so whole leaves stay free. Where the cluster's tree plugin is on,
  Slurm does this itself: `--switches=1@<max_wait>`. Otherwise hpsearch names the nodes
  (`--nodelist`) from the live state. When no leaf can hold the trial now it waits (the
  caller asks again later) up to `max_wait`, then takes the fewest leaves.
- `any`: no constraint; Slurm decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.placement.topology import LeafState
from hpsearch.slurm.hostlist import compress


@dataclass(frozen=True)
class Placement:
    """What to add to a trial's sbatch options, or that it should wait for a leaf."""

    options: tuple[str, ...] = ()
    leaves: tuple[str, ...] = ()   # the leaves the chosen nodes are under
    wait: bool = False             # no leaf fits now and max_wait has not passed: ask again


def slurm_time(seconds: float) -> str:
    """Seconds as Slurm's [D-]HH:MM:SS (rounded up to whole seconds)."""
    total = int(-(-seconds // 1))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{hours:02d}:{minutes:02d}:{secs:02d}"


def best_fit_leaf(states: dict[str, LeafState], k: int) -> str | None:
    """The leaf with the fewest free nodes that still has k free (ties: by name), or None."""
    fits = [(len(s.free), leaf) for leaf, s in states.items() if len(s.free) >= k]
    return min(fits)[1] if fits else None


def fewest_leaves(states: dict[str, LeafState], k: int) -> list[tuple[str, list[str]]]:
    """k free nodes from as few leaves as possible (the fullest-free leaves first), or []
    if fewer than k nodes are free in all."""
    chosen, needed = [], k
    for leaf, state in sorted(states.items(), key=lambda item: (-len(item[1].free), item[0])):
        if needed == 0:
            break
        take = sorted(state.free)[:needed]
        if take:
            chosen.append((leaf, take))
            needed -= len(take)
    return chosen if needed == 0 else []


def place(k: int, states: dict[str, LeafState], policy: str = "leaf-switch",
          waited: float = 0.0, max_wait: float = 300.0, tree_plugin: bool = False) -> Placement:
    """Where a trial of k nodes goes, given how long it has waited for a leaf so far."""
    if policy == "any":
        return Placement()
    if tree_plugin:
        return Placement((f"--switches=1@{slurm_time(max_wait)}",))
    leaf = best_fit_leaf(states, k)
    if leaf is not None:
        nodes = sorted(states[leaf].free)[:k]
        return Placement((f"--nodelist={compress(nodes)}",), (leaf,))
    if waited < max_wait:
        return Placement(wait=True)
    spread = fewest_leaves(states, k)
    if not spread:
        return Placement()  # not enough free nodes anywhere: let Slurm queue it
    nodes = [node for _, taken in spread for node in taken]
    return Placement((f"--nodelist={compress(nodes)}",), tuple(leaf for leaf, _ in spread))
