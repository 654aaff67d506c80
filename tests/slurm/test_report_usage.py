"""Slurm.sacct_usage on the real test cluster: seconds, nodes and GPUs of finished jobs, as
`hpsearch report` counts node- and GPU-hours."""

from __future__ import annotations

from hpsearch.slurm.commands import Slurm


def test_sacct_usage_of_a_gpu_job_and_a_two_node_job(slurm_cluster, tmp_path):
    gpu_job = slurm_cluster.sbatch("-J", "usage-gpu", "--gres=gpu:1", "-o", "/dev/null",
                                   "--wrap", "sleep 1", cwd=tmp_path)
    two_node = slurm_cluster.sbatch("-J", "usage-two", "-N2", "-o", "/dev/null",
                                    "--wrap", "sleep 1", cwd=tmp_path)
    for job in (gpu_job, two_node):
        slurm_cluster.wait_for_accounting(job, "State", timeout=240)
    usage = {u.job_id: u for u in Slurm(env=slurm_cluster.env).sacct_usage([gpu_job,
                                                                              two_node])}
    assert (usage[gpu_job].state, usage[gpu_job].nodes, usage[gpu_job].gpus) == \
        ("COMPLETED", 1, 1)
    assert usage[gpu_job].elapsed >= 1
    assert (usage[two_node].nodes, usage[two_node].gpus) == (2, 0)
