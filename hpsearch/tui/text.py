"""Plain-text pieces that `hpsearch status` and the live view both print (no rich here)."""

from __future__ import annotations

from hpsearch.store import rows
from hpsearch.store.site_speeds import Speed
from hpsearch.views.pilots import PilotLine


def format_duration(seconds: float | None) -> str:
    """42.0s, 3m05s, 2h07m; "" for None."""
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_speed(speed: Speed | None) -> str:
    """A site's trial speed (hpsearch.store.site_speeds.Speed): "0.512s/step"; "" for None."""
    return "" if speed is None else f"{speed.seconds_per_step:.3g}s/step"


def pilot_age(line: PilotLine) -> str:
    """"up 3m05s" (running), "waits 12.0s" (submitted, not running yet), "held 5m00s"
    (ended: how long it held its nodes) or "never ran"."""
    if line.state in (rows.PILOT_SUBMITTING, rows.PILOT_PENDING):
        return f"waits {format_duration(line.age)}"
    if not line.live:
        return f"held {format_duration(line.age)}" if line.age > 0 else "never ran"
    return f"up {format_duration(line.age)}"


def pilot_left(line: PilotLine) -> str:
    """Time left of its limit ("4m48s left"), "" where not known."""
    return "" if line.remaining is None else f"{format_duration(line.remaining)} left"


def pilot_trials(line: PilotLine) -> str:
    return " ".join(f"#{t}" for t in line.trials)


def pilot_where(line: PilotLine) -> str:
    """Its nodes and the leaf switch(es) they are under: "node[1-2] [leaf1]"."""
    if not line.nodes:
        return ""
    if not line.leaves:
        return line.nodes
    span = line.leaves[0] if len(line.leaves) == 1 else \
        f"{len(line.leaves)} leaves: {','.join(line.leaves)}"
    return f"{line.nodes} [{span}]"
