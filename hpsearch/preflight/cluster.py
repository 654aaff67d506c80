"""Whether Slurm answers and would take the trials' jobs: what `submit` asks the cluster before
anything is written."""

from __future__ import annotations

from hpsearch.errors import BadInput
from hpsearch.launch.attempt import build_launch
from hpsearch.search import make_search
from hpsearch.slurm.commands import Slurm
from hpsearch.slurm.failures import PERMANENT, SlurmError
from hpsearch.slurm.sbatch import batch_script
from hpsearch.spec.model import Spec


def slurm_would_take(spec: Spec) -> None:
    """The controller answers, and would accept the first trial's job (`sbatch
    --test-only`): a partition, account or size Slurm refuses for good is bad input now,
    before anything is written. A limit or a passing outage is left to the driver."""
    slurm = Slurm(timeout=30)
    try:
        slurm.ping()
    except SlurmError as exc:
        raise BadInput(f"executor slurm: cannot reach the Slurm controller from here ({exc}); "
                       "run on a login node, set SLURM_CONF, or use --executor local",
                       str(spec.source or ""), key="executor.type") from None
    asked = make_search(spec.search, spec.objectives).ask()
    if asked is None:
        return
    try:
        launch = build_launch(spec.trial_recipe(), asked.trial_id, 1, asked.params)
        slurm.sbatch_test(batch_script(spec.slurm_job(), launch))
    except SlurmError as exc:
        if exc.kind == PERMANENT:
            raise BadInput(f"Slurm would refuse the trials' jobs: {exc}",
                           str(spec.source or ""), key="resources") from None
