# On the lent GPU machine (see README.md here): the promotion search warm, then cold.
#   sh benchmarks/gpu/promotion.sh                  # promotion.yaml: 1-GPU trials
#   sh benchmarks/gpu/promotion.sh promotion_ranks  # 2-rank torchrun trials on 2 GPUs
set -u
spec=${1:-promotion}
name=$(sed -n 's/^name: //p' "benchmarks/gpu/$spec.yaml")
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=$(mktemp -d)
nvidia-smi --query-gpu=index,name --format=csv,noheader
sed "/^  warm:/d; s/^name: $name\$/name: $name-cold/" \
  "benchmarks/gpu/$spec.yaml" > "benchmarks/gpu/$spec-cold.yaml"
for s in "$spec" "$spec-cold"; do
  start=$(date +%s.%N)
  python3 -m hpsearch submit benchmarks/gpu/$s.yaml --runs-dir /tmp/runs -q; echo "exit=$?"
  end=$(date +%s.%N); echo "$s search wall $(python3 -c "print(round($end-$start,1))") s"
done
rm -f "benchmarks/gpu/$spec-cold.yaml"
for n in "$name" "$name-cold"; do
  python3 -m hpsearch status $n --runs-dir /tmp/runs | head -3
  echo "$n first_step_s of each segment:"
  grep -h -o "first_step_s=[0-9.]*" /tmp/runs/$n/trials/*/stdout*.log | cut -d= -f2 | sort -n | python3 -c "
import sys, statistics; v=[float(x) for x in sys.stdin]; print(f'  {len(v)} segments: median {statistics.median(v):.3f} s, min {min(v):.3f}, max {max(v):.3f}')"
done
pkill -f -- "--socket $XDG_RUNTIME_DIR/" || true
