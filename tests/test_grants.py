"""Every trial gets exactly the GPUs and cores it asked for (issue 37, items 6 and 8): in a
pilot whose trials differ in size (hpsearch.pilot.slots, the pilot's claim), in the
environment a pilot gives each trial and a driver in an allocation gives its jobs
(hpsearch.slurm.environment), and in the shell text that narrows each of a trial's steps
(hpsearch.launch.base.GPU_NARROW, CPU_NARROW, step_cpus_per_task), which says on stderr when
it cannot. On the emulated cluster: tests/slurm/test_gpu_binding.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from hpsearch.launch.attempt import Launch
from hpsearch.launch.base import CPU_NARROW, GPU_NARROW, step_cpus_per_task
from hpsearch.pilot import protocol
from hpsearch.pilot.program import Allocation, Pilot
from hpsearch.pilot.slots import Slots
from hpsearch.slurm.environment import GPU_VISIBILITY, for_pilot_trial, outside_allocation
from hpsearch.spec.model import Resources

FOUR = ["0", "1", "2", "3"]
SHOW_GPUS = "echo " + " ".join(f'"{name}=${{{name}-unset}}"' for name in
                               (*GPU_VISIBILITY, "SLURM_STEP_GPUS"))


def _sh(text: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", text], env={"PATH": "/bin:/usr/bin", **env},
                          capture_output=True, text=True, check=True, timeout=30)


def _shown(out: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in out.split())


# -- slots: what a grant holds ---------------------------------------------------------------

def test_a_trial_that_asks_for_no_gpu_holds_none_beside_gpu_trials():
    """Before: it got its slot's GPU (the grant listed every GPU of its slots)."""
    slots = Slots(["n1"], 4, 1, FOUR)
    assert slots.take(1, gpus=1).gpus == ("0",)
    assert slots.take(1, gpus=0).gpus == ()
    assert slots.take(1).gpus == ("2",)  # not told: its slots' GPUs (one size of trial)


def test_a_three_gpu_trial_on_two_gpu_slots_holds_three_not_four():
    slots = Slots(["n1", "n2"], 2, 2, FOUR)
    grant = slots.take(2, width=2, gpus=3)
    assert grant.gpus == ("0", "1", "2") and grant.width == 2 and grant.nodes == ("n1", "n2")


def _pilot(tmp_path: Path, gpus_per_slot: int, slots_per_node: int) -> Pilot:
    paths = protocol.PilotPaths(tmp_path / "pilots" / "1")
    paths.make()
    config = {"time_limit": 600, "slots_per_node": slots_per_node,
              "trial_gpus": gpus_per_slot, "trial_cpus": 1, "trial_tasks_per_node": 1,
              "trial_nodes": 1, "kill_grace": 1, "signal_before": 0, "heartbeat": 1,
              "trial_time": None, "idle_timeout": 60, "grace": 60}
    pilot = Pilot(paths, config, Allocation("7", ("n1",), "n1", tuple(FOUR),
                                            time.time() + 600))
    # the pilot's own environment, as Slurm sets it in a job of 4 GPUs
    pilot.runner.base_env.update({"CUDA_VISIBLE_DEVICES": "0,1,2,3",
                                  "ROCR_VISIBLE_DEVICES": "0,1,2,3",
                                  "GPU_DEVICE_ORDINAL": "0,1,2,3",
                                  "ZE_AFFINITY_MASK": "0,1,2,3"})
    return pilot


def _assign(pilot: Pilot, tmp_path: Path, trial: int, gpus: int, width: int) -> None:
    trial_dir = tmp_path / "trials" / f"{trial:05d}"
    trial_dir.mkdir(parents=True)
    launch = Launch(trial, 1, "true", {}, trial_dir, tmp_path,
                    resources=Resources(gpus_per_node=gpus, time="00:05:00"))
    protocol.write_json(pilot.paths.file("inbox", protocol.name_of(trial, 1)),
                        protocol.launch_to_dict(launch, width))


@pytest.mark.parametrize(("gpus", "width", "expected"), [(0, 1, ""), (3, 2, "0,1,2")],
                         ids=["no-gpu", "three-gpus-on-two-slots"])
def test_a_pilot_gives_each_trial_exactly_its_own_gpus_in_every_gpu_list(
        tmp_path, monkeypatch, gpus, width, expected):
    """What the pilot starts a trial with: a CPU-only trial beside GPU trials sees no GPU in
    any runtime's list (before: its slot's, in CUDA_VISIBLE_DEVICES, and all four in the
    others), a 3-GPU trial on two 2-GPU slots sees three (before: four); its steps narrow
    to the same (HPSEARCH_GPU_FIELDS), and the driver is told those GPUs (what gpu_hours
    charges)."""
    pilot = _pilot(tmp_path, 2, 2)
    started: list[Launch] = []
    monkeypatch.setattr(pilot.runner, "submit", started.append)
    _assign(pilot, tmp_path, 1, gpus, width)
    pilot._claim()
    assert len(started) == 1
    env = started[0].env
    assert {name: env[name] for name in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                         "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK")} \
        == dict.fromkeys(("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                          "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK"), expected)
    assert env["HPSEARCH_GPU_FIELDS"] == ",".join(str(int(g) + 1) for g in FOUR
                                                  if g in expected.split(","))
    assert ",".join(pilot.grants[1][1].gpus) == expected


# -- the environment a trial or a job inherits ------------------------------------------------

def test_a_driver_in_an_allocation_passes_none_of_its_gpus_to_the_jobs_it_submits():
    """`salloc --gpus=2`, then `hpsearch submit`: sbatch exports the environment, and a
    CPU-only trial job got CUDA_VISIBLE_DEVICES=0,1 (and the others) from the driver."""
    salloc = {"SLURM_JOB_ID": "9", "CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "0,1",
              "HIP_VISIBLE_DEVICES": "0,1", "ZE_AFFINITY_MASK": "0,1",
              "GPU_DEVICE_ORDINAL": "0,1", "PATH": "/bin"}
    assert outside_allocation(salloc) == {"PATH": "/bin"}
    mine = {"CUDA_VISIBLE_DEVICES": "1", "PATH": "/bin"}  # a login shell's: the user's own
    assert outside_allocation(mine) == mine


def test_a_pilot_trial_gets_each_gpu_list_the_pilot_has_cut_to_its_positions():
    pilot_env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "ROCR_VISIBLE_DEVICES": "0,1,2,3",
                 "GPU_DEVICE_ORDINAL": "0,1,2,3"}
    env = for_pilot_trial("n1", 1, 1, 1, ["2", "3"], [2, 3], None, pilot_env=pilot_env)
    assert (env["CUDA_VISIBLE_DEVICES"], env["ROCR_VISIBLE_DEVICES"],
            env["GPU_DEVICE_ORDINAL"]) == ("2,3", "2,3", "2,3")
    assert "HIP_VISIBLE_DEVICES" not in env  # not the pilot's: not invented
    none = for_pilot_trial("n1", 1, 1, 1, [], [], None, pilot_env=pilot_env)
    assert (none["CUDA_VISIBLE_DEVICES"], none["ROCR_VISIBLE_DEVICES"],
            none["HPSEARCH_GPU_FIELDS"]) == ("", "", "")
    assert "SLURM_GPUS_ON_NODE" not in none


# -- the narrowing in each step --------------------------------------------------------------

STEP = {"SLURM_STEP_GPUS": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "ROCR_VISIBLE_DEVICES": "0,1,2,3", "HIP_VISIBLE_DEVICES": "0,1,2,3",
        "ZE_AFFINITY_MASK": "0,1,2,3", "GPU_DEVICE_ORDINAL": "0,1,2,3"}


def test_a_steps_gpu_lists_all_narrow_to_the_trials_positions():
    """Before, only CUDA_VISIBLE_DEVICES (and SLURM_STEP_GPUS) narrowed: ROCm, HIP, oneAPI
    and OpenCL programs saw every GPU of the job."""
    shown = _shown(_sh(GPU_NARROW + "\n" + SHOW_GPUS,
                       {**STEP, "HPSEARCH_GPU_FIELDS": "2,4"}).stdout)
    assert shown == {**dict.fromkeys(GPU_VISIBILITY, "1,3"), "SLURM_STEP_GPUS": "5,7"}


def test_a_step_of_a_trial_of_no_gpus_sees_none():
    """Slurm gives an overlapping step every GPU of the job: a CPU-only trial's step in a
    GPU pilot saw them all."""
    proc = _sh(GPU_NARROW + "\n" + SHOW_GPUS, {**STEP, "HPSEARCH_GPU_FIELDS": ""})
    shown = _shown(proc.stdout)
    assert all(shown[name] == "" for name in (*GPU_VISIBILITY, "SLURM_STEP_GPUS")), shown
    assert proc.stderr == ""


def test_a_step_that_cannot_be_narrowed_to_its_gpus_says_so():
    """Slurm gave the step fewer GPUs than the positions name: before, silently fewer."""
    proc = _sh(GPU_NARROW + "\n" + SHOW_GPUS,
               {"SLURM_STEP_GPUS": "4", "CUDA_VISIBLE_DEVICES": "0",
                "HPSEARCH_GPU_FIELDS": "2,3"})
    assert "hpsearch: warning: this step was not narrowed to the GPUs of its trial" \
        in proc.stderr
    outside = _sh(GPU_NARROW + "\n" + SHOW_GPUS, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert _shown(outside.stdout)["CUDA_VISIBLE_DEVICES"] == "0,1" and outside.stderr == ""


def _allowed() -> list[int]:
    text = Path("/proc/self/status").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Cpus_allowed_list:"))
    cpus: list[int] = []
    for part in line.split()[1].split(","):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def test_a_step_that_cannot_be_narrowed_to_its_cores_says_so():
    """Allowed fewer CPUs than the pilot's on the node (Slurm bound the step to the lowest
    cores): before, the trial ran on another slot's cores without a word."""
    cpus = _allowed()
    show = "grep Cpus_allowed_list: /proc/self/status"
    proc = _sh(CPU_NARROW + "\n" + show, {"HPSEARCH_CPU_FIELDS": "1",
                                          "HPSEARCH_NODE_CPUS": str(len(cpus) + 1)})
    assert "hpsearch: warning: this step was not narrowed to the cores of its trial" \
        in proc.stderr
    narrowed = _sh(CPU_NARROW + "\n" + show, {"HPSEARCH_CPU_FIELDS": str(len(cpus)),
                                              "HPSEARCH_NODE_CPUS": str(len(cpus))})
    assert narrowed.stderr == "" and narrowed.stdout.split()[1] == str(cpus[-1])


@pytest.mark.parametrize(("tasks", "cpus"), [(3, 1), (2, 2), (1, 4)])
def test_every_step_of_a_pilot_trial_asks_for_all_of_the_pilots_cpus_on_the_node(tasks, cpus):
    """In a pilot of 8 CPUs a node, a step of 3 tasks asked for $((8/3)) = 2 CPUs each: 6,
    which Slurm takes from the node's lowest cores, so CPU_NARROW had no share to pick from.
    Now each step asks for all 8 per node (srun's -O, SLURM_OVERCOMMIT, makes -c per node;
    on the cluster, an `-n 3 -c 4` step in a 4-CPU job got CPUs=4 with it and CPUs=3 for
    $((4/3)) without); outside a pilot, its tasks' own."""
    option = step_cpus_per_task(tasks, cpus)
    pilot = for_pilot_trial("n1", 1, tasks, cpus, [], [], None, 8, [0])
    assert pilot["SLURM_OVERCOMMIT"] == "1"
    assert _sh(f'echo "{option}"', {"HPSEARCH_NODE_CPUS": pilot["HPSEARCH_NODE_CPUS"]}) \
        .stdout.strip() == "--cpus-per-task=8"
    assert _sh(f'echo "{option}"', {}).stdout.strip() == f"--cpus-per-task={cpus}"


# -- what a pilot attempt is charged ----------------------------------------------------------

@pytest.mark.parametrize(("g", "gpus", "nodes", "share"),
                         [(0, "", "node3", 0.25), (2, "0,1", "node3", 0.5),
                          (2, "0,1", "node[3-4]", 0.5)],
                         ids=["quarter-node-no-gpu", "half-node-two-gpus", "two-half-nodes"])
def test_a_pilot_attempt_is_charged_the_share_of_its_node_it_held(tmp_path, g, gpus, nodes,
                                                                   share):
    """Four 1-GPU slots a node: a CPU-only trial holds one slot (a quarter of the node) and
    no GPU, a 2-GPU trial two slots (half) and two GPUs on each of its nodes. Before,
    node_hours charged each the whole node, so a cost objective could not tell a
    quarter-node trial from a full one, and a 2-node trial's gpu_hours counted one node's."""
    import functools

    from hpsearch.driver.cost import Costs, pilot_share
    from hpsearch.store.store import Store

    store = Store(tmp_path / "store.sqlite")
    store.create_experiment("s", "name: s\n", "s.yaml", str(tmp_path), "random",
                            ["minimize"], 1)
    store.insert_trial(0, {"g": g}, str(tmp_path / "t0"), {}, None)
    store.begin_attempt(0, 1, "first")
    store.mark_running(0, 1, "node3", 1, None, gpus, "77")  # the pilot's job; its node
    store.update_placement(0, 1, "RUNNING", None, nodes)  # the pilot's started file's
    time.sleep(0.05)
    store.finish_attempt(0, 1, "completed", 0, None)
    resources = Resources(gpus_per_node=2, per_trial=(("gpus_per_node", "g"),))
    slot = Resources(gpus_per_node=1)  # the smallest GPU trial's share (Spec.slot)
    costs = Costs(["node_hours", "gpu_hours", "wall_s"], store, print,
                  pilots=functools.partial(pilot_share, resources, slot, 4))
    cost = costs.measure(0, set())
    assert cost["wall_s"] > 0
    n = 2 if "[" in nodes else 1
    assert cost["node_hours"] == pytest.approx(n * share * cost["wall_s"] / 3600)
    assert cost["gpu_hours"] == pytest.approx(n * g * cost["wall_s"] / 3600)
