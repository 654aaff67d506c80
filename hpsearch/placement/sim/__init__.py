"""The placement simulator: a discrete-event model of a two-level fat tree that compares the
placement policies on one seeded workload (simulate: one run of one policy; cluster: the
tree, the selection rules and the cost model; engine: the workload and the event loop;
pilots: the `pilot` policy). Used by benchmarks/placement.py and the report's ring model;
nothing in the driver runs it. docs/placement.md states the model."""
