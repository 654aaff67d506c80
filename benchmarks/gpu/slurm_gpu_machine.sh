#!/usr/bin/env bash
# Real Slurm on the lent GPU machine (issue 26, item 4): a one-node Slurm 22.05 (Debian 12's
# packages, carried as .deb files: the machine has no network and no Slurm) with the node's
# real GPUs as gres, and two hpsearch pilot searches on it.
#
# What it does, on the GPU machine, as root:
#   1. unpacks the .debs in $SLURM_DEBS (default .slurmdeb/) with `dpkg -x` into
#      $SLURM_PREFIX/root (default /opt/slurm); libraries the system lacks are linked into
#      $SLURM_PREFIX/fill, the only folder added to LD_LIBRARY_PATH (with Slurm's own plugin
#      dir), so nothing of the system's is shadowed. Slurm's compiled-in paths
#      /usr/sbin/slurmstepd and /usr/lib/x86_64-linux-gnu/slurm-wlm become links into the
#      prefix where they do not exist (nothing existing is changed);
#   2. installs the wheels in $SLURM_WHL (default .whl/: optuna, sqlite-utils, submitit and
#      their needs) into /tmp/site; hpsearch runs from this tree (PYTHONPATH);
#   3. starts munged (own key, socket and logs under $SLURM_STATE, default /tmp/hps-slurm),
#      writes slurm.conf, gres.conf and cgroup.conf (one node named `hostname -s`, CPUs from nproc,
#      Gres=gpu:N with File=/dev/nvidia[0-N-1], select/cons_tres, proctrack/linuxproc,
#      task/none, no accounting, no job completion log, SlurmUser=root, PluginDir in the
#      prefix; CgroupPlugin=cgroup/v1, whose init does nothing, else cgroup/v2 with
#      IgnoreSystemd=yes), starts slurmctld and slurmd and waits until the node is idle;
#   4. runs `hpsearch submit benchmarks/gpu/slurm_gpu_slots.yaml` (executor slurm, pilots of
#      1 node with 2 slots, 4 trials of gpus_per_node 1, 2 at a time; each trial
#      (slurm_gpu_probe.py) prints CUDA_VISIBLE_DEVICES, the UUID of every GPU CUDA shows it,
#      and the GPU on which NVML lists its pid, then sleeps 6 s), then
#      `hpsearch submit benchmarks/gpu/slurm_gpu_nccl.yaml` (one trial, gpus_per_node 2,
#      launcher torchrun, tasks_per_node 2: each rank all-reduces over NCCL and prints its
#      rank, GPU UUID and the sum), prints `hpsearch status` of both, the jobs Slurm ran
#      (`scontrol -d show job`: the GPU indexes each pilot held) and the trials' output;
#   5. checks (slurm_gpu_check.py): every 1-GPU trial saw exactly one GPU UUID (and NVML saw
#      its pid on that GPU only), two ran at the same time on different UUIDs, both GPUs were
#      used; the 2-GPU trial's two ranks saw two different UUIDs and the all-reduce gave
#      world*(world+1)/2. Exit 0 only if every check passed.
# Everything it prints goes to $OUT/slurm_gpu.log too. Last run and its numbers:
# docs/measurements/slurm-gpu-machine.md.
#
# What it proves: hpsearch's Slurm executor with pilots works against a real slurmctld and
# slurmd on real GPUs: Slurm gives the pilot job the GPUs (gres/gpu), the pilot hands each
# trial its own GPU(s) (HPSEARCH_GPU_FIELDS, CUDA_VISIBLE_DEVICES) so that trials side by side
# never share one, and a torchrun trial's NCCL ranks, started through `srun` in the pilot's
# allocation, each get a GPU of their own and communicate. The emulated test cluster
# (scripts/slurm-cluster.sh) has only placeholder GPUs; tests/slurm/test_pilot_gpus.py checks
# there what a trial is told, this checks what CUDA and the driver see.
#
# How to run it (the device tool's `run`, kind nvidia-h100-x2 or nvidia-h200-x2; carry the
# ignored folders .slurmdeb and .whl, which this repo's .git/info/exclude lists):
#   run(kind="nvidia-h100-x2", carry=[".slurmdeb", ".whl"],
#       command="bash benchmarks/gpu/slurm_gpu_machine.sh")
# The .debs (Debian 12 amd64; how they were fetched: docs/measurements/slurm-gpu-machine.md):
#   apt-get download slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2 \
#     libhwloc15 liblz4-1 libnuma1 libpam0g libjson-c5 libyaml-0-2 libudev1 libaudit1 \
#     libcap-ng0 libbz2-1.0 zlib1g libgcrypt20 libgpg-error0 libreadline8 libtinfo6 \
#     libdbus-1-3 libsystemd0 liblzma5 libzstd1 libcap2      # (the last line: cgroup_v2.so's)
# The wheels: docs/measurements/slurm-gpu-machine.md, "Reproduce". A rehearsal on a Debian
# host without GPUs, as root (placeholder GPU files, gloo on the CPU instead of NCCL, own
# ports from SLURM_PORT_BASE; its GPU checks fail by design):
#   SLURM_PREFIX=/tmp/x/opt SLURM_STATE=/tmp/x/st SLURM_WHL=none PY=.venv/bin/python \
#   OUT=/tmp/x/out bash benchmarks/gpu/slurm_gpu_machine.sh
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-/tmp/slurm-gpu-out}
mkdir -p "$OUT"
if [ -z "${SLURM_GPU_LOGGING-}" ]; then  # once: everything below into the log as well
    export SLURM_GPU_LOGGING=1
    bash "${BASH_SOURCE[0]}" "$@" 2>&1 | tee "$OUT/slurm_gpu.log"
    exit "${PIPESTATUS[0]}"
fi
cd "$REPO" || exit 1

DEBS=${SLURM_DEBS:-$REPO/.slurmdeb}
WHL=${SLURM_WHL:-$REPO/.whl}
PREFIX=${SLURM_PREFIX:-/opt/slurm}
ST=${SLURM_STATE:-/tmp/hps-slurm}
PORT_BASE=${SLURM_PORT_BASE:-17800}
SEARCHES=${SLURM_SEARCHES:-slots nccl}
PY=${PY:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3)
[ -x "$PY" ] || { echo "no python"; exit 1; }
ROOT=$PREFIX/root
PLUGINDIR=$ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm
NODE=$(hostname -s)
RUNS=$ST/runs
SOCK=$ST/munge-socket/munge.socket.2
export SLURM_CONF=$ST/etc/slurm.conf
T_SCRIPT=$(date +%s.%N)

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
step() { printf '\n=== [%s, +%s s] %s\n' "$(date +%T)" "$(since "$T_SCRIPT")" "$*"; }
fail() { echo "FATAL: $*"; dump_logs; stop_all; exit 1; }
dump_logs() {
    local f
    for f in "$ST"/log/*.log; do [ -s "$f" ] && { echo "--- last lines of $f"; tail -n 40 "$f"; }; done
}
pid_in() { [ -s "$1" ] && tr -dc 0-9 <"$1"; }
stop_all() {
    step "stopping what this script started"
    command -v scancel >/dev/null && scancel --quiet --user="$(id -un)" 2>/dev/null
    sleep 1
    local f p
    for f in "$ST/run/slurmd.pid" "$ST/run/slurmctld.pid" "$ST/run/munged.pid"; do
        p=$(pid_in "$f") && [ -n "$p" ] && kill "$p" 2>/dev/null && echo "stopped pid $p ($(basename "$f" .pid))"
    done
}

step "machine"
grep PRETTY_NAME /etc/os-release; uname -r; echo "host $(hostname) node $NODE, $(nproc) CPUs, user $(id -un)"
free -g | head -2
nvidia-smi -L 2>&1
ls -l /dev/nvidia[0-9]* 2>&1
echo "python $PY: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.device_count())' 2>&1 | tail -1)"
env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mapfile -t GPU_UUIDS < <(nvidia-smi -L 2>/dev/null | sed -n 's/.*(UUID: \(GPU-[^)]*\)).*/\1/p')
NGPU=${#GPU_UUIDS[@]}
[ "$NGPU" -ge 1 ] || { NGPU=2; echo "no GPU found by nvidia-smi: placeholder GPUs (rehearsal)"; }

step "1. unpack the Slurm and munge packages into $ROOT"
ls "$DEBS"/*.deb >/dev/null 2>&1 || fail "no .deb files in $DEBS"
rm -rf "$ROOT" "$PREFIX/fill"; mkdir -p "$ROOT" "$PREFIX/fill"
deb_x() {  # deb_x DEB DIR: dpkg -x, or where there is no dpkg the same in Python (ar + tar)
    if command -v dpkg >/dev/null; then dpkg -x "$1" "$2"; return; fi
    "$PY" - "$1" "$2" <<'PYEOF'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    pos += 60 + size + (size & 1)
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            import zstandard
            body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], filter="tar")
PYEOF
}
command -v dpkg >/dev/null || echo "no dpkg here: unpacking with Python"
for deb in "$DEBS"/*.deb; do deb_x "$deb" "$ROOT" || fail "unpacking $deb"; done
echo "$(ls "$DEBS"/*.deb | wc -l) packages, $(du -sh "$ROOT" | cut -f1) unpacked"
for d in slurmctld slurmd slurmstepd; do ln -sf "$d-wlm" "$ROOT/usr/sbin/$d"; done  # Debian's alternatives
# Slurm's compiled-in paths: slurmd runs /usr/sbin/slurmstepd; the binaries' RUNPATH is the plugin dir.
for pair in "/usr/sbin/slurmstepd:$ROOT/usr/sbin/slurmstepd-wlm" "/usr/lib/x86_64-linux-gnu/slurm-wlm:$PLUGINDIR"; do
    path=${pair%%:*}; target=${pair#*:}
    if [ -e "$path" ] || [ -L "$path" ]; then echo "$path exists ($(readlink -f "$path")): left as it is"
    else ln -s "$target" "$path" && echo "linked $path -> $target"; fi
done
# Libraries: only those the system's loader does not know go into fill/.
known=$(ldconfig -p | awk 'NR > 1 {print $1}')
filled=()
for f in "$ROOT"/lib/x86_64-linux-gnu/lib*.so.* "$ROOT"/usr/lib/x86_64-linux-gnu/lib*.so.*; do
    [ -L "$f" ] || continue  # the soname links (libz.so.1 -> libz.so.1.2.13)
    name=$(basename "$f")
    grep -Fxq "$name" <<<"$known" && continue
    ln -sf "$(readlink -f "$f")" "$PREFIX/fill/$name"; filled+=("$name")
done
echo "libraries the system lacks, linked into $PREFIX/fill: ${filled[*]:-none}"
export LD_LIBRARY_PATH=$PREFIX/fill:$PLUGINDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$ROOT/usr/sbin:$ROOT/usr/bin:$(dirname "$PY"):$PATH
missing=0
for b in slurmctld slurmd slurmstepd srun sbatch squeue scontrol scancel sinfo sacct munged munge unmunge mungekey; do
    p=$(command -v "$b") || { echo "missing program $b"; missing=1; continue; }
    ldd "$p" | grep -q "not found" && { echo "$b:"; ldd "$p" | grep "not found"; missing=1; }
done
for pl in auth_munge cred_munge select_cons_tres gres_gpu gpu_generic proctrack_linuxproc task_none \
          accounting_storage_none jobcomp_none jobacct_gather_none sched_backfill priority_basic \
          switch_none topology_none mpi_none launch_slurm; do
    ldd "$PLUGINDIR/$pl.so" 2>&1 | grep -q "not found" && { echo "$pl.so:"; ldd "$PLUGINDIR/$pl.so" | grep "not found"; missing=1; }
done
[ "$missing" = 0 ] || fail "unresolved libraries (above)"
echo "every program and plugin used resolves all its libraries; $(slurmd -V)"
for pl in cgroup_v1 cgroup_v2; do  # slurmd loads one whatever ProctrackType says (cgroup.conf below)
    ldd "$PLUGINDIR/$pl.so" 2>&1 | grep "not found" | sed "s/^/warning: $pl.so: /"
done

step "2. Python packages"
if [ "$WHL" != none ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl \
        || fail "pip install of the wheels"
    export PYTHONPATH=/tmp/site:$REPO
else
    export PYTHONPATH=$REPO
fi
export PYTHONUNBUFFERED=1
"$PY" -c 'import optuna, sqlite_utils, submitit, hpsearch; from importlib.metadata import version as v; print(*(f"{n} {v(n)}" for n in ("optuna", "sqlite-utils", "submitit", "sqlalchemy", "click")))' \
    || fail "imports"

step "3. munged, slurmctld, slurmd"
rm -rf "$ST"; mkdir -p "$ST"/{etc,run,log,spool/slurmctld,spool/slurmd,munge,munge-socket,dev} "$RUNS"
chmod 755 "$ST" "$ST/munge-socket"; chmod 700 "$ST/munge" "$RUNS"
if ! getent hosts "$NODE" >/dev/null; then
    echo "127.0.0.1 $NODE $(hostname)" >>/etc/hosts && echo "added $NODE to /etc/hosts"
fi
mungekey --create --keyfile="$ST/munge/munge.key" 2>/dev/null || head -c 1024 /dev/urandom >"$ST/munge/munge.key"
chmod 400 "$ST/munge/munge.key"
munged --force --socket="$SOCK" --key-file="$ST/munge/munge.key" --pid-file="$ST/run/munged.pid" \
    --log-file="$ST/log/munged.log" --seed-file="$ST/munge/munged.seed" </dev/null || fail "munged did not start"
for _ in $(seq 40); do munge -n --socket="$SOCK" | unmunge --socket="$SOCK" >/dev/null 2>&1 && break; sleep 0.25; done
munge -n --socket="$SOCK" | unmunge --socket="$SOCK" | grep -E "STATUS|UID" || fail "munge does not answer"

if [ -c /dev/nvidia0 ]; then
    GPU_FILES="/dev/nvidia[0-$((NGPU - 1))]"
else  # rehearsal: character devices with /dev/null's numbers
    for i in $(seq 0 $((NGPU - 1))); do mknod -m 666 "$ST/dev/nvidia$i" c 1 3; done
    GPU_FILES="$ST/dev/nvidia[0-$((NGPU - 1))]"
fi
cat >"$SLURM_CONF" <<EOF
# Written by benchmarks/gpu/slurm_gpu_machine.sh
ClusterName=hpsgpu
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$((PORT_BASE + 17))
SlurmdPort=$((PORT_BASE + 18))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
PluginDir=$PLUGINDIR
StateSaveLocation=$ST/spool/slurmctld
SlurmdSpoolDir=$ST/spool/slurmd
SlurmctldPidFile=$ST/run/slurmctld.pid
SlurmdPidFile=$ST/run/slurmd.pid
SlurmctldLogFile=$ST/log/slurmctld.log
SlurmdLogFile=$ST/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
SlurmdParameters=config_overrides
PropagateResourceLimits=NONE
ReturnToService=2
MinJobAge=600
KillWait=2
InactiveLimit=0
MessageTimeout=10
SlurmdTimeout=60
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$(nproc) Gres=gpu:$NGPU State=UNKNOWN
PartitionName=gpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$ST/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=$NODE Name=gpu File=$GPU_FILES
EOF
echo "--- $SLURM_CONF"; cat "$SLURM_CONF"; echo "--- gres.conf"; cat "$ST/etc/gres.conf"
slurmctld </dev/null || fail "slurmctld did not start"
# slurmd 22.05 loads a cgroup plugin even with proctrack/linuxproc and task/none: on a
# cgroup v2 host it picks cgroup/v2, which wants systemd's D-Bus to make a scope. cgroup/v1's
# init does nothing until a cgroup plugin uses it (none here); else cgroup/v2 without systemd.
start_slurmd() {  # start_slurmd CGROUP_PLUGIN
    { echo "CgroupPlugin=$1"; [ "$1" = cgroup/v2 ] && echo "IgnoreSystemd=yes"; } >"$ST/etc/cgroup.conf"
    echo "--- cgroup.conf"; cat "$ST/etc/cgroup.conf"
    slurmd -N "$NODE" </dev/null || return 1
    sleep 2
    local p; p=$(pid_in "$ST/run/slurmd.pid") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null
}
if ! start_slurmd cgroup/v1; then
    echo "slurmd did not start with CgroupPlugin=cgroup/v1:"; tail -n 8 "$ST/log/slurmd.log"
    start_slurmd cgroup/v2 || fail "slurmd did not start"
fi
state=
for _ in $(seq 120); do
    state=$(sinfo -h -N -o %t 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.5
done
sinfo -N -o "%N %t %c %G" 2>&1
[ "$state" = idle ] || { scontrol show node 2>&1; fail "node $NODE is not idle after 60 s (state '$state')"; }
scontrol show node "$NODE" | grep -E "Gres|CfgTRES|State"

# hpsearch searches -------------------------------------------------------------------------
run_search() {  # run_search SPEC_STEM EXPERIMENT
    local t0 t1 rc d f
    step "hpsearch submit benchmarks/gpu/$1.yaml"
    # the GPUs Slurm gave each job while it ran (its GRES index), sampled every second
    ( while :; do scontrol -d show job 2>/dev/null | awk '/^JobId=/ {id = $1} /GRES=gpu/ {print id, $0}' \
        >>"$ST/gres-$2"; sleep 1; done ) &
    local sampler=$!
    t0=$(date +%s.%N)
    timeout 300 "$PY" -m hpsearch submit "benchmarks/gpu/$1.yaml" --runs-dir "$RUNS" -q; rc=$?
    t1=$(since "$t0")
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    echo "GPUs Slurm gave each job while it ran (scontrol -d show job, sampled every second; count):"
    sed 's/  */ /g' "$ST/gres-$2" 2>/dev/null | sort | uniq -c
    echo "$2: submit exit $rc; submit to end $t1 s"
    echo "$2 submit_to_end_s=$t1 exit=$rc" >>"$ST/walls"
    "$PY" -m hpsearch status "$2" --runs-dir "$RUNS" 2>&1
    for d in "$RUNS/$2"/trials/*/; do
        echo "--- trial $d stdout.log"; cat "$d/stdout.log" 2>/dev/null
        echo "--- trial $d stderr.log (last lines)"; tail -n 8 "$d/stderr.log" 2>/dev/null
    done
    for f in "$RUNS/$2"/pilots/submitit/*_log.*; do
        [ -s "$f" ] && { echo "--- pilot log $f (last lines)"; tail -n 15 "$f"; }
    done
    "$PY" -m hpsearch events "$2" --runs-dir "$RUNS" 2>&1 | tail -n 30
}
for s in $SEARCHES; do
    case $s in
        slots) run_search slurm_gpu_slots slurm-gpu-slots ;;
        nccl) run_search slurm_gpu_nccl slurm-gpu-nccl ;;
    esac
done

step "the jobs Slurm ran (scontrol -d show job)"
scontrol -d show job 2>&1 | grep -E "JobId=|JobState=|SubmitTime=|StartTime=|NodeList=|TRES=|GRES=|Nodes=" | grep -v "ReqNodeList\|ExcNodeList"

step "4. checks"
cat "$ST/walls"
"$PY" benchmarks/gpu/slurm_gpu_check.py "$RUNS" slurm-gpu-slots slurm-gpu-nccl "${GPU_UUIDS[@]}"
rc=$?

step "daemon logs"
grep -E "error|gres|GRES" "$ST/log/slurmd.log" | tail -n 20
grep -E "error" "$ST/log/slurmctld.log" | tail -n 20
cp "$ST"/log/slurmctld.log "$ST"/log/slurmd.log "$OUT"/ 2>/dev/null
stop_all
step "done, exit $rc"
exit $rc
