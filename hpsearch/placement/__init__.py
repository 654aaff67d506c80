"""Placement: where on the cluster's network a trial's nodes should go.

`topology` reads the switch tree (from `scontrol show topology`, topology.conf,
topology.yaml or a plain YAML map) and sorts live node state from sinfo per leaf switch;
`policy` holds the rule (`place`: one leaf switch, best fit; a pure function); `planner`
applies it to each Slurm job that the Slurm executor or the pilots' fleet submits
(placement.mode: switches, nodelist or auto), reading node state at most once per poll
interval. `hpsearch topology` and the live view show the topology too. The sub-package `sim`
is the cluster simulator that compares the policies (benchmarks/placement.py) and gives
`hpsearch scale` its ring all-reduce model; nothing in the driver runs it.
"""
