"""A trial in flight as the driver knows it, and reading on in what it writes.

The driver keeps one LiveTrial per trial in flight: where reading its files stopped, the
last value of each metric, the checkpoints seen. LiveTrials.ingest reads what is new and
stores it, with where reading stopped and what the pruner made of it, in one commit, so a
resumed driver reads on from there and its pruner decides as this one did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.driver import retry
from hpsearch.executors.base import Ended
from hpsearch.ingest.checkpoints import CheckpointScan
from hpsearch.ingest.first_call import first_call
from hpsearch.ingest.gpu_samples import GpuSamples
from hpsearch.ingest.resume_check import KIND, SOURCE, ResumeCheck
from hpsearch.ingest.timing_lines import TimingFiles
from hpsearch.ingest.trial_files import TrialFiles, objective_values
from hpsearch.store.store import Store

if TYPE_CHECKING:
    from hpsearch.driver.checkpoint_keeper import CheckpointKeeper
    from hpsearch.ingest.output_watch import OutputWatch
    from hpsearch.pruning.stopper import Stopper
    from hpsearch.spec.model import FailureClass


@dataclass
class LiveTrial:
    """The driver's memory of a trial in flight (rebuilt from store and files on resume)."""

    trial_id: int
    attempt: int
    trial_dir: Path
    files: TrialFiles
    last: dict[str, tuple[int, float]] = field(default_factory=dict)  # metric -> (step, value)
    ckpts: CheckpointScan = field(init=False)
    gpu: GpuSamples = field(init=False)  # its GPU samplers' files (docs/gpu.md)
    timing: TimingFiles = field(init=False)  # its ranks' step timings (docs/scaling.md)
    adopted: bool = False  # in flight when this driver began: it may have ended unseen
    stale: set[int] = field(default_factory=set)  # other attempts whose reports were refused
    resume: ResumeCheck = field(default_factory=ResumeCheck)  # did a later attempt resume?
    startup_of: int = 0  # the attempt whose start-up is stored (or whose file was refused)

    def __post_init__(self) -> None:
        self.ckpts = CheckpointScan(self.trial_dir)
        self.gpu = GpuSamples(self.trial_dir)
        self.timing = TimingFiles(self.trial_dir)

    def verdict(self, ended: Ended, metrics: list[str],
                measure: Callable[[set[str]], dict[str, float]] | None = None
                ) -> tuple[list[float] | None, str | None, FailureClass | None]:
        """What an end means: (objective values, error, failure class). A clean exit
        without the objective is a failure of its own class (no_objective). measure: given
        the names the trial reported, the cost metrics the driver measured (hpsearch.driver
        .cost); they take the place of any report of the same name."""
        if ended.reason == "exited" and ended.exit_code == 0:
            last = {name: value for name, (step, value) in self.last.items()}
            result = self.files.result()
            if ended.stopped_as and not result:  # stopped from outside before its result:
                # its last report is where it was, not its end (a shell trial's `trap exit
                # TERM` between two commands exits 0); it runs again from its checkpoint
                return None, f"stopped before its result; {ended.detail}", ended.stopped_as
            if measure is not None:
                measured = measure(set(last) | set(result or ()))
                last.update(measured)
                result = {k: v for k, v in (result or {}).items() if k not in measured}
            values, error = objective_values(result, last, metrics)
            if error and ended.stopped_as:  # stopped from outside: not the trial's failure
                return None, f"{error}; {ended.detail}", ended.stopped_as
            return values, error, "no_objective" if error else None
        if ended.reason == "exited":
            error = f"exit code {ended.exit_code}" + (f" ({ended.detail})" if ended.detail
                                                      else "")
        else:  # timeout, launch error, lost, or a scheduler's end (out of memory, node failure)
            error = ended.detail or ended.reason
        return None, error, retry.classify(ended)


class LiveTrials:
    """Opens LiveTrials where the store says reading stopped, and ingests what they wrote."""

    def __init__(self, store: Store, metric: str, checkpoints: CheckpointKeeper,
                 stopper: Stopper | None, on_event: Callable[[str], None],
                 watch: OutputWatch | None = None, reading: tuple[str, float] = ("", 0.0),
                 ) -> None:
        """metric: the first objective's, whose value each checkpoint is given. watch:
        where given, the trials passed to watch() are read the moment they report.
        reading: with a pruner, why they are read so or not (open_watch's words), and the
        driver's interval between reads of every trial; said once, here."""
        self.store, self.metric, self.checkpoints = store, metric, checkpoints
        self.stopper, self.on_event, self.output_watch = stopper, on_event, watch
        why, interval = reading
        if why:
            how = "as they are written" if watch else f"every {interval:g} s"
            on_event(f"early stopping: trial reports are read {how} ({why})")

    def open(self, trial_id: int, attempt: int, trial_dir: Path, watch: bool = False
             ) -> LiveTrial:
        """A trial's in-flight memory: its files are read on from where the store says
        reading stopped (earlier attempts, a killed driver), its last values come from it.
        watch: its trial dir exists (an adopted trial): watch() it now."""
        saved = self.store.reads(trial_id)
        live = LiveTrial(trial_id, attempt, trial_dir, TrialFiles(trial_dir, saved.get("files")),
                         self.store.last_metrics(trial_id))
        manifest = saved.get("manifest")
        live.ckpts = CheckpointScan(trial_dir, manifest if isinstance(manifest, dict) else None)
        live.gpu = GpuSamples(trial_dir, saved.get("gpu"))
        live.timing = TimingFiles(trial_dir, saved.get("timing"))
        live.resume = ResumeCheck(saved.get(SOURCE))
        if watch:
            self.watch(live)
        return live

    def reported(self, live: dict[int, LiveTrial]) -> None:
        """With a watch (the executor's poll() wakes for it): read now the trials in flight
        (`live`) that just wrote a report, and tell at once those the pruner rejected, not
        at the driver's next read of every trial."""
        if self.output_watch is None:
            return
        reported = [live[tid] for tid in sorted(self.output_watch.changed()) if tid in live]
        steps = {trial.trial_id: self.ingest(trial) for trial in reported}
        if reported:
            self.tell_stops(live)
        for trial in reported:  # the others go on: their should_stop() waits for that
            step = steps[trial.trial_id]
            if self.stopper and step is not None:
                self.stopper.go_on(trial.trial_dir, trial.trial_id, trial.attempt, step)

    def ingest_all(self, live: dict[int, LiveTrial]) -> None:
        """The driver's read of every trial in flight (`live`), every INGEST_INTERVAL: then
        the trials whose stop it committed are told, and the watches follow `live`."""
        for trial in list(live.values()):
            self.ingest(trial)
        self.tell_stops(live)
        if self.output_watch:
            self.output_watch.follow({tid: trial.trial_dir for tid, trial in live.items()})

    def tell_stops(self, live: dict[int, LiveTrial]) -> None:
        """Tell the trials whose stop the last ingests committed (Stopper.tell)."""
        if self.stopper and self.stopper.untold:
            self.stopper.tell({tid: trial.trial_dir for tid, trial in live.items()})

    def close(self) -> None:
        if self.output_watch:
            self.output_watch.close()

    def watch(self, live: LiveTrial) -> None:
        """Read `live` the moment it reports, where there is a watch: call it once its
        trial dir exists (the executor makes it when the attempt is submitted)."""
        if self.output_watch:
            self.output_watch.add(live.trial_id, live.trial_dir)

    def ingest(self, live: LiveTrial, final: bool = False) -> int | None:
        """Read what `live` wrote since the last read, and store it (one commit); the
        highest step of its new reports, or None."""
        records = credited(live, live.files.read_new(final=final))
        restarted = self._restarted(live, records)
        found = live.ckpts.new()
        gpu = live.gpu.read_new(final=final)
        timing = live.timing.read_new(final=final)
        first, refused = ((None, None) if live.startup_of == live.attempt
                          else first_call(live.trial_dir, live.attempt))
        if refused:  # told once; its start-up stays unknown (none is left out of its cost)
            live.startup_of = live.attempt
            live.files.warnings.append(refused)
        warnings = (live.files.warnings + live.ckpts.warnings + live.gpu.refused
                    + live.timing.warnings)
        for said in (live.files.warnings, live.ckpts.warnings, live.gpu.refused,
                     live.timing.warnings):
            said.clear()
        # records, GPU samples, warnings, where reading stopped and what the pruner made of
        # the records: one commit, so resume reads on from there and the pruner decides as
        # it did
        with self.store.batch():
            self.store.add_output(live.trial_id, live.attempt, records, warnings,
                                  {"files": live.files.unsaved(),
                                   "manifest": live.ckpts.unsaved(),
                                   "gpu": live.gpu.unsaved(),
                                   "timing": live.timing.unsaved(),
                                   SOURCE: live.resume.unsaved()})
            if restarted:
                self.store.add_event(KIND, restarted, live.trial_id)
            self.store.add_gpu_use(live.trial_id, gpu)
            self.store.add_rank_timing(live.trial_id, timing)
            if first is not None and self.store.set_startup(live.trial_id, live.attempt, first):
                live.startup_of = live.attempt  # else its start is not stored yet: again later
            if self.stopper:
                self.stopper.observe(live.trial_id, records)
        for rec in records:
            for name, value in rec.items():
                if name not in ("step", "time"):
                    if name not in live.last or rec["step"] >= live.last[name][0]:
                        live.last[name] = (rec["step"], value)
        if found:
            self.store.add_checkpoints(live.trial_id, live.attempt, found)
        if live.ckpts.seen and (records or found):
            self.store.fill_checkpoint_metrics(live.trial_id, self.metric, exact=True)
        if found and not final:
            self.checkpoints.remove(self.checkpoints.mark(live.trial_id))
        for warning in warnings + ([restarted] if restarted else []):
            self.on_event(f"trial {live.trial_id}: {warning}")
        return max((rec["step"] for rec in records), default=None)

    def _restarted(self, live: LiveTrial, records: list[dict]) -> str | None:
        """The warning, once per attempt, that `live`'s attempt began below the step of the
        latest checkpoint its earlier attempts saved (hpsearch.ingest.resume_check)."""
        if not records or not live.resume.due(live.attempt):
            return None
        held = [step for attempt, step in self.store.checkpoint_steps(live.trial_id).items()
                if attempt < live.attempt and step is not None]
        return live.resume.check(live.attempt, records[0]["step"], max(held, default=None))


def credited(live: LiveTrial, records: list[dict]) -> list[dict]:
    """The records of `live`'s attempt, without their `attempt`: a report that names
    another attempt is not counted (metrics.jsonl outlives attempts, and a process of an
    earlier one may still write to it after the retry began), and the trial's events say so
    once per attempt. A report that names none (a trial in another language that does not
    say) is the live attempt's."""
    mine = []
    for rec in records:
        wrote = rec.pop("attempt", live.attempt)
        if wrote == live.attempt:
            mine.append(rec)
        elif wrote not in live.stale:
            live.stale.add(wrote)
            live.files.warnings.append(
                f"reports written by attempt {wrote} while attempt {live.attempt} runs are "
                f"not counted (first: step {rec['step']}); is a process of attempt {wrote} "
                "still running?")
    return mine
