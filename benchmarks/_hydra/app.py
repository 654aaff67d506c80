"""The peers workload as a hydra app (benchmarks/peers_cluster.py, hydra row): one
configuration's learning curve (benchmarks/_curves.py) run in full, its final loss returned
for hydra-optuna-sweeper. hydra's Optuna sweeper has no pruning: every trial runs all steps.

    python app.py --multirun configs=27 steps=9 step_seconds=0.1 log=/tmp/steps.log row=hydra \\
        hydra.sweeper.n_trials=27 hydra.sweeper.n_jobs=8 'hydra.sweeper.params.config=range(0,27)'
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _curves  # noqa: E402
import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402


@hydra.main(version_base=None, config_path=".", config_name="app")
def main(cfg: DictConfig) -> float:
    w = _curves.Workload(int(cfg.configs), int(cfg.steps), float(cfg.step_seconds))
    log = _curves.StepLog(str(cfg.log), str(cfg.row))
    value = _curves.run_steps(w, int(cfg.config), 0, w.steps, log, lambda s, v: None)
    return float(value if value is not None else "inf")


if __name__ == "__main__":
    main()
