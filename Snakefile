# The example pipeline on the digits data (examples/digits_ddp): prepare the data, search
# hyperparameters with hpsearch, retrain the best configuration on all the training data,
# evaluate it on held-out digits, write a report. See docs/snakemake.md.
#
#   snakemake -c1                                   # everything on this machine
#   snakemake -c1 --config executor=slurm           # trials as Slurm jobs, the rest here
#   snakemake --executor slurm -j4 --config executor=slurm   # every step on Slurm
#
# config: spec, executor (local | slurm), driver_job (true | false), runs_dir, results.

import os
import sys

config.setdefault("spec", "examples/digits_ddp/pipeline.yaml")
config.setdefault("results", "results")
R = config["results"]
BEST, TRIALS = f"{R}/best_params.json", f"{R}/trials.json"  # written by the hpsearch rules
SCRIPTS = os.path.join(workflow.basedir, "workflows", "scripts")
PYTHON = sys.executable  # Snakemake's own, from the environment hpsearch is installed in


module hpsearch:
    snakefile:
        "workflows/hpsearch.smk"
    config:
        {"spec": config["spec"], "best": BEST, "trials": TRIALS, "log": f"{R}/logs/search.log",
         "runs_dir": config.get("runs_dir", "hpsearch-runs"),
         "executor": config.get("executor"), "driver_job": config.get("driver_job", False)}


rule all:
    input:
        f"{R}/report.md",


rule prepare:
    output:
        train=f"{R}/data/train.npz",
        test=f"{R}/data/test.npz",
    log:
        f"{R}/logs/prepare.log",
    shell:
        "{PYTHON:q} {SCRIPTS:q}/prepare_digits.py --train {output.train:q} --test {output.test:q}"
        " > {log:q} 2>&1"


use rule search from hpsearch as search with:
    input:
        spec=config["spec"],
        data=rules.prepare.output.train,
    localrule: True  # `with:` would reset it (snakemake 9); hpsearch submits the trials


use rule export_trials from hpsearch as export_trials


rule retrain:
    input:
        best=BEST,
        data=rules.prepare.output.train,
    output:
        f"{R}/model.pt",
    log:
        f"{R}/logs/retrain.log",
    shell:
        "{PYTHON:q} {SCRIPTS:q}/retrain_digits.py --best {input.best:q} --data {input.data:q}"
        " --model {output:q} > {log:q} 2>&1"


rule evaluate:
    input:
        model=rules.retrain.output[0],
        data=rules.prepare.output.test,
    output:
        f"{R}/test_metrics.json",
    log:
        f"{R}/logs/evaluate.log",
    shell:
        "{PYTHON:q} {SCRIPTS:q}/evaluate_digits.py --model {input.model:q} --data {input.data:q}"
        " --out {output:q} > {log:q} 2>&1"


rule report:
    input:
        best=BEST,
        trials=TRIALS,
        metrics=rules.evaluate.output[0],
    output:
        f"{R}/report.md",
    shell:
        "{PYTHON:q} {SCRIPTS:q}/report_digits.py --best {input.best:q} --trials {input.trials:q}"
        " --metrics {input.metrics:q} --out {output:q}"
