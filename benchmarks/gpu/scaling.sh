# Issue 25 item 5 on the lent GPU machine: per-rank step timing and POP metrics of a DDP
# trial at 1 and 2 ranks (benchmarks/gpu/scaling.yaml), through hpsearch's local executor.
#   run(carry=[".whl"], command="bash benchmarks/gpu/scaling.sh")
# With one GPU the 2-rank trial's ranks share it over gloo (tests/scaling_trial.py says
# which backend each rank used): that checks the CUDA-event clock, not scaling.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name --format=csv,noheader
gpus=$(nvidia-smi -L | wc -l)
# the trial runs in its own folder: the script by its full path
sed "s|tests/scaling_trial.py|$PWD/tests/scaling_trial.py|" benchmarks/gpu/scaling.yaml > /tmp/scaling.yaml
spec=/tmp/scaling.yaml
if [ "$gpus" -lt 2 ]; then  # the local executor's GPU slots: both ranks on GPU 0
  sed -i 's/gpus_per_node: "{ranks}"/gpus_per_node: 1/' $spec
fi
R=/tmp/runs
rm -rf $R/gpu-scaling
python3 -m hpsearch submit $spec --runs-dir $R -q; echo "exit=$?"
python3 -m hpsearch status gpu-scaling --runs-dir $R
python3 -m hpsearch export gpu-scaling --runs-dir $R --format csv --out $OUT/gpu-scaling.csv
cat $OUT/gpu-scaling.csv
for d in $R/gpu-scaling/trials/*; do
  echo "--- $d"; grep -h "^rank " $d/stdout.log; grep -h -m3 -E "Error|error:" $d/stderr.log
  for f in $d/timing.*.jsonl; do echo "$f: $(wc -l < $f) steps; last: $(tail -1 $f)"; done
done
