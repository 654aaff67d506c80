"""One experiment, as the composition root wires it, for the driver policies' unit tests
(tests/test_policy_*.py): a spec file parsed like `submit` parses it, the store created like
`submit` creates it, and the policies built by hpsearch.driver.policies from their sections.
Nothing runs: a test plays the driver's part by calling the policy it checks."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from hpsearch.driver.policies import Policies, policies
from hpsearch.driver.session import create_store, make_executor, new_experiment
from hpsearch.executors.base import Executor
from hpsearch.search import Search, make_search
from hpsearch.spec import Spec
from hpsearch.store import runs
from hpsearch.store.store import Store


@dataclass
class Experiment:
    spec: Spec
    store: Store
    search: Search
    executor: Executor
    policies: Policies
    events: list[str] = field(default_factory=list)  # the driver's event lines, in order

    def trial(self, params: dict | None = None, mark: dict | None = None) -> int:
        """Ask the search's next trial and store it as the driver does (`submitting`,
        attempt 1), then running; returns its id. `params`, `mark`: an enqueued point's
        parameters and the sampler attrs that name it (Driver._new)."""
        asked = self.search.ask(params, mark)
        assert asked is not None, "the search has no trial left to ask"
        tdir = runs.trial_dir(self.spec.experiment_dir, asked.trial_id)
        tdir.mkdir(parents=True, exist_ok=True)
        self.store.insert_trial(asked.trial_id, asked.params, str(tdir), asked.sampler_attrs)
        self.store.mark_running(asked.trial_id, 1, "localhost", None, None, None)
        return asked.trial_id

    def start(self) -> None:
        """What a driver does first (hpsearch.driver.recovery): the search rebuilt from the
        store, then the policies' own recovery."""
        trials = self.store.trials()
        self.search.rebuild(trials, self.store.experiment().study_attrs,
                            self.policies.extent.warm_trials())
        self.policies.extent.recover(trials)
        self.policies.checkpoints.recover()

    def restart(self) -> None:
        """A resumed driver: a new search and new policies from the same spec, over the
        store as it is now (fail-fast counts from here), then start()."""
        self.search = make_search(self.spec.search, self.spec.objectives)
        self.policies = policies(self.spec, self.store, self.executor, self.search,
                                 self.events.append)
        self.start()

    def close(self) -> None:
        self.executor.close()
        self.store.close()


def experiment(folder: Path, spec_text: str) -> Experiment:
    """The experiment of `spec_text` (YAML), with its runs under folder/runs."""
    path = folder / "spec.yaml"
    path.write_text(textwrap.dedent(spec_text).lstrip())
    spec, exists = new_experiment(path, folder / "runs", None, resume_existing=False)
    assert not exists
    store = create_store(spec, spec.search.trials)
    search = make_search(spec.search, spec.objectives)
    executor = make_executor(spec, store)
    events: list[str] = []
    made = Experiment(spec, store, search, executor,
                      policies(spec, store, executor, search, events.append), events)
    made.start()
    return made
