"""One line per rank, as bind_probe.sh, and whether the rank started warm: `decimal` is
preloaded by the warm server (executor.warm) and never imported here. argv: loss, seconds."""

import os
import sys
import time

warm = "decimal" in sys.modules
began = time.time()
time.sleep(float(sys.argv[2]))
env = os.environ
print(f"bind node={env['SLURMD_NODENAME']} trial={env['HPSEARCH_TRIAL_ID']} "
      f"rank={env.get('RANK', '0')} cvd={env.get('CUDA_VISIBLE_DEVICES', '')} "
      f"gpus={env.get('SLURM_STEP_GPUS') or env.get('SLURM_JOB_GPUS', '')} "
      f"cpus={','.join(map(str, sorted(os.sched_getaffinity(0))))} "
      f"began={began} ended={time.time()} warm={warm}", flush=True)
if env.get("RANK", "0") == "0":
    print(f"@hpsearch step=0 loss={sys.argv[1]}", flush=True)
