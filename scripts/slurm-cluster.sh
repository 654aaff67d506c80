#!/usr/bin/env bash
# A real Slurm cluster on this one host, for tests and for trying hpsearch by hand:
# munged, a private MariaDB, slurmdbd (so sacct works), slurmctld and 8 nodes, each a
# `slurmd -N nodeX` process on its own port, under a tree topology of 4 leaf switches and a
# spine; partitions debug (all 8, the default), left (node[1-4]) and right (node[5-8]), and
# over node[5-8] scavenger (preemptible) and urgent (which preempts it).
# Beside it a second cluster, hpsearch2 (its own slurmctld and 4 nodes h2node[1-4], the same
# munge, slurmdbd and state directory), reached from the first one's SLURM_CONF with
# `sbatch -M hpsearch2`, `squeue -M hpsearch2`, ... Root on Debian/Ubuntu; every file it
# writes lives under one state directory.
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
# HPSEARCH_SLURM_SECOND_CLUSTER names the second cluster (default hpsearch2); `none` starts
# none (the flat and bound test clusters).
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
SECOND_CLUSTER=${HPSEARCH_SLURM_SECOND_CLUSTER:-hpsearch2}   # none: no second cluster
[ "$SECOND_CLUSTER" = none ] && SECOND_CLUSTER=""
if [ -n "$SECOND_CLUSTER" ] && { [[ ! $SECOND_CLUSTER =~ ^[a-z][a-z0-9_]{0,30}$ ]] \
        || [ "$SECOND_CLUSTER" = "$CLUSTER_NAME" ]; }; then
    echo "HPSEARCH_SLURM_SECOND_CLUSTER must be none or a lower-case name other than $CLUSTER_NAME" >&2
    exit 2
fi
SECOND_NODE_COUNT=4     # h2node1..h2node4, two leaf switches (h2leaf1, h2leaf2)
SECOND_NODE_PREFIX=h2node

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
SLURMCTLD2_PORT=$((PORT_BASE + 37))  # the second cluster's slurmctld
SLURMD2_PORT0=$((PORT_BASE + 40))    # its node i listens on SLURMD2_PORT0 + i
# The second cluster's own configuration (slurm.conf, gres.conf, topology.conf): its daemons
# read it; clients reach it through the first one's slurm.conf, with -M (slurmdbd tells them
# where its slurmctld listens).
ETC2=$ETC/${SECOND_CLUSTER:-second}
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
    if [ -n "$SECOND_CLUSTER" ]; then
        mkdir -p "$SPOOL/slurmctld-$SECOND_CLUSTER"
        for i in $(seq 1 "$SECOND_NODE_COUNT"); do
            mkdir -p "$SPOOL/slurmd-$SECOND_NODE_PREFIX$i"
        done
    fi
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

# write_slurm_conf NAME DIR CTLD_PORT NODE_PREFIX NODE_COUNT PORT0 SWITCH_PREFIX PARTITIONS:
# one cluster's slurm.conf, gres.conf and topology.conf in DIR (atomically, each by rename).
# Its slurmctld keeps pid file, log and state under its own names; nodes are
# NODE_PREFIX1..NODE_PREFIX<COUNT>, node i on port PORT0 + i, two per leaf switch.
# PARTITIONS: the PartitionName lines after `PartitionName=`, one per line.
write_slurm_conf() {
    local name=$1 dir=$2 ctld_port=$3 prefix=$4 count=$5 port0=$6 switch=$7 partitions=$8
    local host nodes i k tasks ctld=slurmctld
    [ "$name" = "$CLUSTER_NAME" ] || ctld=slurmctld-$name
    host=$(hostname -s)
    nodes="$prefix[1-$count]"
    tasks=$(task_plugins)
    mkdir -p "$dir"
    {
        echo "# Written by scripts/slurm-cluster.sh on each cold start; edits are lost."
        echo "ClusterName=$name"
        echo "SlurmctldHost=$host(127.0.0.1)"
        echo "SlurmctldPort=$ctld_port"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "# cred_expire: also how long a requeued job waits before it may start again"
        echo "# (default 120 s); the tests requeue jobs (driver jobs, preemption stand-ins)."
        echo "AuthInfo=socket=$MUNGE_SOCKET,cred_expire=30"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$SPOOL/$ctld"
        echo "SlurmdSpoolDir=$SPOOL/slurmd-%n"
        echo "SlurmctldPidFile=$RUN/$ctld.pid"
        echo "SlurmdPidFile=$RUN/slurmd-%n.pid"
        echo "SlurmctldLogFile=$LOG/$ctld.log"
        echo "SlurmdLogFile=$LOG/slurmd-%n.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "# Track processes by parent pid (proctrack/cgroup would need the freezer too)."
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=$tasks"
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
        echo "# Preemption by partition: only a job of partition urgent (PriorityTier=10) preempts,"
        echo "# and only jobs of partition scavenger (PreemptMode=CANCEL); every other partition"
        echo "# is PreemptMode=OFF (a preemptible site: tests/slurm/test_brokerage_preempt.py)."
        echo "PreemptType=preempt/partition_prio"
        echo "PreemptMode=CANCEL"
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
        for i in $(seq 1 "$count"); do
            echo "NodeName=$prefix$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((port0 + i)) CPUs=$NODE_CPUS RealMemory=$NODE_MEMORY_MB Gres=gpu:$NODE_GPUS State=UNKNOWN"
        done
        while read -r i; do
            [ -n "$i" ] && echo "PartitionName=$i"
        done <<<"$partitions"
    } >"$dir/slurm.conf.new"
    {
        echo "# Every node shows its GPUs as placeholder files; nothing opens them."
        echo "AutoDetect=off"
        echo "NodeName=$nodes Name=gpu File=$STATE_DIR/dev/nvidia[0-$((NODE_GPUS - 1))]"
    } >"$dir/gres.conf.new"
    {
        for k in $(seq 1 $((count / 2))); do
            echo "SwitchName=${switch}leaf$k Nodes=$prefix[$((2 * k - 1))-$((2 * k))]"
        done
        echo "SwitchName=${switch}spine Switches=${switch}leaf[1-$((count / 2))]"
    } >"$dir/topology.conf.new"
    local file
    for file in slurm.conf gres.conf topology.conf; do
        mv -f "$dir/$file.new" "$dir/$file"
    done
    # task_plugins writes cgroup.conf beside the first cluster's slurm.conf.
    if [ "$dir" != "$ETC" ] && [ -f "$ETC/cgroup.conf" ]; then cp "$ETC/cgroup.conf" "$dir/"; fi
}

# The first cluster: partitions debug (every node, the default: what every test used before
# there were more), left and right (the first and the second half, two leaf switches each:
# two sites with disjoint nodes); over the second half also scavenger (preemptible: its jobs
# are cancelled for a job of urgent) and urgent (higher PriorityTier: it preempts).
write_configs() {
    local half=$((NODE_COUNT / 2))
    write_slurm_conf "$CLUSTER_NAME" "$ETC" "$SLURMCTLD_PORT" node "$NODE_COUNT" \
        "$SLURMD_PORT0" "" \
        "debug Nodes=node[1-$NODE_COUNT] Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF
left Nodes=node[1-$half] MaxTime=INFINITE State=UP PreemptMode=OFF
right Nodes=node[$((half + 1))-$NODE_COUNT] MaxTime=INFINITE State=UP PreemptMode=OFF
scavenger Nodes=node[$((half + 1))-$NODE_COUNT] MaxTime=INFINITE State=UP PreemptMode=CANCEL
urgent Nodes=node[$((half + 1))-$NODE_COUNT] MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
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
    mv -f "$ETC/slurmdbd.conf.new" "$ETC/slurmdbd.conf"
    printf 'export SLURM_CONF=%s\n' "$SLURM_CONF_FILE" >"$ETC/env.sh"
}

# The second cluster: one partition, debug, of all its nodes (a name the first has too, as
# on real sites).
write_second_configs() {
    write_slurm_conf "$SECOND_CLUSTER" "$ETC2" "$SLURMCTLD2_PORT" "$SECOND_NODE_PREFIX" \
        "$SECOND_NODE_COUNT" "$SLURMD2_PORT0" h2 \
        "debug Nodes=$SECOND_NODE_PREFIX[1-$SECOND_NODE_COUNT] Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF"
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
    local name node
    for name in $(clusters); do
        echo "$(ctld_name "$name") slurmctld $RUN/$(ctld_name "$name").pid"
    done
    while read -r name node _; do echo "slurmd-$node slurmd $RUN/slurmd-$node.pid"; done \
        < <(node_table)
}

# The clusters: this one, then the second (if any).
clusters() { echo "$CLUSTER_NAME"; [ -z "$SECOND_CLUSTER" ] || echo "$SECOND_CLUSTER"; }
# The name of a cluster's slurmctld (its pid file, log and spool directory are named so).
ctld_name() { if [ "$1" = "$CLUSTER_NAME" ]; then echo slurmctld; else echo "slurmctld-$1"; fi; }
ctld_port() { if [ "$1" = "$CLUSTER_NAME" ]; then echo "$SLURMCTLD_PORT"; else echo "$SLURMCTLD2_PORT"; fi; }
# on CLUSTER COMMAND...: COMMAND with that cluster's own slurm.conf, as its daemons read it.
on() {
    local conf=$SLURM_CONF_FILE
    [ "$1" = "$CLUSTER_NAME" ] || conf=$ETC2/slurm.conf
    shift
    SLURM_CONF=$conf "$@"
}
# Every node: cluster, node name, port.
node_table() {
    local i
    for i in $(seq 1 "$NODE_COUNT"); do echo "$CLUSTER_NAME node$i $((SLURMD_PORT0 + i))"; done
    [ -n "$SECOND_CLUSTER" ] || return 0
    for i in $(seq 1 "$SECOND_NODE_COUNT"); do
        echo "$SECOND_CLUSTER $SECOND_NODE_PREFIX$i $((SLURMD2_PORT0 + i))"
    done
}
node_count() { if [ "$1" = "$CLUSTER_NAME" ]; then echo "$NODE_COUNT"; else echo "$SECOND_NODE_COUNT"; fi; }

is_running() {  # is_running NAME, a name of daemon_table: its pid file is $RUN/NAME.pid
    local program=$1
    case $1 in slurmd-*) program=slurmd ;; slurmctld-*) program=slurmctld ;; esac
    pid_of "$RUN/$1.pid" "$program" >/dev/null
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

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.2 s until it succeeds.
wait_for() {
    local seconds=$1 description=$2; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || { log "gave up after ${seconds}s waiting for $description"; return 1; }
        sleep 0.2
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

# Prints the name of each cluster it had to add to the accounting database.
start_slurmdbd() {
    if ! is_running slurmdbd; then
        require_free_port "$SLURMDBD_PORT" slurmdbd
        slurmdbd </dev/null >>"$LOG/slurmdbd.out" 2>&1 9>&- \
            || die "slurmdbd did not start" "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"
    fi
    # The first start creates the database's tables, which takes a few seconds.
    wait_for 60 slurmdbd sacctmgr_works \
        || die "slurmdbd does not answer sacctmgr" "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"
    local name registered missing=()
    registered=$(sacctmgr -n -P list cluster format=cluster)
    for name in $(clusters); do
        grep -qx "$name" <<<"$registered" || missing+=("$name")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    # One call for both (each cluster gets tables of its own: about a second each).
    sacctmgr -i add cluster "${missing[@]}" >>"$LOG/slurmdbd.out" 2>&1 \
        || die "sacctmgr add cluster ${missing[*]} failed" "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"
    printf '%s\n' "${missing[@]}"
}

# When the second cluster is added to slurmdbd it gets every association the first has
# (user, account): root's comes with `sacctmgr add cluster`, others (the tests' second
# user) were added to the first before the second existed. A user added later with `sacctmgr add user` without cluster=
# gets an association on every cluster that has the account.
copy_associations() {
    local pair user account
    local -A have=()
    while read -r pair; do have[$pair]=1; done \
        < <(sacctmgr -n -P list assoc cluster="$SECOND_CLUSTER" format=user,account)
    while IFS='|' read -r user account; do
        [ -n "$user" ] && [ -z "${have[$user|$account]:-}" ] || continue
        sacctmgr -i add user "$user" account="$account" cluster="$SECOND_CLUSTER" \
            >>"$LOG/slurmdbd.out" 2>&1 \
            || log "could not give $user an association (account $account) on $SECOND_CLUSTER"
    done < <(sacctmgr -n -P list assoc cluster="$CLUSTER_NAME" format=user,account)
}

slurmctld_up() { on "$1" scontrol ping | grep -q 'is UP'; }

# launch_slurmctld CLUSTER, then wait_slurmctld CLUSTER: both controllers start together.
launch_slurmctld() {
    local ctld
    ctld=$(ctld_name "$1")
    require_free_port "$(ctld_port "$1")" "$ctld"
    on "$1" slurmctld </dev/null >>"$LOG/$ctld.out" 2>&1 9>&- \
        || die "$ctld did not start" "$LOG/$ctld.out" "$LOG/$ctld.log"
}
wait_slurmctld() {
    local ctld
    ctld=$(ctld_name "$1")
    wait_for 30 "$ctld" slurmctld_up "$1" \
        || die "$ctld does not answer scontrol ping" "$LOG/$ctld.out" "$LOG/$ctld.log"
}

# slurmctld tells slurmdbd its host and port when it registers; until then sacct lists
# no jobs of this cluster, and -M cannot reach it. True when every cluster has.
slurmctlds_in_accounting() {
    local listed name
    listed=$(sacctmgr -n -P list cluster format=cluster,controlport) || return 1
    for name in $(clusters); do
        grep -qx "$name|$(ctld_port "$name")" <<<"$listed" || return 1
    done
}

# All at once (each slurmd takes a moment to daemonize), then each one's exit status.
start_slurmds() {
    local cluster node port pids=() nodes=() i
    while read -r cluster node port; do
        is_running "slurmd-$node" && continue
        require_free_port "$port" "slurmd -N $node"
        on "$cluster" slurmd -N "$node" </dev/null >>"$LOG/slurmd-$node.out" 2>&1 9>&- &
        pids+=("$!"); nodes+=("$node")
    done < <(node_table)
    for i in "${!pids[@]}"; do
        node=${nodes[$i]}
        wait "${pids[$i]}" \
            || die "slurmd -N $node did not start" "$LOG/slurmd-$node.out" "$LOG/slurmd-$node.log"
    done
}

# wait_for_nodes WANT CLUSTER: waits until every node of CLUSTER is up; resumes nodes left
# down or drained (by an earlier run, a killed slurmd, or a registration with other
# resources). With WANT=idle every node must be idle, otherwise busy nodes count as up too.
wait_for_nodes() {
    local want=$1 cluster=$2 deadline=$((SECONDS + START_TIMEOUT_S)) last_resume=-100
    local node state ready listing to_resume count
    count=$(node_count "$cluster")
    while :; do
        # A node in several partitions has a line for each.
        listing=$(on "$cluster" sinfo -h -N -o '%N %T' 2>&1 | sort -u) || listing=""
        ready=0; to_resume=()
        while read -r node state; do
            [ -n "$node" ] || continue
            case "$state" in
                idle) ready=$((ready + 1)) ;;
                mixed|allocated|completing) [ "$want" = idle ] || ready=$((ready + 1)) ;;
                *drain*|down|fail*|inval*) to_resume+=("$node") ;;
            esac
        done <<<"$listing"
        [ "$ready" -eq "$count" ] && return 0
        if [ "${#to_resume[@]}" -gt 0 ] && [ $((SECONDS - last_resume)) -ge 3 ]; then
            log "resuming ${to_resume[*]} ($cluster)"
            local joined
            joined=$(IFS=,; echo "${to_resume[*]}")
            on "$cluster" scontrol update nodename="$joined" state=resume >&2 || true
            last_resume=$SECONDS
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "nodes of $cluster not ready after ${START_TIMEOUT_S}s:"
            printf '%s\n' "$listing" >&2
            die "not all $count nodes of $cluster came up" "$LOG/$(ctld_name "$cluster").log"
        fi
        sleep 0.5
    done
}

cancel_all_jobs() {  # cancel_all_jobs CLUSTER
    local jobs
    jobs=$(on "$1" squeue -h -o %i 2>/dev/null || true)
    [ -n "$jobs" ] || return 0
    log "cancelling leftover jobs of $1: ${jobs//$'\n'/ }"
    # shellcheck disable=SC2086  # one job id per word
    on "$1" scancel $jobs || true
    wait_for 20 "jobs gone" queue_empty "$1" || log "some jobs of $1 are still completing"
}
queue_empty() { [ -z "$(on "$1" squeue -h -o %i)" ]; }

# job_accounted_completed CLUSTER ID, asked from the first cluster (-M: the way clients
# reach the second). After a crash slurmctld may hand out job ids again that accounting
# already holds, and for a few seconds sacct may name a finished job "allocation": match
# on name and state.
job_accounted_completed() {
    sacct -M "$1" -n -X -P -j "$2" -o JobName,State | grep -qx 'slurm-cluster-check|COMPLETED'
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
    # A cold cluster (its slurmctld not running) gets its configuration written again, its
    # leftover jobs cancelled and a check job run.
    local cold=() name
    for name in $(clusters); do
        is_running "$(ctld_name "$name")" && continue
        cold+=("$name")
        if [ "$name" = "$CLUSTER_NAME" ]; then write_configs; else write_second_configs; fi
    done
    start_munged
    start_mariadb
    local added
    added=$(start_slurmdbd | tr '\n' ' ')
    for name in $added; do
        is_running "$(ctld_name "$name")" || continue
        # A cluster added to accounting after its slurmctld started is seen only after a
        # restart (scontrol reconfigure is not enough).
        log "restarting $(ctld_name "$name") so it registers with slurmdbd"
        stop_daemon "$(ctld_name "$name")" slurmctld "$RUN/$(ctld_name "$name").pid"
        cold+=("$name")
    done
    for name in $(clusters); do
        is_running "$(ctld_name "$name")" || launch_slurmctld "$name"
    done
    for name in $(clusters); do wait_slurmctld "$name"; done
    start_slurmds
    for name in ${cold[@]+"${cold[@]}"}; do
        # A cold start means a fresh cluster: jobs recovered from the saved state belonged
        # to a cluster that is gone.
        cancel_all_jobs "$name"
        # Jobs that were running when everything was SIGKILLed stay RUNNING in accounting
        # ("runaway jobs") until closed by hand; -i answers the question with yes.
        on "$name" sacctmgr -i list runawayjobs </dev/null >>"$LOG/slurmdbd.out" 2>&1 || true
    done
    for name in $(clusters); do
        if is_cold "$name"; then wait_for_nodes idle "$name"; else wait_for_nodes up "$name"; fi
    done
    wait_for 30 "each slurmctld registered in accounting" slurmctlds_in_accounting \
        || die "not every slurmctld registered with slurmdbd" "$LOG/slurmdbd.log" \
            "$LOG/slurmctld.log" ${SECOND_CLUSTER:+"$LOG/slurmctld-$SECOND_CLUSTER.log"}
    # (Not on a new database, where the first has only root's, which the second has too.)
    if [ -n "$SECOND_CLUSTER" ] && [[ " $added " == *" $SECOND_CLUSTER "* ]] \
            && [[ " $added " != *" $CLUSTER_NAME "* ]]; then
        copy_associations
    fi
    local sacct_err
    sacct_err=$(sacct -n -X -P -S now-1minutes -o JobID 2>&1 >/dev/null) \
        || die "sacct fails: $sacct_err" "$LOG/slurmdbd.log"
    [ -z "$sacct_err" ] || die "sacct complains: $sacct_err" "$LOG/slurmdbd.log"
    # End to end, on each cold cluster at once, submitted from the first with -M: a job
    # runs, and sacct lists it as finished.
    local probes=() probe
    for name in ${cold[@]+"${cold[@]}"}; do
        probe=$(sbatch -M "$name" --parsable -J slurm-cluster-check -o /dev/null --wrap true 2>&1) \
            || die "sbatch -M $name of a check job failed: $probe" "$LOG/$(ctld_name "$name").log"
        probes+=("$name ${probe%%;*}")
    done
    for probe in ${probes[@]+"${probes[@]}"}; do
        read -r name probe <<<"$probe"
        wait_for 60 "check job accounted" job_accounted_completed "$name" "$probe" \
            || die "check job $probe of $name not listed COMPLETED by sacct" \
                "$LOG/$(ctld_name "$name").log" "$LOG/slurmdbd.log"
    done
    local second=""
    [ -z "$SECOND_CLUSTER" ] || second=", and $SECOND_CLUSTER of $SECOND_NODE_COUNT nodes"
    log "cluster up in $((SECONDS - began))s: $CLUSTER_NAME of $NODE_COUNT nodes$second, state in $STATE_DIR"
    log "use it with:"
    cat "$ETC/env.sh"
}
is_cold() { [[ " ${cold[*]-} " == *" $1 "* ]]; }  # in cmd_start: $1 started cold

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
    if is_running slurmctld && [ -f "$SLURM_CONF_FILE" ]; then cancel_all_jobs "$CLUSTER_NAME"; fi
    if [ -n "$SECOND_CLUSTER" ] && is_running "$(ctld_name "$SECOND_CLUSTER")" \
            && [ -f "$ETC2/slurm.conf" ]; then
        cancel_all_jobs "$SECOND_CLUSTER"
    fi
    # Every slurmd and slurmctld with a pid file here, also those of a second cluster that
    # HPSEARCH_SLURM_SECOND_CLUSTER no longer names.
    stop_daemon slurmd slurmd "$RUN"/slurmd-*.pid
    stop_daemon slurmctld slurmctld "$RUN"/slurmctld*.pid
    stop_daemon slurmdbd slurmdbd "$RUN/slurmdbd.pid"
    stop_daemon mariadbd mariadbd "$RUN/mariadbd.pid"
    stop_daemon munged munged "$RUN/munged.pid"
    log "stopped; state kept in $STATE_DIR (delete it for a fresh cluster)"
}

cmd_status() {
    local name program pidfile pid down=0
    while read -r name program pidfile; do
        if pid=$(pid_of "$pidfile" "$program"); then
            printf '%-20s running  pid %s\n' "$name" "$pid"
        else
            printf '%-20s stopped\n' "$name"
            down=1
        fi
    done < <(daemon_table)
    if is_running slurmctld; then
        echo
        sinfo -N -o '%N %T %P %c %m %G' || true
        if [ -n "$SECOND_CLUSTER" ] && is_running "$(ctld_name "$SECOND_CLUSTER")"; then
            echo
            sinfo -M "$SECOND_CLUSTER" -N -o '%N %T %P %c %m %G' || true
        fi
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
