#!/usr/bin/env bash
# A real Slurm cluster on this one host, for tests and for trying hpsearch by hand:
# munged, a private MariaDB, slurmdbd (so sacct works), slurmctld and 8 nodes, each a
# `slurmd -N nodeX` process on its own port, under a tree topology of 4 leaf switches and a
# spine. Root on Debian/Ubuntu; every file it writes lives under one state directory.
#
#   scripts/slurm-cluster.sh install   # apt-get install what is missing (nothing if present)
#   scripts/slurm-cluster.sh start     # install if needed, start what is not running, wait
#                                      # until all nodes are up and sacct works; prints the
#                                      # `export SLURM_CONF=...` line to use the cluster
#   scripts/slurm-cluster.sh status    # each daemon and its pid, then sinfo; exit 3 if any is down
#   scripts/slurm-cluster.sh stop      # cancel all jobs, stop every daemon by its pid file
#
# HPSEARCH_SLURM_DIR (default /tmp/hpsearch-slurm) holds the state; HPSEARCH_SLURM_PORT_BASE
# (default 16800) moves every port, so two clusters can run side by side. See docs/testing.md.
# HPSEARCH_SLURM_TOPOLOGY=none starts the cluster without the tree plugin (topology.conf is
# still written, for hpsearch's placement.topology, but Slurm does not read it).
# HPSEARCH_SLURM_BIND=cores binds tasks to cores (task/cgroup,task/affinity; see task_plugins),
# HPSEARCH_SLURM_NODE_CPUS (default 4) and HPSEARCH_SLURM_NODE_GPUS (default 2) size each node:
# tests/slurm/conftest.py's slurm_bound_cluster uses all three.
# Exit codes: 0 ok, 1 failed (the reason and the log's tail on stderr), 2 usage,
# 3 (status) not all running, 77 cannot run here (not root, no apt-get).
set -euo pipefail

STATE_DIR=$(realpath -m "${HPSEARCH_SLURM_DIR:-/tmp/hpsearch-slurm}")
PORT_BASE=${HPSEARCH_SLURM_PORT_BASE:-16800}
CLUSTER_NAME=hpsearch
NODE_COUNT=8            # node1..node8; leaf switch k holds node(2k-1) and node(2k)
NODE_CPUS=${HPSEARCH_SLURM_NODE_CPUS:-4}   # declared, not real: SlurmdParameters=config_overrides
NODE_MEMORY_MB=4000
NODE_GPUS=${HPSEARCH_SLURM_NODE_GPUS:-2}   # gres gpu backed by placeholder files under $STATE_DIR/dev
BIND=${HPSEARCH_SLURM_BIND:-none}   # none: task/none | cores: task/cgroup,task/affinity
START_TIMEOUT_S=${HPSEARCH_SLURM_START_TIMEOUT:-90}
TOPOLOGY_PLUGIN=${HPSEARCH_SLURM_TOPOLOGY:-tree}   # tree | none
case $TOPOLOGY_PLUGIN in tree|none) ;; *) echo "HPSEARCH_SLURM_TOPOLOGY must be tree or none" >&2; exit 2;; esac
case $BIND in none|cores) ;; *) echo "HPSEARCH_SLURM_BIND must be none or cores" >&2; exit 2;; esac

PACKAGES=(munge mariadb-server slurm-wlm slurm-client slurmdbd)

ETC=$STATE_DIR/etc
RUN=$STATE_DIR/run
LOG=$STATE_DIR/log
SPOOL=$STATE_DIR/spool
SLURM_CONF_FILE=$ETC/slurm.conf
# In a folder of its own that every user can reach (the key stays in munge/, mode 700):
# the tests submit jobs as a second user too.
MUNGE_SOCKET=$STATE_DIR/munge-socket/munge.socket
MYSQL_SOCKET=$STATE_DIR/mysql/mysqld.sock
MYSQL_PORT=$((PORT_BASE + 6))
SLURMCTLD_PORT=$((PORT_BASE + 17))
SLURMDBD_PORT=$((PORT_BASE + 19))
SLURMD_PORT0=$((PORT_BASE + 20))     # node i listens on SLURMD_PORT0 + i
DB_USER=slurm
DB_PASSWORD=hpsearch-test-only       # a private database on 127.0.0.1, for tests

export SLURM_CONF=$SLURM_CONF_FILE

log() { printf '[slurm-cluster] %s\n' "$*" >&2; }

# die MESSAGE [LOGFILE...]: the reason, then the last lines of each log that explains it.
die() {
    local message=$1; shift
    log "error: $message"
    local file
    for file in "$@"; do
        if [ -s "$file" ]; then
            printf -- '--- last lines of %s ---\n' "$file" >&2
            tail -n 25 "$file" >&2
        fi
    done
    exit 1
}

cannot_run_here() { log "cannot run here: $*"; exit 77; }

require_root_and_apt() {
    [ "$(id -u)" -eq 0 ] || cannot_run_here "must run as root (it installs packages and starts daemons as root)"
    command -v apt-get >/dev/null 2>&1 || cannot_run_here "apt-get not found (Debian or Ubuntu needed)"
}

missing_packages() {
    local package
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
            || printf '%s\n' "$package"
    done
}

cmd_install() {
    require_root_and_apt
    local missing
    mapfile -t missing < <(missing_packages)
    if [ "${#missing[@]}" -eq 0 ]; then
        log "packages already installed: ${PACKAGES[*]}"
        return 0
    fi
    log "installing ${missing[*]} (apt-get, --no-install-recommends)"
    # The packages' postinst scripts would start the system's munge, MariaDB and Slurm
    # services; this cluster runs its own, so a policy-rc.d forbids that while apt runs
    # (the file is removed again unless it was already there).
    local policy=/usr/sbin/policy-rc.d
    local made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# temporary, from hpsearch scripts/slurm-cluster.sh install\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    # (the lock timeout waits out an unattended upgrade instead of failing at once)
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2 || die "apt-get update failed"
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}" >&2 \
        || die "apt-get install ${missing[*]} failed"
    if [ "$made_policy" -eq 1 ]; then
        rm -f "$policy"
        trap - EXIT
    fi
    mapfile -t missing < <(missing_packages)
    [ "${#missing[@]}" -eq 0 ] || die "still not installed after apt-get: ${missing[*]}"
    log "installed"
}


# --- state directory and configuration ---------------------------------------------------

make_state_dir() {
    mkdir -p "$STATE_DIR"
    chmod 755 "$STATE_DIR"
    mkdir -p "$ETC" "$RUN" "$LOG" "$SPOOL/slurmctld" "$STATE_DIR/dev" "$STATE_DIR/mysql"
    mkdir -p "$STATE_DIR/munge"
    chmod 700 "$STATE_DIR/munge"  # munged refuses a key directory others can read
    mkdir -p "$STATE_DIR/munge-socket"
    chmod 755 "$STATE_DIR/munge-socket"
    local i
    for i in $(seq 1 "$NODE_COUNT"); do mkdir -p "$SPOOL/slurmd-node$i"; done
    for i in $(seq 0 $((NODE_GPUS - 1))); do make_placeholder_gpu "$STATE_DIR/dev/nvidia$i"; done
}

# A GPU's File= must be a character device, or slurmd logs "not a valid character or block
# device" and sets no CUDA_VISIBLE_DEVICES. The placeholders are copies of /dev/null (1:3):
# harmless to open, and with task/none nothing restricts devices anyway. Where mknod is not
# allowed a plain file still gives the gres count (without CUDA_VISIBLE_DEVICES).
make_placeholder_gpu() {
    [ -c "$1" ] && return 0
    rm -f "$1"
    mknod -m 666 "$1" c 1 3 2>/dev/null || : >"$1"
}

# HPSEARCH_SLURM_BIND=cores binds as production clusters do: task/affinity sets each task's
# CPU mask, task/cgroup confines each step to its cores in a cpuset cgroup (v1 here, one
# slurm_<node> tree per slurmd) where this host lets root make one; else affinity alone.
# Devices are not constrained: the placeholder GPUs have /dev/null's numbers.
task_plugins() {
    if [ "$BIND" = none ]; then echo task/none; return; fi
    local probe=/sys/fs/cgroup/cpuset/hpsearch-probe-$$
    if mkdir "$probe" 2>/dev/null; then
        rmdir "$probe"
        printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=yes\n' >"$ETC/cgroup.conf"
        echo task/cgroup,task/affinity
    else
        log "no cpuset cgroup can be made here (/sys/fs/cgroup/cpuset): task/affinity alone"
        echo task/affinity
    fi
}

node_range() { printf 'node[1-%d]' "$NODE_COUNT"; }

write_configs() {
    local host nodes i k
    host=$(hostname -s)
    nodes=$(node_range)
    {
        echo "# Written by scripts/slurm-cluster.sh on each cold start; edits are lost."
        echo "ClusterName=$CLUSTER_NAME"
        echo "SlurmctldHost=$host(127.0.0.1)"
        echo "SlurmctldPort=$SLURMCTLD_PORT"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "# cred_expire: also how long a requeued job waits before it may start again"
        echo "# (default 120 s); the tests requeue jobs (driver jobs, preemption stand-ins)."
        echo "AuthInfo=socket=$MUNGE_SOCKET,cred_expire=30"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$SPOOL/slurmctld"
        echo "SlurmdSpoolDir=$SPOOL/slurmd-%n"
        echo "SlurmctldPidFile=$RUN/slurmctld.pid"
        echo "SlurmdPidFile=$RUN/slurmd-%n.pid"
        echo "SlurmctldLogFile=$LOG/slurmctld.log"
        echo "SlurmdLogFile=$LOG/slurmd-%n.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "# Track processes by parent pid (proctrack/cgroup would need the freezer too)."
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=$(task_plugins)"
        echo "JobAcctGatherType=jobacct_gather/linux"
        echo "JobAcctGatherFrequency=30"
        echo "PropagateResourceLimits=NONE"
        echo "MpiDefault=none"
        echo "AccountingStorageType=accounting_storage/slurmdbd"
        echo "AccountingStorageHost=localhost"
        echo "AccountingStoragePort=$SLURMDBD_PORT"
        echo "# For connections to slurmdbd, Slurm takes the munge socket from here, not AuthInfo."
        echo "AccountingStoragePass=$MUNGE_SOCKET"
        echo "AccountingStorageTRES=gres/gpu"
        echo "# Association limits (sacctmgr ... MaxSubmitJobs=N) are enforced, as on production"
        echo "# clusters: the tests make sbatch refuse jobs by such a limit."
        echo "AccountingStorageEnforce=associations,limits"
        echo "JobCompType=jobcomp/none"
        echo "TopologyPlugin=topology/$TOPOLOGY_PLUGIN"
        echo "SchedulerType=sched/backfill"
        echo "# Schedule within a second or two so tests stay fast."
        echo "SchedulerParameters=bf_interval=1,sched_interval=2,bf_continue"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU_Memory"
        echo "DefMemPerCPU=$((NODE_MEMORY_MB / NODE_CPUS))"
        echo "GresTypes=gpu"
        echo "# The nodes declare CPUs, memory and GPUs this host does not have."
        echo "SlurmdParameters=config_overrides"
        echo "ReturnToService=2"
        echo "JobRequeue=1"
        echo "MaxArraySize=1001"
        echo "MinJobAge=300"
        echo "KillWait=2"
        echo "InactiveLimit=0"
        echo "MessageTimeout=10"
        echo "SlurmdTimeout=60"
        echo "SlurmctldTimeout=60"
        for i in $(seq 1 "$NODE_COUNT"); do
            echo "NodeName=node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((SLURMD_PORT0 + i)) CPUs=$NODE_CPUS RealMemory=$NODE_MEMORY_MB Gres=gpu:$NODE_GPUS State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP"
    } >"$ETC/slurm.conf.new"
    {
        echo "# Every node shows its GPUs as placeholder files; nothing opens them."
        echo "AutoDetect=off"
        echo "NodeName=$nodes Name=gpu File=$STATE_DIR/dev/nvidia[0-$((NODE_GPUS - 1))]"
    } >"$ETC/gres.conf.new"
    {
        for k in $(seq 1 $((NODE_COUNT / 2))); do
            echo "SwitchName=leaf$k Nodes=node[$((2 * k - 1))-$((2 * k))]"
        done
        echo "SwitchName=spine Switches=leaf[1-$((NODE_COUNT / 2))]"
    } >"$ETC/topology.conf.new"
    {
        echo "# slurmdbd reads this from beside slurm.conf, and only if it is mode 600."
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=$MUNGE_SOCKET"
        echo "DbdHost=localhost"
        echo "DbdAddr=127.0.0.1"
        echo "DbdPort=$SLURMDBD_PORT"
        echo "SlurmUser=root"
        echo "PidFile=$RUN/slurmdbd.pid"
        echo "LogFile=$LOG/slurmdbd.log"
        echo "DebugLevel=info"
        echo "StorageType=accounting_storage/mysql"
        echo "StorageHost=127.0.0.1"
        echo "StoragePort=$MYSQL_PORT"
        echo "StorageUser=$DB_USER"
        echo "StoragePass=$DB_PASSWORD"
        echo "StorageLoc=slurm_acct_db"
    } >"$ETC/slurmdbd.conf.new"
    chmod 600 "$ETC/slurmdbd.conf.new"
    local name
    for name in slurm.conf gres.conf topology.conf slurmdbd.conf; do
        mv -f "$ETC/$name.new" "$ETC/$name"
    done
    printf 'export SLURM_CONF=%s\n' "$SLURM_CONF_FILE" >"$ETC/env.sh"
}

# --- daemons, found only through their pid files -----------------------------------------

# is_alive PID PROGRAM: PID is a live (not zombie) process named PROGRAM. Zombies count as
# dead: where pid 1 is not a real init (containers), killed daemons are never reaped.
is_alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    [ "${stat#*(}" != "$stat" ] || return 1
    local comm=${stat#*(}; comm=${comm%%)*}
    local state=${stat##*) }; state=${state%% *}
    [ "$comm" = "$2" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# pid_of PIDFILE PROGRAM: the pid in PIDFILE if that process is alive and is PROGRAM.
pid_of() {
    local pidfile=$1 program=$2 pid
    [ -s "$pidfile" ] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [ -n "$pid" ] && is_alive "$pid" "$program" || return 1
    echo "$pid"
}

# DAEMONS: name, program, pid file; in start order.
daemon_table() {
    echo "munged munged $RUN/munged.pid"
    echo "mariadbd mariadbd $RUN/mariadbd.pid"
    echo "slurmdbd slurmdbd $RUN/slurmdbd.pid"
    echo "slurmctld slurmctld $RUN/slurmctld.pid"
    local i
    for i in $(seq 1 "$NODE_COUNT"); do echo "slurmd-node$i slurmd $RUN/slurmd-node$i.pid"; done
}

is_running() {  # is_running NAME
    local name program pidfile
    while read -r name program pidfile; do
        [ "$name" = "$1" ] && { pid_of "$pidfile" "$program" >/dev/null; return; }
    done < <(daemon_table)
    return 1
}

# require_free_port PORT WHAT: fail early, and say why, when a daemon of ours cannot bind.
require_free_port() {
    local hex
    hex=$(printf '%04X' "$1")
    if awk -v hex="$hex" '$4 == "0A" && $2 ~ (":" hex "$") { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
        die "port $1 ($2) is already in use: a cluster whose state dir was deleted while it ran, or another service. Stop it, or move this cluster's ports with HPSEARCH_SLURM_PORT_BASE (now $PORT_BASE)"
    fi
}

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every half second until it succeeds.
wait_for() {
    local seconds=$1 description=$2; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || { log "gave up after ${seconds}s waiting for $description"; return 1; }
        sleep 0.5
    done
}

start_munged() {
    is_running munged && return 0
    if [ ! -s "$STATE_DIR/munge/munge.key" ]; then
        # mungekey is munge >= 0.5.14; a kilobyte of random bytes is the older way.
        mungekey --create --keyfile="$STATE_DIR/munge/munge.key" 2>/dev/null \
            || head -c 1024 /dev/urandom >"$STATE_DIR/munge/munge.key"
    fi
    chmod 400 "$STATE_DIR/munge/munge.key"
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE_DIR/munge/munge.key" \
        --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" \
        --seed-file="$STATE_DIR/munge/munged.seed" </dev/null >>"$LOG/munged.out" 2>&1 9>&- \
        || die "munged did not start" "$LOG/munged.out" "$LOG/munged.log"
    wait_for 20 munge munge_works || die "munge does not answer on $MUNGE_SOCKET" "$LOG/munged.log"
}
munge_works() { munge -n --socket="$MUNGE_SOCKET" | unmunge --socket="$MUNGE_SOCKET"; }

mysql_client() { mariadb --no-defaults --socket="$MYSQL_SOCKET" -u root "$@"; }

# A private mariadbd (own datadir, socket and port under the state dir), not the system's
# service: nothing outside the state dir is touched, and deleting it resets the accounting
# database together with slurmctld's job-id counter.
start_mariadb() {
    local data=$STATE_DIR/mysql/data
    if ! is_running mariadbd; then
        if [ ! -d "$data/mysql" ]; then
            rm -rf "$data"
            mariadb-install-db --no-defaults --datadir="$data" --user=root \
                --auth-root-authentication-method=socket --skip-test-db \
                >"$LOG/mariadb-install.log" 2>&1 \
                || die "mariadb-install-db failed" "$LOG/mariadb-install.log"
        fi
        rm -f "$MYSQL_SOCKET"
        require_free_port "$MYSQL_PORT" mariadbd
        # slurmdbd logs an error unless buffer pool, log file and lock wait are this large
        # (half its recommendation); the pool is reserved, not used, by this tiny database.
        setsid mariadbd --no-defaults --datadir="$data" --socket="$MYSQL_SOCKET" \
            --port="$MYSQL_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
            --pid-file="$RUN/mariadbd.pid" --log-error="$LOG/mariadb.log" --user=root \
            --innodb-use-native-aio=0 --innodb-buffer-pool-size=512M \
            --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
            </dev/null >>"$LOG/mariadb.out" 2>&1 9>&- &
        wait_for 60 mariadb mariadb-admin --no-defaults --socket="$MYSQL_SOCKET" ping \
            || die "mariadbd did not come up" "$LOG/mariadb.out" "$LOG/mariadb.log"
        wait_for 10 "mariadb pid file" is_running mariadbd \
            || die "mariadbd wrote no pid file $RUN/mariadbd.pid" "$LOG/mariadb.log"
    fi
    mysql_client -e "CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
        GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'127.0.0.1';" 2>>"$LOG/mariadb.out" \
        || die "could not create the slurm database user" "$LOG/mariadb.out"
}

sacctmgr_works() { sacctmgr -n -P list cluster format=cluster; }
cluster_registered() { sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER_NAME"; }

# Prints "added" if the cluster had to be added to the accounting database.
start_slurmdbd() {
    if ! is_running slurmdbd; then
        require_free_port "$SLURMDBD_PORT" slurmdbd
        slurmdbd </dev/null >>"$LOG/slurmdbd.out" 2>&1 9>&- \
            || die "slurmdbd did not start" "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"
    fi
    # The first start creates the database's tables, which takes a few seconds.
    wait_for 60 slurmdbd sacctmgr_works \
        || die "slurmdbd does not answer sacctmgr" "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"
    if ! cluster_registered; then
        sacctmgr -i add cluster "$CLUSTER_NAME" >>"$LOG/slurmdbd.out" 2>&1 \
            || die "sacctmgr add cluster $CLUSTER_NAME failed" "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"
        echo added
    fi
}

slurmctld_up() { scontrol ping | grep -q 'is UP'; }

start_slurmctld() {
    require_free_port "$SLURMCTLD_PORT" slurmctld
    slurmctld </dev/null >>"$LOG/slurmctld.out" 2>&1 9>&- \
        || die "slurmctld did not start" "$LOG/slurmctld.out" "$LOG/slurmctld.log"
    wait_for 30 slurmctld slurmctld_up \
        || die "slurmctld does not answer scontrol ping" "$LOG/slurmctld.out" "$LOG/slurmctld.log"
}

# slurmctld tells slurmdbd its host and port when it registers; until then sacct lists
# no jobs of this cluster.
slurmctld_in_accounting() {
    [ "$(sacctmgr -n -P list cluster "$CLUSTER_NAME" format=controlport)" = "$SLURMCTLD_PORT" ]
}

start_slurmds() {
    local i
    for i in $(seq 1 "$NODE_COUNT"); do
        is_running "slurmd-node$i" && continue
        require_free_port $((SLURMD_PORT0 + i)) "slurmd -N node$i"
        slurmd -N "node$i" </dev/null >>"$LOG/slurmd-node$i.out" 2>&1 9>&- \
            || die "slurmd -N node$i did not start" "$LOG/slurmd-node$i.out" "$LOG/slurmd-node$i.log"
    done
}

# Waits until every node is up; resumes nodes left down or drained (by an earlier run, a
# killed slurmd, or a registration with other resources). With WANT=idle every node must be
# idle, otherwise busy nodes count as up too.
wait_for_nodes() {
    local want=$1 deadline=$((SECONDS + START_TIMEOUT_S)) last_resume=-100
    local node state ready listing to_resume
    while :; do
        listing=$(sinfo -h -N -o '%N %T' 2>&1) || listing=""
        ready=0; to_resume=()
        while read -r node state; do
            [ -n "$node" ] || continue
            case "$state" in
                idle) ready=$((ready + 1)) ;;
                mixed|allocated|completing) [ "$want" = idle ] || ready=$((ready + 1)) ;;
                *drain*|down|fail*|inval*) to_resume+=("$node") ;;
            esac
        done <<<"$listing"
        [ "$ready" -eq "$NODE_COUNT" ] && return 0
        if [ "${#to_resume[@]}" -gt 0 ] && [ $((SECONDS - last_resume)) -ge 3 ]; then
            log "resuming ${to_resume[*]}"
            local joined
            joined=$(IFS=,; echo "${to_resume[*]}")
            scontrol update nodename="$joined" state=resume >&2 || true
            last_resume=$SECONDS
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "nodes not ready after ${START_TIMEOUT_S}s:"
            printf '%s\n' "$listing" >&2
            die "not all $NODE_COUNT nodes came up" "$LOG/slurmctld.log" "$LOG/slurmd-node1.log"
        fi
        sleep 0.5
    done
}

cancel_all_jobs() {
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    [ -n "$jobs" ] || return 0
    log "cancelling leftover jobs: ${jobs//$'\n'/ }"
    # shellcheck disable=SC2086  # one job id per word
    scancel $jobs || true
    wait_for 20 "jobs gone" queue_empty || log "some jobs are still completing"
}
queue_empty() { [ -z "$(squeue -h -o %i)" ]; }

# After a crash slurmctld may hand out job ids again that accounting already holds, and
# for a few seconds sacct may name a finished job "allocation": match on name and state.
job_accounted_completed() {
    sacct -n -X -P -j "$1" -o JobName,State | grep -qx 'slurm-cluster-check|COMPLETED'
}

# Serializes start and stop. Every daemon is started with 9>&- so that none inherits the
# lock's descriptor (and holds the lock for its lifetime).
take_lock() {
    exec 9>>"$STATE_DIR/lock"
    flock -w 600 9 || die "another slurm-cluster.sh holds $STATE_DIR/lock"
}

cmd_start() {
    local began=$SECONDS
    require_root_and_apt
    [ -z "$(missing_packages)" ] || cmd_install
    make_state_dir
    take_lock
    local cold=0
    if ! is_running slurmctld; then
        cold=1
        write_configs
    fi
    start_munged
    start_mariadb
    local added
    added=$(start_slurmdbd)
    if [ "$added" = added ] && [ "$cold" -eq 0 ]; then
        # A cluster added to accounting after slurmctld started is seen only after a
        # restart (scontrol reconfigure is not enough).
        log "restarting slurmctld so it registers with slurmdbd"
        stop_daemon slurmctld slurmctld "$RUN/slurmctld.pid"
        cold=1
    fi
    is_running slurmctld || start_slurmctld
    start_slurmds
    if [ "$cold" -eq 1 ]; then
        # A cold start means a fresh cluster: jobs recovered from the saved state belonged
        # to a cluster that is gone.
        cancel_all_jobs
        # Jobs that were running when everything was SIGKILLed stay RUNNING in accounting
        # ("runaway jobs") until closed by hand; -i answers the question with yes.
        sacctmgr -i list runawayjobs </dev/null >>"$LOG/slurmdbd.out" 2>&1 || true
        wait_for_nodes idle
    else
        wait_for_nodes up
    fi
    wait_for 30 "slurmctld registered in accounting" slurmctld_in_accounting \
        || die "slurmctld did not register with slurmdbd" "$LOG/slurmctld.log" "$LOG/slurmdbd.log"
    local sacct_err
    sacct_err=$(sacct -n -X -P -S now-1minutes -o JobID 2>&1 >/dev/null) \
        || die "sacct fails: $sacct_err" "$LOG/slurmdbd.log"
    [ -z "$sacct_err" ] || die "sacct complains: $sacct_err" "$LOG/slurmdbd.log"
    if [ "$cold" -eq 1 ]; then
        # End to end: a job runs, and sacct lists it as finished.
        local probe
        probe=$(sbatch --parsable -J slurm-cluster-check -o /dev/null --wrap true 2>&1) \
            || die "sbatch of a check job failed: $probe" "$LOG/slurmctld.log"
        wait_for 60 "check job accounted" job_accounted_completed "$probe" \
            || die "check job $probe not listed COMPLETED by sacct" "$LOG/slurmctld.log" "$LOG/slurmdbd.log"
    fi
    log "cluster up in $((SECONDS - began))s: $NODE_COUNT nodes, state in $STATE_DIR"
    log "use it with:"
    cat "$ETC/env.sh"
}

# stop_daemon NAME PROGRAM PIDFILE...: SIGTERM, then SIGKILL after 15 s.
stop_daemon() {
    local name=$1 program=$2; shift 2
    local pidfile pid pids=()
    for pidfile in "$@"; do
        if pid=$(pid_of "$pidfile" "$program"); then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    local deadline=$((SECONDS + 15)) alive
    while :; do
        alive=()
        for pid in "${pids[@]}"; do
            is_alive "$pid" "$program" && alive+=("$pid")
        done
        [ "${#alive[@]}" -eq 0 ] && break
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "$name: SIGKILL ${alive[*]}"
            kill -KILL "${alive[@]}" 2>/dev/null || true
            sleep 0.5
            break
        fi
        sleep 0.2
    done
    for pidfile in "$@"; do rm -f "$pidfile"; done
    [ "${#pids[@]}" -eq 0 ] || log "stopped $name (${pids[*]})"
}

cmd_stop() {
    [ -d "$STATE_DIR" ] || { log "nothing to stop: no $STATE_DIR"; return 0; }
    take_lock
    if is_running slurmctld && [ -f "$SLURM_CONF_FILE" ]; then cancel_all_jobs; fi
    local i slurmd_pidfiles=()
    for i in $(seq 1 "$NODE_COUNT"); do slurmd_pidfiles+=("$RUN/slurmd-node$i.pid"); done
    stop_daemon slurmd slurmd "${slurmd_pidfiles[@]}"
    stop_daemon slurmctld slurmctld "$RUN/slurmctld.pid"
    stop_daemon slurmdbd slurmdbd "$RUN/slurmdbd.pid"
    stop_daemon mariadbd mariadbd "$RUN/mariadbd.pid"
    stop_daemon munged munged "$RUN/munged.pid"
    log "stopped; state kept in $STATE_DIR (delete it for a fresh cluster)"
}

cmd_status() {
    local name program pidfile pid down=0
    while read -r name program pidfile; do
        if pid=$(pid_of "$pidfile" "$program"); then
            printf '%-14s running  pid %s\n' "$name" "$pid"
        else
            printf '%-14s stopped\n' "$name"
            down=1
        fi
    done < <(daemon_table)
    if is_running slurmctld; then
        echo
        sinfo -N -o '%N %T %P %c %m %G' || true
        echo
        cat "$ETC/env.sh"
    fi
    [ "$down" -eq 0 ] || return 3
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 {install|start|stop|status}" >&2; exit 2 ;;
esac
