"""The digits example's model and optimizer (examples/digits_ddp/train.py), for the pipeline
steps that train and evaluate outside a search."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "digits_ddp"))
from train import make_model, make_optimizer  # noqa: E402,F401  (the example's own)


def load(path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) of a file written by prepare_digits.py."""
    with np.load(path) as arrays:
        return torch.tensor(arrays["x"]), torch.tensor(arrays["y"], dtype=torch.int64)
