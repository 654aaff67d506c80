"""Population-based training on the driver's side (`search.strategy: pbt`): each trial is a
member of the population, each attempt a segment of `perturbation_interval` reported steps.

The decisions are hpsearch.search.pbt_policy's; this module writes each one ahead and acts
on it, asked by the driver's loop exactly as the promoter of promotion mode is
(hpsearch.pruning.promoter.Segments):
- first/again: a member's first segment, or the same segment again (a retry);
- paused: a segment ended at its boundary. The policy decides (continue, or exploit a top
  member and explore its parameters); an exploit's checkpoint is staged into the member's
  folder (hpsearch.pruning.pbt_checkpoints) and the decision is stored with the pause, in
  one commit. A member at max_resource completes;
- promote: a free slot runs the paused member with the least progress (Ray's order), once
  every member has started: the staged checkpoint swapped in, then its next attempt, new
  parameters and their place in the schedule in one commit (write-ahead of the launch).

A driver killed anywhere resumes from the store: a decision stored is acted on once (its
pause is there, or its attempt has begun), a decision not stored is made again from the same
state, with the same seeded draws.

What the store keeps per member (pruner_attrs["pbt"]): its last boundary (step, score), its
segment number, its schedule (the parameters from each segment on, and the step that
segment starts at: an exploit of a donor behind goes back in steps), its lineage (whose
checkpoint it took at which boundary) and the decision waiting for its next segment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hpsearch.faults import fault_point
from hpsearch.pruning import pbt_checkpoints as files
from hpsearch.pruning.promotion import Segment
from hpsearch.registry import load
from hpsearch.search.pbt_policy import (
    Boundary,
    Decision,
    Explorer,
    Member,
    PbtSettings,
    Population,
    next_to_run,
)
from hpsearch.search.registry import strategy
from hpsearch.store import rows

if TYPE_CHECKING:
    from hpsearch.executors.base import Ended
    from hpsearch.search.base import Search
    from hpsearch.spec.model import Spec
    from hpsearch.store.store import Store

KEY = "pbt"


def settings_of(spec: Spec) -> PbtSettings:
    """The policy's settings from the spec's `search:` (its pbt options)."""
    search = spec.search
    mutations = tuple(search.option("mutations")) or tuple(p.name for p in search.tuned)
    return PbtSettings(interval=search.option("perturbation_interval"),
                       max_resource=search.option("max_resource"), mutations=mutations,
                       maximize=spec.objectives[0].direction == "maximize",
                       burn_in=search.option("burn_in_period"),
                       quantile=search.option("quantile_fraction"),
                       resample_probability=search.option("resample_probability"),
                       factors=tuple(search.option("perturbation_factors")), seed=search.seed,
                       replay=tuple((piece["from_step"], piece["params"])
                                    for piece in search.option("replay")))


class PbtSegments:
    def __init__(self, settings: PbtSettings, spec: Spec, store: Store, search: Search,
                 on_event: Callable[[str], None]) -> None:
        self.population = Population(settings, spec.search.space)
        explorer = strategy(spec.search.strategy).explorer  # pb2's GP-bandit; pbt's own
        if explorer is not None:
            self.population.explorer = cast("Explorer", load(explorer))
        self.metric = spec.objectives[0].metric
        self.store, self.search, self.on_event = store, search, on_event
        self.state: dict[int, dict[str, Any]] = {}  # member -> its pruner_attrs["pbt"]
        self.waiting: list[int] = []                # paused members

    @classmethod
    def from_spec(cls, spec: Spec, store: Store, search: Search,
                  on_event: Callable[[str], None]) -> PbtSegments:
        return cls(settings_of(spec), spec, store, search, on_event)

    # -- resume ----------------------------------------------------------------------------
    def recover(self, trials: list[rows.TrialRow]) -> None:
        for row in trials:
            state = row.pruner_attrs.get(KEY)
            if not isinstance(state, dict):
                continue
            self.state[row.id] = state
            pending = state.get("pending") or {}  # decided, its segment not begun: the
            params = pending.get("params", row.params)  # trial's parameters are still its last
            self.population.members[row.id] = Member(
                dict(params), state.get("step"), state.get("score"),
                bool(state.get("done")) or row.state in rows.FINISHED)
            if row.state == rows.PAUSED:
                self.waiting.append(row.id)
            self.population.history += [Boundary(row.id, b[0], b[1], b[2], b[3])
                                        for b in state.get("boundaries", [])]

    # -- segments --------------------------------------------------------------------------
    def env(self, segment: Segment) -> dict[str, str]:
        return {"HPSEARCH_BUDGET": str(segment.budget), "HPSEARCH_RUNG": str(segment.rung)}

    def first(self, trial_id: int) -> Segment:
        """A new member's first segment (stored with its attempt 1 by the caller's commit)."""
        params = self.store.trial(trial_id).params
        self.population.add(trial_id, params)
        self.state[trial_id] = {"step": None, "score": None, "done": False, "segment": 0,
                                "schedule": [{"segment": 0, "from_step": 0,
                                              "params": params}],
                                "lineage": [], "pending": None}
        return self._save(trial_id, 1, "")

    def again(self, trial_id: int, attempt: int) -> Segment:
        """The segment a retried (or re-launched) attempt runs: the same again."""
        return self._save(trial_id, attempt, "")

    def paused(self, ended: Ended, last: tuple[int, float] | None) -> bool:
        """A segment ended well. True if the member paused at its boundary with its next
        decision stored; False if it completes (max_resource, or its command ended before
        its budget): the driver records that."""
        tid = ended.trial_id
        if last is None:
            return False
        step, value = last
        budget = self.population.budget(tid)
        state = self.state[tid]
        short = step + 1 < budget
        done = short or self.population.reached(tid, step, value)
        if not short:  # what pb2 learns from, kept to rebuild after a resume
            b = self.population.history[-1]
            state.setdefault("boundaries", []).append([b.step, b.score, b.before, b.params])
        if done:
            self.population.members[tid].done = True
            state.update(step=step, score=value, done=True)
            self.store.set_pruner_attrs(tid, self._attrs(tid))
            if short:
                self.on_event(f"trial {tid} ended at step {step} of its budget {budget} on "
                              "its own: it completes there")
            return False
        decision = self._staged(tid, self.population.decide(tid))
        self.population.apply(decision)
        member = self.population.members[tid]
        order = 1 + max((int(s.get("paused", 0)) for s in self.state.values()), default=0)
        state.update(step=member.step, score=member.score, pending=_json(decision),
                     paused=order)  # promote(): of equal progress, the first paused first
        if decision.exploits:
            state["lineage"].append({"at_step": step, "donor": decision.donor,
                                     "donor_step": decision.donor_step})
        if decision.exploits or decision.params != _last_params(state):
            entry = {"segment": int(state.get("segment", 0)) + 1,
                     "from_step": (member.step or 0) + 1, "params": decision.params}
            if decision.exploits:  # the donor's history up to its checkpoint comes first
                donor = self.state[decision.donor]["schedule"]  # type: ignore[index]
                entry.update(donor=decision.donor, donor_step=decision.donor_step,
                             donor_segment=donor[-1]["segment"])
            state["schedule"].append(entry)
        with self.store.batch():
            self.store.set_pruner_attrs(tid, self._attrs(tid))
            self.store.finish_attempt(tid, ended.attempt, rows.PAUSED, ended.exit_code,
                                      f"paused at step {step} ({self.metric}={value:.6g}): "
                                      + self._told(decision))
        self.waiting.append(tid)
        self.on_event(f"trial {tid} at step {step} ({self.metric}={value:.6g}): "
                      + self._told(decision))
        return True

    def promote(self, end_game: bool, rotate_logs: Callable[[Path, int], None]
                ) -> tuple[Segment, int] | None:
        """The next segment of a paused member, written ahead: (segment, attempt). None
        while a member has yet to start (new members first) or none is paused."""
        if self.search.asked < self.search.total or not self.waiting:
            return None
        members = self.population.members
        tid = next_to_run(self.waiting, {t: members[t].step for t in self.waiting},
                          {t: int(self.state[t].get("paused", 0)) for t in self.waiting})
        self.waiting.remove(tid)
        row, state = self.store.trial(tid), self.state[tid]
        pending = state.get("pending") or {}
        trial_dir = Path(row.trial_dir)
        if pending.get("checkpoint"):
            files.swap(trial_dir, pending["checkpoint"], int(pending["donor_step"]))
            fault_point("after_pbt_swap")
        rotate_logs(trial_dir, row.attempt)
        attempt = row.attempt + 1
        state.update(pending=None, segment=int(state.get("segment", 0)) + 1)
        why = f"pbt segment {state['segment']}" + (
            f" from trial {pending['donor']}'s checkpoint at step {pending['donor_step']}"
            if pending.get("donor") is not None else "")
        with self.store.batch():
            self.store.begin_attempt(tid, attempt, why)
            self.store.set_params(tid, members[tid].params)
            if pending.get("checkpoint"):
                self._set_aside(tid, trial_dir / "checkpoints" / pending["checkpoint"],
                                int(pending["donor_step"]))
            segment = self._save(tid, attempt, why)
        files.clear_old(trial_dir)
        fault_point("after_promotion")
        self.on_event(f"trial {tid} {why}: runs to step budget {segment.budget}")
        return segment, attempt

    def finished(self, trial_id: int) -> None:
        """The member failed for good (or completed): no longer ranked, never run again."""
        if trial_id in self.population.members:
            self.population.members[trial_id].done = True
        if trial_id in self.waiting:
            self.waiting.remove(trial_id)

    def request_finish(self, request_id: str, trial_ids: list[int],
                       done: Callable[[], None]) -> None:
        """`hpsearch finish` is promotion mode's: pbt runs each member to max_resource."""
        message = (f"hpsearch finish: pbt runs every member to max_resource already; "
                   f"trials {', '.join(map(str, trial_ids))} are left as they are")
        self.store.add_event("warning", message)
        self.on_event(message)
        done()

    # -- helpers ---------------------------------------------------------------------------
    def _staged(self, tid: int, decision: Decision) -> Decision:
        """The decision with its donor's checkpoint copied into the member's folder; where
        the donor has none at that step any more, the member goes on as it is instead."""
        if not decision.exploits:
            return decision
        assert decision.donor is not None and decision.donor_step is not None
        source = self._donor_checkpoint(decision.donor, decision.donor_step)
        why = "it has no checkpoint of that step left" if source is None else None
        if source is not None:
            try:
                name = files.stage(source, Path(self.store.trial(tid).trial_dir))
                fault_point("after_pbt_stage")
                return dataclasses.replace(decision, checkpoint=name)
            except (OSError, ValueError) as e:
                why = str(e)
        message = (f"pbt: trial {tid} does not take trial {decision.donor}'s checkpoint of "
                   f"step {decision.donor_step}: {why}; it goes on with its own")
        self.store.add_event("warning", message, tid)
        self.on_event(message)
        own = self.population.members[tid]
        return Decision(tid, decision.at_step, dict(own.params))

    def _donor_checkpoint(self, donor: int, step: int) -> Path | None:
        """The donor's checkpoint of `step`: staged for its own next segment if it exploited
        at that boundary (not swapped in yet), else the one the store has of that step."""
        pending = self.state.get(donor, {}).get("pending") or {}
        folder = Path(self.store.trial(donor).trial_dir) / "checkpoints"
        if pending.get("checkpoint") and int(pending["donor_step"]) == step:
            return folder / (files.STAGED + pending["checkpoint"])
        found = [c for c in self.store.checkpoints(donor)
                 if c.step == step and Path(c.path).parent == folder]
        found.sort(key=lambda c: c.time or 0.0)
        return Path(found[-1].path) if found else None

    def _set_aside(self, tid: int, taken: Path, step: int) -> None:
        """The member's own checkpoints were set aside for the one it took (swap): their
        rows follow them (`checkpoints --all` lists them deleted, under their new names)."""
        renamed = {c.path: str(Path(c.path).with_name(files.OLD + Path(c.path).name))
                   for c in self.store.checkpoints(tid, include_deleted=True)
                   if Path(c.path) != taken and not Path(c.path).name.startswith(".")}
        self.store.set_aside_checkpoints(tid, renamed, str(taken), step)

    def _told(self, decision: Decision) -> str:
        return _told(decision, self.population.settings.mutations)

    def _save(self, tid: int, attempt: int, why: str) -> Segment:
        state = self.state[tid]
        segment = Segment(tid, int(state.get("segment", 0)), self.population.budget(tid), why)
        with self.store.batch():
            self.store.set_segment(tid, attempt, segment.rung, segment.budget)
            self.store.set_pruner_attrs(tid, self._attrs(tid))
        return segment

    def _attrs(self, tid: int) -> dict:
        return {KEY: self.state[tid]}


def _json(decision: Decision) -> dict:
    return {"at_step": decision.at_step, "params": decision.params, "donor": decision.donor,
            "donor_step": decision.donor_step, "resampled": list(decision.resampled),
            "checkpoint": decision.checkpoint}


def _last_params(state: dict) -> dict:
    return state["schedule"][-1]["params"] if state["schedule"] else {}


def _told(decision: Decision, mutations: tuple[str, ...]) -> str:
    """What a member does at its boundary, its mutable parameters named."""
    if not decision.exploits:
        return "goes on with its own parameters"
    changed = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in decision.params.items() if k in mutations)
    return (f"takes trial {decision.donor}'s checkpoint of step {decision.donor_step} and "
            f"goes on with {changed}" + (f" (resampled: {', '.join(decision.resampled)})"
                                         if decision.resampled else ""))
