"""docs/lightning-quickstart.md (issue 38 item 15) stays true: its spec is a real file that
`hpsearch validate` accepts, every hpsearch command in it parses as the CLI reads it, and its
links lead to files and headings that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from hpsearch.cli.main import build_parser
from tests.conftest import EXAMPLES, Cli

ROOT = EXAMPLES.parent
DOC = ROOT / "docs" / "lightning-quickstart.md"
SPEC = EXAMPLES / "lightning" / "quickstart.yaml"


def _commands(text: str) -> list[str]:
    """The hpsearch command lines of the sh blocks (comments and a trailing & left out)
    and of inline code spans with arguments."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip().removesuffix("&").strip()
            if line.startswith("hpsearch "):
                found.append(line)
    found += [span for span in re.findall(r"`(hpsearch [^`]+)`", text)
              if len(span.split()) > 2]
    return found


def test_the_quickstart_spec_is_a_real_file_that_validate_accepts(tmp_path):
    assert f"`{SPEC.relative_to(ROOT)}`" in DOC.read_text()
    proc = Cli(tmp_path)("validate", SPEC)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{SPEC}: ok"), proc.stdout + \
        proc.stderr


def test_every_hpsearch_command_in_the_quickstart_parses():
    commands = _commands(DOC.read_text())
    used = {shlex.split(c)[1] for c in commands}
    assert {"validate", "plan", "submit", "watch", "status", "events", "checkpoints",
            "finish", "best", "tensorboard", "report", "export", "resume"} <= used, used
    parser = build_parser()
    for command in commands:
        try:
            parser.parse_args(shlex.split(command)[1:])
        except SystemExit as exit_:
            pytest.fail(f"{command!r} does not parse (exit {exit_.code})")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    heads = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_the_quickstart_links_lead_somewhere_and_is_linked():
    for target in re.findall(r"\]\(([^)]+)\)", DOC.read_text()):
        name, _, anchor = target.partition("#")
        path = DOC.parent / name
        assert path.is_file(), target
        assert not anchor or anchor in _anchors(path), target
    for page in (ROOT / "README.md", ROOT / "docs" / "lightning.md"):
        assert "lightning-quickstart.md" in page.read_text(), page
