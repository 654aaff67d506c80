"""A trial stopped on a pilot's other node gets its signal and its grace, as one on the
pilot's own node does (tests/test_stop_grace.py), on the real emulated cluster.

The pilot runs a trial there through `srun --overlap`, and srun answers SIGTERM by SIGKILLing
its step ("forcing job termination"): signalled through srun, a stopped trial had no time
to finish its step or save a checkpoint (benchmarks/peers_cluster.py's step log: 7 of 16
stopped trials killed mid-step). The pilot now signals the step's tasks through Slurm.

A 2-node pilot, one slot a node: trial 0 (x = 0) reports three good steps on the pilot's node
and completes; trial 1 (x = 5), on the other node, then reports a hopeless step, and the median
pruner stops it. On SIGTERM it takes 1.5 s to save a checkpoint, writes `saved` (where
and when) and exits 0."""

from __future__ import annotations

import sys
import textwrap
import time
import uuid
from pathlib import Path

from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]

TRIAL = textwrap.dedent("""
    import os, signal, socket, sys, time
    from pathlib import Path
    from hpsearch import trial
    x = float(sys.argv[1])

    def save(signum, frame):
        began = time.time()
        time.sleep(1.5)  # a checkpoint that takes a while to write
        Path(os.environ["HPSEARCH_CHECKPOINT_DIR"], "saved").write_text(
            f"{os.environ.get('SLURMD_NODENAME', socket.gethostname())} {began} {time.time()}")
        sys.exit(0)

    signal.signal(signal.SIGTERM, save)
    print("node=" + os.environ.get("SLURMD_NODENAME", ""), flush=True)
    if x == 0:
        for step in range(3):
            trial.report(step, loss=1.0 / (step + 1))
        trial.result(loss=1.0 / 3)
    else:
        time.sleep(5)  # trial 0 has completed: the pruner compares with it at the next report
        for step in range(3):
            trial.report(step, loss=x + 1.0 / (step + 1))
            time.sleep(1)
        time.sleep(120)  # until stopped
""")

SPEC = """\
name: {name}
command: "{python} {script} {{x}}"
search:
  strategy: grid
  parallel: 2
  space: {{x: {{choices: [0, 5]}}}}
  pruner: {{type: median, n_startup_trials: 1}}
objective: {{metric: loss, direction: minimize}}
resources: {{nodes: 1, time: "00:03:00"}}
executor:
  type: slurm
  poll_interval: 1s
  grace: {grace}
  pilots: {{nodes: 2, time: "00:05:00", max: 1, slots_per_node: 1, idle_timeout: 5,
            heartbeat: 1}}
"""
GRACE = 20


def test_a_trial_stopped_on_the_pilots_other_node_saves_within_its_grace(cli, slurm_cluster):
    name = f"pl-remote-stop-{RUN}"
    script = cli.cwd / "trial.py"
    script.write_text(TRIAL)
    spec = cli.write_spec(SPEC.format(name=name, python=sys.executable, script=script,
                                      grace=GRACE))
    proc = cli("submit", spec, env=slurm_cluster.env, check=0, timeout=240)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed", "pruned"], \
        ([(t.state, t.nodes, t.error) for t in trials], proc.stdout, proc.stderr)
    first, stopped = trials
    assert stopped.nodes != first.nodes, (first.nodes, stopped.nodes)  # on the other node
    trial_dir = Path(stopped.trial_dir)
    assert f"node={stopped.nodes}" in (trial_dir / "stdout.log").read_text()
    stderr = (trial_dir / "stderr.log").read_text()
    assert "forcing job termination" not in stderr, stderr  # srun did not kill it
    saved = trial_dir / "checkpoints" / "saved"
    assert saved.exists(), f"killed before its SIGTERM handler was done: {stderr}"
    node, began, ended = saved.read_text().split()
    assert node == stopped.nodes
    assert float(ended) - float(began) >= 1.5  # its handler ran to its end
    # it exited by itself, not after the whole grace; and the search ended with it
    assert stopped.finished is not None and stopped.finished - float(ended) < GRACE / 2, \
        (stopped.finished, ended)
    assert (trial_dir / "exit_code").read_text().split()[0] == "0"
    assert time.time() - float(ended) < 240
