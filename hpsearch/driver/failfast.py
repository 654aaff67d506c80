"""Fail fast: stop a search whose trials keep failing (`search.max_failures`).

A search whose command cannot start (a missing module, a wrong path, a bad container) fails
every trial the same way; without a limit it spends its whole budget, and a cluster's queue,
on that one error. Judged after each trial that failed for good (its retries spent), from the
store's counts: `first` failures since the driver started with no completion since, or more
than `fraction` of the finished trials failed. The message names the most common cause.

A trial whose command could not start (`launch_error`: not found, not executable, no such
folder) counts at that first attempt, its retry left queued: the same launch error on `first`
different trials is the command's, not a node's, and retrying each of them first spent
(retries + 1) x `first` launches on it (issue 38: 24 launches for a typo).
"""

from __future__ import annotations

from collections import Counter

from hpsearch.ingest.outcome import cause, same_cause
from hpsearch.spec.model import MaxFailures
from hpsearch.store import rows

MIN_FINISHED = 5  # a fraction is judged once this many trials finished, if `first` is 0


class FailFast:
    def __init__(self, rule: MaxFailures | None, name: str, counts: dict[str, int]) -> None:
        """rule: the spec's search.max_failures; name: the experiment's (for `resume`);
        `counts`: the store's trial counts by state when the driver starts."""
        self.rule, self.name = rule, name
        self.completed0, self.failed0 = counts.get(rows.COMPLETED, 0), counts.get(rows.FAILED, 0)
        self.unstarted: dict[int, str] = {}  # trial -> its launch error, its retry queued

    def after_failure(self, store, trial_id: int, launch_error: str | None = None
                      ) -> str | None:
        """After trial `trial_id` failed for good, or (`launch_error`: its error) could not
        start and is queued for a retry: why the search stops (recorded as a `max_failures`
        event), or None to go on."""
        if launch_error is not None:
            self.unstarted[trial_id] = launch_error
        else:
            self.unstarted.pop(trial_id, None)  # counted in the store's failed trials now
        why = self.judge(store.state_counts(), lambda: store.trials([rows.FAILED]))
        if why:
            store.add_event("max_failures", why)
        return why

    def judge(self, counts: dict[str, int], failed) -> str | None:
        """After a trial failed for good: why the search stops, or None to go on.
        `counts`: the store's counts now; `failed()`: its failed trials (read only when the
        search stops, to name the common cause)."""
        rule = self.rule
        if rule is None:  # no search.max_failures: never stop
            return None
        completed, failures = counts.get(rows.COMPLETED, 0), counts.get(rows.FAILED, 0)
        finished = completed + failures + counts.get(rows.PRUNED, 0)
        unstarted = len(self.unstarted)
        if rule.first and completed == self.completed0 \
                and failures - self.failed0 + unstarted >= rule.first:
            queued = (f" ({unstarted} could not start; their retries are left queued)"
                      if unstarted else "")
            why = (f"{failures - self.failed0 + unstarted} trials failed{queued} and none "
                   f"completed since the driver started (search.max_failures.first: "
                   f"{rule.first})")
        elif rule.fraction is not None and finished >= (rule.first or MIN_FINISHED) \
                and failures > rule.fraction * finished:
            why = (f"{failures} of {finished} finished trials failed, more than "
                   f"search.max_failures.fraction {rule.fraction:g}")
        else:
            return None
        errors = [t.error for t in failed() if t.error] + list(self.unstarted.values())
        causes = Counter(cause(same_cause(error)) for error in errors)
        common = ""
        if causes:
            text, n = causes.most_common(1)[0]
            common = f"; most common cause ({n} of {sum(causes.values())}): {text}"
        return (f"search stopped: {why}{common}. Fix the cause and continue with: "
                f"hpsearch resume {self.name} (add --spec FILE if the fix is in the spec)")
