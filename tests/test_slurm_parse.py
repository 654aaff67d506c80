"""hpsearch.slurm.parse and hpsearch.slurm.sacct against real Slurm 22.05 output
(tests/slurm/captured/, whose README says which command made each file), plus hand-typed
edge cases. The values asserted are the ones in those files: after capture.sh makes them
again, job ids and times here change too."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from hpsearch.slurm import parse, sacct
from hpsearch.slurm.parse import (
    JobRecord,
    NodeState,
    QueueRecord,
    Switch,
    expand_array_tasks,
    is_invalid_job_id,
    job_records_from_scontrol,
    parse_cluster_names,
    parse_elapsed,
    parse_sbatch_answer,
    parse_sbatch_parsable,
    parse_scontrol_job,
    parse_scontrol_node,
    parse_scontrol_records,
    parse_sinfo_nodes,
    parse_squeue,
    parse_squeue_steps,
    parse_topology,
)
from hpsearch.slurm.sacct import is_accounting_disabled, parse_sacct, parse_sacct_runs

CAPTURED = Path(__file__).resolve().parent / "slurm" / "captured"
NODES = tuple(f"node{i}" for i in range(1, 9))


def captured(name: str) -> str:
    return (CAPTURED / name).read_text()


def without_exit_line(text: str) -> tuple[str, str]:
    """Files that end with `exit=<code>` (stdout and stderr together): (the rest, code)."""
    lines = text.splitlines()
    assert lines[-1].startswith("exit="), lines
    return "\n".join(lines[:-1]) + "\n", lines[-1].removeprefix("exit=")


def t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def by_id(records):
    return {r.job_id: r for r in records}


# -- the formats the code asks for are the ones the files were made with --------------------

def test_formats_are_the_ones_capture_sh_used():
    script = captured("capture.sh")
    assert f"\nSACCT_FORMAT={sacct.SACCT_FORMAT}\n" in script
    assert f"squeue -h -o '{parse.SQUEUE_FORMAT}'" in script
    assert f"sinfo -h -N -o '{parse.SINFO_NODES_FORMAT}'" in script
    # The hand-made files use it too (README: "Its format is SACCT_FORMAT's").
    for name in ("sacct_duplicate_job_id.txt", "sacct_lagging_behind_squeue.txt"):
        assert all(line.count("|") == sacct.SACCT_FORMAT.count(",")
                   for line in captured(name).splitlines())


# -- sacct ---------------------------------------------------------------------------------

def test_sacct_completed_job_keeps_the_job_line_and_skips_the_batch_step():
    assert parse_sacct(captured("sacct_completed.txt")) == [JobRecord(
        job_id="60", array_job_id=None, array_task_id=None, name="completed",
        state="COMPLETED", raw_state="COMPLETED", exit_code=0, signal=0, nodes=("node1",),
        reason=None, submit=t("2026-11-26T05:25:27"), start=t("2026-11-26T05:25:27"),
        end=t("2026-11-26T05:25:27"), elapsed=0.0)]
    assert parse_sacct(captured("sacct_completed.txt"))[0].finished


def test_sacct_failed_job_has_its_exit_code():
    [rec] = parse_sacct(captured("sacct_failed.txt"))
    assert (rec.job_id, rec.state, rec.exit_code, rec.signal, rec.finished) == (
        "61", "FAILED", 3, 0, True)
    assert rec.elapsed == 1.0


def test_sacct_cancelled_job_state_is_normalized_and_exit_code_is_the_job_lines():
    [rec] = parse_sacct(captured("sacct_cancelled.txt"))
    assert (rec.state, rec.raw_state) == ("CANCELLED", "CANCELLED by 0")
    # The .batch step says 0:15 (SIGTERM); the job's own line says 0:0.
    assert (rec.exit_code, rec.signal, rec.nodes) == (0, 0, ("node2",))


def test_sacct_timeout_job():
    [rec] = parse_sacct(captured("sacct_timeout.txt"))
    assert (rec.job_id, rec.state, rec.name, rec.finished) == ("59", "TIMEOUT", "timeout", True)
    assert rec.elapsed == 89.0  # 00:01:29 for a 1-minute limit
    assert (rec.start, rec.end) == (t("2026-11-26T05:25:27"), t("2026-11-26T05:26:56"))


def test_sacct_array_gives_one_record_per_task():
    records = parse_sacct(captured("sacct_array.txt"))
    assert [(r.job_id, r.array_job_id, r.array_task_id, r.state, r.exit_code)
            for r in records] == [
        ("62_0", "62", 0, "COMPLETED", 0), ("62_1", "62", 1, "COMPLETED", 0),
        ("62_2", "62", 2, "FAILED", 1), ("62_3", "62", 3, "COMPLETED", 0)]
    assert {r.name for r in records} == {"array"}


def test_sacct_two_node_job_expands_its_hostlist_and_skips_its_steps():
    [rec] = parse_sacct(captured("sacct_two_node.txt"))
    assert (rec.job_id, rec.name, rec.nodes) == ("63", "two_nodes", ("node3", "node4"))


def test_sacct_allocations_only_keeps_slurms_order_and_a_never_started_job():
    records = parse_sacct(captured("sacct_allocations_only.txt"))
    assert [r.job_id for r in records] == [
        "59", "60", "61", "63", "64", "62_0", "62_1", "62_2", "62_3", "68", "70"]
    assert all(r.finished for r in records)
    never_ran = by_id(records)["70"]
    assert (never_ran.name, never_ran.state, never_ran.nodes, never_ran.start) == (
        "wants_8_nodes", "CANCELLED", (), None)
    assert never_ran.end == t("2026-11-26T05:25:32")
    assert by_id(records)["68"].nodes == ("node1", "node2")


def test_sacct_running_and_pending_jobs_have_no_exit_code_or_end_and_the_array_expands():
    records = by_id(parse_sacct(captured("sacct_running_and_pending.txt")))
    running = records["68"]
    assert (running.state, running.finished, running.exit_code, running.signal) == (
        "RUNNING", False, None, None)
    assert (running.nodes, running.start, running.end) == (
        ("node1", "node2"), t("2026-11-26T05:25:28"), None)
    pending = records["70"]
    assert (pending.state, pending.nodes, pending.start, pending.end, pending.reason) == (
        "PENDING", (), None, None, None)
    # 74_[0-3]: one PENDING record per task.
    assert [(r.job_id, r.array_job_id, r.array_task_id, r.state, r.name)
            for r in records.values() if r.array_job_id == "74"] == [
        (f"74_{i}", "74", i, "PENDING", "pending_array") for i in range(4)]
    assert len(records) == 6


def test_sacct_lagging_behind_squeue_is_parsed_as_printed():
    # squeue said 52 RUNNING on node[1-2] at that moment; sacct had not caught up.
    [rec] = parse_sacct(captured("sacct_lagging_behind_squeue.txt"))
    assert (rec.job_id, rec.name, rec.state, rec.nodes, rec.finished) == (
        "52", "allocation", "PENDING", ("node1",), False)
    assert rec.start == t("2026-11-26T05:25:06") and rec.end is None


def test_sacct_throttled_array_expands_the_pending_range_with_its_reason():
    records = parse_sacct(captured("sacct_throttled_array.txt"))
    assert [(r.job_id, r.state, r.reason, r.nodes) for r in records] == [
        ("75_0", "RUNNING", None, ("node2",)), ("75_1", "RUNNING", None, ("node2",)),
        *[(f"75_{i}", "PENDING", "JobArrayTaskLimit", ()) for i in range(2, 6)]]


def test_sacct_throttled_array_gap_is_what_sacct_printed_while_lagging():
    records = by_id(parse_sacct(captured("sacct_throttled_array_gap.txt")))
    assert {job_id: r.state for job_id, r in records.items()} == {
        "75_0": "RUNNING", "75_1": "CANCELLED", "75_2": "PENDING", "75_3": "PENDING",
        "75_4": "PENDING", "75_5": "PENDING"}


def test_sacct_cancelled_range_expands_and_a_tasks_own_line_beats_the_range():
    records = parse_sacct(captured("sacct_throttled_array_cancelled.txt"))
    assert [r.job_id for r in records] == [f"75_{i}" for i in range(6)]
    assert {r.state for r in records} == {"CANCELLED"} and all(r.finished for r in records)
    task2 = by_id(records)["75_2"]  # its own line, not the `75_[2-5%2]` one
    assert (task2.nodes, task2.start) == (("node2",), t("2026-11-26T05:25:36"))
    for i in (3, 4, 5):
        rec = by_id(records)[f"75_{i}"]
        assert (rec.nodes, rec.start, rec.exit_code) == ((), None, 0)
    # The order of the lines does not matter.
    lines = captured("sacct_throttled_array_cancelled.txt").splitlines()
    reordered = by_id(parse_sacct("\n".join(reversed(lines))))
    assert reordered["75_2"].nodes == ("node2",)


def test_sacct_requeued_job_listed_twice_keeps_the_newest():
    text = captured("sacct_requeued_duplicates.txt")
    assert [line.split("|")[0] for line in text.splitlines()] == ["79", "79"]
    [rec] = parse_sacct(text)
    assert (rec.state, rec.raw_state, rec.submit, rec.nodes) == (
        "CANCELLED", "CANCELLED by 0", t("2026-11-26T05:25:38"), ())
    # Newest by submit time, not by line order.
    [rec] = parse_sacct("\n".join(reversed(text.splitlines())))
    assert rec.state == "CANCELLED"


def test_sacct_runs_of_a_requeued_job_are_listed_oldest_first():
    text = captured("sacct_requeued_duplicates.txt")
    for order in (text, "\n".join(reversed(text.splitlines()))):
        runs = parse_sacct_runs(order)
        assert list(runs) == ["79"]
        assert [(rec.state, rec.nodes) for rec in runs["79"]] == [
            ("REQUEUED", ("node3",)), ("CANCELLED", ())]
    # An older record under another name is another job that had the same id.
    other = text.splitlines()[0].replace("|requeued|", "|other|")
    assert [rec.state for rec in parse_sacct_runs(
        other + "\n" + text.splitlines()[1])["79"]] == ["CANCELLED"]


def test_sacct_same_id_with_equal_submit_times_keeps_the_later_line():
    line = captured("sacct_completed.txt").splitlines()[0]
    later = line.replace("|COMPLETED|", "|FAILED|").replace("|0:0|", "|2:0|")
    [rec] = parse_sacct(f"{line}\n{later}\n")
    assert (rec.state, rec.exit_code) == ("FAILED", 2)


def test_sacct_reused_id_after_a_crash_gives_both_jobs_with_their_submit_times():
    records = parse_sacct(captured("sacct_duplicate_job_id.txt"))
    assert [(r.job_id, r.array_job_id, r.array_task_id, r.name, r.submit) for r in records] == [
        ("12_3", "12", 3, "wrap", t("2026-11-26T05:13:54")),
        ("12", None, None, "slurm-cluster-check", t("2026-11-26T05:14:00"))]


def test_sacct_transient_allocation_name_is_kept_with_its_final_state():
    [rec] = parse_sacct(captured("sacct_transient_allocation_name.txt"))
    assert (rec.job_id, rec.name, rec.state, rec.finished) == (
        "80", "allocation", "COMPLETED", True)


def test_sacct_without_accounting_is_told_apart_from_no_jobs():
    stdout = captured("sacct_no_accounting.stdout.txt")
    stderr = captured("sacct_no_accounting.stderr.txt")
    assert captured("sacct_no_accounting.exitcode.txt") == "1\n"
    assert stdout == "" and parse_sacct(stdout) == []
    assert is_accounting_disabled(stderr)
    assert not is_accounting_disabled("")
    assert not is_accounting_disabled(captured("squeue_unknown_job.txt"))


def test_sacct_malformed_line_raises_naming_the_line():
    good = captured("sacct_completed.txt").splitlines()[0]
    with pytest.raises(ValueError, match=r"sacct line 2: expected 10 .*'71\|oops'"):
        parse_sacct(f"{good}\n71|oops\n")
    with pytest.raises(ValueError, match=r"sacct line 1: .*not a job id: 'abc'"):
        parse_sacct(good.replace("60|", "abc|", 1))
    with pytest.raises(ValueError, match=r"sacct line 1: .*not a Slurm time"):
        parse_sacct(good.replace("2026-11-26T05:25:27|None", "yesterday|None"))
    with pytest.raises(ValueError, match=r"sacct line 1: .*not a Slurm exit code"):
        parse_sacct(good.replace("|0:0|", "|x:y|"))


def test_sacct_job_name_with_a_bar_is_rejoined():
    line = captured("sacct_completed.txt").splitlines()[0].replace("|completed|", "|a|b|c|")
    [rec] = parse_sacct(line)
    assert (rec.name, rec.state, rec.nodes) == ("a|b|c", "COMPLETED", ("node1",))


def test_sacct_hand_typed_array_ranges_and_het_jobs():
    fields = "|wrap|PENDING|0:0|None assigned|00:00:00|2026-11-26T05:00:00|Unknown|Unknown|None"
    records = parse_sacct(f"123_[1,4-5]{fields}\n124_[0-3%2]{fields}\n125+0{fields}\n"
                          f"125+0.0{fields}\n123_4.batch{fields}\n")
    assert [r.job_id for r in records] == ["123_1", "123_4", "123_5", "124_0", "124_1",
                                           "124_2", "124_3", "125+0"]
    assert records[-1].array_job_id is None


@pytest.mark.parametrize("text, seconds", [
    ("00:00:00", 0.0), ("00:01:26", 86.0), ("1-02:03:04", 93784.0), ("01:26", 86.0),
    ("00:00.250", 0.25), ("", None), ("INVALID", None)])
def test_elapsed(text, seconds):
    assert parse_elapsed(text) == seconds


def test_array_task_ranges():
    assert expand_array_tasks("2-5%2") == [2, 3, 4, 5]
    assert expand_array_tasks("3,5%2") == [3, 5]
    assert expand_array_tasks("0-15:4") == [0, 4, 8, 12]
    with pytest.raises(ValueError, match="bad array task range"):
        expand_array_tasks("5-2")


# -- squeue --------------------------------------------------------------------------------

def test_squeue_running_and_pending_with_reasons_and_the_pending_array_expanded():
    records = parse_squeue(captured("squeue_running_and_pending.txt"))
    assert [(r.job_id, r.state, r.reason, r.nodes) for r in records] == [
        ("70", "PENDING", "Resources", ()),
        ("72", "PENDING", "Dependency", ()),
        ("73", "PENDING", "BeginTime", ()),
        *[(f"74_{i}", "PENDING", "Priority", ()) for i in range(4)],
        ("71", "PENDING", "JobHeldUser", ()),
        ("59", "RUNNING", None, ("node1",)),
        ("68", "RUNNING", None, ("node1", "node2")),
        ("69", "RUNNING", None, ("node3", "node4", "node5", "node6"))]
    assert by_id(records)["74_2"] == QueueRecord("74_2", "74", 2, "PENDING", "Priority", ())


def test_squeue_throttled_array_and_a_gap_in_its_pending_range():
    records = parse_squeue(captured("squeue_throttled_array.txt"))
    assert {r.job_id: (r.state, r.reason) for r in records} == {
        **{f"75_{i}": ("PENDING", "JobArrayTaskLimit") for i in range(2, 6)},
        "75_0": ("RUNNING", None), "75_1": ("RUNNING", None)}
    records = parse_squeue(captured("squeue_throttled_array_gap.txt"))  # 75_[3,5%2]
    assert [(r.job_id, r.state) for r in records] == [
        ("75_3", "PENDING"), ("75_5", "PENDING"), ("75_2", "RUNNING"), ("75_0", "RUNNING")]
    assert by_id(records)["75_2"].nodes == ("node2",)


def test_squeue_of_several_ids_leaves_an_unknown_one_out_without_error():
    text, code = without_exit_line(captured("squeue_known_and_unknown_jobs.txt"))
    assert code == "0" and not is_invalid_job_id(text)
    assert sorted(r.job_id for r in parse_squeue(text)) == [f"75_{i}" for i in range(6)]


def test_squeue_and_scontrol_of_an_unknown_job_say_invalid_job_id():
    for name in ("squeue_unknown_job.txt", "scontrol_show_job_unknown.txt"):
        text, code = without_exit_line(captured(name))
        assert code == "1"
        assert is_invalid_job_id(text)


def test_squeue_malformed_line_raises_naming_the_line():
    with pytest.raises(ValueError, match=r"squeue line 2: expected 4"):
        parse_squeue("70|PENDING|Resources|\n70|PENDING\n")
    with pytest.raises(ValueError, match=r"squeue line 1: .*bad array task range"):
        parse_squeue("75_[x]|PENDING|Priority|\n")


def test_squeue_job_listed_once_per_partition_is_one_record():
    records = parse_squeue("70|PENDING|Resources|\n70|PENDING|Priority|\n")
    assert records == [QueueRecord("70", None, None, "PENDING", "Priority", ())]


def test_squeue_steps_by_name_batch_left_out():
    assert parse_squeue_steps(captured("squeue_steps.txt")) == {
        "hpsearch-trial-3.1": "2835.0", "hpsearch-trial-4.1": "2835.1", "sleep": "2835.2"}


def test_squeue_steps_sharing_a_name_give_the_first_and_bad_lines_raise():
    assert parse_squeue_steps("9.3|a|b\n9.1|a|b\n9.extern|extern\n") == {"a|b": "9.1"}
    with pytest.raises(ValueError, match=r"squeue line 1: expected JOB.STEP"):
        parse_squeue_steps("9|RUNNING|None|node1\n")


# -- sinfo ---------------------------------------------------------------------------------

def test_sinfo_states_and_availability():
    nodes = parse_sinfo_nodes(captured("sinfo_nodes_drained_down.txt"))
    assert [(n.name, n.state, n.available) for n in nodes] == [
        ("node1", "DRAINING", False), ("node2", "MIXED", True),
        ("node3", "ALLOCATED", False), ("node4", "ALLOCATED", False),
        ("node5", "ALLOCATED", False), ("node6", "ALLOCATED", False),
        ("node7", "DRAINED", False), ("node8", "DOWN", False)]
    assert {n.partitions for n in nodes} == {("debug",)}  # "debug*": the default partition
    assert {n.reason for n in nodes} == {None}


def test_sinfo_with_reasons():
    nodes = {n.name: n for n in parse_sinfo_nodes(captured("sinfo_nodes_with_reasons.txt"))}
    assert sorted(nodes) == list(NODES)
    assert nodes["node1"].reason == "capture: draining by hand"
    assert nodes["node7"].reason == "capture: drained by hand"
    assert nodes["node8"] == NodeState("node8", "DOWN", "down", frozenset(), ("debug",),
                                       "capture: down by hand")
    assert nodes["node2"].reason is None  # sinfo prints "none"


def test_sinfo_node_in_two_partitions_is_one_node():
    lines = captured("sinfo_nodes_with_reasons.txt").splitlines()
    text = "\n".join(lines + [line.replace("|debug*|", "|gpu|") for line in lines])
    nodes = parse_sinfo_nodes(text)
    assert [n.name for n in nodes] == list(NODES)
    assert {n.partitions for n in nodes} == {("debug", "gpu")}


@pytest.mark.parametrize("raw, state, flags, available", [
    ("idle", "IDLE", set(), True), ("mixed-", "MIXED", {"-"}, True),
    ("idle*", "IDLE", {"*"}, False), ("idle~", "IDLE", {"~"}, False),
    ("idle#", "IDLE", {"#"}, False), ("idle%", "IDLE", {"%"}, False),
    ("idle!", "IDLE", {"!"}, False), ("mixed$", "MIXED", {"$"}, False),
    ("idle@", "IDLE", {"@"}, False), ("reboot^", "REBOOT", {"^"}, False),
    ("drained*", "DRAINED", {"*"}, False), ("reserved", "RESERVED", set(), False),
    ("maint", "MAINT", set(), False), ("idle+drain", "IDLE", {"DRAIN"}, False),
    ("down*", "DOWN", {"*"}, False), ("allocated", "ALLOCATED", set(), False)])
def test_sinfo_state_flags(raw, state, flags, available):
    [node] = parse_sinfo_nodes(f"n1|{raw}|debug|none\n")
    assert (node.state, node.flags, node.available) == (state, frozenset(flags), available)


def test_sinfo_malformed_line_raises_naming_the_line():
    with pytest.raises(ValueError, match=r"sinfo line 2: expected"):
        parse_sinfo_nodes("node1|idle|debug*\nnode2\n")
    with pytest.raises(ValueError, match=r"sinfo line 1: unknown node state flag"):
        parse_sinfo_nodes("node1|idle?|debug*\n")


# -- scontrol ------------------------------------------------------------------------------

def test_scontrol_show_job_multi_line_and_one_line_forms_agree():
    multi = parse_scontrol_job(captured("scontrol_show_job_running.txt"))
    one = parse_scontrol_job(captured("scontrol_show_job_running_oneliner.txt"))
    assert multi == one
    assert {key: multi[key] for key in (
        "JobId", "JobName", "JobState", "Reason", "ExitCode", "NodeList", "BatchHost",
        "NumNodes", "TRES", "TresPerNode", "Command", "Power", "AllocNode:Sid",
        "ReqB:S:C:T", "StdOut")} == {
        "JobId": "68", "JobName": "running", "JobState": "RUNNING", "Reason": "None",
        "ExitCode": "0:0", "NodeList": "node[1-2]", "BatchHost": "node1", "NumNodes": "2",
        "TRES": "cpu=4,mem=4000M,node=2,billing=4,gres/gpu=2", "TresPerNode": "gres:gpu:1",
        "Command": "(null)", "Power": "", "AllocNode:Sid": "localhost:2461",
        "ReqB:S:C:T": "0:0:*:*", "StdOut": "/tmp/hpsearch-capture.RY09Y1/running.out"}
    assert len(multi) == 61


def test_scontrol_show_job_as_job_records():
    [running] = job_records_from_scontrol(
        parse_scontrol_job(captured("scontrol_show_job_running.txt")))
    assert (running.job_id, running.state, running.nodes, running.exit_code, running.end) == (
        "68", "RUNNING", ("node1", "node2"), None, None)
    [done] = job_records_from_scontrol(
        parse_scontrol_job(captured("scontrol_show_job_completed.txt")))
    assert (done.job_id, done.name, done.state, done.exit_code, done.signal, done.nodes) == (
        "60", "completed", "COMPLETED", 0, 0, ("node1",))
    # The same job as sacct saw it.
    [from_sacct] = parse_sacct(captured("sacct_completed.txt"))
    assert done == from_sacct


def test_scontrol_show_job_of_a_pending_array_task():
    fields = parse_scontrol_job(captured("scontrol_show_job_pending_array_task.txt"))
    assert (fields["JobId"], fields["ArrayJobId"], fields["ArrayTaskId"],
            fields["ArrayTaskThrottle"], fields["NodeList"]) == ("75", "75", "4", "2", "")
    [rec] = job_records_from_scontrol(fields)
    assert (rec.job_id, rec.array_job_id, rec.array_task_id, rec.state, rec.reason,
            rec.nodes, rec.start) == ("75_4", "75", 4, "PENDING", "JobArrayTaskLimit", (), None)


def test_scontrol_whole_line_values_keep_spaces_and_equals_signs():
    text = captured("scontrol_show_job_completed.txt").replace(
        "   Command=(null)", "   Command=/home/me/my dir/train.sh lr=0.1 --epochs 3")
    fields = parse_scontrol_job(text)
    assert fields["Command"] == "/home/me/my dir/train.sh lr=0.1 --epochs 3"
    assert "lr" not in fields
    one_line = captured("scontrol_show_job_running_oneliner.txt").replace(
        "Reason=None", "Reason=(ReqNodeNotAvail, UnavailableNodes:node3)")
    assert parse_scontrol_job(one_line)["Reason"] == "(ReqNodeNotAvail, UnavailableNodes:node3)"


def test_scontrol_several_records():
    one = captured("scontrol_show_job_running_oneliner.txt")
    multi = captured("scontrol_show_job_completed.txt")
    records = parse_scontrol_records(multi + multi.replace("JobId=60", "JobId=61") + one)
    assert [r["JobId"] for r in records] == ["60", "61", "68"]
    assert parse_scontrol_records("") == []


def test_scontrol_show_node_multi_line_and_one_line_forms_agree():
    multi = parse_scontrol_node(captured("scontrol_show_node_drained.txt"))
    one = parse_scontrol_node(captured("scontrol_show_node_drained_oneliner.txt"))
    assert multi == one
    assert (multi["NodeName"], multi["NodeAddr"], multi["State"], multi["Gres"]) == (
        "node7", "127.0.0.1", "IDLE+DRAIN", "gpu:2")
    assert multi["OS"] == "Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0"
    assert multi["Reason"] == "capture: drained by hand [root@2026-11-26T05:25:32]"
    assert (multi["AllocTRES"], multi["Partitions"]) == ("", "debug")


def test_scontrol_show_node_not_responding():
    fields = parse_scontrol_node(captured("scontrol_show_node_oneliner.txt"))
    assert (fields["NodeName"], fields["NodeAddr"], fields["State"], fields["BootTime"]) == (
        "node8", "127.0.0.1", "IDLE+NOT_RESPONDING", "None")
    assert "Reason" not in fields


def test_scontrol_malformed_output_raises():
    with pytest.raises(ValueError, match="no job record"):
        parse_scontrol_job("")
    with pytest.raises(ValueError, match="no node record"):
        parse_scontrol_node(captured("scontrol_show_job_completed.txt"))
    with pytest.raises(ValueError, match=r"scontrol line 1: expected Key=value, got 'slurm_"):
        parse_scontrol_records(captured("scontrol_show_job_unknown.txt"))


def test_topology_is_four_leaves_under_a_spine():
    switches = parse_topology(captured("scontrol_show_topology.txt"))
    assert switches[:4] == [Switch(f"leaf{i}", 0, (f"node{2 * i - 1}", f"node{2 * i}"), ())
                            for i in range(1, 5)]
    assert switches[4] == Switch("spine", 1, NODES, ("leaf1", "leaf2", "leaf3", "leaf4"))
    assert parse_topology("") == []
    with pytest.raises(ValueError, match=r"topology record 1: bad or missing 'Level'"):
        parse_topology("SwitchName=s1 Nodes=n1\n")


# -- sbatch --------------------------------------------------------------------------------

def test_sbatch_parsable():
    assert parse_sbatch_parsable(captured("sbatch_parsable.txt")) == "60"
    assert parse_sbatch_parsable(captured("sbatch_parsable_two_nodes.txt")) == "63"
    assert parse_sbatch_parsable("71;cluster2\n") == "71"
    for bad in ("", "\n", "Submitted batch job 71\n", "71;\n"):
        with pytest.raises(ValueError, match="printed no job id"):
            parse_sbatch_parsable(bad)


def test_every_captured_file_is_read_by_a_test_here():
    """A file added to captured/ without a parser test here fails this one."""
    source = Path(__file__).read_text()
    names = {p.name for p in CAPTURED.glob("*.txt")}
    stems = {re.sub(r"\.(stdout|stderr|exitcode)\.txt$", "", n) for n in names}
    missing = sorted(s for s in stems if s.removesuffix(".txt") not in source)
    assert not missing, f"captured files no test reads: {missing}"


# -- sacct usage (hpsearch report) ---------------------------------------------------------

def test_sacct_usage_reads_seconds_nodes_and_gpus_from_real_output():
    from hpsearch.slurm.sacct import JobUsage, parse_sacct_usage
    assert f"\nUSAGE_FORMAT={sacct.SACCT_USAGE_FORMAT}\n" in captured("capture.sh")
    usage = by_id(parse_sacct_usage(captured("sacct_usage.txt")))
    assert usage["985"] == JobUsage(job_id="985", state="COMPLETED", elapsed=2.0, nodes=1,
                                    gpus=2, cpus=1)
    assert (usage["986"].nodes, usage["986"].gpus, usage["986"].cpus) == (2, 0, 2)
    assert usage["987"].state == "FAILED"
    assert {"988_0", "988_1"} <= set(usage)
    assert (usage["990"].state, usage["990"].elapsed, usage["990"].gpus) == ("PENDING", 0.0, 0)
    assert (usage["991"].state, usage["991"].gpus) == ("RUNNING", 1)


def test_sacct_usage_skips_steps_and_unstarted_ranges_and_names_a_bad_line():
    from hpsearch.slurm.sacct import parse_sacct_usage
    text = ("5|COMPLETED|7|1|cpu=1,gres/gpu=4,node=1|2026-11-26T07:43:07\n"
            "5.batch|COMPLETED|7|1|cpu=1,gres/gpu=4,node=1|2026-11-26T07:43:07\n"
            "6_[0-3]|PENDING|0|1||2026-11-26T07:43:07\n")
    assert [u.job_id for u in parse_sacct_usage(text)] == ["5"]
    assert parse_sacct_usage(text)[0].gpus == 4
    with pytest.raises(ValueError, match="sacct line 1"):
        parse_sacct_usage("5|COMPLETED|7|1|cpu=one|2026-11-26T07:43:07\n")
    with pytest.raises(ValueError, match="expected 6"):
        parse_sacct_usage("5|COMPLETED|7\n")


# -- output captured with --clusters (-M) on the second cluster (capture_clusters.sh) -----

SECOND = "hpsearch2"

def test_sbatch_with_clusters_answers_job_id_and_cluster():
    assert parse_sbatch_answer(captured("sbatch_parsable_cluster.txt")) == ("10", SECOND)
    # -M of the local cluster answers so too.
    assert parse_sbatch_answer(captured("sbatch_parsable_local_cluster.txt")) == (
        "5", "hpsearch")
    assert parse_sbatch_parsable(captured("sbatch_parsable_cluster.txt")) == "10"
    assert parse_sbatch_answer(captured("sbatch_parsable.txt")) == ("60", None)


def test_squeue_with_clusters_and_noheader_has_no_cluster_line():
    records = {r.job_id: r for r in parse_squeue(captured("squeue_cluster.txt"))}
    assert {j: (r.state, r.reason, r.nodes) for j, r in records.items()} == {
        "11": ("RUNNING", None, ("h2node1",)),
        "12": ("PENDING", "Resources", ())}
    # Without --noheader squeue names the cluster first; hpsearch never asks for that.
    with_header = captured("squeue_cluster_with_header.txt").splitlines()
    assert with_header[0] == f"CLUSTER: {SECOND}"
    assert "\n".join(with_header[2:]) + "\n" == captured("squeue_cluster.txt")


def test_sinfo_of_the_second_cluster():
    nodes = parse_sinfo_nodes(captured("sinfo_nodes_cluster.txt"))
    assert [n.name for n in nodes] == [f"h2node{i}" for i in range(1, 5)]
    assert {n.partitions for n in nodes} == {("debug",)}
    assert [n.state for n in nodes] == ["MIXED", "IDLE", "IDLE", "IDLE"]


def test_sinfo_of_nodes_in_two_partitions_each():
    nodes = parse_sinfo_nodes(captured("sinfo_nodes_partitions.txt"))
    assert {n.name: n.partitions for n in nodes} == {
        **{f"node{i}": ("debug", "left") for i in range(1, 5)},
        **{f"node{i}": ("debug", "right") for i in range(5, 9)}}


def test_sacct_of_the_second_cluster():
    records = {r.job_id: r for r in parse_sacct(captured("sacct_cluster.txt"))}
    assert {j: (r.name, r.state, r.nodes) for j, r in records.items()} == {
        "10": ("hps-done", "COMPLETED", ("h2node1",)),
        "11": ("hps-run", "RUNNING", ("h2node1",)),
        "12": ("hps-pend", "PENDING", ())}
    assert "SACCT_FORMAT=" + sacct.SACCT_FORMAT in (CAPTURED / "capture_clusters.sh").read_text()


def test_scontrol_show_job_of_the_second_cluster():
    fields = parse_scontrol_job(captured("scontrol_show_job_cluster.txt"))
    assert (fields["JobId"], fields["JobName"], fields["JobState"], fields["NodeList"]) == (
        "11", "hps-run", "RUNNING", "h2node1")


def test_cluster_names_from_sacctmgr():
    assert parse_cluster_names(captured("sacctmgr_list_clusters.txt")) == ["hpsearch", SECOND]
    assert parse_cluster_names("") == []
    with pytest.raises(ValueError, match="sacctmgr line 2: not a cluster name"):
        parse_cluster_names("hpsearch\nsacctmgr: error: Problem talking to the database\n")
