"""The driver: the one loop that owns an experiment's store, and what it asks.

- session: the composition root; `submit`, `resume` and `cancel` start here, read the spec,
  and build the driver with its executor, search and policies (policies.py).
- loop: the Driver itself: ask the search, hand launches to the executor, ingest what comes
  back (live.py), ask the policies, record every step before acting on it.
- policies it asks: attempts (retries, by retry's failure classes and rules), extent
  (total, enqueued points, time budget), failfast (search.max_failures), checkpoint_keeper
  (which checkpoints go), and the pruning package's stopper and promoter.
- around it: requests (files that grow a running search), warm_start (trials of earlier
  experiments), slurm_job (the driver as a Slurm job), waiting (`submit --wait`), ending.
"""
