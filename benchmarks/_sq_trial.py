"""The trial of the search-quality benchmark: `python -S _sq_trial.py FUNCTION X0 X1 ...`.

Evaluates the test function at the point given on its command line (hpsearch substitutes the
parameters x0, x1, ...) and prints `@hpsearch result y=<value>`. It imports only math and
(for BBOB functions) ioh, and runs with `-S`: a trial's cost is its process start-up.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _objectives import evaluate  # noqa: E402


def main() -> None:
    y = evaluate(sys.argv[1], [float(v) for v in sys.argv[2:]])
    print(f"@hpsearch result y={y!r}", flush=True)


if __name__ == "__main__":
    main()
