# On the lent GPU machine (see README.md here): the pbt search of pbt.yaml (segments forked
# warm), then what it found: the best member's schedule, the exploits, each segment's start,
# and `hpsearch replay` of the best member.
#   sh benchmarks/gpu/pbt.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=$(mktemp -d)
nvidia-smi --query-gpu=index,name --format=csv,noheader
python3 -c 'import torch, optuna; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "optuna", optuna.__version__)'
for s in pbt; do
  start=$(date +%s.%N)
  python3 -m hpsearch submit benchmarks/gpu/$s.yaml --runs-dir /tmp/runs -q; echo "exit=$?"
  end=$(date +%s.%N); echo "$s search wall $(python3 -c "print(round($end-$start,1))") s"
done
for n in digits-gpu-pbt; do
  python3 -m hpsearch status $n --runs-dir /tmp/runs | head -3
  python3 -m hpsearch best $n --runs-dir /tmp/runs -k 2
  python3 -m hpsearch events $n --runs-dir /tmp/runs | grep -c "takes trial" | sed 's/^/exploits: /'
  echo "$n first_step_s of each segment:"
  grep -h -o "first_step_s=[0-9.]*" /tmp/runs/$n/trials/*/stdout*.log | cut -d= -f2 | sort -n | python3 -c "
import sys, statistics; v=[float(x) for x in sys.stdin]; print(f'  {len(v)} segments: median {statistics.median(v):.3f} s, min {min(v):.3f}, max {max(v):.3f}')"
  grep -h -o "device=[a-z]*" /tmp/runs/$n/trials/*/stdout*.log | sort | uniq -c
done
python3 -m hpsearch replay digits-gpu-pbt --runs-dir /tmp/runs -q; echo "replay exit=$?"
python3 -m hpsearch best digits-gpu-pbt-replay --runs-dir /tmp/runs -k 1 | head -2
rm -f examples/digits_ddp/digits-gpu-pbt-replay.yaml benchmarks/gpu/digits-gpu-pbt-replay.yaml
pkill -f -- "--socket $XDG_RUNTIME_DIR/" || true
