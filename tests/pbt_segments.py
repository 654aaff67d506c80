"""What every segment of a pbt member ran with, read back from its attempts' stdout, for the
trial scripts that print, on every rank, after resuming (examples/digits_ddp/train.py --pbt,
examples/lightning/train.py):

    pbt: rank R trains with lr X from epoch E

X the learning rate in the optimizer after the checkpoint was loaded (the one the segment
trains with), E the first epoch it trains. check_segments compares them with the schedule
and lineage the store keeps (docs/pbt.md)."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE

# what train.py imports, for executor.warm (examples/digits_ddp/pbt.yaml)
WARM = "[numpy, torch, torch.distributed, torch.nn.parallel, torch._dynamo, sklearn.datasets]"
DIGITS_SPEC = """
name: {name}
command: "{{python}} train.py --lr {{lr}} --width 16 --batch-size 64 --epochs 3 --seed 0 {args}"
search:
  strategy: pbt
  population: 2
  parallel: 1
  seed: 7
  perturbation_interval: 1
  max_resource: 3
  space: {{lr: {{low: 1e-4, high: 1e-1, log: true}}}}
objective: {{metric: val_acc, direction: maximize}}
resources: {resources}
launcher: {launcher}
executor: {executor}
env: {{OMP_NUM_THREADS: 1}}
"""
LINE = re.compile(r"^pbt: rank (\d+) trains with lr (\S+) from epoch (\d+)$", re.M)


def digits_spec(name: str, launcher: str, resources: str, executor: str,
                args: str = "--pbt --optimizer sgd") -> str:
    """A pbt search of the lr of examples/digits_ddp/train.py (or, with other `args`, of
    examples/lightning/train.py): 2 members of 3 one-epoch segments (lr 2e-4 and 2e-2 at
    first, seed 7: the first is the worse at every boundary), one at a time, so that the
    order of segments, hence every decision, is fixed: member 0's second boundary takes
    member 1's checkpoint."""
    return DIGITS_SPEC.format(name=name, launcher=launcher, resources=resources,
                              executor=executor, args=args)


def submit_warm(cli, spec: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`hpsearch submit` with warm servers of its own (a private XDG_RUNTIME_DIR), stopped
    after: a server lives 600 s idle, keeps the modules it preloaded, and would otherwise
    serve the next run of the same interpreter and preload list, whatever its PYTHONPATH."""
    runtime = Path(tempfile.mkdtemp(prefix="hw", dir="/tmp"))  # short: a socket's 107 bytes
    try:
        return cli("submit", spec, "--no-tui", env={"XDG_RUNTIME_DIR": str(runtime)},
                   check=0, timeout=timeout)
    finally:
        subprocess.run(["pkill", "-f", "--", f"--socket {runtime}/"], check=False)


def attempt_logs(trial_dir: Path) -> list[Path]:
    """The trial's stdout of each attempt, in order (the last one is stdout.log)."""
    older = sorted(trial_dir.glob("stdout.attempt*.log"),
                   key=lambda p: int(re.search(r"(\d+)", p.name).group(1)))
    return [*older, trial_dir / "stdout.log"]


def expected_starts(lineage: list[dict], interval: int, steps: int) -> list[int]:
    """The first step of each segment: on from the last boundary, or from the donor's
    step after an exploit (a donor behind costs the member a segment more)."""
    taken, starts = list(lineage), [0]
    while starts[-1] + interval < steps:
        boundary = starts[-1] + interval - 1
        if taken and taken[0]["at_step"] == boundary:
            boundary = taken.pop(0)["donor_step"]
        starts.append(boundary + 1)
    assert not taken, lineage
    return starts


def check_segments(runs: Path, name: str, ranks: int, output: str) -> list:
    """The search of digits_spec ended with both members completed, and member 0 took
    member 1's checkpoint; each member's segments each ran once, on every one of `ranks`
    ranks alike, with the lr its schedule has for that segment, from the step its lineage
    says (after an exploit: on from the donor's step); its stored val_acc reports are steps
    0, 1, 2 once. `output`: what the driver printed, shown when it fails. Returns the trials."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        members = [(t, [m["step"] for m in reader.metrics(t.id) if m["name"] == "val_acc"])
                   for t in reader.trials()]
    finally:
        reader.close()
    assert [t.state for t, _ in members] == ["completed"] * 2, output
    assert members[0][0].pruner_attrs["pbt"]["lineage"], output
    for t, reported in members:
        pbt = t.pruner_attrs["pbt"]
        assert reported == [0, 1, 2], (t.id, reported)
        starts = expected_starts(pbt["lineage"], 1, 3)
        logs = attempt_logs(runs / name / "trials" / f"{t.id:05d}")
        assert len(logs) == len(starts) == t.attempt, (t.id, logs, starts)  # no segment twice
        for segment, (log, start) in enumerate(zip(logs, starts, strict=True)):
            seen = sorted((int(r), float(lr), int(e)) for r, lr, e in LINE.findall(log.read_text()))
            lr = [s["params"] for s in pbt["schedule"] if s["segment"] <= segment][-1]["lr"]
            assert seen == [(r, lr, start) for r in range(ranks)], (t.id, log, seen, lr, start)
    return [t for t, _ in members]
