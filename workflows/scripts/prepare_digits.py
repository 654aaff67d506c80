"""Split scikit-learn's bundled digits into a training part (searched and retrained on) and a
held-out test part (touched only by the final evaluation). Stratified, seeded: the same
files every run.

  python prepare_digits.py --train results/data/train.npz --test results/data/test.npz
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="output: the training part (.npz)")
    parser.add_argument("--test", required=True, help="output: the held-out part (.npz)")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixels 0..16 scaled to [0, 1]
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=args.test_fraction, random_state=args.seed,
        stratify=digits.target)
    np.savez(args.train, x=x_train, y=y_train)
    np.savez(args.test, x=x_test, y=y_test)
    print(f"{len(y_train)} digits to train on in {args.train}, "
          f"{len(y_test)} held out in {args.test}")


if __name__ == "__main__":
    main()
