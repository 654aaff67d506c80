# Issue 26 item 7 on the lent GPU machine: the Lightning digits example (examples/lightning/
# spec.yaml: TPE, median pruner, 2-rank DDP trials under torchrun) on 2 GPUs, NCCL, through
# hpsearch's local executor with its GPU slots (resources.gpus_per_node: 2).
#   run(kind="nvidia-h200-x2", carry=[".whl"], command="bash benchmarks/gpu/lightning.sh")
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader
# on the GPUs: --accelerator gpu, 2 GPUs per trial, the script by its full path
sed -e "s|{python} train.py|{python} $PWD/examples/lightning/train.py|" \
    -e "s|--accelerator cpu|--accelerator gpu|" \
    -e "s|resources: {tasks_per_node: 2, cpus_per_task: 1}|resources: {tasks_per_node: 2, cpus_per_task: 4, gpus_per_node: 2}|" \
    -e "s|name: lightning-digits|name: lightning-gpu|" \
    examples/lightning/spec.yaml > /tmp/lightning-gpu.yaml
grep -n "accelerator\|resources\|train.py" /tmp/lightning-gpu.yaml
R=/tmp/runs
rm -rf $R/lightning-gpu
python3 -c "import inotify_simple; print(\"inotify_simple\", inotify_simple.__version__ if hasattr(inotify_simple, \"__version__\") else \"present\")"
start=$(date +%s.%N)
python3 -m hpsearch submit /tmp/lightning-gpu.yaml --runs-dir $R --no-tui > /tmp/submit.log 2>&1; echo "exit=$?"; grep -iE "inotify|polling|reads|completed in" /tmp/submit.log | head
end=$(date +%s.%N); echo "search wall $(python3 -c "print(round($end-$start,1))") s"
python3 -m hpsearch status lightning-gpu --runs-dir $R
python3 -m hpsearch export lightning-gpu --runs-dir $R --format csv --out $OUT/lightning-gpu.csv
for d in $R/lightning-gpu/trials/*; do
  echo "--- $d"; grep -h -m4 -E "GPU available|CUDA_VISIBLE|LOCAL_RANK|Initializing distributed|nccl|NCCL|stopp" $d/stdout.log $d/stderr.log
  grep -h -m3 -E "Error|error:" $d/stderr.log
done
nvidia-smi --query-compute-apps=pid,name --format=csv,noheader | head
python3 benchmarks/gpu/stop_latency.py $R lightning-gpu
# Side by side, the same search with the callback from before 2026-11-28's SIGTERM change,
# when HPSEARCH_OLD_CALLBACK names that file (an untracked copy carried with the tree).
if [ -n "${HPSEARCH_OLD_CALLBACK-}" ] && [ -f "$HPSEARCH_OLD_CALLBACK" ]; then
  cp "$HPSEARCH_OLD_CALLBACK" hpsearch/integrations/lightning.py
  sed -i "s|name: lightning-gpu|name: lightning-gpu-old|" /tmp/lightning-gpu.yaml
  start=$(date +%s.%N)
  python3 -m hpsearch submit /tmp/lightning-gpu.yaml --runs-dir $R --no-tui > /tmp/submit-old.log 2>&1; echo "old callback: exit=$?"
  end=$(date +%s.%N); echo "old callback: search wall $(python3 -c "print(round($end-$start,1))") s"
  python3 -m hpsearch status lightning-gpu-old --runs-dir $R
  python3 benchmarks/gpu/stop_latency.py $R lightning-gpu-old
fi
