"""`ava sweep`: the plan (options or TOML, checked before any job), the local executor end to end (resumable: a rerun
runs only what failed or changed), and a real one-node SLURM cluster through submitit (`.ci/slurm-up.sh`; skipped
when no cluster answers here)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ava.sweep.jobs import plan_jobs
from ava.sweep.plan import SweepError, load_plan, make_plan, plan_toml, write_plan
from ava.sweep.run import status, sweep
from tests.helpers import Cli, slurm_up


def _fields(data: Path, tmp: Path, **kw: object) -> dict:
    return {
        "vfm": "pixels",
        "head": "knn",
        "data": str(data),
        "cache": str(tmp / "cache"),
        "out": str(tmp / "runs"),
        "device": "cpu",
        **kw,
    }


def test_plan_round_trips_through_toml_and_makes_one_job_per_cell(cache_data: Path, tmp_path: Path) -> None:
    plan = make_plan(
        _fields(
            cache_data,
            tmp_path,
            vfm="pixels,random-vit",
            head=["knn", "linear"],
            ava=[["color", "counting"], ["color"]],
        )
    )
    assert plan.head == ["knn", "probe-linear"] and plan.ava == [["color", "counting"], ["color"]]  # "linear": an alias
    assert load_plan(write_plan(plan)) == plan
    assert "[slurm]" in plan_toml(plan)
    names = [j.name for j in plan_jobs(plan)]
    assert names[:2] == ["extract-pixels", "extract-random-vit"] and len(names) == 2 + 2 * 2 * 2
    assert "probe-linear-random-vit-color+counting" in names
    job = next(j for j in plan_jobs(plan) if j.name == "knn-pixels-color")
    assert job.argv[1:] == [
        "-m",
        "ava",
        "head",
        "train",
        "--head",
        "knn",
        "--vfm",
        "pixels",
        "--data",
        str(cache_data),
        "--cache",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "runs" / "knn-pixels-color"),
        "--device",
        "cpu",
        "--ava",
        "color",
    ]


def test_the_zero_shot_head_needs_no_cache_nor_extraction(cache_data: Path, tmp_path: Path) -> None:
    """The zero-shot head runs the VFM's own towers: its jobs get no --cache (which it refuses) and wait for no
    extraction; a plan of zero-shot alone extracts nothing."""
    jobs = plan_jobs(make_plan(_fields(cache_data, tmp_path, head=["zero-shot", "knn"])))
    zs = next(j for j in jobs if j.head == "zero-shot")
    assert "--cache" not in zs.argv and zs.needs is None
    assert next(j for j in jobs if j.head == "knn").needs == "extract-pixels"
    assert [j.kind for j in plan_jobs(make_plan(_fields(cache_data, tmp_path, head="zero-shot")))] == ["train"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vfm": "no-such-vfm"}, r"--vfm 'no-such-vfm'"),
        ({"head": "knm"}, r"unknown head 'knm'"),
        ({"ava": "colr,counting"}, r"colr"),
        ({"executor": "k8s"}, r"--executor 'k8s': use one of local, slurm"),
        ({"jobs": 0}, r"--jobs must be >= 1"),
        ({"bogus": 1}, r"unknown field\(s\) bogus"),
        (
            {"vfm": "open_clip:PE-Core-B-16:random", "head": "zero-shot,knn"},
            r"open_clip models serve the zero-shot head",
        ),
    ],
)
def test_bad_plans_are_refused_before_any_job(cache_data: Path, tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(SweepError, match=message):
        make_plan(_fields(cache_data, tmp_path, **change))
    assert not (tmp_path / "runs").exists()


def test_a_plan_file_that_is_not_toml_is_named(tmp_path: Path) -> None:
    (tmp_path / "plan.toml").write_text("vfm = [unclosed")
    with pytest.raises(SweepError, match=r"plan.toml: not a TOML plan"):
        load_plan(tmp_path / "plan.toml")


@pytest.mark.slow
def test_local_sweep_runs_each_job_once_and_reruns_only_the_failed(cache_data: Path, tmp_path: Path, cli: Cli) -> None:
    plan_file = tmp_path / "grid.toml"
    plan_file.write_text(
        f'vfm = ["pixels"]\nhead = ["knn"]\nava = [["color", "counting"], ["ocr"]]\n'
        f'data = "{cache_data}"\ncache = "{tmp_path / "cache"}"\nout = "{tmp_path / "runs"}"\n'
        f'device = "cpu"\njobs = 2\n'
    )
    code, output = cli(["sweep", "--plan", str(plan_file)])
    assert code == 1, output  # the ocr job fails: the data has no ocr samples
    rows = {r["job"]: r for r in status(load_plan(tmp_path / "runs"))["jobs"]}
    assert rows["extract-pixels"]["state"] == rows["knn-pixels-color+counting"]["state"] == "done"
    assert rows["knn-pixels-color+counting"]["results"] == [
        str(tmp_path / "runs/knn-pixels-color+counting/results_test.json")
    ]
    failed = rows["knn-pixels-ocr"]
    log = str(tmp_path / "runs/sweep/logs/knn-pixels-ocr.log")
    assert failed["state"] == "failed" and failed["log"] == log
    assert failed["error"].startswith("error: dataset") and "no samples for ability 'ocr'" in failed["error"]
    line = next(ln for ln in output.splitlines() if ln.startswith("failed    knn-pixels-ocr "))
    assert f" log {log}: error: dataset" in line  # no estimate: the data has no ocr samples
    done = next(ln for ln in output.splitlines() if ln.startswith("done      knn-pixels-color+counting "))
    assert "(est " in done  # its time beside its estimate
    stamp = (tmp_path / "runs/sweep/logs/knn-pixels-color+counting.log").stat().st_mtime_ns
    again = sweep(load_plan(tmp_path / "runs"))
    assert again["submitted"] == ["knn-pixels-ocr"]  # only the failed job ran again
    assert (tmp_path / "runs/sweep/logs/knn-pixels-color+counting.log").stat().st_mtime_ns == stamp
    code, output = cli(["sweep", "status", str(tmp_path / "runs"), "--json"])
    assert code == 0 and json.loads(output)["counts"] == {"done": 2, "failed": 1}


def test_local_executor_logs_each_job_and_blocks_those_whose_extraction_failed(tmp_path: Path) -> None:
    """The local executor's bookkeeping, with jobs that are tiny Python processes: a job's output goes to its log, its
    exit code decides done/failed, the failure's line is kept, and a training job waiting for a failed extraction
    is blocked (never run)."""
    from ava.sweep.jobs import BLOCKED, DONE, FAILED, Job, JobState
    from ava.sweep.local import run_local

    ok = [sys.executable, "-c", "print('extracted')"]
    bad = [sys.executable, "-c", "import sys; print('error: no such image'); sys.exit(2)"]
    marker = tmp_path / "ran"
    touch = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    todo = [
        Job("extract-a", "extract", "a", ok),
        Job("extract-b", "extract", "b", bad),
        Job("knn-a", "train", "a", ok, needs="extract-a"),
        Job("knn-b", "train", "b", touch, needs="extract-b"),
    ]
    state = JobState(tmp_path / "sweep")
    outcome = run_local(todo, state, jobs=2, finished={})
    assert outcome == {"extract-a": DONE, "extract-b": FAILED, "knn-a": DONE, "knn-b": BLOCKED}
    assert state.read(todo[1])["error"] == "error: no such image" and state.read(todo[1])["rc"] == 2
    assert "extracted" in state.log(todo[0]).read_text() and state.read(todo[0])["rc"] == 0
    assert state.read(todo[3])["error"] == "its extraction extract-b failed: error: no such image"
    assert not marker.exists()  # the blocked job never ran


def test_slurm_states_come_from_the_queue_then_from_the_result_file(tmp_path: Path) -> None:
    """How a submitted job's state is read back without accounting: squeue's line while it is listed, then the
    result file submitit writes when it ends; gone from the queue without one: failed (killed)."""
    import pickle

    from ava.sweep.jobs import DONE, FAILED, RUNNING, SUBMITTED, Job, JobState
    from ava.sweep.slurm import refresh_slurm

    state = JobState(tmp_path / "sweep")
    log = tmp_path / "job.out"
    log.write_text("starting\nerror: --data d: no such dataset directory\n")

    def submitted(name: str, job_id: str) -> tuple[Job, dict]:
        job = Job(name, "train", "pixels", ["ava"])
        return job, state.write(
            job, state=SUBMITTED, job_id=job_id, log=str(log), result_file=str(tmp_path / f"{job_id}_result.pkl")
        )

    job, record = submitted("queued", "7")
    assert refresh_slurm(job, record, state, {"7": "PENDING"})["state"] == SUBMITTED
    assert refresh_slurm(job, record, state, {"7": "RUNNING"})["state"] == RUNNING
    job, record = submitted("finished", "8_1")
    (tmp_path / "8_1_result.pkl").write_bytes(pickle.dumps(("success", None)))
    assert refresh_slurm(job, record, state, {})["state"] == DONE
    job, record = submitted("raised", "9")
    (tmp_path / "9_result.pkl").write_bytes(pickle.dumps(("error", "Traceback ...\nRuntimeError: boom")))
    failed = refresh_slurm(job, record, state, {})
    assert failed["state"] == FAILED and failed["error"] == "error: --data d: no such dataset directory"
    job, record = submitted("killed", "10")
    gone = refresh_slurm(job, record, state, {})
    assert gone["state"] == FAILED and gone["error"].startswith("gone from the queue without a result")


# -- a real SLURM cluster -----------------------------------------------------------------------------------------
slurm = pytest.mark.skipif(not slurm_up(), reason="no SLURM cluster answers here (start one: bash .ci/slurm-up.sh)")


@slurm
def test_a_missing_partition_is_refused_before_any_job(cache_data: Path, tmp_path: Path, cli: Cli) -> None:
    pytest.importorskip("submitit")
    args = [
        "sweep",
        "--vfm",
        "pixels",
        "--head",
        "knn",
        "--data",
        str(cache_data),
        "--cache",
        str(tmp_path / "c"),
        "--out",
        str(tmp_path / "runs"),
        "--executor",
        "slurm",
        "--partition",
        "no-such-partition",
    ]
    code, output = cli(args)
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert output.startswith("error: --partition 'no-such-partition': no such SLURM partition (partitions: ")
    assert not (tmp_path / "runs").exists()


@slurm
@pytest.mark.slow
def test_slurm_sweep_runs_through_submitit_and_a_rerun_submits_nothing(cache_data: Path, tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    partition = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True).stdout.split()[0]
    plan = make_plan(
        _fields(
            cache_data,
            tmp_path,
            executor="slurm",
            ava="color,counting",
            slurm={"partition": partition.rstrip("*"), "time_min": 10},
        )
    )
    first = sweep(plan)
    assert first["submitted"] == ["extract-pixels", "knn-pixels"]
    assert all(r["slurm_id"] for r in first["jobs"])
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        rows = status(plan)["jobs"]
        if all(r["state"] in ("done", "failed") for r in rows):
            break
        time.sleep(2)
    assert [r["state"] for r in rows] == ["done", "done"], rows
    assert rows[1]["results"] == [str(tmp_path / "runs/knn-pixels/results_test.json")]
    assert Path(rows[1]["log"]).is_file()
    assert sweep(plan)["submitted"] == []  # idempotent
    report = subprocess.run(
        [sys.executable, "-m", "ava", "report", str(tmp_path / "runs/knn-pixels"), "--out", str(tmp_path / "report")],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr


# -- plan files with fields of the wrong type, names that collide, secrets in URLs ---------------------------------
GOOD = 'vfm = ["pixels"]\nhead = ["knn"]\ndata = "{data}"\ncache = "{cache}"\nout = "{out}"\n'


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('jobs = "two"', r"grid.toml: jobs must be an integer, not 'two'"),
        ("jobs = true", r"grid.toml: jobs must be an integer, not True"),
        ("slurm = 5", r"grid.toml: slurm must be a table \(\[slurm\] with partition, gpus_per_job ...\), not 5"),
        ('executor = ["local"]', r"grid.toml: executor must be a string \(local or slurm\), not \['local'\]"),
        ("device = 0", r"grid.toml: device must be a string \(auto, cpu, cuda ...\), not 0"),
        ('[slurm]\ntime_min = "an hour"', r"grid.toml: \[slurm\] time_min must be an integer, not 'an hour'"),
        ("[slurm]\npartition = 3", r"grid.toml: \[slurm\] partition must be a string, not 3"),
    ],
)
def test_a_plan_field_of_the_wrong_type_is_named_with_its_file(
    cache_data: Path, tmp_path: Path, extra: str, message: str
) -> None:
    text = GOOD.format(data=cache_data, cache=tmp_path / "c", out=tmp_path / "runs")
    (tmp_path / "grid.toml").write_text(text + extra + "\n")
    with pytest.raises(SweepError, match=message):
        load_plan(tmp_path / "grid.toml")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("vfm", ["pixels", "pixels"], r"vfm 'pixels' is listed twice"),
        ("head", ["knn", "knn"], r"head 'knn' is listed twice"),
        ("head", ["knn", "kNN"], r"head 'knn' is listed twice"),  # one head by two spellings
        ("ava", [["color"], ["color"]], r"ava 'color' is listed twice"),
        ("ava", [["color", "Color"]], r"ability 'color' is listed twice in the set"),
        ("vfm", ["hf:org/model", "hf:org_model"], r"--vfm 'hf:org/model' and --vfm 'hf:org_model' would share"),
        ("vfm", ["timm:a.b/c", "timm:a.b_c"], r"'timm:a.b/c' and --vfm 'timm:a.b_c' would share"),
    ],
)
def test_names_that_would_collide_are_refused_naming_both(
    cache_data: Path, tmp_path: Path, field: str, value: list, message: str
) -> None:
    with pytest.raises(SweepError, match=message):
        make_plan(_fields(cache_data, tmp_path, **{field: value}))
    assert not (tmp_path / "runs").exists()


def test_a_credential_in_the_cache_url_is_refused_and_never_echoed(cache_data: Path, tmp_path: Path, cli: Cli) -> None:
    args = [
        "sweep",
        "--vfm",
        "pixels",
        "--head",
        "knn",
        "--data",
        str(cache_data),
        "--cache",
        "s3://AKIAEXAMPLE:wJalr/XUtnFEMI+K7MDENG@bucket/features",
        "--out",
        str(tmp_path / "runs"),
    ]
    code, output = cli(args)
    assert code == 2 and "s3://***@bucket/features" in output and "a credential written into the URL" in output
    assert "wJalr" not in output and "AKIAEXAMPLE" not in output
    assert not (tmp_path / "runs").exists()  # nothing written: no plan, no log holding the URL


def _ran_before(plan, name: str, argv: list[str]) -> None:
    """A job record as an earlier sweep left it, and its run directory."""
    from ava.sweep.jobs import DONE, Job, JobState

    job = next((j for j in plan_jobs(plan) if j.name == name), None) or Job(name, "train", "pixels", argv)
    JobState(plan.folder).write(Job(**{**job.__dict__, "argv": argv}), state=DONE, log="x.log")
    Path(plan.out, name).mkdir(parents=True, exist_ok=True)


def test_a_second_sweep_with_other_settings_names_them_and_force_replaces(
    cache_data: Path, tmp_path: Path, monkeypatch, cli: Cli
) -> None:
    """`ava sweep --ava color` then `--ava ocr` into one --out: the same run directory with another command."""
    import ava.sweep.local

    ran: list[list[str]] = []
    monkeypatch.setattr(ava.sweep.local, "run_local", lambda todo, *a, **k: ran.extend(j.argv for j in todo))
    first = make_plan(_fields(cache_data, tmp_path, ava="color"))
    old = next(j for j in plan_jobs(first) if j.name == "knn-pixels").argv
    write_plan(first)
    _ran_before(first, "knn-pixels", old)
    _ran_before(first, "extract-pixels", [])
    args = [
        "sweep",
        "--vfm",
        "pixels",
        "--head",
        "knn",
        "--ava",
        "ocr",
        "--data",
        str(cache_data),
        "--cache",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "runs"),
        "--device",
        "cpu",
    ]
    code, output = cli(args)
    assert code == 2 and not ran, output
    assert "job knn-pixels ran before with other settings (--ava color there, ocr now)" in output
    assert "give --force" in output and "another --out" in output
    assert load_plan(tmp_path / "runs") == first  # the refused sweep left the first plan as it was
    code, output = cli([*args, "--force"])
    assert ran and ran[-1][-3:] == ["--ava", "ocr", "--force"], output
    second = load_plan(tmp_path / "runs")
    assert second.ava == [["ocr"]]
    # an earlier plan's job, not in this one, is still shown by `sweep status`
    _ran_before(first, "knn-pixels-color+counting", ["python", "-m", "ava", "head", "train"])
    rows = {r["job"]: r for r in status(second)["jobs"]}
    assert rows["knn-pixels-color+counting"]["current"] is False and rows["knn-pixels"]["current"] is True


def test_the_local_executor_says_when_each_job_starts_and_ends(tmp_path: Path, capsys) -> None:
    from ava.sweep.jobs import Job, JobState
    from ava.sweep.local import run_local

    ok = [sys.executable, "-c", "print('extracted')"]
    bad = [sys.executable, "-c", "import sys; print('error: no such image'); sys.exit(2)"]
    todo = [
        Job("extract-a", "extract", "a", ok),
        Job("extract-b", "extract", "b", bad),
        Job("knn-b", "train", "b", ok, needs="extract-b"),
    ]
    state = JobState(tmp_path / "sweep")
    run_local(todo, state, jobs=1, finished={}, progress=True)
    err = " ".join(capsys.readouterr().err.split())
    assert f"running extract-a (log {state.log(todo[0])})" in err and "done extract-a in" in err
    assert "failed extract-b in" in err and "(exit 2): error: no such image" in err
    assert "blocked knn-b: its extraction extract-b failed" in err
