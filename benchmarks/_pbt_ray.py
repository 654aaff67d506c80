"""Ray Tune's PopulationBasedTraining on the PBT paper's toy (benchmarks/pbt.py's Ray row), run
by the interpreter that has ray[tune] (benchmarks/.venv-peers, from peers-setup.sh):

    python benchmarks/_pbt_ray.py POPULATION STEPS INTERVAL SEED

The same problem, step and start as examples/pbt_toy/train.py, in Ray's function API: one
report a step (training_iteration), a checkpoint every `interval` steps (Ray's PBT exploits
at those), the knobs of hpsearch's pbt (quantile 0.25, resample probability 0.25, factors
1.2 and 0.8, h0 and h1 mutated from U(0, 1)), 2 trials at a time on 2 CPUs, actors reused
(as benchmarks/peers.py runs Ray: without, a population of 2 took 116 s here, not 8).
Prints one JSON line: the best member's last Q, the wall seconds of Tuner.fit() (ray.init
not counted) and Ray's version.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

LR = 0.01  # examples/pbt_toy/train.py's


def main() -> None:
    population, steps, interval, seed = map(int, sys.argv[1:5])
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    import random

    import numpy
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    random.seed(seed)  # Ray's PBT draws with random, tune.uniform with numpy
    numpy.random.seed(seed)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)

    def toy(config: dict) -> None:
        theta, start = [0.9, 0.9], 0
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                state = json.loads((Path(folder) / "state.json").read_text())
            theta, start = state["theta"], state["step"] + 1
        for step in range(start, steps):
            theta = [theta[0] + LR * -2 * config["h0"] * theta[0],
                     theta[1] + LR * -2 * config["h1"] * theta[1]]
            q = 1.2 - (theta[0] ** 2 + theta[1] ** 2)
            if (step + 1) % interval == 0 or step + 1 == steps:
                with tempfile.TemporaryDirectory() as folder:
                    (Path(folder) / "state.json").write_text(
                        json.dumps({"theta": theta, "step": step}))
                    tune.report({"Q": q}, checkpoint=tune.Checkpoint.from_directory(folder))
            else:
                tune.report({"Q": q})

    pbt = PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=interval, burn_in_period=0,
        hyperparam_mutations={"h0": tune.uniform(0.0, 1.0), "h1": tune.uniform(0.0, 1.0)},
        quantile_fraction=0.25, resample_probability=0.25, perturbation_factors=(1.2, 0.8),
        synch=False)
    with tempfile.TemporaryDirectory() as storage:
        tuner = tune.Tuner(
            toy, param_space={"h0": tune.uniform(0.0, 1.0), "h1": tune.uniform(0.0, 1.0)},
            tune_config=tune.TuneConfig(metric="Q", mode="max", scheduler=pbt,
                                        num_samples=population, max_concurrent_trials=2,
                                        reuse_actors=True),
            run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                      stop={"training_iteration": steps}))
        clock = time.perf_counter()
        results = tuner.fit()
        seconds = time.perf_counter() - clock
    best = max(r.metrics["Q"] for r in results if r.metrics and "Q" in r.metrics)
    ray.shutdown()
    print(json.dumps({"best": best, "seconds": seconds, "version": ray.__version__}))


if __name__ == "__main__":
    main()
