"""Specs are parsed by libyaml's parser where PyYAML has it (7x faster on a spec of 10,000
parameters) and composed by hpsearch's bounded composer either way: both parsers must give
every spec the same values and the same key lines, and bad syntax keeps PyYAML's message."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpsearch.errors import BadInput
from hpsearch.spec import loading
from hpsearch.spec.yamlpos import load_yaml_with_lines

ROOT = Path(__file__).resolve().parents[1]
TRICKY = """\
name: "quoted: {x}"
base: &base {lr: 1e-5, time: 45:00, flag: yes, none: ~, when: 2026-11-28}
a:
  <<: *base
  lr: 0.5
b: [*base, 'single', "tab\\t", 0x1F, 0o17, .inf, -.5e+3]
c: |
  line one
    two: 2
d: >-
  folded
  text
e: ünïcode ✓
"""


def _both(text: str, monkeypatch) -> tuple:
    fast = load_yaml_with_lines(text, "spec.yaml")
    monkeypatch.setattr(loading, "_FastLoader", None)
    slow = load_yaml_with_lines(text, "spec.yaml")
    monkeypatch.undo()
    return fast, slow


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="this PyYAML has no libyaml: one parser")
@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*/*.yaml")), ids=str)
def test_both_parsers_read_every_example_spec_alike(path, monkeypatch):
    fast, slow = _both(path.read_text(), monkeypatch)
    assert fast == slow


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="this PyYAML has no libyaml: one parser")
def test_both_parsers_read_anchors_merges_times_and_block_text_alike(monkeypatch):
    (fast, lines), slow = _both(TRICKY, monkeypatch)
    assert (fast, lines) == slow
    assert fast["a"]["lr"] == 0.5 and fast["a"]["time"] == "45:00"
    assert fast["base"]["lr"] == 1e-5 and fast["a"]["flag"] is True
    assert lines[("c",)] == 7 and lines[("e",)] == 13


def test_bad_syntax_is_reported_as_pyyaml_words_it_with_its_line():
    with pytest.raises(BadInput) as exc:
        load_yaml_with_lines("name: x\nsearch: {space: [1, 2}\n", "spec.yaml")
    assert str(exc.value).startswith("spec.yaml:2: YAML syntax error: "), str(exc.value)
    assert "expected ',' or ']', but got '}'" in str(exc.value)
