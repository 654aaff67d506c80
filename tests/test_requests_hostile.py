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
    assert len(notes) == 6 and all(" request file " in n for n in notes)
    assert [n for n in notes if n.startswith("refused")] == [  # not even read
        f"refused request file {folder / 'enqueue-4.json'}: larger than 65536 bytes"]
    assert sorted(p.name for p in folder.iterdir()) == [good.path.name]


def test_a_fifo_or_a_link_to_dev_zero_is_refused_at_once_not_read(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes, and /dev/zero never ends:
    either hung the driver. Both are refused without being read, with a note naming them."""
    import os
    folder = tmp_path / "requests"
    folder.mkdir()
    os.mkfifo(folder / "trials-1.json")
    (folder / "trials-2.json").symlink_to("/dev/zero")
    own = tmp_path / "mine.json"
    own.write_text('{"id": "x", "total": 9}')
    (folder / "trials-3.json").symlink_to(own)  # a link, even to a good file of ours
    good = requests.write(tmp_path, "trials", {"total": 7})
    found, notes = requests.pending(tmp_path)
    assert [r.id for r in found] == [good.id]
    assert sorted(notes) == [f"refused request file {folder / 'trials-1.json'}: not a regular file",
                             f"refused request file {folder / 'trials-2.json'}: a symbolic link",
                             f"refused request file {folder / 'trials-3.json'}: a symbolic link"]
    assert own.read_text() == '{"id": "x", "total": 9}'  # what a link points to is untouched


def test_request_files_are_written_owner_only_whatever_the_umask(tmp_path):
    import os
    old = os.umask(0o002)  # a project space's umask: group-writable by default
    try:
        made = requests.write(tmp_path, "enqueue", {"params": {"x": 1}})
    finally:
        os.umask(old)
    assert made.path.stat().st_mode & 0o077 == 0
    assert made.path.parent.stat().st_mode & 0o777 == 0o700  # requests/ is private
