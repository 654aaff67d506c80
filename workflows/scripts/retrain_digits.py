"""Train the best configuration of the search again, on all the training data (the search
held a fifth of it back to validate on), and save the model.

  python retrain_digits.py --best results/best_params.json --data results/data/train.npz \
      --model results/model.pt
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F
from digits_model import load, make_model, make_optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--best", required=True, help="the search's best trial (JSON)")
    parser.add_argument("--data", required=True, help="the training part (.npz)")
    parser.add_argument("--model", required=True, help="output: the trained model")
    args = parser.parse_args()
    params = json.loads(open(args.best).read())["params"]
    torch.manual_seed(params.get("seed", 0))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    x, y = load(args.data)
    model = make_model(params["width"])
    optimizer = make_optimizer(params["optimizer"], params["lr"], model)
    batch = params.get("batch_size", 32)
    for epoch in range(params["epochs"]):
        order, total = torch.randperm(len(y)), 0.0
        for start in range(0, len(y), batch):
            rows = order[start:start + batch]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[rows]), y[rows])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(rows)
        print(f"epoch {epoch + 1}/{params['epochs']} train_loss={total / len(y):.6f}")
    torch.save({"width": params["width"], "params": params, "state": model.state_dict()},
               args.model)
    print(f"trained on {len(y)} digits with {params}; model in {args.model}")


if __name__ == "__main__":
    main()
