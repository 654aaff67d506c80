"""The executors a spec may choose, with the facts the spec and the driver ask about each
and where its class lives ("module:Class", imported when it is first built: the pilots'
executor lives in hpsearch.pilot, above this package). Adding an executor is its module and
one entry here, or an entry point in the group "hpsearch.executors" of another package
(hpsearch/registry.py); `executor.type` in the schema, `validate`, `plan` and docs/spec.md
take their names from EXECUTORS (tests/test_registries.py checks they agree).

An executor is chosen by `executor.type`, unless an entry refines that type with a section of
`executor:` (`facts.refines`, `facts.section`): where that section is set, its executor runs
the trials (executor.pilots with type slurm: pilot jobs; `submit --executor local` runs the
same spec's trials here; executor.sites with type slurm: several partitions or clusters,
brokered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from hpsearch.registry import Registry, load
from hpsearch.spec.vocabulary import ExecutorFacts

if TYPE_CHECKING:
    from hpsearch.executors.base import Executor
    from hpsearch.spec.model import Executor as ExecutorSection


@dataclass(frozen=True)
class ExecutorEntry:
    facts: ExecutorFacts
    target: str  # "module:Class", a subclass of hpsearch.executors.base.Executor

    def cls(self) -> type[Executor]:
        return cast("type[Executor]", load(self.target))


EXECUTORS: Registry[ExecutorEntry] = Registry("executor", group="hpsearch.executors")
for _entry in (
        ExecutorEntry(ExecutorFacts("local"), "hpsearch.executors.local:LocalExecutor"),
        ExecutorEntry(ExecutorFacts("slurm", on_slurm=True, job_per_attempt=True),
                      "hpsearch.executors.slurm:SlurmExecutor"),
        ExecutorEntry(ExecutorFacts("pilots", on_slurm=True, in_pilots=True, section="pilots",
                                    refines="slurm"),
                      "hpsearch.pilot.executor:PilotExecutor"),
        ExecutorEntry(ExecutorFacts("sites", on_slurm=True, job_per_attempt=True,
                                    section="sites", refines="slurm"),
                      "hpsearch.executors.sites:SitesExecutor")):
    EXECUTORS.add(_entry.facts.name, _entry)


def chosen(section: ExecutorSection) -> ExecutorEntry:
    """The entry of the executor a spec's `executor:` section chooses."""
    for entry in EXECUTORS:
        refined = entry.facts.refines == section.type and entry.facts.section
        if refined and getattr(section, refined, None):  # set: pilots (a mapping), sites
            return entry
    return EXECUTORS.get(section.type)


def facts(section: ExecutorSection) -> ExecutorFacts:
    return chosen(section).facts
