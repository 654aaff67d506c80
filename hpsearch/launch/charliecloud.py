"""`runtime: charliecloud`: `ch-run -b SRC:DST ... -c DIR IMAGE -- CMD`.

ch-run passes the host environment through (it only unsets TMPDIR and sets CH_RUNNING), so
HPSEARCH_* and the rank variables need no flags; it needs $USER, which the script sets if
unset. Each bind's destination must exist in the image (ch-run 0.31 makes none in a read-only
image; newer ones do with --write-fake): see containers/README.md. ch-run binds take no
options (no `:ro`). GPUs need the NVIDIA libraries injected into the image (ch-fromhost
--nvidia). tests/test_charliecloud.py runs trials in an image for real.
"""

from __future__ import annotations

from hpsearch.launch.base import ContainerRuntime, LaunchError, RankLayout, merged_binds


class CharliecloudRuntime(ContainerRuntime):
    name = "charliecloud"
    program = "ch-run"

    def setup_lines(self) -> list[str]:
        # ch-run refuses to start without $USER, which a container or cron may not set.
        return ['export USER="${USER:-$(id -un)}"']

    def wrap(self, argv: list[str], layout: RankLayout) -> list[str]:
        binds = []
        for b in merged_binds(self.binds, layout):
            if b.opts:
                raise LaunchError(f"container.binds: {b.spec()!r}: ch-run binds take no "
                                  "options; write src or src:dst")
            binds += ["-b", f"{b.src}:{b.dst}"]
        return [self.program, *binds, *(["-c", layout.workdir] if layout.workdir else []),
                *self.args, self.image, "--", *argv]
