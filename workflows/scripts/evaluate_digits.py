"""Measure the retrained model on the held-out digits, which neither the search nor the
retraining saw: accuracy, loss, per-class accuracy, confusion matrix.

  python evaluate_digits.py --model results/model.pt --data results/data/test.npz \
      --out results/test_metrics.json
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from digits_model import load, make_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="the held-out part (.npz)")
    parser.add_argument("--out", required=True, help="output: the metrics (JSON)")
    args = parser.parse_args()
    saved = torch.load(args.model, weights_only=True)
    model = make_model(saved["width"])
    model.load_state_dict(saved["state"])
    model.eval()
    x, y = load(args.data)
    with torch.no_grad():
        logits = model(x)
    predicted = logits.argmax(dim=1)
    confusion = torch.zeros(10, 10, dtype=torch.int64)
    confusion.index_put_((y, predicted), torch.ones_like(y), accumulate=True)
    metrics = {
        "test_samples": len(y),
        "test_acc": (predicted == y).double().mean().item(),
        "test_loss": F.cross_entropy(logits, y).item(),
        "per_class_acc": (confusion.diag() / confusion.sum(dim=1)).tolist(),
        "confusion": confusion.tolist(),
    }
    with open(args.out, "w") as fh:
        json.dump(metrics, fh, indent=1)
    print(f"test_acc={metrics['test_acc']:.4f} test_loss={metrics['test_loss']:.4f} "
          f"on {len(y)} held-out digits")


if __name__ == "__main__":
    main()
