"""GPU use from the samplers' files: what the driver adds up, what status, export and
report show, and which files it refuses.

The sample files here are written line by line with the sampler's own writer
(hpsearch.gpu.sampler.sample_line), as it writes them on a GPU node; what cannot run here is
NVML on real GPUs (no GPU in CI): benchmarks/gpu/gpu_sampling.sh checks the readings on the
lent GPU machine."""

from __future__ import annotations

import csv
import io
import os
import pwd
import sys
from pathlib import Path

import pytest

from hpsearch.gpu.sampler import sample_line
from hpsearch.ingest.gpu_samples import GpuSamples
from hpsearch.report.gpu_use import GpuUse, describe, pilot_gpu_use, trial_gpu_use
from hpsearch.store.store import Store
from tests.helpers import ensure_system_entry, read_store

OTHER = "hpsearch-other"


def _write(path: Path, lines: list[bytes]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        for line in lines:
            os.write(fd, line)
    finally:
        os.close(fd)


def test_samples_add_up_to_busy_fraction_util_and_memory(tmp_path):
    """Two nodes of one trial, two GPUs each, 4 samples of 5 s: node 0 has one GPU at 100%
    and one idle, node 1 both at 50%. Busy GPU-seconds: 20 + 20 = 40 of 4 GPUs x 20 s held
    (the store's start and end) = 0.5. Read in two parts, the second by a reader resumed
    from the first one's state: nothing is counted twice."""
    store = Store(tmp_path / "store.db")
    store.db["attempts"].insert({"trial": 3, "attempt": 1, "state": "completed",
                                 "started": 1000.0, "finished": 1020.0, "job_id": "77"})
    node0 = [sample_line(1000 + 5 * k, 1, 5.0, [100, 0], [8192.0, 10.0]) for k in (1, 2, 3, 4)]
    node1 = [sample_line(1000 + 5 * k, 1, 5.0, [50, 50], [4096.0, 4096.0])
             for k in (1, 2, 3, 4)]
    _write(tmp_path / "gpu.0.jsonl", node0[:2] + [b'{"not": "a sample"}\n'])
    _write(tmp_path / "gpu.1.jsonl", node1[:3])
    reader = GpuSamples(tmp_path)
    with store.batch():
        store.add_gpu_use(3, reader.read_new())
        state = reader.unsaved()
    _write(tmp_path / "gpu.0.jsonl", node0[2:])
    _write(tmp_path / "gpu.1.jsonl", node1[3:])
    resumed = GpuSamples(tmp_path, state)
    store.add_gpu_use(3, resumed.read_new(final=True))
    assert resumed.read_new(final=True) == []
    rows = store.gpu_use()
    assert [(r["node"], r["gpus"], r["samples"]) for r in rows] == [(0, 2, 4), (1, 2, 4)]
    attempts = [(a["trial"], a["attempt"], a["started"], a["finished"], a["job_id"])
                for a in store.all_attempts()]
    found, busy_by_job = trial_gpu_use(rows, attempts, now=5000.0)
    use = found[3]
    assert use.gpus == 4 and use.samples == 8
    assert use.busy_gpu_seconds == pytest.approx(40.0)
    assert use.held_gpu_seconds == pytest.approx(80.0)
    assert use.busy_fraction == pytest.approx(0.5)
    assert use.util_mean == pytest.approx(50.0) and use.mem_max_mib == 8192.0
    assert busy_by_job == {"77": pytest.approx(40.0)}
    assert describe(use) == "50% busy, util 50%, 8.0 GiB"
    # the pilot of job 77: 2 nodes x 2 GPUs held 40 s -> 40 of 160 GPU-seconds
    assert pilot_gpu_use(busy_by_job["77"], 2, 2, 40.0).busy_fraction == pytest.approx(0.25)
    assert pilot_gpu_use(0.0, 2, 2, 40.0) is None and describe(None) == ""
    store.close()


def test_a_running_attempt_is_held_until_now_and_never_busier_than_held():
    rows = [{"trial": 1, "attempt": 2, "node": 0, "gpus": 1, "samples": 3, "gpu_samples": 3,
             "util_sum": 300.0, "busy_gpu_seconds": 15.0, "mem_max_mib": 1.0,
             "first": 105.0, "last": 115.0}]
    found, _ = trial_gpu_use(rows, [(1, 2, 100.0, None, None)], now=130.0)
    assert found[1].held_gpu_seconds == 30.0 and found[1].busy_fraction == 0.5
    found, _ = trial_gpu_use(rows, [(1, 2, 100.0, 110.0, None)], now=130.0)
    assert found[1].busy_fraction == 1.0  # 15 busy seconds in 10 held: clocks apart
    assert GpuUse(1, 0, None, 0.0, 0.0, 0.0).busy_fraction is None


@pytest.fixture(scope="module")
def other_uid() -> int:
    """A second local user (as tests/test_other_users.py makes it)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("needs root to create a second Unix user")
        pytest.skip("needs root to create a second Unix user")
    return ensure_system_entry(["useradd", "--system", "--no-create-home", "--shell",
                                "/usr/sbin/nologin"], pwd.getpwnam, OTHER).pw_uid


@pytest.mark.parametrize("kind", ["other_user", "symlink", "fifo"])
def test_a_sample_file_that_is_not_the_owners_regular_file_is_not_read(tmp_path, kind,
                                                                        request):
    """Another user's file, a link to a real sample file, and a FIFO (which must not block
    the reader) at gpu.0.jsonl give no samples, and one refusal naming the file."""
    real = tmp_path / "elsewhere.jsonl"
    _write(real, [sample_line(1.0, 1, 5.0, [100], [1.0])])
    path = tmp_path / "gpu.0.jsonl"
    if kind == "other_user":
        uid = request.getfixturevalue("other_uid")
        real.rename(path)
        os.chown(path, uid, -1)
    elif kind == "symlink":
        path.symlink_to(real)
    else:
        os.mkfifo(path)
    reader = GpuSamples(tmp_path)
    assert reader.read_new(final=True) == []
    assert len(reader.refused) == 1 and reader.refused[0].startswith("gpu.0.jsonl: ")
    reader.refused.clear()
    assert reader.read_new() == [] and reader.refused == []  # said once


WRITER = """
import os, sys, time
from hpsearch.gpu.sampler import FILE, sample_line
path = os.path.join(os.environ["HPSEARCH_TRIAL_DIR"], FILE.format(node=0))
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
for _ in range(4):
    time.sleep(0.1)
    os.write(fd, sample_line(time.time(), int(os.environ["HPSEARCH_ATTEMPT"]), 0.1,
                             [int(sys.argv[1])], [2048.0]))
print("@hpsearch step=0 loss=" + sys.argv[1])
"""


@pytest.mark.slow
def test_status_export_and_report_show_each_trials_gpu_use(cli):
    """A local search whose trials write samples as the sampler does (80% and 0%
    utilisation; the real sampler is off: HPSEARCH_GPU_INTERVAL=0), read by the driver into
    the store: `status` shows a gpu column, `export` gpu_* columns, the report a GPU
    section. A CPU search shows none of them."""
    (cli.cwd / "writer.py").write_text(WRITER)
    spec = cli.write_spec(f"""
        name: gpu-shown
        command: '{sys.executable} writer.py {{u}}'
        search:
          strategy: grid
          space:
            u: {{choices: [80, 0]}}
        objective: {{metric: loss}}
        resources: {{gpus_per_node: 1}}
        env: {{HPSEARCH_GPU_INTERVAL: "0"}}
        executor: {{type: local, gpus: [0, 1], timeout: 60}}
        """)
    cli("submit", spec, check=0)
    _, trials = read_store(cli.runs, "gpu-shown")
    assert [t.state for t in trials] == ["completed", "completed"]
    status = cli("status", "gpu-shown", check=0).stdout
    assert "gpu" in status.splitlines()[1]
    assert "util 80%, 2.0 GiB" in status and "0% busy, util 0%, 2.0 GiB" in status
    rows = list(csv.DictReader(io.StringIO(cli("export", "gpu-shown", check=0).stdout)))
    by_util = {float(r["gpu_util"]): r for r in rows}
    busy = float(by_util[80.0]["gpu_busy"])
    # 0.32 busy GPU-seconds (4 x 0.1 s x 0.8) in the trial's wall time (> 0.4 s)
    assert float(by_util[80.0]["gpu_busy_hours"]) == pytest.approx(0.32 / 3600)
    assert 0 < busy < 0.8 and float(by_util[0.0]["gpu_busy"]) == 0.0
    assert float(by_util[80.0]["gpu_mem_max_mib"]) == 2048.0

    from hpsearch.report.data import collect
    from hpsearch.report.gpu_table import gpu_section
    section = gpu_section(collect(cli.runs / "gpu-shown", use_sacct=False))
    assert "GPU use" in section and section.count("<td>trial ") == 2 and "80%" in section

    cpu = cli.write_spec("""
        name: cpu-only
        command: 'echo "@hpsearch step=0 loss={x}"'
        search: {strategy: grid, space: {x: {choices: [1]}}}
        objective: {metric: loss}
        """, "cpu.yaml")
    cli("submit", cpu, check=0)
    assert "busy" not in cli("status", "cpu-only", check=0).stdout
    assert "gpu_busy" not in cli("export", "cpu-only", check=0).stdout
    assert gpu_section(collect(cli.runs / "cpu-only", use_sacct=False)) == ""
