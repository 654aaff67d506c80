# Reusable hpsearch rules for Snakemake pipelines; see docs/snakemake.md.
#
#   module hpsearch:
#       snakefile: "workflows/hpsearch.smk"
#       config: {"spec": "search.yaml", "best": "results/best.json"}
#   use rule * from hpsearch as hps_*
#
# config (the module's own `config:` mapping):
#   spec        the experiment spec (required)
#   best        output: the best trial as JSON (default results/best_params.json)
#   trials      output of export_trials: every trial as JSON (default results/trials.json)
#   runs_dir    where the experiment lives (default hpsearch-runs)
#   executor    local | slurm (default: the spec's executor)
#   driver_job  true: the driver runs as its own Slurm job (default false)
#   log         the search's log (default logs/hpsearch-search.log)
#   allow_failures  true: a search with some failed trials still succeeds and writes its
#               best, if it ran to its end and one trial completed (default false)
#   hpsearch    the command to run (default: `python -m hpsearch` on the interpreter
#               Snakemake runs on, so no activated virtualenv is needed)
#
# The search runs where Snakemake runs (a local rule): hpsearch itself submits the trials,
# to Slurm with `executor: slurm`. Named inputs beyond `spec` (add them with `use rule ...
# with: input:`) reach every trial as HPSEARCH_INPUT_<NAME>, an absolute path.

import os
import shlex
import sys

import yaml

_SPEC = config["spec"]
_RUNS = config.get("runs_dir", "hpsearch-runs")
_BEST = config.get("best", "results/best_params.json")
_HPSEARCH = config.get("hpsearch") or f"{shlex.quote(sys.executable)} -m hpsearch"
with open(_SPEC) as _fh:
    _EXPERIMENT = str(yaml.safe_load(_fh)["name"])


def _submit_flags():
    flags = ["--runs-dir", _RUNS]
    if config.get("executor"):
        flags += ["--executor", str(config["executor"])]
    if config.get("driver_job"):
        flags += ["--driver-job", "--wait"]
    if config.get("allow_failures"):
        flags += ["--allow-failures"]
    return shlex.join(flags)


def _input_env(wildcards, input):
    return " ".join(f"HPSEARCH_INPUT_{name.upper()}={shlex.quote(os.path.abspath(path))}"
                    for name, path in input.items() if name != "spec")


rule search:
    """Run (or continue) the search; write its best trial only if every trial completed.
    Rerun after an interruption, it resumes the same experiment (submit --resume)."""
    input:
        spec=_SPEC,
    output:
        best=_BEST,
    log:
        config.get("log", "logs/hpsearch-search.log"),
    params:
        hpsearch=_HPSEARCH,
        flags=_submit_flags(),
        env=_input_env,
    localrule: True
    shell:
        "env {params.env} {params.hpsearch} submit {input.spec:q} --resume"
        " --best-out {output.best:q} {params.flags} > {log:q} 2>&1"


rule export_trials:
    """Every trial of the search (params, state, values, timings) as JSON."""
    input:
        best=_BEST,
    output:
        trials=config.get("trials", "results/trials.json"),
    params:
        hpsearch=_HPSEARCH,
        experiment=_EXPERIMENT,
        runs_dir=_RUNS,
    localrule: True
    shell:
        "{params.hpsearch} export {params.experiment:q} --runs-dir {params.runs_dir:q}"
        " --format json --out {output.trials:q}"
