"""A pbt member's schedule as its model lived it (`hpsearch best`, export, the Python API, the
Optuna view of an experiment):
the parameters it trained with from step 0, through the members whose checkpoints it took.

Each member's own schedule (hpsearch.pruning.pbt: pruner_attrs["pbt"]["schedule"]) starts
again from its last exploit: the steps before it were trained by the donor, under the
donor's schedule up to the donor's step (and, where the donor had itself taken a checkpoint
before that, by its donor, and so on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Piece:
    """Steps from `from_step` on (to the next piece) trained with `params` by `trial`."""

    from_step: int
    params: dict[str, Any]
    trial: int


def schedule_of(attrs: dict) -> list[dict] | None:
    """A trial's own pbt schedule from its pruner attrs, or None (not a pbt trial)."""
    state = attrs.get("pbt") if isinstance(attrs, dict) else None
    schedule = state.get("schedule") if isinstance(state, dict) else None
    return schedule if isinstance(schedule, list) and schedule else None


def lived(schedules: dict[int, list[dict]], member: int, up_to_segment: float = float("inf"),
          depth: int = 0) -> list[Piece]:
    """The pieces of `member`'s model history: `schedules` maps each trial to its own
    schedule; `up_to_segment`: its entries of later segments are left out (a donor's history
    as it stood when its checkpoint was taken)."""
    entries = [e for e in schedules.get(member, []) if e["segment"] <= up_to_segment]
    exploits = [i for i, e in enumerate(entries) if e.get("donor") is not None]
    if not exploits or depth > len(schedules):
        return [Piece(e["from_step"], e["params"], member) for e in entries]
    last = entries[exploits[-1]]
    before = [p for p in lived(schedules, last["donor"], last["donor_segment"], depth + 1)
              if p.from_step <= last["donor_step"]]
    return before + [Piece(e["from_step"], e["params"], member)
                     for e in entries[exploits[-1]:]]


def describe(pieces: list[Piece], last_step: int | None = None) -> list[str]:
    """One line a piece: `steps 0-15 (trial 2): lr=0.01 momentum=0.9`."""
    lines = []
    for i, piece in enumerate(pieces):
        end = pieces[i + 1].from_step - 1 if i + 1 < len(pieces) else last_step
        span = f"{piece.from_step}-{end}" if end is not None else f"{piece.from_step}-"
        params = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in piece.params.items())
        lines.append(f"steps {span} (trial {piece.trial}): {params}")
    return lines


def lived_all(trials: list) -> dict[int, list[Piece]]:
    """Every pbt trial's lived schedule, by trial id, from rows with pruner_attrs ({} for an
    experiment of another strategy)."""
    schedules = {t.id: s for t in trials if (s := schedule_of(t.pruner_attrs))}
    return {tid: lived(schedules, tid) for tid in schedules}


def as_json(pieces: list[Piece]) -> list[dict]:
    return [{"from_step": p.from_step, "trial": p.trial, "params": p.params} for p in pieces]
