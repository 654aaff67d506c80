"""Ray Tune's PopulationBasedTraining on benchmarks/pbt.py's problems (its Ray rows), run by
the interpreter that has ray[tune] (benchmarks/.venv-peers, from peers-setup.sh):

    python benchmarks/_pbt_ray.py toy|digits POPULATION STEPS INTERVAL SEED [SITE]

The same problem, step and start as hpsearch's rows, in Ray's function API: one report a
step (training_iteration), a checkpoint every `interval` steps (Ray's PBT exploits at
those), the knobs of hpsearch's pbt (quantile 0.25, resample probability 0.25, factors 1.2
and 0.8, the mutable parameters drawn anew from their range), 2 trials at a time on 2
CPUs, actors reused (as benchmarks/peers.py runs Ray: without, a population of 2 took
116 s here, not 8).

- toy: examples/pbt_toy/train.py's steps, h0 and h1 mutable;
- digits: examples/digits_ddp/train.py's functions (data split, model, SGD, one epoch,
  evaluation), run in Ray's worker process: torch and scikit-learn come from SITE (the
  site-packages of the interpreter that runs hpsearch's rows, appended to sys.path), lr
  mutable, one torch thread, seed 0 as `--seed 0`.

Prints one JSON line: the best member's last score, the wall seconds of Tuner.fit()
(ray.init not counted), the steps trained (every step any trial ran, counted by the
trainable itself) and Ray's version.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

LR = 0.01  # examples/pbt_toy/train.py's
DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits_ddp"


def count_step(tally: str) -> None:
    """One byte appended per step trained: the trials run in other processes."""
    with open(tally, "ab") as fh:
        fh.write(b".")


def report(tune, step: int, steps: int, interval: int, metrics: dict, save) -> None:
    """Report a step; at a boundary (and the last step) with a checkpoint save() writes."""
    if (step + 1) % interval and step + 1 != steps:
        tune.report(metrics)
        return
    with tempfile.TemporaryDirectory() as folder:
        save(Path(folder))
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def toy_trainable(steps: int, interval: int, tally: str):
    from ray import tune

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
            count_step(tally)
            report(tune, step, steps, interval, {"Q": 1.2 - (theta[0] ** 2 + theta[1] ** 2)},
                   lambda folder, theta=theta, step=step: (folder / "state.json").write_text(
                       json.dumps({"theta": theta, "step": step})))

    space = {"h0": tune.uniform(0.0, 1.0), "h1": tune.uniform(0.0, 1.0)}
    return toy, "Q", space


def digits_trainable(steps: int, interval: int, tally: str, site: str):
    from ray import tune

    def digits(config: dict) -> None:
        sys.path.append(site)
        sys.path.insert(0, str(DIGITS))
        import random

        import torch
        import train  # examples/digits_ddp/train.py
        from torch.utils.data import DistributedSampler

        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True, warn_only=True)
        random.seed(0)
        torch.manual_seed(0)
        ranks = train.Ranks(0, 1, 0, torch.device("cpu"))
        x_train, y_train, x_val, y_val = train.load_split(ranks.device)
        model = train.make_model(64)
        optimizer = train.make_optimizer("sgd", config["lr"], model)
        start, checkpoint = 0, tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                state = torch.load(Path(folder) / "state.pt", weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            for group in optimizer.param_groups:  # this segment's lr, as train.py --pbt
                group["lr"] = config["lr"]
            torch.set_rng_state(state["rng"])
            start = state["epoch"] + 1
        sampler = DistributedSampler(range(len(y_train)), num_replicas=1, rank=0,
                                     shuffle=True, seed=0)
        clock = train.FirstStepClock(ranks)
        for epoch in range(start, steps):
            train.train_epoch(model, optimizer, x_train, y_train, sampler, epoch, 32, clock)
            val_acc, _ = train.evaluate(model, x_val, y_val)
            count_step(tally)
            report(tune, epoch, steps, interval, {"val_acc": val_acc},
                   lambda folder, epoch=epoch: torch.save(
                       {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "rng": torch.get_rng_state(), "epoch": epoch}, folder / "state.pt"))

    return digits, "val_acc", {"lr": tune.loguniform(1e-4, 1e-1)}


def main() -> None:
    problem = sys.argv[1]
    population, steps, interval, seed = map(int, sys.argv[2:6])
    site = sys.argv[6] if len(sys.argv) > 6 else ""
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
    with tempfile.TemporaryDirectory() as storage:
        tally = str(Path(storage) / "steps")
        trainable, metric, space = (toy_trainable(steps, interval, tally) if problem == "toy"
                                    else digits_trainable(steps, interval, tally, site))
        pbt = PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=interval, burn_in_period=0,
            hyperparam_mutations=space, quantile_fraction=0.25, resample_probability=0.25,
            perturbation_factors=(1.2, 0.8), synch=False)
        tuner = tune.Tuner(
            trainable, param_space=space,
            tune_config=tune.TuneConfig(metric=metric, mode="max", scheduler=pbt,
                                        num_samples=population, max_concurrent_trials=2,
                                        reuse_actors=True),
            run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                      stop={"training_iteration": steps}))
        clock = time.perf_counter()
        results = tuner.fit()
        seconds = time.perf_counter() - clock
        trained = Path(tally).stat().st_size
    best = max(r.metrics[metric] for r in results if r.metrics and metric in r.metrics)
    ray.shutdown()
    print(json.dumps({"best": best, "seconds": seconds, "steps": trained,
                      "version": ray.__version__}))


if __name__ == "__main__":
    main()
