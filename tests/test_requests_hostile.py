"""Request files for the driver (hpsearch.driver.requests) with hostile bytes are skipped with a
note and removed, never fatal: not UTF-8, empty, wrong shape, 3 MB of nesting, huge numbers."""

from __future__ import annotations

from hpsearch.driver import requests


def test_hostile_request_files_are_skipped_with_a_note(tmp_path):
    folder = tmp_path / "requests"
    folder.mkdir()
    (folder / "enqueue-1.json").write_bytes(b"\xff\xfe\x00bad")
    (folder / "trials-2.json").write_bytes(b"")
    (folder / "enqueue-3.json").write_bytes(b"[1,2]")
    (folder / "enqueue-4.json").write_bytes(b"[" * 3_000_000)
    (folder / "trials-5.json").write_bytes(b'{"id": 5, "total": 3}')
    (folder / "nonsense-6.json").write_bytes(b'{"id": "c"}')
    good = requests.write(tmp_path, "trials", {"total": 10**30})
    found, notes = requests.pending(tmp_path)
    assert [r.id for r in found] == [good.id] and found[0].data == {"total": 10**30}
    assert len(notes) == 6 and all("ignored request file" in n for n in notes)
    assert sorted(p.name for p in folder.iterdir()) == [good.path.name]
