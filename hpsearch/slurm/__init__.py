"""Everything hpsearch says to Slurm and reads back: commands (the one runner), parse (the
parsers of their output), failures (what a failed command means, and the back-off), hostlist,
sbatch (batch scripts), pilot_jobs (pilot jobs, through submitit), environment (what a Slurm
command, or a trial in a pilot, inherits).

Invariant 5 (docs/architecture.md): every Slurm command hpsearch runs goes through this
package, and no other package parses Slurm's output. Two places start `srun` themselves and
read only its exit status, never its output:

- the pilot (hpsearch.pilot.program, hpsearch.pilot.warm_servers) starts job steps inside its
  own allocation: it runs on the allocation's first node, and a trial on another of its
  nodes, or a warm server on each, can only start there as an `srun --overlap` step; the
  trial's step is a process of the pilot's own runner, which waits for it and signals it
  through this package (Slurm.signal_step);
- the launchers (hpsearch.launch) write `srun` into a trial's command line, which the
  trial's shell runs, not hpsearch.
"""
