"""The one place that runs Slurm commands (docs/architecture.md, invariant 5).

`Slurm` runs sbatch, sacct, squeue, scancel, sinfo and scontrol as argument lists (never
through a shell), hands their output to the parsers of hpsearch.slurm.parse (sacct's: of
hpsearch.slurm.sacct), counts every call by command name, and turns a failure into
SlurmError. Job ids are batched into one call (comma-separated), in chunks of at most
`max_ids_per_call`.

With `cluster` (a name slurmdbd knows, `sacctmgr list clusters`), every command runs on that
cluster: each gets Slurm's `--clusters=NAME` (-M) option, as from a login node of several
clusters that share one slurmdbd and filesystem; its output has the same shape (with
--noheader squeue and sinfo print no `CLUSTER:` line; sbatch --parsable answers
`JOBID;CLUSTER`). Without one, nothing is added: the cluster of SLURM_CONF, or of the
user's SLURM_CLUSTERS. -M needs slurmdbd even for the local cluster: while slurmdbd is
down every command with a cluster fails (transient), where those without one still work.

Two answers that are not errors: sacct on a cluster without accounting returns None (never
[]: no accounting is not "no such job"), and a job slurmctld has forgotten is simply absent
from squeue's answer (or {} / None from scontrol).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence

from hpsearch.slurm import failures, parse
from hpsearch.slurm.environment import outside_allocation
from hpsearch.slurm.failures import SlurmError
from hpsearch.slurm.parse import JobRecord, NodeState, QueueRecord, Switch
from hpsearch.slurm.sacct import (
    SACCT_FORMAT,
    SACCT_PEAK_FORMAT,
    SACCT_USAGE_FORMAT,
    JobUsage,
    Peak,
    is_accounting_disabled,
    parse_sacct,
    parse_sacct_peaks,
    parse_sacct_runs,
    parse_sacct_usage,
)

DEFAULT_TIMEOUT = 60.0  # seconds per command; slurmctld under load can take a while
MAX_IDS_PER_CALL = 500  # job ids per sacct/squeue/scancel call
CLOCK_SKEW = 300.0  # seconds the login node's clock may be ahead of slurmctld's
# The commands that take --clusters (-M); sacctmgr names clusters with cluster= instead.
CLUSTER_COMMANDS = frozenset({"sbatch", "sacct", "squeue", "scancel", "sinfo", "scontrol"})
# One cluster: Slurm's -M also takes a comma list and `all`, which hpsearch does not pass
# (a job id is only meaningful with the one cluster that gave it).
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _unique(job_ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(str(job_id) for job_id in job_ids))


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


class Slurm:
    """Runs Slurm's commands for hpsearch.

    env: variables added to this process's environment for every command (e.g. SLURM_CONF).
    timeout: seconds each command may take before SlurmError.
    cluster: the cluster every command runs on (`--clusters=NAME`); None: no option, the
        cluster of SLURM_CONF. ValueError if it is not one plain cluster name. A name
        slurmdbd does not know fails each command (permanent), except sacct, which then
        answers with no jobs: check names against clusters() first.
    calls: how many times each command ran ("sbatch", "sacct", ...).
    """

    def __init__(self, env: Mapping[str, str] | None = None,
                 timeout: float = DEFAULT_TIMEOUT,
                 max_ids_per_call: int = MAX_IDS_PER_CALL,
                 cluster: str | None = None) -> None:
        if cluster is not None and not _CLUSTER_NAME.fullmatch(cluster):
            raise ValueError(f"not a Slurm cluster name: {cluster!r} (one name of letters, "
                             f"digits, '_' and '-')")
        self.cluster = cluster
        # SLURM_TIME_FORMAT=standard: the parsers read ISO times, whatever the user set.
        # Not the allocation it may run in: a job submitted from inside one would inherit its
        # shape (hpsearch.slurm.environment).
        self.env = {**outside_allocation(os.environ), **(env or {}),
                    "SLURM_TIME_FORMAT": "standard"}
        self.timeout = timeout
        self.max_ids_per_call = max(1, max_ids_per_call)
        self.calls: collections.Counter[str] = collections.Counter()
        self._config: dict[str, str] | None = None

    # -- running ---------------------------------------------------------------------------
    def _run(self, argv: list[str], stdin: str | None = None,
             cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
        """Runs argv and returns it whatever its exit code; SlurmError if it cannot run.

        A query (anything but sbatch) killed by a signal is run once more: a driver running as
        a Slurm job gets `scancel --signal=TERM --full`, which reaches its children too, and
        must still be able to cancel its trials. sbatch is never repeated (it may have
        submitted before it died). Each command runs in a session of its own, so a Ctrl-C
        at the terminal (SIGINT to the foreground process group) reaches only the driver,
        which then cancels its trials: an sbatch is not killed halfway. With a cluster,
        `--clusters=NAME` goes right after the command's name (the only place this is
        added, so no command can miss it)."""
        if self.cluster is not None and argv[0] in CLUSTER_COMMANDS:
            argv = [argv[0], f"--clusters={self.cluster}", *argv[1:]]
        for _ in range(1 if argv[0] == "sbatch" else 2):
            proc = self._run_once(argv, stdin, cwd)
            if proc.returncode >= 0:
                break
        return proc

    def _run_once(self, argv: list[str], stdin: str | None,
                  cwd: str | os.PathLike | None) -> subprocess.CompletedProcess:
        self.calls[argv[0]] += 1
        try:
            # errors="replace": a node's drain reason or another user's job name may hold
            # bytes that are not UTF-8; they must not stop the driver.
            return subprocess.run(argv, check=False, input=stdin, capture_output=True,
                                  text=True, encoding="utf-8", errors="replace",
                                  env=self.env, cwd=cwd, timeout=self.timeout,
                                  stdin=None if stdin is not None else subprocess.DEVNULL,
                                  start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
                else (exc.stderr or "")
            raise SlurmError(argv, None, stderr,
                             f"did not finish in {self.timeout:g} s") from None
        except OSError as exc:  # not installed, not executable
            raise SlurmError(argv, None, "",
                             f"could not run ({exc.strerror or exc}); is Slurm installed "
                             f"and on PATH?", kind=failures.PERMANENT) from None

    def _check(self, argv: list[str], stdin: str | None = None,
               cwd: str | os.PathLike | None = None) -> str:
        """Runs argv; its stdout, or SlurmError if it exited non-zero."""
        proc = self._run(argv, stdin, cwd)
        if proc.returncode != 0:
            raise _failed(argv, proc)
        return proc.stdout

    @staticmethod
    def _parsed(argv: list[str], parser, text: str):
        """parser(text), a ValueError (output of an unexpected shape) as SlurmError."""
        try:
            return parser(text)
        except ValueError as exc:
            raise SlurmError(argv, 0, "", f"printed output hpsearch cannot read: {exc}",
                             kind=failures.PERMANENT) from None

    # -- jobs ------------------------------------------------------------------------------
    def sbatch(self, script: str, extra_args: Sequence[str] = (),
               cwd: str | os.PathLike | None = None) -> str:
        """Submits a batch script (given as text, passed on stdin) with `sbatch --parsable
        EXTRA_ARGS`; returns the job id. `cwd` is where sbatch runs (the job's default
        working directory and the base of relative output paths)."""
        argv = ["sbatch", "--parsable", *extra_args]
        return self._parsed(argv, parse.parse_sbatch_parsable, self._check(argv, script, cwd))

    def sbatch_test(self, script: str) -> None:
        """Would Slurm accept this batch script? (`sbatch --test-only`: nothing is
        submitted.) SlurmError with Slurm's reason if not."""
        self._check(["sbatch", "--test-only"], script)

    def sacct(self, job_ids: Iterable[str]) -> list[JobRecord] | None:
        """Accounting records of these jobs ("123" gives every task of array 123), one per
        job or task, steps left out. None when the cluster keeps no accounting. A job
        submitted a moment ago may be missing, or listed only as a pending range, for a
        few seconds: sacct lags slurmctld."""
        ids = _unique(job_ids)
        if not ids:
            return []
        text = self._sacct_text(ids, SACCT_FORMAT)
        # One parse over every chunk: a job listed twice keeps its newest record.
        return None if text is None else self._parsed(["sacct"], parse_sacct, text)

    def sacct_runs(self, job_ids: Iterable[str]) -> dict[str, list[JobRecord]] | None:
        """Like sacct(), with every run of each job (`sacct -D`), oldest first: a job Slurm
        requeued (scontrol requeue, preemption, a node failure) has one record per run under
        the same id. None when the cluster keeps no accounting."""
        ids = _unique(job_ids)
        if not ids:
            return {}
        text = self._sacct_text(ids, SACCT_FORMAT, duplicates=True)
        return None if text is None else self._parsed(["sacct", "-D"], parse_sacct_runs,
                                                      text)

    def _sacct_text(self, ids: list[str], format_: str,
                    duplicates: bool = False) -> str | None:
        """`sacct --parsable2 --noheader -X [-D] --format=FORMAT -j ...` over chunks of ids,
        the outputs joined; None when the cluster keeps no accounting."""
        outputs = []
        for chunk in _chunks(ids, self.max_ids_per_call):
            argv = ["sacct", "--parsable2", "--noheader", "-X", *(["-D"] if duplicates else []),
                    f"--format={format_}", "-j", ",".join(chunk)]
            proc = self._run(argv)
            if proc.returncode != 0:
                if is_accounting_disabled(proc.stderr):
                    return None
                raise _failed(argv, proc)
            outputs.append(proc.stdout)
        return "".join(outputs)

    def squeue(self, job_ids: Iterable[str] | None = None) -> list[QueueRecord]:
        """Jobs in slurmctld's queue (pending, running, completing...), all of them or only
        these. A job that has left the queue is just not in the answer."""
        base = ["squeue", "-h", "-o", parse.SQUEUE_FORMAT]
        if job_ids is None:
            return self._parsed(base, parse.parse_squeue, self._check(base))
        outputs = []
        for chunk in _chunks(_unique(job_ids), self.max_ids_per_call):
            argv = [*base, "-j", ",".join(chunk)]
            proc = self._run(argv)
            # One unknown id alone: "Invalid job id specified", exit 1 (several: exit 0).
            if proc.returncode != 0 and not parse.is_invalid_job_id(proc.stderr):
                raise _failed(argv, proc)
            outputs.append(proc.stdout)
        return self._parsed(["squeue"], parse.parse_squeue, "".join(outputs))

    def scancel(self, job_ids: Iterable[str], signal: str | int | None = None) -> None:
        """Cancels these jobs, or with `signal` (a name like "USR1" or a number) sends it to
        the batch shell and every step (`--full`). Jobs already gone are not an error."""
        options = [f"--signal={signal}", "--full"] if signal is not None else []
        for chunk in _chunks(_unique(job_ids), self.max_ids_per_call):
            argv = ["scancel", *options, *chunk]
            proc = self._run(argv)
            if proc.returncode != 0 and not _only_gone_jobs(proc.stderr):
                raise _failed(argv, proc)

    def step_ids(self, job_id: str) -> dict[str, str]:
        """The running steps of this job, {step name: step id ("123.4")}; {} once the job
        has ended (parse.parse_squeue_steps)."""
        argv = ["squeue", "-h", "-s", "-j", str(job_id), "-o", parse.SQUEUE_STEPS_FORMAT]
        proc = self._run(argv)
        if proc.returncode != 0 and not parse.is_invalid_job_id(proc.stderr):
            raise _failed(argv, proc)
        return self._parsed(argv, parse.parse_squeue_steps, proc.stdout)

    def signal_step(self, step_id: str, signal: str | int) -> bool:
        """Send `signal` to every task of one step ("123.4") and nothing else: srun keeps
        running and ends when they do. (Signalling srun itself is no substitute: srun
        answers SIGTERM by SIGKILLing its tasks, "forcing job termination".) Through
        slurmctld (--ctld): sent straight to the slurmds, Slurm 22.05's scancel delivers it
        and still exits 1, "Invalid job id specified". False if the step is gone."""
        argv = ["scancel", "--ctld", f"--signal={signal}", str(step_id)]
        proc = self._run(argv)
        if proc.returncode != 0:
            if _only_gone_jobs(proc.stderr):
                return False
            raise _failed(argv, proc)
        return True

    def requeue(self, job_id: str) -> None:
        """Requeue a running batch job under the same id (`scontrol requeue`): Slurm ends
        this run and queues the job again."""
        self._check(["scontrol", "requeue", str(job_id)])

    def scancel_by_name(self, name: str) -> None:
        """Cancels this user's jobs named `name` (a job whose sbatch answer was lost)."""
        argv = ["scancel", "--user", _user(), "--name", name]
        proc = self._run(argv)
        if proc.returncode != 0 and not _only_gone_jobs(proc.stderr):
            raise _failed(argv, proc)

    def scontrol_show_job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job ID` as Key=value strings; {} once slurmctld has forgotten the
        job (MinJobAge after it ended)."""
        argv = ["scontrol", "show", "job", str(job_id)]
        proc = self._run(argv)
        if proc.returncode != 0:
            if parse.is_invalid_job_id(proc.stderr):
                return {}
            raise _failed(argv, proc)
        return self._parsed(argv, parse.parse_scontrol_job, proc.stdout)

    def job_record(self, job_id: str) -> JobRecord | None:
        """The job as slurmctld knows it (`scontrol show job`), shaped like a sacct record:
        the stand-in where there is no accounting. None once slurmctld has forgotten it."""
        argv = ["scontrol", "show", "job", str(job_id)]
        proc = self._run(argv)
        if proc.returncode != 0:
            if parse.is_invalid_job_id(proc.stderr):
                return None
            raise _failed(argv, proc)
        records = [record
                   for fields in self._parsed(argv, parse.parse_scontrol_records, proc.stdout)
                   for record in self._parsed(argv, parse.job_records_from_scontrol, fields)]
        for record in records:
            if record.job_id == str(job_id):
                return record
        # Asked for "123" and got its tasks, or asked for a task by its own job id.
        return records[0] if records else None

    def job_id_by_name(self, name: str, since: float | None = None) -> str | None:
        """The id of this user's newest job named `name` submitted after `since` (a Unix
        time; None: any time), slurmctld's queue first, then accounting, or None. For finding
        a job whose id a crash kept from being stored: never another user's job, nor one
        older than the experiment that looks for it."""
        user = _user()
        argv = ["squeue", "-h", "-t", "all", "--user", user, "--name", name, "-o", "%i|%j|%V"]
        queued = [fields[0] for fields in (line.split("|") for line in
                                           self._check(argv).splitlines())
                  if len(fields) == 3 and fields[1] == name and _after(fields[2], since)]
        if queued:
            return max(queued, key=_job_id_order)
        start = "1970-01-01T00:00:00" if since is None else time.strftime(
            "%Y-%m-%dT%H:%M:%S", time.localtime(since - CLOCK_SKEW))
        argv = ["sacct", "--parsable2", "--noheader", "-X", f"--starttime={start}",
                "--user", user, "--name", name, f"--format={SACCT_FORMAT}"]
        proc = self._run(argv)
        if proc.returncode != 0:
            if is_accounting_disabled(proc.stderr):
                return None
            raise _failed(argv, proc)
        records = [r for r in self._parsed(argv, parse_sacct, proc.stdout)
                   if r.name == name and (since is None or r.submit is None
                                          or r.submit.timestamp() >= since - CLOCK_SKEW)]
        if not records:
            return None
        newest = max(records, key=lambda r: (r.submit is not None, r.submit or 0,
                                             _job_id_order(r.job_id)))
        return newest.job_id

    # -- the cluster -----------------------------------------------------------------------
    def clusters(self) -> list[str]:
        """The clusters slurmdbd knows (`sacctmgr -n -P list clusters format=cluster`), the
        names `cluster` may take, whether or not each one's slurmctld runs now."""
        argv = ["sacctmgr", "-n", "-P", "list", "clusters", "format=cluster"]
        return self._parsed(argv, parse.parse_cluster_names, self._check(argv))

    def ping(self) -> None:
        """Raise SlurmError unless the Slurm controller answers (`scontrol ping`)."""
        self._check(["scontrol", "ping"])

    def config_value(self, key: str) -> str | None:
        """One setting of `scontrol show config` (e.g. TopologyPlugin), or None if absent.
        The output is read once per runner."""
        if self._config is None:
            out = self._check(["scontrol", "show", "config"])
            self._config = {}
            for line in out.splitlines():
                name, sep, value = line.partition("=")
                if sep:
                    self._config[name.strip()] = value.strip()
        return self._config.get(key)

    def max_array_size(self) -> int:
        """The most tasks one job array may have: MaxArraySize from `scontrol show config`
        (array indices run from 0 to MaxArraySize - 1)."""
        value = self.config_value("MaxArraySize") or ""
        return int(value) if value.isdigit() else 1001  # Slurm's default

    def set_nodelist(self, job_id: str, nodelist: str) -> None:
        """Re-choose the nodes of a pending job (`scontrol update ReqNodeList=`)."""
        self._check(["scontrol", "update", f"JobId={job_id}", f"ReqNodeList={nodelist}"])
    def partition_load(self, partition: str | None) -> tuple[int, set[str]]:
        """A partition's idle nodes and the ids of every user's jobs pending there (None:
        the cluster's default partition): what the broker weighs a site by
        (hpsearch.executors.brokerage)."""
        nodes = self.sinfo_nodes()
        argv = ["sinfo", "-h", "-o", "%P|%a"]  # each partition, and whether it is up
        up = self._parsed(argv, parse.parse_partitions_up, self._check(argv))
        name = partition or next((p.rstrip("*") for p in up if p.endswith("*")), None)
        available = up.get(name or "", up.get(f"{name}*", "")) == "up"
        idle = sum(1 for n in nodes if n.state == "IDLE" and not n.flags & {"*", "~", "$"}
                   and name in n.partitions) if available else 0
        argv = ["squeue", "-h", "-t", "PD", "-o", "%i|%P"]
        pending = {job for job, _, parts in (line.partition("|") for line in
                                             self._check(argv).splitlines())
                   if name in parts.split(",")}
        return idle, pending

    def sinfo_nodes(self) -> list[NodeState]:
        """Every node, its state, partitions and drain/down reason."""
        argv = ["sinfo", "-h", "-N", "-o", parse.SINFO_NODES_FORMAT]
        return self._parsed(argv, parse.parse_sinfo_nodes, self._check(argv))

    def topology(self) -> list[Switch]:
        """The switches of the topology plugin; [] where there is none."""
        argv = ["scontrol", "show", "topology"]
        return self._parsed(argv, parse.parse_topology, self._check(argv))

    def node_addr(self, node: str) -> str:
        """The address slurmd of `node` listens on (NodeAddr), e.g. for a rendezvous."""
        argv = ["scontrol", "show", "node", "-o", node]
        fields = self._parsed(argv, parse.parse_scontrol_node, self._check(argv))
        if not fields.get("NodeAddr"):
            raise SlurmError(argv, 0, "", "printed no NodeAddr")
        return fields["NodeAddr"]

    def node_addrs(self, nodes: Iterable[str]) -> dict[str, str]:
        """Each node's NodeAddr, in one call: a pilot's, told to its trials (they need not
        ask slurmctld each, hpsearch.launch.base.preamble). Nodes that print none are left
        out."""
        argv = ["scontrol", "show", "node", "-o", ",".join(nodes)]
        records = self._parsed(argv, parse.parse_scontrol_records, self._check(argv))
        return {r["NodeName"]: r["NodeAddr"] for r in records
                if r.get("NodeName") and r.get("NodeAddr")}

    def sacct_peaks(self, job_ids: Iterable[str]) -> dict[str, Peak] | None:
        """Each finished job's run time and largest step MaxRSS (scouts); None when the
        cluster keeps no accounting."""
        found: dict[str, Peak] = {}
        for chunk in _chunks(_unique(job_ids), self.max_ids_per_call):
            argv = ["sacct", "--parsable2", "--noheader", f"--format={SACCT_PEAK_FORMAT}",
                    "-j", ",".join(chunk)]
            proc = self._run(argv)
            if proc.returncode != 0:
                if is_accounting_disabled(proc.stderr):
                    return None
                raise _failed(argv, proc)
            found.update(self._parsed(argv, parse_sacct_peaks, proc.stdout))
        return found

    def sacct_usage(self, job_ids: Iterable[str]) -> list[JobUsage] | None:
        """What these jobs used (seconds run, nodes, GPUs, CPUs), one record per job or
        task that ran or runs; None when the cluster keeps no accounting (`hpsearch
        report` then falls back on the store's times)."""
        text = self._sacct_text(_unique(job_ids), SACCT_USAGE_FORMAT)
        return None if text is None else self._parsed(["sacct"], parse_sacct_usage, text)


def _failed(argv: list[str], proc: subprocess.CompletedProcess) -> SlurmError:
    """The error of a command that exited non-zero, named by the command line that ran
    (proc.args: with the cluster option, where there is one)."""
    # Most commands complain on stderr; some only on stdout (`scontrol show node nodeX`
    # prints "Node nodeX not found" there and exits 1).
    ran = [str(arg) for arg in proc.args] if isinstance(proc.args, list) else argv
    return SlurmError(ran, proc.returncode, proc.stderr if proc.stderr.strip() else proc.stdout)


def _after(submitted: str, since: float | None) -> bool:
    """squeue's %V (submit time, ISO) is at or after `since`, less the clock skew allowed."""
    if since is None:
        return True
    try:
        when = time.mktime(time.strptime(submitted.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return True  # unreadable: the name, unique per experiment instance, still holds
    return when >= since - CLOCK_SKEW


def _user() -> str:
    """This user's name, as Slurm's -u/--user options take it."""
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _only_gone_jobs(stderr: str) -> bool:
    """scancel's complaints are all about jobs that already ended or were forgotten."""
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    return bool(errors) and all(
        parse.is_invalid_job_id(line) or "already completing or completed" in line
        for line in errors)


def _job_id_order(job_id: str) -> tuple[int, int]:
    """"123_4" -> (123, 4): job ids in submission order (within one slurmctld life)."""
    job, _, task = job_id.partition("_")
    return (int(job) if job.isdigit() else -1, int(task) if task.isdigit() else -1)
