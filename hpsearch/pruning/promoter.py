"""What the driver does in promotion mode (search.pruner.mode: promotion), kept out of its loop.

Every attempt of a trial is a segment with a rung and a step budget (HPSEARCH_BUDGET), stored
with the attempt before it is launched. A segment that ends well below the last rung pauses
the trial there (state `paused`, its rung value in pruner_attrs); the Promotion policy picks
which paused trial goes on, and a promotion is a new attempt, written ahead like any other, so
a driver killed between a rung decision and the next segment resumes with both intact.
`hpsearch finish` asks for paused trials to go straight to the last rung (request_finish):
they go before any other promotion, the same way (hpsearch.pruning.finishing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hpsearch.faults import fault_point
from hpsearch.pruning.finishing import FINISH
from hpsearch.pruning.promotion import Promotion, Segment
from hpsearch.store import rows

if TYPE_CHECKING:
    from hpsearch.executors.base import Ended
    from hpsearch.search.base import Search
    from hpsearch.spec.model import Objective, Pruner, Spec
    from hpsearch.store.store import Store


class Segments(Protocol):
    """What the driver's loop asks of whatever runs trials in segments: the Promoter below
    (search.pruner.mode: promotion), or a strategy's own (pbt: hpsearch.pruning.pbt)."""

    def recover(self, trials: list[rows.TrialRow]) -> None: ...
    def env(self, segment: Segment) -> dict[str, str]: ...
    def first(self, trial_id: int) -> Segment: ...
    def again(self, trial_id: int, attempt: int) -> Segment: ...
    def promote(self, end_game: bool, rotate_logs: Callable[[Path, int], None]
                ) -> tuple[Segment, int] | None: ...
    def paused(self, ended: Ended, last: tuple[int, float] | None) -> bool: ...
    def finished(self, trial_id: int) -> None: ...
    def request_finish(self, request_id: str, trial_ids: list[int],
                       done: Callable[[], None]) -> None: ...


@dataclass
class _FinishRequest:
    id: str
    trials: list[int]            # those not yet sent on or skipped, in the order asked
    done: Callable[[], None]     # removes the request (called once all are written ahead)


class Promoter:
    def __init__(self, pruner: Pruner, objective: Objective, study_name: str, store: Store,
                 search: Search, on_event: Callable[[str], None]) -> None:
        self.policy = Promotion(pruner, objective.direction, study_name)
        self.metric = objective.metric
        self.store, self.search, self.on_event = store, search, on_event
        self.finishing: list[_FinishRequest] = []  # `hpsearch finish` requests, oldest first
        self.sent: dict[int, dict] = {}  # trial id -> its FINISH mark (pruner attrs)

    @classmethod
    def from_spec(cls, spec: Spec, store: Store, search: Search,
                  on_event: Callable[[str], None]) -> Promoter:
        return cls(spec.search.pruner, spec.objectives[0], f"hpsearch-{spec.name}", store,
                   search, on_event)

    def recover(self, trials: list[rows.TrialRow]) -> None:
        for row in trials:
            attrs = row.pruner_attrs
            if isinstance(attrs.get(FINISH), dict):
                self.sent[row.id] = attrs[FINISH]
            rungs = {int(k): v for k, v in attrs.get("rungs", {}).items()}
            self.policy.load(row.id, int(attrs.get("rung", 0)), rungs, row.state == rows.PAUSED,
                             attrs.get("step"))
            if row.state == rows.COMPLETED:
                self.policy.completed(row.id)

    def env(self, segment: Segment) -> dict[str, str]:
        return {"HPSEARCH_BUDGET": str(segment.budget), "HPSEARCH_RUNG": str(segment.rung)}

    def first(self, trial_id: int) -> Segment:
        """A new trial's first segment (stored with its attempt 1 by the caller's commit)."""
        segment = self.policy.first(trial_id)
        self._save(trial_id, 1, segment)
        return segment

    def again(self, trial_id: int, attempt: int) -> Segment:
        """The segment a retried (or re-launched) attempt runs: its rung's, again."""
        segment = self.policy.segment(trial_id)
        self._save(trial_id, attempt, segment)
        return segment

    def promote(self, end_game: bool, rotate_logs: Callable[[Path, int], None]
                ) -> tuple[Segment, int] | None:
        """The next promotion, written ahead: (its segment, its attempt number). The last
        segment's logs and exit_code are set aside first (rotate_logs), so that a driver
        killed before the launch never takes them for the new segment's."""
        segment = self._next_finish() or self.policy.promote(end_game)
        if segment is None:
            return None
        row = self.store.trial(segment.trial_id)
        attempt = row.attempt + 1
        rotate_logs(Path(row.trial_dir), row.attempt)
        with self.store.batch():
            self.store.begin_attempt(segment.trial_id, attempt, segment.why)
            self._save(segment.trial_id, attempt, segment)
        fault_point("after_promotion")
        self.on_event(f"trial {segment.trial_id} {segment.why}: runs to step budget "
                      f"{segment.budget}")
        return segment, attempt

    def paused(self, ended: Ended, last: tuple[int, float] | None) -> bool:
        """A segment ended well (exit 0, objective found). True if it paused the trial at a
        rung below the last (recorded here, as `paused`); False if the trial completed (the
        last rung, or it ended before its budget on its own): the driver records that."""
        tid = ended.trial_id
        if last is None:
            return False
        step, value = last
        rung = self.policy.rung_reached(tid, step + 1)
        if rung < 0:
            return False
        budget = self.policy.segment(tid).budget  # what this segment was asked to run
        short = step + 1 < budget  # it stopped on its own: it has no more steps to give
        top = short or self.policy.is_top(tid, rung)
        self.policy.record(tid, rung, value, paused=not top, step=step)
        with self.store.batch():
            self.store.set_pruner_attrs(tid, self._attrs(tid))
            if short:
                self.policy.completed(tid)
                self.on_event(f"trial {tid} ended at step {step} of its budget {budget} on "
                              "its own: it completes there (its command runs fewer steps "
                              "than the rung asks; `hpsearch validate` warns of it)")
            if top:
                return False
            attrs = self.search.tell(tid, rows.PRUNED, None, intermediate={step: value})
            self.store.finish_attempt(tid, ended.attempt, rows.PAUSED, ended.exit_code,
                                      f"paused at rung {rung} (step {step}, value "
                                      f"{value:.6g})", sampler_attrs=attrs)
        self.on_event(f"trial {tid} paused at rung {rung}: step {step}, {self.metric}="
                      f"{value:.6g}")
        return True

    def finished(self, trial_id: int) -> None:
        self.policy.finished(trial_id)

    def request_finish(self, request_id: str, trial_ids: list[int],
                       done: Callable[[], None]) -> None:
        """`hpsearch finish`: send these trials, if still paused, to the last rung before any
        other promotion; `done` once each is written ahead (or skipped). A request seen
        again (its file stays until then) is taken once."""
        if all(f.id != request_id for f in self.finishing):
            self.finishing.append(_FinishRequest(request_id, list(trial_ids), done))

    def _next_finish(self) -> Segment | None:
        """The next trial a finish request sends on. A request is done once a later call
        finds it empty: its last trial's segment has been committed by then."""
        while self.finishing:
            request = self.finishing[0]
            while request.trials:
                tid = request.trials.pop(0)
                t = self.policy.trials.get(tid)
                if tid in self.sent:  # an earlier request sent it (idempotent)
                    continue
                if t is None or not t.paused:
                    what = "there is no such trial" if t is None else \
                        f"it is {self.store.trial(tid).state}, not paused at a rung"
                    message = f"hpsearch finish: trial {tid} not finished: {what}"
                    self.store.add_event("warning", message, tid if t else None)
                    self.on_event(message)
                    continue
                rung, value = t.rung, t.values[t.rung]
                self.sent[tid] = {"rung": rung, "value": value, "request": request.id}
                return self.policy.finish(tid, f"finished by `hpsearch finish` from rung "
                                               f"{rung} (value {value:.6g})")
            self.finishing.pop(0)
            request.done()
        return None

    def _save(self, trial_id: int, attempt: int, segment: Segment) -> None:
        with self.store.batch():
            self.store.set_segment(trial_id, attempt, segment.rung, segment.budget)
            self.store.set_pruner_attrs(trial_id, self._attrs(trial_id))

    def _attrs(self, trial_id: int) -> dict:
        """What the store keeps: the rung of its current segment, its value at each rung
        reached, and the step of the last one (the sampler ranks a paused trial by it)."""
        t = self.policy.trials[trial_id]
        mark = {FINISH: self.sent[trial_id]} if trial_id in self.sent else {}
        return {"rung": t.rung, "rungs": {str(k): v for k, v in sorted(t.values.items())},
                "step": t.step, **mark}
