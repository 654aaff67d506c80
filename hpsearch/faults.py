"""Fault injection for crash-safety tests: kill the driver at a named point.

HPSEARCH_FAULT="after_launch:3" makes the driver SIGKILL itself the 3rd time it passes
`fault_point("after_launch")`. Unset (always, outside tests) it costs one dict lookup.
Points: after_insert (trial stored, not launched), after_launch (process started, pid not
stored), after_running (pid stored), mid_ingest (final metrics read, outcome not committed),
after_finish (end recorded, sampler told), before_requeue (Slurm requeued a job: seen, not
recorded), after_stop_request (a trial's early stop written, the trial not told yet),
after_promotion (a paused trial's next segment written, not launched), after_pbt_stage (a pbt
donor's checkpoint copied into a member's folder, the decision not stored), after_pbt_swap
(that checkpoint put in place, the member's next segment not stored), after_retry_stored
(a retry's attempt written, not launched),
mid_migration (a store schema migration applied, not committed; any process that
opens the store read-write passes it once per pending migration).
"""

from __future__ import annotations

import os
import signal

_spec = os.environ.get("HPSEARCH_FAULT", "")
_target, _, _count = _spec.partition(":")
_remaining = {_target: int(_count or 1)} if _target else {}


def fault_point(name: str) -> None:
    if name in _remaining:
        _remaining[name] -= 1
        if _remaining[name] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
