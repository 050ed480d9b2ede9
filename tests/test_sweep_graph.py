"""The jobs' graph (``Job.after``) and the local executor's order: a job starts as soon as the jobs it waits for are
done (no barrier between one VFM's extraction and another's training), a failure blocks only what waits on it,
with the reason, and bad graphs are refused. The jobs are tiny processes that record their start and end."""

from __future__ import annotations

import pytest

from ava.sweep.jobs import BLOCKED, DONE, FAILED, Job, JobState, check_graph, topological
from ava.sweep.local import run_local
from ava.sweep.plan import SweepError
from ava.sweep.schedule import bottom_levels
from tests.helpers import events, recorder, when


def test_a_finished_vfm_trains_while_another_still_extracts(tmp_path) -> None:
    """Two slots, a slow and a fast extraction: the slow one ends only once the fast VFM's training has started
    (it waits for that job's start marker, and fails after a minute without it: a barrier would fail it)."""
    ev = tmp_path / "events"
    todo = [
        Job("extract-slow", "extract", "slow", recorder(ev, "extract-slow", wait_for="start train-fast")),
        Job("extract-fast", "extract", "fast", recorder(ev, "extract-fast")),
        Job("train-slow", "train", "slow", recorder(ev, "train-slow"), after=["extract-slow"]),
        Job("train-fast", "train", "fast", recorder(ev, "train-fast"), after=["extract-fast"]),
    ]
    outcome = run_local(todo, JobState(tmp_path / "sweep"), jobs=2, finished={})
    assert outcome == dict.fromkeys([j.name for j in todo], DONE)
    rows = events(ev)
    assert when(rows, "end", "extract-fast") < when(rows, "start", "train-fast") < when(rows, "end", "extract-slow")
    assert when(rows, "end", "extract-slow") < when(rows, "start", "train-slow")


def test_a_failure_blocks_its_chain_and_nothing_else(tmp_path) -> None:
    """extract -> stage1 -> stage2 -> report for two VFMs; one extraction fails: its chain is blocked (each job
    naming the dependency and its error), the other chain runs to its end."""
    ev = tmp_path / "events"
    todo = []
    for vfm, fail in (("a", ""), ("b", "no such image")):
        todo.append(Job(f"extract-{vfm}", "extract", vfm, recorder(ev, f"extract-{vfm}", fail=fail)))
        for prev, step in (("extract", "stage1"), ("stage1", "stage2"), ("stage2", "report")):
            todo.append(Job(f"{step}-{vfm}", "train", vfm, recorder(ev, f"{step}-{vfm}"), after=[f"{prev}-{vfm}"]))
    state = JobState(tmp_path / "sweep")
    outcome = run_local(todo, state, jobs=2, finished={})
    assert [outcome[f"{s}-a"] for s in ("extract", "stage1", "stage2", "report")] == [DONE] * 4
    assert [outcome[f"{s}-b"] for s in ("extract", "stage1", "stage2", "report")] == [FAILED, BLOCKED, BLOCKED, BLOCKED]
    read = {j.name: state.read(j) for j in todo}
    assert read["extract-b"]["error"] == "error: no such image"
    assert read["stage1-b"]["error"] == "the job it waits for, extract-b failed: error: no such image"
    assert read["stage2-b"]["error"].startswith(
        "the job it waits for, stage1-b is blocked: the job it waits for, extract-b failed"
    )
    assert read["report-b"]["state"] == BLOCKED and read["report-b"]["started"] is None
    rows = events(ev)
    assert {r["job"] for r in rows if r["what"] == "start"} == {
        "extract-a",
        "stage1-a",
        "stage2-a",
        "report-a",
        "extract-b",
    }


def test_a_job_waiting_on_several_starts_after_the_last(tmp_path) -> None:
    ev = tmp_path / "events"
    todo = [
        Job("a", "extract", "a", recorder(ev, "a")),
        Job("b", "extract", "b", recorder(ev, "b")),
        Job("both", "train", "x", recorder(ev, "both"), after=["a", "b"]),
    ]
    assert run_local(todo, JobState(tmp_path / "s"), jobs=3, finished={})["both"] == DONE
    rows = events(ev)
    assert max(when(rows, "end", "a"), when(rows, "end", "b")) < when(rows, "start", "both")


def test_a_dependency_done_in_an_earlier_sweep_counts_as_done(tmp_path) -> None:
    ev = tmp_path / "events"
    todo = [Job("train", "train", "a", recorder(ev, "train"), after=["extract"])]
    assert run_local(todo, JobState(tmp_path / "s"), finished={"extract": DONE})["train"] == DONE


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([Job("a", "train", "x", ["true"], after=["nope"])], r"a waits for nope, which is no job of this sweep"),
        (
            [Job("a", "train", "x", ["true"], after=["b"]), Job("b", "train", "x", ["true"], after=["a"])],
            r"a, b wait for each other in a circle",
        ),
        ([Job("a", "train", "x", ["true"]), Job("a", "train", "y", ["true"])], r"two jobs are named 'a'"),
    ],
)
def test_bad_graphs_are_refused(jobs, message) -> None:
    with pytest.raises(SweepError, match=message):
        check_graph(jobs)


def test_jobs_that_more_work_waits_for_go_first() -> None:
    """The schedule's priority (bottom level): a long chain's head before a lone short job; with costs, the
    expensive extraction before the cheap one."""
    jobs = [
        Job("lone", "train", "x", []),
        Job("e1", "extract", "a", []),
        Job("t1", "train", "a", [], after=["e1"]),
        Job("e2", "extract", "b", []),
        Job("t2", "train", "b", [], after=["e2"]),
        Job("t3", "train", "b", [], after=["t2"]),
    ]
    assert [j.name for j in topological(list(reversed(jobs)))].index("e2") < 3
    levels = bottom_levels(jobs)
    assert levels == {"lone": 1, "e1": 2, "t1": 1, "e2": 3, "t2": 2, "t3": 1}
    costs = {"e1": 100.0, "e2": 10.0}
    levels = bottom_levels(jobs, lambda j: costs.get(j.name, 1.0))
    assert levels["e1"] == 101 and levels["e2"] == 12
