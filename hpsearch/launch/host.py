"""`container: {runtime: none}` (the default): ranks run on the host as they are."""

from __future__ import annotations

from hpsearch.launch.base import ContainerRuntime, RankLayout


class HostRuntime(ContainerRuntime):
    name = "none"
    uses_image = False

    def wrap(self, argv: list[str], layout: RankLayout) -> list[str]:
        return list(argv)
