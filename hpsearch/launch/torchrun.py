"""`launcher: torchrun`: one torchrun per node, each starting tasks_per_node workers.

torchrun runs inside the container, with its static rendezvous on MASTER_ADDR:MASTER_PORT
and the node's rank from Slurm (SLURM_NODEID). The static backend, not c10d, because only it
gives the workers our MASTER_ADDR and MASTER_PORT and a NODE_RANK equal to the Slurm node id:
torch 2.13's c10d backend hands the workers a fresh random port on whichever node joined
first. Locally torchrun runs once, on 127.0.0.1 and the trial's port. Each worker runs the
user's shell command through `--no-python sh -c` (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; NODE_RANK comes from its GROUP_RANK).
`args` go to torchrun (e.g. `--max-restarts=1`).

With `executor.warm` and no `args`, `python -m hpsearch.warm ranks` takes torchrun's place
(hpsearch.warm.ranks): the same workers with the same variables, started without an agent
that imports torch, so that a promoted or retried segment's ranks all start warm.
"""

from __future__ import annotations

import shlex

from hpsearch.launch.base import (
    LOCAL_ADDR,
    NODELIST,
    ContainerRuntime,
    Launcher,
    RankLayout,
    command_line,
    exports,
    preamble,
    rank_script,
    script,
    step_cpus_per_task,
)
from hpsearch.procs import SAFE_MODULE_RUN, module_argv

# Runs on each node, inside the container, where Slurm's and the script's variables are set.
NODE_SCRIPT = ('exec torchrun --node-rank="$SLURM_NODEID" --master-addr="$MASTER_ADDR"'
               ' --master-port="$MASTER_PORT" "$@"')
# The same with hpsearch.warm.ranks ($0: the python that runs it).
WARM_NODE_SCRIPT = (f'exec "$0" -c {shlex.quote(SAFE_MODULE_RUN)} hpsearch.warm ranks'
                    ' --node-rank="$SLURM_NODEID"'
                    ' --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" "$@"')


class TorchrunLauncher(Launcher):
    name = program = "torchrun"

    def host_program(self, in_image: bool, warm: bool) -> str | None:
        # torchrun runs inside the image when there is one; with executor.warm and no args
        # the python running hpsearch.warm takes its place.
        return None if in_image or (warm and not self.args) else self.program

    def checkpoint_signal_env(self, signal: str) -> dict[str, str]:
        # torchrun starts its workers in sessions of their own and passes on only the
        # signals listed here (default SIGTERM,SIGINT,SIGHUP,SIGQUIT); any other kills
        # torchrun itself, and the workers never save their checkpoint.
        return {"PET_SIGNALS_TO_HANDLE": f"SIGTERM,SIGINT,SIGHUP,SIGQUIT,{signal}"}

    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        self.check(layout, runtime)
        ranks = rank_script([exports({"NODE_RANK": '"$GROUP_RANK"'})], command, layout)
        warm = layout.warm_ranks if not self.args else None
        sizes = [f"--nnodes={layout.node_count}", f"--nproc-per-node={layout.tasks_per_node}"]
        if warm:
            program = module_argv(warm, "hpsearch.warm", "ranks")
            torchrun_args = [*sizes, "--", "sh", "-c", ranks]
        else:
            program = ["torchrun"]
            torchrun_args = [*sizes, "--rdzv-backend=static", *self.args, "--no-python", "sh",
                             "-c", ranks]
        if not layout.under_slurm:
            argv = [*program, "--node-rank=0", f"--master-addr={LOCAL_ADDR}",
                    f"--master-port={layout.master_port}", *torchrun_args]
            return script([*preamble(layout, runtime), command_line([], runtime, argv, layout)])
        srun = ["srun", f"--nodes={layout.nodes}", NODELIST, f"--ntasks={layout.nodes}",
                "--ntasks-per-node=1",
                step_cpus_per_task(1, layout.tasks_per_node * layout.cpus_per_task),
                "--kill-on-bad-exit=1", *runtime.srun_options(layout)]
        per_node = (["sh", "-c", WARM_NODE_SCRIPT, warm, *torchrun_args] if warm
                    else ["sh", "-c", NODE_SCRIPT, "torchrun", *torchrun_args])
        return script([*preamble(layout, runtime), command_line(srun, runtime, per_node, layout)])
