# GPU busy fractions measured (docs/gpu.md), on the lent GPU machine (2 GPUs, PyTorch,
# nvidia-ml-py; no network, no Slurm): a local search of three one-GPU trials, busy, mostly
# idle and half busy for 25 s each, sampled every second. Prints each trial's mean
# utilisation, its busy fraction (GPU-hours doing work against GPU-hours held: the held
# time includes the trial's start, ~5 s of importing torch and starting CUDA, so a trial
# busy for 25 s of ~30 s held comes out near 0.8-0.9) and the samples themselves.
# Run from the repository root:  sh benchmarks/gpu/gpu_sampling.sh
set -u
if [ -d .whl ]; then  # optuna, sqlite-utils, nvidia-ml-py... as wheels (no network there)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader
python3 -c 'import torch, pynvml; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "nvidia-ml-py", pynvml.__file__)' || exit 1
R=${R:-/tmp/gpu-sampling-runs}
rm -rf "$R"
start=$(date +%s.%N)
python3 -m hpsearch submit benchmarks/gpu/gpu_sampling.yaml --runs-dir "$R" -q; echo "exit=$?"
end=$(date +%s.%N); echo "search wall $(python3 -c "print(round($end-$start,2))") s"
python3 -m hpsearch status gpu-sampling --runs-dir "$R"
python3 -m hpsearch export gpu-sampling --runs-dir "$R" --format json --out "${OUT:-/tmp}/gpu-sampling.json"
python3 - "$R" "${OUT:-/tmp}/gpu-sampling.json" <<'PY'
import json, sys
from pathlib import Path
runs, exported = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
print("trial  mode   state      wall_s  samples  util_mean%  mem_max_MiB  busy_GPU_s  held_GPU_s  busy")
for rec in exported:
    tdir = Path(rec["trial_dir"])
    samples = [json.loads(x) for x in (tdir / "gpu.0.jsonl").read_text().splitlines()] \
        if (tdir / "gpu.0.jsonl").exists() else []
    busy = rec.get("gpu_busy_hours") or 0.0
    held = rec.get("gpu_held_hours") or 0.0
    print(f"{rec['trial']:5d}  {rec['param_mode']:5s}  {rec['state']:9s}  "
          f"{rec['duration'] or 0:6.1f}  {len(samples):7d}  {rec.get('gpu_util') or 0:10.1f}  "
          f"{rec.get('gpu_mem_max_mib') or 0:11.0f}  {busy * 3600:10.1f}  {held * 3600:10.1f}  "
          f"{rec.get('gpu_busy')}")
    print("       utilisation per sample:", [s["util"][0] for s in samples])
PY
python3 -m hpsearch report gpu-sampling --runs-dir "$R" --out "${OUT:-/tmp}/gpu-sampling-report" --no-sacct >/dev/null 2>&1 \
  && grep -o "<h2 id='gpu'>.*</table>" "${OUT:-/tmp}/gpu-sampling-report/report.html" | sed 's/<[^>]*>/ /g' | tr -s ' '
