"""Issue 37, items 2 and 5, as a site is set up (tests/site.py): an ordinary owner submits a
`share: group` search into a setgid project space with a default ACL for the project
group; another ordinary user of that group then tries to forge results, plant a
checkpoint or swap a log for a link, finding the paths as users do. And a runs dir under a
group-writable folder without the sticky bit is refused before anything is made.

Before the fix, the default ACL (which overrides the umask) made every trial folder,
checkpoint and log group-writable. The unit tests below need no second user."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch import trial
from hpsearch.errors import BadInput
from hpsearch.launch.attempt import open_unlinked
from hpsearch.store.private import make_private
from tests.site import acls_under, default_acl, site  # noqa: F401 (a fixture)

SPEC = """
name: {name}
command: >-
  echo "saved at step 1" > "$HPSEARCH_CHECKPOINT_DIR/step-1.pt" &&
  echo "@hpsearch step=0 loss={{x}}"
search: {{strategy: grid, space: {{x: {{choices: [1, 2]}}}}}}
objective: {{metric: loss}}
share: group
"""


def _writable_by_others(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): oct(stat.S_IMODE(p.lstat().st_mode))
            for p in [root, *root.rglob("*")]
            if not p.is_symlink() and p.lstat().st_mode & 0o022}


def test_a_group_member_cannot_change_a_shared_search_under_a_default_acl(site):  # noqa: F811
    home, project = site.home(), site.project("acl-proj")
    spec = home / "spec.yaml"
    spec.write_text(SPEC.format(name="shared"))
    os.chown(spec, site.owner.uid, site.owner.gid)
    runs = project / "runs"
    proc = site.owner.hpsearch("submit", spec, "--runs-dir", runs, cwd=home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = runs / "shared"
    assert exp.stat().st_uid == site.owner.uid  # really the ordinary owner's
    assert acls_under(exp) == {}  # inherited ACLs removed: the umask says all below
    assert _writable_by_others(exp) == {}
    # the group reads the results ...
    proc = site.other.hpsearch("status", "shared", "--runs-dir", runs, cwd="/")
    assert proc.returncode == 0 and "loss=2" in proc.stdout, proc.stdout + proc.stderr
    # ... and changes nothing: forged lines, a planted checkpoint, a log swapped for a link
    trial0 = exp / "trials" / "00000"
    for script in ('echo "@hpsearch step=1 loss=-100" >> "$1/stdout.log"',
                   'echo "malicious pickle" > "$1/checkpoints/step-1.pt"',
                   'echo "malicious pickle" > "$1/checkpoints/step-9.pt"',
                   'mv "$1/stdout.log" "$1/old.log"',
                   'echo "{}" > "$1/params.json"', 'ln -sf /etc/passwd "$1/stderr.log"'):
        proc = site.other.sh(script, str(trial0))
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, (script, proc)
    assert (trial0 / "checkpoints" / "step-1.pt").read_text() == "saved at step 1\n"


def test_a_runs_dir_under_a_group_writable_folder_without_the_sticky_bit_is_refused(
        site):  # noqa: F811
    """A group member could rename the runs dir away mid-search and put their own in its
    place; before, submit went ahead. Nothing is made, and the message says what to do."""
    home, project = site.home(), site.project("open-proj", sticky=False, acl=False)
    spec = home / "spec2.yaml"
    spec.write_text(SPEC.format(name="refused"))
    os.chown(spec, site.owner.uid, site.owner.gid)
    proc = site.owner.hpsearch("submit", spec, "--runs-dir", project / "mine" / "runs",
                               cwd=home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{project} is writable by its group (mode 2770) without the sticky bit" in \
        proc.stderr
    assert "chmod +t" in proc.stderr
    assert list(project.iterdir()) == []  # nothing made
    # the same project space with the sticky bit, as /tmp has: accepted
    os.chmod(project, 0o3770)
    proc = site.owner.hpsearch("submit", spec, "--runs-dir", project / "mine" / "runs",
                               cwd=home)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- without a second user ------------------------------------------------------------------

def test_an_experiment_made_under_a_default_acl_is_tidied_when_its_driver_starts(tmp_path):
    """What an older hpsearch left under a default ACL (group-writable folders and files,
    inherited ACLs) loses the ACLs and all group and other write; links are left alone."""
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    exp = runs / "old"
    exp.mkdir()
    default_acl(exp, 4242)
    (exp / "trials" / "00000" / "checkpoints").mkdir(parents=True)
    fd = os.open(exp / "trials" / "00000" / "stdout.log", os.O_CREAT | os.O_WRONLY, 0o666)
    os.close(fd)
    victim = tmp_path / "victim"
    victim.write_text("x")
    os.chmod(victim, 0o666)
    (exp / "trials" / "00000" / "link").symlink_to(victim)
    assert _writable_by_others(exp) and acls_under(exp)
    make_private(exp)
    assert acls_under(exp) == {} and _writable_by_others(exp) == {}
    assert stat.S_IMODE(victim.stat().st_mode) == 0o666  # not followed


def test_a_new_runs_dir_and_experiment_drop_a_default_acl_above_them(tmp_path):
    """A default ACL above the runs dir: what hpsearch makes below loses it, so the
    trials' files follow the umask (before: group-writable whatever the umask)."""
    above = tmp_path / "above"
    above.mkdir(mode=0o700)
    default_acl(above, 4242)
    exp = above / "runs" / "new"
    make_private(exp, group_readable=True)
    assert acls_under(above / "runs") == {}
    old = os.umask(0o027)
    try:
        (exp / "trials").mkdir()
        fd = os.open(exp / "trials" / "log", os.O_CREAT | os.O_WRONLY, 0o666)
        os.close(fd)
    finally:
        os.umask(old)
    assert _writable_by_others(above / "runs") == {}


def test_a_link_at_a_trial_files_path_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "stdout.log").symlink_to(victim)
    fd = open_unlinked(tmp_path / "stdout.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, b"line\n")
    os.close(fd)
    assert victim.read_text() == "keep\n"
    assert not (tmp_path / "stdout.log").is_symlink()
    assert (tmp_path / "stdout.log").read_text() == "line\n"


def test_the_exit_code_trap_replaces_a_link_rather_than_writing_through_it(tmp_path):
    from hpsearch.launch.attempt import EXIT_TRAP
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "exit_code").symlink_to(victim)
    env = {"PATH": "/usr/bin:/bin", "HPSEARCH_TRIAL_DIR": str(tmp_path),
           "HPSEARCH_ATTEMPT": "3"}
    proc = subprocess.run(["/bin/sh", "-c", EXIT_TRAP + "exit 7"], env=env)
    assert proc.returncode == 7
    assert victim.read_text() == "keep\n"
    assert (tmp_path / "exit_code").read_text() == "7 3\n"


@pytest.fixture
def checkpoints(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    monkeypatch.setenv("HPSEARCH_TRIAL_DIR", str(tmp_path))
    monkeypatch.setenv("HPSEARCH_CHECKPOINT_DIR", str(folder))
    trial._REFUSED.clear()
    return folder


def test_latest_checkpoint_skips_links_out_of_its_folder_and_names_them(checkpoints,
                                                                         capsys):
    outside = checkpoints.parent / "elsewhere.pt"
    outside.write_text("x")
    (checkpoints / "step-00000001.pt").write_text("mine")
    (checkpoints / "step-00000009.pt").symlink_to(outside)
    assert trial.latest_checkpoint() == checkpoints / "step-00000001.pt"
    assert trial.latest_checkpoint() == checkpoints / "step-00000001.pt"
    err = capsys.readouterr().err
    assert err.count("not resuming from") == 1 and "a link out of the checkpoint" in err
    # Lightning's save_last="link": a link to a checkpoint beside it is fine
    (checkpoints / "last-00000002.ckpt").symlink_to(checkpoints / "step-00000001.pt")
    assert trial.latest_checkpoint() == checkpoints / "last-00000002.ckpt"


def test_latest_checkpoint_never_returns_another_users_file_or_folder(checkpoints, capsys):
    if os.geteuid() != 0:
        reason = "needs root to give a checkpoint to another uid"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    (checkpoints / "step-00000001.pt").write_text("mine")
    planted = checkpoints / "step-00000005.pt"
    planted.write_text("theirs")
    os.chown(planted, 4242, 4242)
    folder = checkpoints / "step-00000007"
    folder.mkdir()
    (folder / "model.safetensors").write_text("theirs")
    os.chown(folder / "model.safetensors", 4242, 4242)
    assert trial.latest_checkpoint() == checkpoints / "step-00000001.pt"
    err = capsys.readouterr().err
    assert "step-00000005.pt: it belongs to uid 4242" in err
    assert "model.safetensors in it is a link or not yours" in err


def test_make_private_still_refuses_a_runs_dir_open_to_others(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chmod(runs, 0o777)
    with pytest.raises(BadInput, match="writable by others"):
        make_private(runs / "x")
    assert sys.version_info >= (3, 10)
