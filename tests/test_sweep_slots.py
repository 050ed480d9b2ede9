"""GPU slots of a local sweep on one node, tested on a CPU machine: the machine's GPUs are described through
``AVA_GPU_INVENTORY`` (nvidia-smi's format), never their results; each job is a tiny process recording the
``CUDA_VISIBLE_DEVICES``, threads and CPUs it was given, and waiting for known points (another job's start, a file)
so that what ran at once is proven by the jobs themselves."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from ava.sweep.gpus import GPU, choose, parse_inventory, visible
from ava.sweep.jobs import BLOCKED, DONE, FAILED, Job, JobState
from ava.sweep.local import run_local
from ava.sweep.plan import SweepError, make_plan
from ava.sweep.slots import Slots, cpu_ranges, parse_cpus
from tests.helpers import events, gpu_inventory, recorder, run_cli, when


@pytest.fixture
def data(cache_data_6: Path) -> Path:
    return cache_data_6


def H100(i: int, free: float = 80.0) -> GPU:
    return GPU(str(i), "NVIDIA H100 80GB HBM3", 81920.0, free * 1024, f"GPU-{i}")


# -- the slots ------------------------------------------------------------------------------------------------
def test_jobs_spread_over_the_gpus_before_sharing_one(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # a cap the user sets (tested below); torch sets it too
    slots = Slots(4, ["0", "1"], per_gpu=2, cpus=list(range(8)), usable=8)
    job = Job("j", "train", "v", [])
    leases = [slots.take(job) for _ in range(4)]
    assert [lease.gpus for lease in leases] == [("0",), ("1",), ("0",), ("1",)]
    assert slots.take(job) is None  # 4 jobs at once, 2 per GPU: full
    assert [lease.cpus for lease in leases] == [(0, 1), (2, 3), (4, 5), (6, 7)] and leases[0].threads == 2
    slots.give(leases[1])
    assert slots.take(job).gpus == ("1",)


def test_a_multi_gpu_job_takes_distinct_gpus_and_their_share_of_cpus(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    slots = Slots(4, ["0", "1", "2", "3"], cpus=list(range(8)), usable=8)
    extract = Job("e", "extract", "v", [], gpus=3)
    lease = slots.take(extract)
    assert lease.gpus == ("0", "1", "2") and lease.cpus == tuple(range(6)) and lease.threads == 6
    assert lease.env()["CUDA_VISIBLE_DEVICES"] == "0,1,2" and lease.env()["OMP_NUM_THREADS"] == "6"
    assert slots.take(extract) is None and slots.take(Job("t", "train", "v", [])).gpus == ("3",)


def test_one_job_at_a_time_keeps_the_machine_whole() -> None:
    lease = Slots(1, cpus=[0, 1, 2, 3], usable=4).take(Job("j", "train", "v", []))
    assert lease.cpus == () and lease.threads is None and lease.env() == {}


def test_omp_num_threads_set_for_the_sweep_caps_each_jobs_threads(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    lease = Slots(2, cpus=list(range(8)), usable=8).take(Job("j", "train", "v", []))
    assert lease.threads == 1 and lease.cpus == (0, 1, 2, 3)


def test_cpu_lists_read_and_written_as_taskset_does() -> None:
    assert cpu_ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8" and parse_cpus("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]


# -- the machine's GPUs ----------------------------------------------------------------------------------------
def test_the_inventory_is_nvidia_smis_and_cuda_visible_devices_narrows_it() -> None:
    gpus = parse_inventory(
        "0, NVIDIA H100 80GB HBM3, 81559, 80000, GPU-aaa\n1, NVIDIA H200, [N/A], [N/A], GPU-bbb\n", "x"
    )
    assert gpus[0].kind == "nvidia-h100" and gpus[1].kind == "nvidia-h200" and gpus[1].free_mb is None
    assert [g.id for g in visible(gpus, "1")] == ["1"] and visible(gpus, "GPU-aaa")[0].name == "NVIDIA H100 80GB HBM3"
    assert visible(gpus, "MIG-1")[0] == GPU("MIG-1")  # an entry nvidia-smi does not list: passed on as it is
    with pytest.raises(SweepError, match=r"line 1 is not 'index, name"):
        parse_inventory("NVIDIA H100\n", "x")


def test_a_gpu_another_process_fills_is_named_and_skipped() -> None:
    gpus = [H100(0), H100(1, free=3.0), H100(2), H100(3)]
    chosen = choose("all", gpus)
    assert [g.id for g in chosen.gpus] == ["0", "2", "3"]
    assert chosen.skipped == [
        "GPU 1 (NVIDIA H100 80GB HBM3: 3.0 of 80.0 GB free, under 72.0; another process holds it)"
    ]
    assert [g.id for g in choose("2", gpus).gpus] == ["0", "2"]  # a count: the first with room
    assert [g.id for g in choose("1,3", gpus).gpus] == ["3"]
    assert [g.id for g in choose("1,3,", gpus, min_free_gb=2.0).gpus] == ["1", "3"]
    with pytest.raises(SweepError, match=r"--gpus 1,: every GPU asked for is in use by another process: GPU 1"):
        choose("1,", gpus)


def test_this_sweeps_own_running_jobs_do_not_make_a_gpu_busy() -> None:
    gpus = [H100(0, free=1.0), H100(1)]
    assert [g.id for g in choose("all", gpus, held={"0"}).gpus] == ["0", "1"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0,0", r"--gpus 0,0: GPU 0 is listed twice"),
        ("-1", r"--gpus -1: give all, a count \(--gpus 4\), or GPU numbers"),
        ("9", r"--gpus 9: this machine has 4 GPU\(s\) \(0, 1, 2, 3\)"),
        ("1,7", r"--gpus 1,7: GPU 7 is not on this machine \(its GPUs: 0, 1, 2, 3\)"),
        ("two", r"--gpus two: give all"),
    ],
)
def test_gpus_a_four_gpu_machine_cannot_give_are_refused(spec: str, message: str) -> None:
    with pytest.raises(SweepError, match=message):
        choose(spec, [H100(i) for i in range(4)])


def test_a_dry_run_plans_for_gpus_this_machine_lacks() -> None:
    assert [g.id for g in choose("0,2,5", [], dry_run=True).gpus] == ["0", "2", "5"]
    planned = choose("all", [], dry_run=True)
    assert len(planned.gpus) == 8 and planned.planned and "no GPU here: gpus = all planned as 8 GPUs" in planned.note
    assert len(choose("6", [H100(0)], dry_run=True).gpus) == 6
    with pytest.raises(SweepError, match=r"--gpus all: this machine has no GPU"):
        choose("all", [])


# -- the plan's GPU options ------------------------------------------------------------------------------------
def _fields(data: Path, tmp: Path, **kw: object) -> dict:
    return {"vfm": "pixels", "head": "knn", "data": str(data), "cache": str(tmp / "c"), "out": str(tmp / "runs"), **kw}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpus": "2", "gpus_per_extract": 3}, r"--gpus-per-extract 3 is more than the 2 GPU\(s\) of --gpus 2"),
        ({"gpus": "0,1", "jobs": 3}, r"--jobs 3 is more than the 2 GPU slot\(s\) of --gpus 0,1 .*--jobs-per-gpu"),
        ({"gpus_per_extract": 2}, r"--gpus-per-extract needs --gpus"),
        ({"jobs_per_gpu": 0, "gpus": "2"}, r"--jobs-per-gpu must be >= 1"),
        ({"gpus": "2", "device": "cpu"}, r"--device cpu with --gpus: each job sees only its own GPU"),
        ({"gpus": "2", "device": "cuda:1"}, r"--device cuda:1 with --gpus"),
        ({"gpus": "2", "executor": "slurm"}, r"--gpus is for --executor local"),
        ({"gpus": "-1"}, r"--gpus -1: give all"),
    ],
)
def test_gpu_options_no_machine_could_satisfy_are_refused_with_the_plan(data, tmp_path, change, message) -> None:
    with pytest.raises(SweepError, match=message):
        make_plan(_fields(data, tmp_path, **change))


def test_a_plans_gpus_may_be_all_a_count_or_a_list(data, tmp_path) -> None:
    from ava.sweep.plan import load_plan, write_plan

    for value, text in (("all", "all"), (4, "4"), ([0, 2, 5], "0,2,5,"), ([3], "3,")):
        plan = make_plan(_fields(data, tmp_path, gpus=value))
        assert plan.gpus == text and load_plan(write_plan(plan)).gpus == text


def test_a_plan_with_gpus_all_on_a_cpu_machine_is_refused_and_a_dry_run_plans_it(
    data, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("AVA_GPU_INVENTORY", str(gpu_inventory(tmp_path / "none.csv", [])))
    monkeypatch.setenv("AVA_HOME", str(tmp_path / "home"))
    plan = tmp_path / "grid.toml"
    plan.write_text(
        f'vfm = ["pixels"]\nhead = ["knn"]\ndata = "{data}"\ncache = "{tmp_path / "c"}"\n'
        f'out = "{tmp_path / "runs"}"\ngpus = "all"\n'
    )
    code, output = run_cli(["sweep", "--plan", str(plan)], capsys, monkeypatch)
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert output.startswith("error: --gpus all: this machine has no GPU (nvidia-smi lists none)")
    assert not (tmp_path / "runs").exists()
    code, output = run_cli(["sweep", "--plan", str(plan), "--dry-run"], capsys, monkeypatch)
    assert code == 0, output
    assert "no GPU here: gpus = all planned as 8 GPUs" in output and "extract-pixels  0" in output
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "9"], "error: --gpus 9: this machine has 4 GPU(s) (0, 1, 2, 3)"),
        (["--gpus", "0,0"], "error: --gpus 0,0: GPU 0 is listed twice"),
        (["--gpus=-1"], "error: --gpus -1: give all, a count (--gpus 4)"),
        (["--gpus", "2", "--gpus-per-extract", "3"], "error: --gpus-per-extract 3 is more than the 2 GPU(s)"),
        (
            ["--gpus", "all", "--gpus-per-extract", "4"],
            "error: --gpus-per-extract 4 is more than the 3 GPU(s) this sweep has",
        ),
    ],
)
def test_bad_gpu_options_from_the_cli_on_a_four_gpu_machine(data, tmp_path, capsys, monkeypatch, args, message) -> None:
    monkeypatch.setenv("AVA_GPU_INVENTORY", str(gpu_inventory(tmp_path / "gpus.csv", [80, 80, 80, 1])))
    base = ["sweep", "--vfm", "pixels", "--head", "knn", "--data", str(data), "--cache", str(tmp_path / "c")]
    code, output = run_cli([*base, "--out", str(tmp_path / "runs"), *args], capsys, monkeypatch)
    assert code == 2 and output.startswith(message) and len(output.strip().splitlines()) == 1, output
    assert not (tmp_path / "runs").exists()


# -- jobs on their GPUs ----------------------------------------------------------------------------------------
def test_four_jobs_run_at_once_each_on_its_own_gpu(tmp_path) -> None:
    """Each job waits for the next one's start before it ends (a ring): they can only end when all four ran at once;
    each recorded a different CUDA_VISIBLE_DEVICES, one CPU thread of the 4, and its log says so."""
    ev = tmp_path / "events"
    names = [f"knn-{v}" for v in "abcd"]
    todo = [
        Job(n, "train", n[-1], recorder(ev, n, wait_for=f"start {names[(i + 1) % 4]}")) for i, n in enumerate(names)
    ]
    state = JobState(tmp_path / "sweep")
    slots = Slots(4, ["0", "1", "2", "3"])
    assert run_local(todo, state, slots=slots) == dict.fromkeys(names, DONE)
    started = {r["job"]: r for r in events(ev) if r["what"] == "start"}
    assert sorted(r["gpus"] for r in started.values()) == ["0", "1", "2", "3"]
    assert {r["threads"] for r in started.values()} == {str(slots.threads)}
    for job in todo:
        record = state.read(job)
        header = state.log(job).read_text().splitlines()[0]
        assert f"CUDA_VISIBLE_DEVICES={started[job.name]['gpus']}" in header and "OMP_NUM_THREADS=1" in header
        assert record["gpus"] == [started[job.name]["gpus"]] and record["threads"] == 1
        assert started[job.name]["progress"] == str(state.progress_file(job))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin two jobs apart")
def test_jobs_at_once_are_pinned_to_their_own_cpus(tmp_path) -> None:
    """Two jobs at once on two of this machine's CPUs: each runs on its own (its affinity, inherited from the
    wrapper before it started), with one thread."""
    ev = tmp_path / "events"
    cpus = sorted(os.sched_getaffinity(0))[:2]
    todo = [Job(n, "train", "v", recorder(ev, n, wait_for=f"start {o}")) for n, o in (("a", "b"), ("b", "a"))]
    assert set(run_local(todo, JobState(tmp_path / "s"), slots=Slots(2, cpus=cpus, usable=2)).values()) == {DONE}
    started = [r for r in events(ev) if r["what"] == "start"]
    assert sorted(r["cpus"] for r in started) == [str(c) for c in cpus] and {r["threads"] for r in started} == {"1"}


def test_never_two_jobs_on_one_gpu_unless_asked(tmp_path) -> None:
    """Six jobs, two GPUs: on each GPU one job ends before the next starts; with two jobs per GPU four run at once
    (the ring of four proves it)."""
    ev = tmp_path / "events"
    todo = [Job(f"j{i}", "train", "v", recorder(ev, f"j{i}")) for i in range(6)]
    run_local(todo, JobState(tmp_path / "s1"), slots=Slots(2, ["0", "1"]))
    rows = events(ev)
    for gpu in ("0", "1"):
        on = [r["job"] for r in rows if r["what"] == "start" and r["gpus"] == gpu]
        for a, b in itertools.pairwise(on):
            assert when(rows, "end", a) < when(rows, "start", b)
    ev2 = tmp_path / "events2"
    names = [f"k{i}" for i in range(4)]
    ring = [Job(n, "train", "v", recorder(ev2, n, wait_for=f"start {names[(i + 1) % 4]}")) for i, n in enumerate(names)]
    assert set(run_local(ring, JobState(tmp_path / "s2"), slots=Slots(4, ["0", "1"], per_gpu=2)).values()) == {DONE}
    assert sorted(r["gpus"] for r in events(ev2) if r["what"] == "start") == ["0", "0", "1", "1"]


def test_a_job_killed_while_holding_its_gpu_frees_it_and_blocks_what_waits(tmp_path) -> None:
    ev = tmp_path / "events"
    todo = [
        Job("extract-a", "extract", "a", recorder(ev, "extract-a", fail="SIGKILL")),
        Job("knn-a", "train", "a", recorder(ev, "knn-a"), after=["extract-a"]),
        Job("extract-b", "extract", "b", recorder(ev, "extract-b", wait_for="start extract-a")),
        Job("knn-b", "train", "b", recorder(ev, "knn-b"), after=["extract-b"]),
        Job("knn-c", "train", "c", recorder(ev, "knn-c")),
    ]
    state = JobState(tmp_path / "sweep")
    outcome = run_local(todo, state, slots=Slots(1, ["0"]))
    assert outcome == {"extract-a": FAILED, "knn-a": BLOCKED, "extract-b": DONE, "knn-b": DONE, "knn-c": DONE}
    killed = state.read(todo[0])
    assert killed["rc"] == -9 and killed["error"].startswith("killed by SIGKILL (out of memory?")
    assert state.read(todo[1])["error"].startswith("the job it waits for, extract-a failed: killed by SIGKILL")
    assert {r["gpus"] for r in events(ev) if r["what"] == "start"} == {"0"}  # the one GPU, free again after the kill


@pytest.mark.slow
def test_an_extraction_on_two_gpus_runs_under_torchrun(tmp_path) -> None:
    """``gpus=2`` on a sweep with GPUs: the command runs as two torchrun ranks, both seeing the job's two GPUs."""
    pytest.importorskip("torch.distributed.run")
    ev = tmp_path / "events"
    todo = [Job("extract-a", "extract", "a", recorder(ev, "extract-a"), gpus=2)]
    state = JobState(tmp_path / "sweep")
    assert run_local(todo, state, slots=Slots(2, ["0", "1"]))["extract-a"] == DONE, state.log(todo[0]).read_text()
    starts = [r for r in events(ev) if r["what"] == "start"]
    assert sorted(r["rank"] for r in starts) == ["0", "1"] and {r["gpus"] for r in starts} == {"0,1"}
    assert "-m torch.distributed.run --standalone --nproc_per_node=2" in state.log(todo[0]).read_text()
    assert sys.executable in state.log(todo[0]).read_text()
