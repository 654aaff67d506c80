#!/usr/bin/env bash
# Re-captures the files of this folder that show the second cluster and the partitions
# (README.md, "Several clusters and partitions"): Slurm's output with --clusters (-M) from
# the first cluster's login, and sinfo of a node in several partitions. Needs the cluster up
# with its second cluster (scripts/slurm-cluster.sh start) and both queues empty:
#   SLURM_CONF=/tmp/hpsearch-slurm/etc/slurm.conf bash tests/slurm/captured/capture_clusters.sh
# Takes about 10 seconds.
set -euo pipefail
: "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the test cluster}"
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/hpsearch-capture.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
SECOND=${SECOND_CLUSTER:-hpsearch2}
# Keep equal to hpsearch.slurm.sacct.SACCT_FORMAT and parse.SQUEUE_FORMAT/SINFO_NODES_FORMAT.
SACCT_FORMAT=JobID,JobName,State,ExitCode,NodeList,Elapsed,Submit,Start,End,Reason
SQUEUE_FORMAT='%i|%T|%r|%N'
SINFO_NODES_FORMAT='%N|%T|%P|%E'

out() {  # out NAME COMMAND...: COMMAND's stdout, exactly, into NAME.txt
    local name=$1; shift
    "$@" >"$HERE/$name.txt"
}

wait_for() {  # wait_for WHAT COMMAND...: until COMMAND succeeds, at most 60 s
    local what=$1 deadline=$((SECONDS + 60)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "never: $what" >&2; exit 1; }
        sleep 0.3
    done
}
running() { [ "$(squeue -M "$SECOND" -h -j "$1" -o %T)" = RUNNING ]; }
accounted() { sacct -M "$SECOND" -X -n -P -j "$1" -o JobName,State | grep -qx "$2"; }

[ -z "$(squeue -M "$SECOND" -h -o %i)" ] || { echo "$SECOND's queue must be empty first" >&2; exit 1; }

# sbatch answers JOBID;CLUSTER with -M, even for the local cluster.
out sbatch_parsable_cluster sbatch -M "$SECOND" --parsable -J hps-done -o /dev/null --wrap 'echo done'
done_job=$(cut -d';' -f1 "$HERE/sbatch_parsable_cluster.txt")
local_answer=$(sbatch -M "$(scontrol show config | awk '$1 == "ClusterName" {print $3}')" \
    --parsable -o /dev/null --wrap true)
printf '%s\n' "$local_answer" >"$HERE/sbatch_parsable_local_cluster.txt"
run=$(sbatch -M "$SECOND" --parsable -J hps-run -o /dev/null --wrap 'sleep 300' | cut -d';' -f1)
wait_for "job $run running" running "$run"
pend=$(sbatch -M "$SECOND" --parsable -J hps-pend -N4 --exclusive -o /dev/null --wrap true | cut -d';' -f1)
wait_for "job $done_job accounted" accounted "$done_job" 'hps-done|COMPLETED'
sleep 2  # let squeue give the pending job its reason

# squeue and sinfo with -M and --noheader: no CLUSTER line, the same shape as without -M.
out squeue_cluster squeue -M "$SECOND" -h -o "$SQUEUE_FORMAT" -j "$run,$pend"
# Without --noheader each prints a "CLUSTER: name" line first (not what hpsearch runs).
out squeue_cluster_with_header squeue -M "$SECOND" -o "$SQUEUE_FORMAT" -j "$run,$pend"
out sinfo_nodes_cluster sinfo -M "$SECOND" -h -N -o "$SINFO_NODES_FORMAT"
out sacct_cluster sacct -M "$SECOND" --parsable2 --noheader -X -j "$done_job,$run,$pend" \
    --format="$SACCT_FORMAT"
out scontrol_show_job_cluster scontrol -M "$SECOND" show job "$run"
out sacctmgr_list_clusters sacctmgr -n -P list clusters format=cluster
# The first cluster's nodes, each in debug and in left or right.
out sinfo_nodes_partitions sinfo -h -N -o "$SINFO_NODES_FORMAT"
scancel -M "$SECOND" "$run" "$pend"
echo "captured; job ids on $SECOND: done $done_job, running $run, pending $pend" >&2
