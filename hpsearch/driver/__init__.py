"""The driver: the one loop that owns an experiment's store, and what it asks.

- session: the composition root; `submit` and `resume` start here: it reads and checks the
  spec (hpsearch.preflight), creates or opens the store, and builds the driver with its
  executor, search and policies (policies.py), each handed only its own part of the spec.
- loop: the Driver itself: ask the search, hand launches to the executor, ingest what comes
  back (live.py), ask the policies, record every step before acting on it; recovery: its
  resume (rebuild the search from the store, adopt what is in flight); ending: the signals
  that stop a run, its final status and exit code.
- policies it asks: attempts (retries, by retry's failure classes and rules), extent
  (total, enqueued points, time budget), failfast (search.max_failures), checkpoint_keeper
  (which checkpoints go), cost (cost objectives), and the pruning package's stopper and
  promoter.
- around it: cancel (`hpsearch cancel`, through the driver or with none running), requests
  (files that reach a running driver: resume --trials, enqueue, finish), warm_start (trials
  of earlier experiments), slurm_job (the driver as a Slurm job), waiting (`submit --wait`,
  `--best-out`), respec (`resume --spec`: what a fixed spec may change), scale_spec
  (`hpsearch scale`'s child spec).
"""
