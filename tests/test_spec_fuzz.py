"""Spec fuzzing: whatever the text, validation returns a spec or one BadInput naming the file
(and the line and key where it can), never a traceback; the CLI exits 0 or 2."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpsearch.errors import BadInput
from hpsearch.preflight import parse_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*/*.yaml"))
TEXTS = [p.read_text() for p in EXAMPLES]
FILE = "fuzz.yaml"
SETTINGS = settings(max_examples=250, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _validate(text: str) -> BadInput | None:
    """Validate; any exception but BadInput fails the test (hypothesis shows the input)."""
    try:
        parse_spec(text, FILE, Path("/tmp/fuzz"), Path("/tmp/fuzz-runs"))
    except BadInput as exc:
        assert str(exc).startswith(FILE), str(exc)
        return exc
    return None


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 20, 10 ** 20),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["", "{x}", "{", "}", "../x", "1e-5", "2:00:00", "10m",
                                     "auto", "USR2", "exit_137", "nan", "-1", "\0"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8) | st.sampled_from(
        ["max", "type", "low", "high", "choices", "keep_last", "signal", "timeout"]),
        inner, max_size=4)), max_leaves=10)


def _paths(tree, prefix=()):
    """Every key path in a nested dict/list."""
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_examples(draw):
    """An example spec with one to three random edits of its parsed tree, dumped as YAML."""
    tree = copy.deepcopy(yaml.safe_load(draw(st.sampled_from(TEXTS))))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(tree) if p]
        path = draw(st.sampled_from(paths))
        parent = tree
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add", "rename"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
        elif action == "rename" and isinstance(parent, dict):
            parent[path[-1] + draw(st.sampled_from(["s", "_", "x"]))] = parent.pop(path[-1])
    return yaml.safe_dump(tree, allow_unicode=True)


@st.composite
def mangled_texts(draw):
    """An example spec's text with lines dropped, repeated or cut, and YAML-significant
    characters inserted."""
    lines = draw(st.sampled_from(TEXTS)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from(["drop", "dup", "cut", "insert"]))
        if edit == "drop" and len(lines) > 1:
            del lines[i]
        elif edit == "dup":
            lines.insert(i, lines[i])
        elif edit == "cut":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
        else:
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(
                [":", "- ", "{", "}", "[", "]", "'", '"', "\t", "&a ", "*a", "!!python/object ",
                 "#", "|", ">", "%", "@", "\0", "\x85", "? "])) + lines[i][at:]
    return "\n".join(lines) + "\n"


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
@SETTINGS
@given(mutated_examples())
def test_mutated_example_specs_give_a_spec_or_one_clear_error(text):
    err = _validate(text)
    if err is not None:
        assert err.line is not None, str(err)  # the dumped YAML is a mapping: a line exists
        assert err.detail and "Traceback" not in err.detail


@SETTINGS
@given(mangled_texts())
def test_mangled_spec_text_gives_a_spec_or_one_clear_error(text):
    _validate(text)


@SETTINGS
@given(st.lists(st.sampled_from(list("abx:{}[]-,'\"\n #&*!|>?0129.eE_") + [
    "name: ", "search:\n  ", "objective: ", "space:", "command: "]), max_size=40))
def test_random_yamlish_text_gives_a_spec_or_one_clear_error(pieces):
    _validate("".join(pieces))


@pytest.mark.slow  # 3.2 s in the quick tier (2026-11-30): over its 3 s rule
def test_fuzzed_specs_through_the_cli_exit_2_without_a_traceback(tmp_path):
    """A few mutated specs through the real `hpsearch validate`: exit 0 or 2, and a failure
    names the file and line."""
    found = []

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(mutated_examples())
    def collect(text):
        if _validate(text) is not None:
            found.append(text)

    collect()
    assert len(found) >= 5
    for i, text in enumerate(found[:5]):
        path = tmp_path / f"spec{i}.yaml"
        path.write_text(text)
        proc = subprocess.run([sys.executable, "-m", "hpsearch", "validate", str(path)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 2, (text, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert proc.stderr.startswith(f"hpsearch: error: {path}:"), proc.stderr


def test_nan_and_huge_numbers_in_a_spec_are_errors_not_crashes():
    for key in ("trials", "parallel", "seed"):
        for bad in (".nan", ".inf", "1e400", str(10 ** 40), "-1"):
            tree = yaml.safe_load((ROOT / "examples" / "quadratic" / "spec.yaml").read_text())
            tree["search"][key] = "BAD"
            err = _validate(yaml.safe_dump(tree).replace("BAD", bad))
            assert err is not None and f"search.{key}" in str(err), (key, bad)
            assert err.line is not None
