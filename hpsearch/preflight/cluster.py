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
    launch = build_launch(spec.trial_recipe(under_slurm=True), asked.trial_id, 1, asked.params)
    if spec.executor.sites:
        _sites_would_take(spec, slurm, launch)
        return
    try:
        slurm.sbatch_test(batch_script(spec.slurm_job(), launch))
    except SlurmError as exc:
        if exc.kind == PERMANENT:
            raise BadInput(f"Slurm would refuse the trials' jobs: {exc}",
                           str(spec.source or ""), key="resources") from None


def _sites_would_take(spec: Spec, slurm: Slurm, launch) -> None:
    """Each site's cluster is one slurmdbd knows (`sacct -M` of an unknown one prints
    nothing, as if every job were gone), and each site would take the first trial's job."""
    from dataclasses import replace

    from hpsearch.executors.sites import site_job, site_resources
    file = str(spec.source or "")
    named = [s.cluster for s in spec.executor.sites if s.cluster]
    try:
        known: list[str] | None = slurm.clusters() if named else []
    except SlurmError:  # slurmdbd does not answer now: the driver rides that out
        known = None
    for i, site in enumerate(spec.executor.sites):
        key = f"executor.sites[{i}]"
        if site.cluster and known is not None and site.cluster not in known:
            raise BadInput(f"site {site.name}: slurmdbd knows no cluster {site.cluster!r} "
                           f"(it knows {', '.join(known) or 'none'})", file, key=key)
        job = site_job(spec.slurm_job(), site)
        own = replace(launch, resources=site_resources(launch.resources or job.resources,
                                                       site))
        try:
            Slurm(timeout=30, cluster=site.cluster).sbatch_test(batch_script(job, own))
        except SlurmError as exc:
            if exc.kind == PERMANENT:
                raise BadInput(f"Slurm would refuse site {site.name}'s jobs: {exc}", file,
                               key=key) from None
