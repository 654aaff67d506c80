#!/bin/sh
# The peers of benchmarks/peers.py (Ray Tune, Syne Tune) in their own venv,
# benchmarks/.venv-peers (gitignored), so they never change the project's test venv.
# hpsearch is installed there too (editable), with the `peers` extra of pyproject.toml.
# The extra pins pyarrow < 19: syne-tune 0.13 holds numpy < 2, and pyarrow 19+ needs
# numpy 2 (ray.tune imports pyarrow).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python3 -m venv "$here/.venv-peers"
"$here/.venv-peers/bin/pip" install -e "$here/..[peers]"
# hydra with its Optuna sweeper and submitit launcher (benchmarks/peers_cluster.py):
# hydra-optuna-sweeper 1.3.0 needs optuna < 3, so they get a venv of their own.
python3 -m venv "$here/.venv-hydra"
"$here/.venv-hydra/bin/pip" install hydra-core==1.3.8 hydra-optuna-sweeper==1.3.0 \
  hydra-submitit-launcher==1.2.0 "optuna<3"
