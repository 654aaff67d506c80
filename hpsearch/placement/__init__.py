"""Placement: where on the cluster's network a trial's nodes should go.

`topology` reads the switch tree (from `scontrol show topology`, topology.conf,
topology.yaml or a plain YAML map) and sorts live node state from sinfo per leaf switch;
`policy` holds the rule, `planner` applies it to a trial. The cluster simulator that compares
the policies is the sub-package `sim`.
"""
