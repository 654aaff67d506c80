"""Checks what benchmarks/gpu/slurm_gpu_machine.sh's two searches printed, from their stores
and their trials' stdout.log (lines of slurm_gpu_probe.py). Prints a timeline, the GPUs each
trial used, `PASS`/`FAIL` per check, and exits 1 if any check failed.

    python3 slurm_gpu_check.py RUNS_DIR SLOTS_NAME NCCL_NAME [UUID ...]

UUID ...: every GPU of the machine (`nvidia-smi -L`); each UUID a trial saw must be one of them.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}: {what}")
    if not ok:
        failures.append(what)


def words(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w and not w.startswith("@"))


def trials(runs: Path, name: str) -> list[dict]:
    if not (runs / name / "store.sqlite").exists():
        print(f"{name}: no store (the search did not run)")
        return []
    con = sqlite3.connect(f"file:{runs / name / 'store.sqlite'}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute(
        "select id, state, started, finished, gpus, nodes, job_id, trial_dir from trials"
        " order by id")]
    created = con.execute("select created from experiment").fetchone()[0]
    started = [r["started"] for r in rows if r["started"]]
    finished = [r["finished"] for r in rows if r["finished"]]
    if started and finished:
        print(f"{name} (store): created to first trial start {min(started) - created:.2f} s, "
              f"to last trial end {max(finished) - created:.2f} s; trial times "
              + ", ".join(f"#{r['id']} {r['finished'] - r['started']:.2f} s" for r in rows
                          if r["started"] and r["finished"]))
    for r in rows:
        d = Path(r["trial_dir"])
        d = d if d.is_absolute() else runs / name / d
        out = d / "stdout.log"
        r["lines"] = out.read_text(errors="replace").splitlines() if out.exists() else []
    return rows


def main() -> int:
    runs, slots_name, nccl_name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    machine = set(sys.argv[4:])
    print(f"machine GPUs (nvidia-smi -L): {sorted(machine) or 'unknown'}")

    # --- 4 one-GPU trials, 2 slots ---------------------------------------------------------
    rows = trials(runs, slots_name)
    check(len(rows) == 4 and all(r["state"] == "completed" for r in rows),
          f"{slots_name}: 4 trials completed ({[r['state'] for r in rows]})")
    seen = {}
    for r in rows:
        probe = [words(x) for x in r["lines"] if x.startswith("probe ")]
        end = [words(x) for x in r["lines"] if x.startswith("probe_end ")]
        if not probe or not end:
            check(False, f"{slots_name} trial {r['id']}: probe lines in stdout.log")
            continue
        p = probe[-1]
        uuids = [u for u in p["uuids"].split(",") if u and u != "-"]
        seen[r["id"]] = dict(uuids=uuids, began=float(p["began"]),
                             ended=float(end[-1]["ended"]), cvd=p["cuda_visible_devices"],
                             nvml=p["nvml_pid_on"], job=p["slurm_job_id"],
                             store_gpus=r["gpus"])
    if seen:
        t0 = min(s["began"] for s in seen.values())
        print(f"{slots_name}: trial, job, CUDA_VISIBLE_DEVICES, store gpus, CUDA UUIDs, "
              "NVML pid on, began s, ended s (from the first trial's start)")
        for i, s in sorted(seen.items()):
            print(f"  {i} job={s['job']} cvd={s['cvd']} store={s['store_gpus']} "
                  f"uuids={','.join(s['uuids'])} nvml={s['nvml']} "
                  f"{s['began'] - t0:7.2f} {s['ended'] - t0:7.2f}")
    for i, s in sorted(seen.items()):
        check(len(s["uuids"]) == 1, f"{slots_name} trial {i} saw exactly one GPU ({s['uuids']})")
        if machine and s["uuids"]:
            check(set(s["uuids"]) <= machine, f"{slots_name} trial {i}: its UUID is this machine's")
        if s["nvml"] not in ("none",) and not s["nvml"].startswith("error"):
            check(s["nvml"].split(",") == s["uuids"],
                  f"{slots_name} trial {i}: NVML lists its pid on that same GPU only ({s['nvml']})")
    pairs = [(a, b) for a in seen for b in seen if a < b
             and seen[a]["began"] < seen[b]["ended"] and seen[b]["began"] < seen[a]["ended"]]
    for a, b in pairs:
        lap = min(seen[a]["ended"], seen[b]["ended"]) - max(seen[a]["began"], seen[b]["began"])
        print(f"  overlap: trials {a} and {b} ran together for {lap:.2f} s on "
              f"{seen[a]['uuids']} and {seen[b]['uuids']}")
    check(bool(pairs), f"{slots_name}: two trials ran at the same time ({len(pairs)} pairs)")
    check(all(seen[a]["uuids"] != seen[b]["uuids"] for a, b in pairs),
          f"{slots_name}: trials that overlapped used different GPUs")
    check(max((len(s["uuids"]) for s in seen.values()), default=0) == 1
          and len({u for s in seen.values() for u in s["uuids"]}) == 2,
          f"{slots_name}: both GPUs were used")

    # --- one 2-rank torchrun trial, NCCL ------------------------------------------------------
    rows = trials(runs, nccl_name)
    check(len(rows) == 1 and rows[0]["state"] == "completed",
          f"{nccl_name}: 1 trial completed ({[r['state'] for r in rows]})")
    ranks = {}
    for r in rows:
        for x in r["lines"]:
            for part in re.split(r"(?=rank=\d+ world=)", x):  # lines that ran together
                if part.startswith("rank="):
                    w = words(part)
                    ranks[int(w["rank"])] = w
    for k, w in sorted(ranks.items()):
        print(f"  rank {k}: cvd={w['cuda_visible_devices']} local_rank={w['local_rank']} "
              f"uuid={w['uuid']} nvml={w['nvml_pid_on']} allreduce={w['allreduce']} "
              f"(expected {w['expected']}) 256MiB all-reduce {w['allreduce_256MiB_ms']} ms, "
              f"busbw {w['busbw_GBps']} GB/s")
    check(sorted(ranks) == [0, 1], f"{nccl_name}: both ranks printed ({sorted(ranks)})")
    check(len({w["uuid"] for w in ranks.values()}) == len(ranks) == 2,
          f"{nccl_name}: the two ranks used two different GPUs")
    if machine:
        check({w["uuid"] for w in ranks.values()} <= machine,
              f"{nccl_name}: the ranks' UUIDs are this machine's")
    check(bool(ranks) and all(w["ok"] == "1" for w in ranks.values()),
          f"{nccl_name}: the NCCL all-reduce gave world*(world+1)/2 on every rank")
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
