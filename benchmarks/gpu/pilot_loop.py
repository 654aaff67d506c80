"""Benchmark: a pilot's trial loop on this machine, without Slurm; the idle gap between trials
and the time from assignment to a trial's first training step.

```
python benchmarks/gpu/pilot_loop.py --trials 30 --gpus 0,1      # 2 GPU slots, 1 GPU a trial
python benchmarks/gpu/pilot_loop.py --trials 30 --gpus 0        # 1 GPU slot
python benchmarks/gpu/pilot_loop.py --trials 20 --cpu-slots 2   # no GPU: 2 CPU slots
```

It plays the driver's side of the pilot protocol (hpsearch.pilot.protocol) as PilotExecutor
does, with late binding: it writes the pilot's pilot.json, keeps its own heartbeat, and
writes an assignment into the pilot's inbox/ only when a slot is free (at most `slots`
assignments unfinished; a new one as soon as it sees one in ended/, looking every 0.05 s,
PilotExecutor's TICK). The pilot is the real one, `hpsearch.pilot.program.main` in its own
process with every SLURM_* variable removed: Allocation.from_env sees one node (this host)
and the GPUs of CUDA_VISIBLE_DEVICES (--gpus), slots_per_node = one slot a GPU and
trial_gpus = 1, so each trial gets its own CUDA_VISIBLE_DEVICES from the pilot's slots.
Each trial is pilot_trial.py: a short real PyTorch training that writes when it started,
imported torch, had its device, and finished its first and last steps.

The driver side here does nothing else (no store, no search), so its share of the gap is
a lower bound of a real driver's. It prints, in seconds (median, p95, n), the phases from
assignment to first step and the gaps between consecutive trials of one slot, then checks
that trials training at the same time had different devices. Always exits 0 unless the
loop itself broke (the pilot died, a trial failed, the timeout passed: exit 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(HERE), str(REPO)]

from pilot_stats import TrialRecord, concurrent_devices, gap_spans, phase_spans, table  # noqa: E402

from hpsearch.executors.base import Launch  # noqa: E402
from hpsearch.launch.attempt import prepare_trial_dir  # noqa: E402
from hpsearch.pilot import protocol  # noqa: E402
from hpsearch.store import runs  # noqa: E402

DRIVER_TICK = 0.05  # seconds between the driver's looks at ended/ (PilotExecutor's TICK)
TRIAL_SCRIPT = HERE / "pilot_trial.py"
EXPERIMENT = "pilot-loop"


def pilot_config(slots: int, trial_gpus: int, heartbeat: float) -> dict:
    """pilot.json as the driver's Fleet writes it, for one node, trials of one node and one
    task, no trial time limit and no checkpoint signal, and a long pilot."""
    return {"time_limit": 3600, "slots_per_node": slots, "trial_nodes": 1,
            "trial_tasks_per_node": 1, "trial_cpus": 1, "trial_gpus": trial_gpus,
            "trial_time": None, "idle_timeout": 60, "grace": 60, "heartbeat": heartbeat,
            "signal": None, "signal_before": 0, "kill_grace": 10}


def trial_launch(exp_dir: Path, trial_id: int, command: str) -> Launch:
    """Attempt 0 of one trial, with the HPSEARCH_* environment the driver gives a trial."""
    tdir = runs.trial_dir(exp_dir, trial_id)
    env = {"HPSEARCH_EXPERIMENT": EXPERIMENT, "HPSEARCH_TRIAL_ID": str(trial_id),
           "HPSEARCH_ATTEMPT": "0", "HPSEARCH_TRIAL_DIR": str(tdir),
           "HPSEARCH_CHECKPOINT_DIR": str(tdir / "checkpoints"),
           "HPSEARCH_PARAMS": json.dumps({"trial": trial_id})}
    return Launch(trial_id, 0, command, env, tdir, exp_dir, {"trial": trial_id})


def start_pilot(paths: protocol.PilotPaths, gpus: list[str]) -> subprocess.Popen:
    """The real pilot program in its own process, outside Slurm: no SLURM_* variables, the
    GPUs it may hand out in CUDA_VISIBLE_DEVICES (empty: none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    log = open(paths.root / "pilot.log", "ab")
    return subprocess.Popen([sys.executable, "-c", "import sys; from hpsearch.pilot.program "
                             "import main; print(main(sys.argv[1]))", str(paths.root)],
                            env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def drive(paths: protocol.PilotPaths, exp_dir: Path, pilot: subprocess.Popen, trials: int,
          slots: int, command: str, heartbeat: float, timeout: float,
          plan: dict[int, tuple[float, int | None]]) -> None:
    """Run `trials` trials through the pilot with late binding, filling `plan`: for each trial
    assigned, when and which trial's end freed its slot (None: the first wave). It is filled
    as it goes, so what ran is there also when this raises RuntimeError (the loop broke)."""
    beat = protocol.Beat(protocol.pilots_dir(exp_dir) / protocol.DRIVER_HEARTBEAT, heartbeat)
    unfinished: dict[str, int] = {}  # assignment name -> trial id
    freed_by: list[int] = []  # trials whose end freed a slot not yet given out again
    deadline = time.monotonic() + timeout
    while len(plan) < trials or unfinished:
        if beat.due():
            beat.write(state="running")
        ended = set(protocol.names(paths.dir("ended")))
        for name in [n for n in unfinished if n in ended]:
            freed_by.append(unfinished.pop(name))
        while len(unfinished) < slots and len(plan) < trials:
            launch = trial_launch(exp_dir, len(plan), command)
            prepare_trial_dir(launch)
            data = protocol.launch_to_dict(launch)
            name = protocol.name_of(launch.trial_id, 0)
            protocol.write_json(paths.file("inbox", name), data)
            plan[launch.trial_id] = (data["assigned"], freed_by.pop(0) if freed_by else None)
            unfinished[name] = launch.trial_id
        if pilot.poll() is not None:
            raise RuntimeError(f"the pilot exited early: {protocol.read_json(paths.exit)}; see "
                               f"{paths.root / 'pilot.log'}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done after {timeout:g} s: {len(unfinished)} unfinished")
        time.sleep(DRIVER_TICK)


def wait_running(paths: protocol.PilotPaths, pilot: subprocess.Popen, timeout: float) -> None:
    """Until the pilot's first heartbeat: the driver binds trials to running pilots only."""
    deadline = time.monotonic() + timeout
    while protocol.read_json(paths.heartbeat) is None:
        if pilot.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the pilot never sent a heartbeat; see "
                               f"{paths.root / 'pilot.log'}")
        time.sleep(DRIVER_TICK)


def rename_sets_ctime(directory: Path) -> bool:
    """Whether a rename here updates the file's ctime (then claimed/'s ctime is the claim)."""
    a, b = directory / "probe.a", directory / "probe.b"
    a.write_text("")
    before = a.stat().st_ctime
    time.sleep(0.05)
    os.rename(a, b)
    after = b.stat().st_ctime
    b.unlink()
    return after - before >= 0.04


def collect(paths: protocol.PilotPaths, exp_dir: Path, plan: dict[int, tuple[float, int | None]],
            ctime_is_claim: bool) -> list[TrialRecord]:
    records = []
    for tid, (assigned, replaces) in sorted(plan.items()):
        name = protocol.name_of(tid, 0)
        started = protocol.read_json(paths.file("started", name)) or {}
        ended = protocol.read_json(paths.file("ended", name)) or {}
        claimed_file = paths.file("claimed", name)
        claimed = claimed_file.stat().st_ctime if ctime_is_claim and \
            claimed_file.exists() else None
        timing = protocol.read_json(runs.trial_dir(exp_dir, tid) / "timing.json") or {}
        records.append(TrialRecord(tid, assigned, claimed, started.get("time"),
                                   ended.get("time"), ended.get("exit_code"), replaces,
                                   started.get("gpus") or "", timing))
    return records


def machine_line() -> str:
    gpus = ""
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                              timeout=30).stdout.strip().replace("\n", "; ")
    except (OSError, subprocess.SubprocessError):
        pass
    return (f"host {os.uname().nodename}, {os.cpu_count()} CPUs, Python "
            f"{sys.version.split()[0]}; GPUs: {gpus or 'none'}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--gpus", help="GPU ids the pilot gets, one slot each (e.g. 0,1)")
    where.add_argument("--cpu-slots", type=int, help="no GPU: this many CPU slots")
    parser.add_argument("--train-seconds", type=float, default=2.0,
                        help="each trial trains this long after its first step")
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=540.0,
                        help="give up after this many seconds")
    parser.add_argument("--dir", type=Path, help="runs dir to use (default: a new temp dir)")
    parser.add_argument("--out", type=Path, help="write every trial's record here (JSON)")
    args = parser.parse_args(argv)
    if args.trials < 1 or (args.cpu_slots is not None and args.cpu_slots < 1):
        parser.error("--trials and --cpu-slots must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else []
    slots = len(gpus) or args.cpu_slots
    exp_dir = (args.dir or Path(tempfile.mkdtemp(prefix="pilot-loop-"))) / EXPERIMENT
    paths = protocol.PilotPaths(protocol.pilots_dir(exp_dir) / "0")
    paths.make()
    protocol.write_json(paths.config, pilot_config(slots, 1 if gpus else 0, args.heartbeat))
    command = shlex.join([sys.executable, str(TRIAL_SCRIPT), "--device",
                          "cuda" if gpus else "cpu", "--train-seconds", str(args.train_seconds)])
    print(machine_line())
    print(f"{args.trials} trials, {slots} slot(s) "
          f"({'GPUs ' + ','.join(gpus) if gpus else 'CPU'}), {args.train_seconds:g} s of "
          f"training each; runs dir {exp_dir}", flush=True)
    ctime_is_claim = rename_sets_ctime(paths.dir("claimed"))
    protocol.Beat(protocol.pilots_dir(exp_dir) / protocol.DRIVER_HEARTBEAT,
                  args.heartbeat).write(state="running")
    pilot_began = time.time()
    pilot = start_pilot(paths, gpus)
    plan: dict[int, tuple[float, int | None]] = {}
    began, broke = time.time(), None
    try:
        wait_running(paths, pilot, args.timeout)
        began = time.time()
        drive(paths, exp_dir, pilot, args.trials, slots, command, args.heartbeat,
              args.timeout, plan)
    except RuntimeError as exc:
        broke = str(exc)
        print(f"FAILED: {exc}; what ended before is below")
    wall = time.time() - began
    paths.stop.write_text("")
    try:
        pilot.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pilot.kill()
    records = collect(paths, exp_dir, plan, ctime_is_claim)
    records = [r for r in records if r.ended is not None]  # all, unless the loop broke
    failed = [r.trial_id for r in records if r.exit_code != 0 or not r.timing]
    print(f"pilot left: {(protocol.read_json(paths.exit) or {}).get('reason')}; "
          f"{len(records) - len(failed)}/{len(records)} trials exited 0 with a timing; "
          f"pilot up in {began - pilot_began:.2f} s; wall {wall:.1f} s from the "
          f"first assignment to the last trial's end")
    if not ctime_is_claim:
        print("note: a rename here does not update ctime: the claim's time is unknown")
    devices = sorted({r.timing.get("device_name") or r.timing.get("device", "?")
                      for r in records if r.timing})
    print(f"devices the trials saw: {', '.join(devices)}")
    print("\nfrom assignment to the first training step (first wave included):")
    print(table(phase_spans(records)))
    later = [r for r in records if r.replaces is not None]
    print(f"\nthe same, trials after the first wave only ({len(later)}):")
    print(table(phase_spans(later)))
    print("\nbetween consecutive trials of one slot:")
    print(table(gap_spans(records)))
    overlapping, shared = concurrent_devices(records)
    print(f"\n{overlapping} pairs of trials trained at the same time; {shared} of them on the "
          f"same device" + (" (expected with CPU slots)" if not gpus else ""))
    per_slot: dict[str, int] = {}
    for r in records:
        per_slot[r.gpus or "cpu"] = per_slot.get(r.gpus or "cpu", 0) + 1
    print("trials per GPU slot: " + ", ".join(f"{k}: {v}" for k, v in sorted(per_slot.items())))
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                        "machine": machine_line(), "wall": wall,
                                        "trials": [dataclasses.asdict(r) for r in records]},
                                       indent=1) + "\n")
    if broke:
        return 1
    if failed:
        print(f"FAILED trials: {failed[:10]}; see their stderr.log under {exp_dir / 'trials'}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
