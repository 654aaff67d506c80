#!/usr/bin/env bash
# Re-captures every file in this folder from the running test cluster (README.md says what
# each one is). Needs the cluster up and idle: scripts/slurm-cluster.sh start, then
#   SLURM_CONF=/tmp/hpsearch-slurm/etc/slurm.conf bash tests/slurm/captured/capture.sh
# Takes about 2 minutes (the TIMEOUT job needs a 1-minute limit to pass). It drains and
# downs nodes on the way and resumes them at the end.
set -euo pipefail
: "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the test cluster}"
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/hpsearch-capture.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# Keep equal to hpsearch.slurm.sacct.SACCT_FORMAT (tests/test_slurm_parse.py checks it).
SACCT_FORMAT=JobID,JobName,State,ExitCode,NodeList,Elapsed,Submit,Start,End,Reason

# out NAME COMMAND...: COMMAND's stdout, exactly, into NAME.txt (a failure stops the script).
out() {
    local name=$1; shift
    "$@" >"$HERE/$name.txt"
}

wait_state() {  # wait_state JOB STATE: until squeue shows the job (every task) in STATE
    local deadline=$((SECONDS + 60))
    until [ "$(squeue -h -j "$1" -o %T | sort -u)" = "$2" ]; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "job $1 never reached $2" >&2; exit 1; }
        sleep 0.3
    done
}

wait_sacct_shows() {  # wait_sacct_shows JOB REGEX: until a line of sacct -X for JOB matches
    local deadline=$((SECONDS + 60))
    until sacct -X -n -P -j "$1" --format="$SACCT_FORMAT" | grep -qE "$2"; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "sacct never showed $2 for $1" >&2; exit 1; }
        sleep 0.3
    done
}

wait_running_tasks() {  # wait_running_tasks ARRAY_JOB N: until squeue shows N tasks RUNNING
    local deadline=$((SECONDS + 60))
    until [ "$(squeue -h -j "$1" -t RUNNING -o %i | wc -l)" -eq "$2" ]; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "$1: never $2 tasks running" >&2; exit 1; }
        sleep 0.3
    done
}

wait_accounted() {  # wait_accounted JOB...: until sacct shows each job and its tasks finished
    local job deadline=$((SECONDS + 150))
    for job in "$@"; do
        while sacct -X -n -P -j "$job" -o State | grep -qE '^(PENDING|RUNNING|COMPLETING|$)' \
              || [ -z "$(sacct -X -n -P -j "$job" -o State)" ]; do
            [ "$SECONDS" -lt "$deadline" ] || { echo "job $job not accounted" >&2; exit 1; }
            sleep 0.5
        done
    done
}

[ -z "$(squeue -h -o %i)" ] || { echo "the queue must be empty first" >&2; exit 1; }

# --- jobs that end in each state, started together so the TIMEOUT one sets the pace -----
timeout_job=$(sbatch --parsable -J timeout -w node1 --time=1 -o /dev/null --wrap 'sleep 600')
sbatch --parsable -J completed -o /dev/null --wrap 'echo done' >"$HERE/sbatch_parsable.txt"
completed_job=$(cat "$HERE/sbatch_parsable.txt")
failed_job=$(sbatch --parsable -J failed -o /dev/null --wrap 'exit 3')
# shellcheck disable=SC2016  # expanded by the job's shell
array_job=$(sbatch --parsable -J array --array=0-3 -o /dev/null \
    --wrap '[ "$SLURM_ARRAY_TASK_ID" != 2 ] || exit 1')
sbatch --parsable -J two_nodes -N2 --ntasks-per-node=1 -o /dev/null \
    --wrap 'srun hostname; srun -N2 true' >"$HERE/sbatch_parsable_two_nodes.txt"
two_node_job=$(cat "$HERE/sbatch_parsable_two_nodes.txt")
cancelled_job=$(sbatch --parsable -J cancelled -w node2 -o /dev/null --wrap 'sleep 600')
wait_state "$cancelled_job" RUNNING
scancel "$cancelled_job"

# --- scontrol show job of a running 2-node GPU job, both formats --------------------------
running_job=$(sbatch --parsable -J running -w 'node[1-2]' --ntasks-per-node=2 --gres=gpu:1 \
    -o "$WORK/running.out" --wrap 'sleep 600')
wait_state "$running_job" RUNNING
out scontrol_show_job_running scontrol show job "$running_job"
out scontrol_show_job_running_oneliner scontrol show job -o "$running_job"

# --- squeue with running and pending jobs (for several reasons) ---------------------------
filler=$(sbatch --parsable -J filler -w 'node[3-6]' --exclusive -o /dev/null --wrap 'sleep 600')
wait_state "$filler" RUNNING
pending_resources=$(sbatch --parsable -J wants_8_nodes -N8 -o /dev/null --wrap 'true')
sbatch --parsable -J held --hold -o /dev/null --wrap 'true' >/dev/null
sbatch --parsable -J dependent -d "afterok:$running_job" -o /dev/null --wrap 'true' >/dev/null
sbatch --parsable -J later --begin=now+1hour -o /dev/null --wrap 'true' >/dev/null
pending_array=$(sbatch --parsable -J pending_array --array=0-3 -N8 -o /dev/null --wrap 'true')
sleep 3  # one scheduling pass, so every pending job has its reason
# sacct lags (slurmdbd is busy after a burst of submissions): wait until it has caught up.
wait_sacct_shows "$running_job" '\|running\|RUNNING\|'
wait_sacct_shows "$pending_resources" '\|wants_8_nodes\|PENDING\|'
wait_sacct_shows "$pending_array" '_\[0-3\]\|pending_array\|PENDING\|'
out squeue_running_and_pending squeue -h -o '%i|%T|%r|%N'
out sacct_running_and_pending sacct --parsable2 --noheader -X --format="$SACCT_FORMAT" \
    -j "$running_job,$pending_resources,$pending_array"

# --- sinfo with mixed, allocated, draining, drained and down nodes ------------------------
# node7 and node8 are idle (jobs run on node1-6): drain one, down the other; drain node1,
# which runs jobs, to get "draining".
scontrol update nodename=node7 state=drain reason="capture: drained by hand"
scontrol update nodename=node8 state=down reason="capture: down by hand"
scontrol update nodename=node1 state=drain reason="capture: draining by hand"
out sinfo_nodes_drained_down sinfo -h -N -o '%N|%T|%P'
out sinfo_nodes_with_reasons sinfo -h -N -o '%N|%T|%P|%E'
out scontrol_show_node_drained_oneliner scontrol show node -o node7
out scontrol_show_node_drained scontrol show node node7

squeue -h -o %i | grep -vx "$timeout_job" | xargs -r scancel  # the TIMEOUT job runs on
# One at a time, errors ignored: a DOWN node may already be back (ReturnToService=2), and
# resuming an idle node is an error ("Invalid node state specified").
for node in node1 node7 node8; do
    scontrol update nodename=$node state=resume 2>/dev/null || true
done
out scontrol_show_node_oneliner scontrol show node -o node8

# --- a throttled array (--array=0-5%2): pending tasks as ranges, in squeue and sacct -------
throttled_job=$(sbatch --parsable -J throttled --array=0-5%2 -w node2 -o /dev/null \
    --wrap 'sleep 600')
wait_running_tasks "$throttled_job" 2
wait_sacct_shows "$throttled_job" '_\[2-5%2\]\|.*\|PENDING\|'
out squeue_throttled_array squeue -h -j "$throttled_job" -o '%i|%T|%r|%N'
out sacct_throttled_array sacct --parsable2 --noheader -X --format="$SACCT_FORMAT" \
    -j "$throttled_job"
out scontrol_show_job_pending_array_task scontrol show job "${throttled_job}_4"
{ squeue -h -j "$throttled_job,999999" -o '%i|%T|%r|%N' 2>&1 && echo exit=0 \
    || echo "exit=$?"; } >"$HERE/squeue_known_and_unknown_jobs.txt"
scancel "${throttled_job}_1"  # a running task: task 2 starts
wait_state "${throttled_job}_2" RUNNING
scancel "${throttled_job}_4"  # a pending task: a gap in the pending range
sleep 1
out squeue_throttled_array_gap squeue -h -j "$throttled_job" -o '%i|%T|%r|%N'
out sacct_throttled_array_gap sacct --parsable2 --noheader -X --format="$SACCT_FORMAT" \
    -j "$throttled_job"
scancel "$throttled_job"

# --- a requeued job: two accounting records of one job id (sacct -D shows both) ------------
requeued_job=$(sbatch --parsable -J requeued -w node3 -o /dev/null --wrap 'sleep 600')
wait_state "$requeued_job" RUNNING
scontrol requeue "$requeued_job"
wait_state "$requeued_job" PENDING  # held back by a BeginTime ~2 min ahead
scancel "$requeued_job"

# --- a job's steps (squeue -s): two named srun steps, one step started inside another ------
# shellcheck disable=SC2016  # expanded by the job's shell
steps_job=$(sbatch --parsable -J steps -N2 -o /dev/null --wrap '
srun --overlap -N1 -n1 -w "$SLURMD_NODENAME" -J hpsearch-trial-3.1 sh -c "srun --overlap -N1 -n1 sleep 60" &
srun --overlap -N1 -n1 -J hpsearch-trial-4.1 --exclude="$SLURMD_NODENAME" sleep 60 & wait')
until [ "$(squeue -h -s -j "$steps_job" -o %i | wc -l)" -ge 4 ]; do sleep 0.2; done
out squeue_steps squeue -h -s -j "$steps_job" -o '%i|%j'
scancel "$steps_job"

# --- jobs that are gone ------------------------------------------------------------------
{ squeue -h -j 999999 -o '%i|%T|%r|%N' 2>&1 || echo "exit=$?"; } >"$HERE/squeue_unknown_job.txt"
{ scontrol show job 999999 2>&1 || echo "exit=$?"; } >"$HERE/scontrol_show_job_unknown.txt"

# --- sacct once every job has ended -------------------------------------------------------
wait_accounted "$completed_job" "$failed_job" "$cancelled_job" "$array_job" "$two_node_job" \
    "$running_job" "$pending_resources" "$timeout_job" "$throttled_job" "$requeued_job"
out scontrol_show_job_completed scontrol show job "$completed_job"
for case in completed failed cancelled array two_node timeout; do
    job_var=${case}_job
    out "sacct_$case" sacct --parsable2 --noheader -j "${!job_var}" --format="$SACCT_FORMAT"
done
out sacct_allocations_only sacct --parsable2 --noheader -X --format="$SACCT_FORMAT" \
    -j "$completed_job,$failed_job,$cancelled_job,$array_job,$two_node_job,$timeout_job,$running_job,$pending_resources"
out scontrol_show_topology scontrol show topology
out sacct_throttled_array_cancelled sacct --parsable2 --noheader -X --format="$SACCT_FORMAT" \
    -j "$throttled_job"
out sacct_requeued_duplicates sacct --parsable2 --noheader -X -D --format="$SACCT_FORMAT" \
    -j "$requeued_job"

# --- sacct listing a just-finished job as "allocation" (a transient seen a few seconds at
# most, often enough to catch with a handful of short jobs) --------------------------------
: >"$HERE/sacct_transient_allocation_name.txt"
for _ in $(seq 1 20); do
    job=$(sbatch --parsable -J quick -o /dev/null --wrap true)
    for _ in $(seq 1 30); do
        rows=$(sacct --parsable2 --noheader -X -j "$job" --format="$SACCT_FORMAT")
        if [ "$(cut -d'|' -f2 <<<"$rows")" = allocation ]; then
            printf '%s\n' "$rows" >"$HERE/sacct_transient_allocation_name.txt"
            break 2
        fi
        case $rows in *quick*) break ;; esac
        sleep 0.1
    done
done
[ -s "$HERE/sacct_transient_allocation_name.txt" ] \
    || echo "note: no transient 'allocation' name seen this time; file left empty" >&2

# --- sacct usage (hpsearch report: node- and GPU-hours): finished jobs with GPUs, two nodes,
# a failure and an array; a job pending (--begin later) and one running. Keep USAGE_FORMAT
# equal to hpsearch.slurm.sacct.SACCT_USAGE_FORMAT.
USAGE_FORMAT=JobID,State,ElapsedRaw,NNodes,AllocTRES,Submit
u1=$(sbatch --parsable -J usage-gpu --gres=gpu:2 -o /dev/null --wrap 'sleep 2')
u2=$(sbatch --parsable -J usage-two-node -N2 --ntasks-per-node=1 -o /dev/null --wrap 'srun sleep 2')
u3=$(sbatch --parsable -J usage-failed -o /dev/null --wrap 'sleep 1; exit 3')
u4=$(sbatch --parsable -J usage-array --array=0-1 -o /dev/null --wrap 'sleep 1')
wait_accounted "$u1" "$u2" "$u3" "$u4"
u5=$(sbatch --parsable -J usage-pending --begin=now+3600 -o /dev/null --wrap true)
u6=$(sbatch --parsable -J usage-running --gres=gpu:1 -o /dev/null --wrap 'sleep 20')
wait_state "$u6" RUNNING
sleep 3
out sacct_usage sacct --parsable2 --noheader -X --format="$USAGE_FORMAT" \
    -j "$u1,$u2,$u3,$u4,$u5,$u6"
scancel "$u5" "$u6"

# --- sacct where accounting is not configured: it reads only its own slurm.conf ----------
grep -v '^AccountingStorage' "$SLURM_CONF" >"$WORK/no_accounting.conf"
set +e
SLURM_CONF=$WORK/no_accounting.conf sacct --parsable2 --noheader -j "$completed_job" \
    >"$HERE/sacct_no_accounting.stdout.txt" 2>"$HERE/sacct_no_accounting.stderr.txt"
echo $? >"$HERE/sacct_no_accounting.exitcode.txt"
set -e

# --- the second cluster and the partitions (a script of its own, to be run alone too) ----
bash "$HERE/capture_clusters.sh"
echo "captured into $HERE"
