set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name --format=csv,noheader
python3 -c 'import torch, optuna, sqlite_utils; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "optuna", optuna.__version__)'
R=/tmp/runs
for s in slots nccl; do
  start=$(date +%s.%N)
  python3 -m hpsearch submit benchmarks/gpu/$s.yaml --runs-dir $R -q; echo "exit=$?"
  end=$(date +%s.%N); echo "$s search wall $(python3 -c "print(round($end-$start,2))") s"
done
for n in digits-gpu-slots digits-nccl-2gpu; do
  python3 -m hpsearch status $n --runs-dir $R
  python3 -m hpsearch export $n --runs-dir $R --format json --out $OUT/$n.json
  for d in $R/$n/trials/*; do
    echo "--- $d"; grep -h -E "^rank |first_step_s|CUDA|nccl|NCCL" $d/stdout.log | head -8
    tail -3 $d/stderr.log
  done
done
python3 - <<'PY'
import sqlite3
for n in ("digits-gpu-slots", "digits-nccl-2gpu"):
    con = sqlite3.connect(f"/tmp/runs/{n}/store.sqlite")
    for row in con.execute("select id, state, gpus, round(finished - started, 2) from trials"):
        print(n, "trial", row)
    t0 = con.execute("select min(started) from trials").fetchone()[0]
    for row in con.execute("select id, round(started - ?, 2), round(finished - ?, 2), gpus from trials order by started", (t0, t0)):
        print(n, "timeline (trial, start s, end s, gpus)", row)
PY
