#!/bin/sh
# One line per rank: the GPUs and CPUs it was given, and when it held them
# (tests/slurm/test_gpu_binding.py). $1: the loss to report, $2: seconds to hold them.
began=$(date +%s.%N)
sleep "$2"
echo "bind node=$SLURMD_NODENAME trial=$HPSEARCH_TRIAL_ID rank=${RANK:-0}" \
     "cvd=${CUDA_VISIBLE_DEVICES-} gpus=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS-}}" \
     "cpus=$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)" \
     "began=$began ended=$(date +%s.%N)"
if [ "${RANK:-0}" = 0 ]; then echo "@hpsearch step=0 loss=$1"; fi
