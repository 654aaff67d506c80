"""hpsearch's Lightning callback under population-based training (examples/lightning/train.py,
strategy pbt): Lightning restores the optimizer of the checkpoint a segment resumes from, lr
and all, after configure_optimizers; HpsearchCallback(optimizer_params=...) sets this
segment's lr on it, so a member that took another member's checkpoint trains on with its own
explored lr (docs/pbt.md). Needs torch, scikit-learn and lightning; skipped (failed under
CI=true) without them."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES
from tests.pbt_segments import check_segments, digits_spec, submit_warm
from tests.test_digits_ddp import _require


@pytest.fixture(autouse=True)
def lightning_installed() -> None:
    for module in ("torch", "sklearn", "lightning"):
        _require(module, "scripts/setup.sh test,gp,lightning installs what these tests need")


@pytest.mark.slow  # torch's imports, 15 to 31 s on a loaded machine (docs/testing.md#tiers)
def test_a_lightning_member_trains_each_segment_with_its_scheduled_lr(cli):
    """Member 0 takes member 1's checkpoint (saved with lr 2e-2) and trains on with its own
    explored lr, 0.8 x 2e-2 (before optimizer_params: with the checkpoint's 2e-2)."""
    (cli.cwd / "train.py").write_text((EXAMPLES / "lightning" / "train.py").read_text())
    spec = digits_spec("lt-pbt", "none", "{cpus_per_task: 1}",
                       "{type: local, timeout: 2m, warm: [torch, lightning.pytorch, "
                       "sklearn.datasets]}",
                       args="--accelerator cpu")
    proc = submit_warm(cli, cli.write_spec(spec))
    check_segments(cli.runs, "lt-pbt", ranks=1, output=proc.stdout)
