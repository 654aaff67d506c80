"""The multi-fidelity trial of the early-stopping benchmark: one MF-Hartmann learning curve.

    python -S _es_trial.py GENERATORS_PY mfh3|mfh6 STEPS BIAS NOISE STEP_SECONDS X0 X1 ...

Step s (0-based) of the curve is mf-prior-bench's MF-Hartmann generator at fidelity z = s + 1
out of STEPS (its `n_fidelities`), at the point X0, X1, ...: the fidelity's bias and noise
shrink with log z and vanish at z = STEPS, where the value is the plain Hartmann function.
Each step waits STEP_SECONDS (the "epoch"), then reports `y` and checkpoints the next step
number. It honours the trial contract as a training script would: it resumes from its latest
checkpoint, stops at trial.budget() steps in promotion mode, and leaves the loop when
trial.should_stop() (pruned). The generator's file is loaded by path (GENERATORS_PY): it
needs only numpy, while importing the mfpbench package would pull ConfigSpace and pandas.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time

from hpsearch import trial

GENERATORS = {"mfh3": "MFHartmann3", "mfh6": "MFHartmann6"}


def load_generator(path: str, function: str, steps: int, bias: float, noise: float):
    """mf-prior-bench's MFHartmann3/6 generator with `steps` fidelities (its default seed)."""
    spec = importlib.util.spec_from_file_location("_mfpbench_hartmann_generators", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, GENERATORS[function])(n_fidelities=steps, fidelity_bias=bias,
                                                  fidelity_noise=noise, seed=None)


def main(argv: list[str]) -> None:
    path, function, steps, bias, noise, pause = argv[:6]
    steps = int(steps)
    xs = tuple(float(v) for v in argv[6:])
    curve = load_generator(path, function, steps, float(bias), float(noise))
    trial.should_stop()  # the first call installs the SIGTERM handler
    latest = trial.latest_checkpoint()
    start = json.loads(latest.read_text())["next"] if latest else 0
    end = min(steps, trial.budget() or steps)
    value = None
    for step in range(start, end):
        time.sleep(float(pause))
        value = curve(step + 1, xs)
        trial.report(step, y=value)
        with trial.checkpoint(step, ".json") as ckpt:
            ckpt.write_text(json.dumps({"next": step + 1}))
        if trial.should_stop():
            break
    if value is not None:
        trial.result(y=value)


if __name__ == "__main__":
    main(sys.argv[1:])
