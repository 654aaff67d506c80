"""Run a search's trials in a pilot on this host, without Slurm (benchmarks/stop_latency.py).

    python _pilot_local.py SPEC RUNS_DIR

The spec's executor must be `slurm` with `pilots` (max 1, nodes 1). The real driver, store
and pilot executor run here as `hpsearch submit` runs them, and the real pilot program
(hpsearch.pilot.program) runs as a child process, as its job would start it on its first
node. What stands in for Slurm: the pilot is in the store as running job 1001 before the
driver starts (as if submitted and started), and a stand-in answers the driver's sacct and
squeue with nothing (the job runs on). Everything between driver and pilot goes through the
pilot dir's files, as on a cluster, on whatever filesystem RUNS_DIR is on.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
from pathlib import Path

from hpsearch.driver import session
from hpsearch.pilot import program, protocol
from hpsearch.pilot.executor import PilotExecutor
from hpsearch.preflight import load_spec
from hpsearch.search import make_search

JOB_ID = "1001"


class _NoSlurm:
    """Slurm as the driver asks it while its one pilot runs: no job has ended; nothing
    is submitted (the pilot is there already); no topology."""

    def sacct(self, job_ids) -> list:
        return []

    def squeue(self, job_ids=None) -> list:
        return []

    def scancel(self, job_ids, signal=None) -> None:
        pass

    def config_value(self, key: str) -> None:
        return None


def _pilot(root: Path) -> None:
    for key in [k for k in os.environ if k.startswith("SLURM_")] + ["CUDA_VISIBLE_DEVICES"]:
        os.environ.pop(key, None)
    os.environ["SLURM_JOB_ID"] = JOB_ID
    program.main(str(root))


def run(spec_path: Path, runs_dir: Path) -> int:
    spec = load_spec(spec_path, runs_dir, None)  # not new_experiment: it asks Slurm
    spec = dataclasses.replace(spec, source=spec_path)
    search = make_search(spec.search, spec.objectives)
    store = session.create_store(spec, search.total)
    store.add_pilot(1, f"hps.{spec.name}.bench.pilot.1")
    store.update_pilot(1, job_id=JOB_ID, state="running")
    executor = PilotExecutor(spec.slurm_job(), store, _NoSlurm())
    paths = protocol.PilotPaths(protocol.pilots_dir(spec.experiment_dir) / "1")
    paths.make()
    protocol.write_json(paths.config, executor.fleet._config(1))  # as Fleet.submit writes it
    # forked: the child never touches the store's connection, and leaves by os._exit
    pilot = multiprocessing.get_context("fork").Process(target=_pilot, args=(paths.root,))
    pilot.start()
    try:
        driver = session.driver_for(spec, store, executor, search,
                                    lambda line: print(line, flush=True))
        return driver.run()
    finally:
        paths.stop.touch()
        pilot.join(timeout=30)
        if pilot.exitcode is None:
            pilot.kill()
        store.close()


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()))
