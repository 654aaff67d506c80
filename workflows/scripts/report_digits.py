"""Write the pipeline's report (Markdown): the search's trials, the best configuration, and
how the retrained model did on the held-out digits.

  python report_digits.py --best results/best_params.json --trials results/trials.json \
      --metrics results/test_metrics.json --out results/report.md
"""

from __future__ import annotations

import argparse
import json


def _read(path: str):
    with open(path) as fh:
        return json.load(fh)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("best", "trials", "metrics", "out"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    best, trials, metrics = _read(args.best), _read(args.trials), _read(args.metrics)
    (metric, value), = best["values"].items()
    names = sorted(k for k in trials[0] if k.startswith("param_"))
    lines = [
        f"# Digits: search, retrain, evaluate ({best['experiment']})", "",
        f"Best of {len(trials)} trials: trial {best['trial']}, {metric} = {value:.4f} "
        "(validation, a fifth of the training part).", "",
        "| parameter | value |", "|---|---|",
        *(f"| {k} | {v} |" for k, v in best["params"].items()), "",
        f"Retrained on all the training part, on {metrics['test_samples']} held-out digits: "
        f"**test accuracy {metrics['test_acc']:.4f}**, test loss {metrics['test_loss']:.4f}.",
        "", "Per-class test accuracy: " + ", ".join(
            f"{digit}: {acc:.2f}" for digit, acc in enumerate(metrics["per_class_acc"])), "",
        "## Trials", "",
        "| trial | state | " + metric + " | " + " | ".join(n[6:] for n in names) + " |",
        "|---" * (3 + len(names)) + "|",
    ]
    for t in trials:
        shown = f"{t[metric]:.4f}" if t.get(metric) is not None else ""
        lines.append(f"| {t['trial']} | {t['state']} | {shown} | " +
                     " | ".join(str(t[n]) for n in names) + " |")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"report: {args.out}")


if __name__ == "__main__":
    main()
