"""`ava reproduce`: the paper's protocol as a chain of jobs on the sweep's executors. Fast: the plan and its refusals,
--dry-run, the local executor's chain (waves after `after`, blocked after a failure) and a killed job run again. Slow:
the whole protocol on a CPU with tiny random models (labelled random), killed mid-way and run again, and stages 1-2
from caption and instruction data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ava.api import reproduce
from ava.errors import AvaError
from tests.helpers import main_streams

LLM = "tiny-random-qwen2"
QUICK = {"llm": LLM, "device": "cpu", "epochs": 1, "batch_size": 4, "lora_r": 8, "max_train": 8, "max_eval": 4}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from ava.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("repro") / "data"
    generate(SynthConfig(out=str(root), per_ava=12, ava=["color", "spatial"], seed=0, size=64), progress=False)
    return root


@pytest.fixture(scope="module")
def stage_data(tmp_path_factory) -> tuple[Path, Path]:
    """Eight caption pairs and eight conversations (`ava head import-captions` / `import-instructions`)."""
    from PIL import Image

    from ava.heads.llm.align import import_captions
    from ava.heads.llm.stage2 import import_instructions

    root = tmp_path_factory.mktemp("stages")
    (root / "img").mkdir()
    caps, convs = [], []
    for i in range(8):
        colour, rgb = [("red", (220, 20, 20)), ("green", (20, 200, 20)), ("blue", (20, 20, 220))][i % 3]
        Image.new("RGB", (32 + i, 32), rgb).save(root / "img" / f"{i}.png")
        human = {"from": "human", "value": "<image>\nGive a brief description of the image."}
        caps.append({"id": f"c{i}", "image": f"{i}.png", "conversations": [human, {"from": "gpt", "value": colour}]})
        ask = {"from": "human", "value": "What colour is it?\n<image>"}
        convs.append({"id": f"v{i}", "image": f"{i}.png", "conversations": [ask, {"from": "gpt", "value": colour}]})
    (root / "caps.json").write_text(json.dumps(caps))
    (root / "convs.json").write_text(json.dumps(convs))
    import_captions(root / "caps.json", root / "img", root / "captions")
    import_instructions(root / "convs.json", root / "img", root / "instructions")
    return root / "captions", root / "instructions"


# -- the plan -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("vfm", ["pixels", "dinov3-l", "siglip2#size=224", "hf:google/siglip2-base-patch16-224"])
def test_a_vfm_the_paper_lacks_is_refused_by_name_before_anything(data, tmp_path, capsys, vfm):
    out = tmp_path / "runs"
    code, _, err = main_streams(
        ["reproduce", "--vfm", f"siglip2,{vfm}", "--data", str(data), "--cache", "c", "--out", str(out)], capsys
    )
    assert code == 2 and f"--vfm '{vfm}': not one of the paper's VFMs" in err and "ava report RUNS --paper" in err
    assert not out.exists() and not Path("c").exists()


def test_unsplit_data_and_missing_stage_data_are_refused(data, tmp_path):
    import shutil

    from ava.data.format import update_info

    unsplit = tmp_path / "unsplit"
    shutil.copytree(data, unsplit)
    update_info(unsplit, split=None)
    with pytest.raises(AvaError, match="not split into train and test .*`ava data split`"):
        reproduce("siglip2", data=unsplit, cache=tmp_path / "c", out=tmp_path / "o", dry_run=True)
    with pytest.raises(AvaError, match="--captions .* has no samples/captions.jsonl .*import-captions"):
        reproduce("siglip2", data=data, cache=tmp_path / "c", out=tmp_path / "o", captions=data, dry_run=True)
    with pytest.raises(AvaError, match="unknown LLM"):
        reproduce("siglip2", data=data, cache=tmp_path / "c", out=tmp_path / "o", llm="qwen-9000", dry_run=True)


def test_dry_run_prints_the_chain_of_stages_and_writes_nothing(data, stage_data, tmp_path, capsys):
    captions, instructions = stage_data
    out = tmp_path / "runs"
    args = ["reproduce", "--vfm", "tiny-siglip2,dinov2", "--data", str(data), "--cache", str(tmp_path / "c")]
    args += ["--out", str(out), "--captions", str(captions), "--instructions", str(instructions), "--dry-run"]
    code, stdout, _ = main_streams(args, capsys)
    assert code == 0 and "nothing was run or written" in stdout
    assert "stage 1: connector alignment on" in stdout and "stage 2: instruction tuning on" in stdout
    result = reproduce(
        ["tiny-siglip2", "dinov2"],
        data=data,
        cache=tmp_path / "c",
        out=out,
        captions=captions,
        instructions=instructions,
        dry_run=True,
    )
    rows = {r["job"]: r for r in result.dry_run}
    assert list(rows)[:2] == ["extract-tiny-siglip2", "extract-captions-tiny-siglip2"]
    assert rows["stage1-dinov2"]["after"] == ["extract-captions-dinov2"]
    assert rows["stage2-dinov2"]["after"] == ["extract-instructions-dinov2", "stage1-dinov2"]
    assert rows["llm-dinov2"]["after"] == ["extract-dinov2", "stage2-dinov2"]
    assert f"--init {out / 'stage2-dinov2'}" in rows["llm-dinov2"]["command"]
    assert f"--init {out / 'stage1-dinov2'}" in rows["stage2-dinov2"]["command"]
    assert rows["report"]["after"] == ["llm-tiny-siglip2", "llm-dinov2"] and "--paper" in rows["report"]["command"]
    assert all(r["runs"] and r["state"] == "pending" for r in rows.values())
    assert not out.exists() and not (tmp_path / "c").exists()


def test_without_caption_or_instruction_data_the_shortcut_is_named(data, tmp_path):
    result = reproduce("siglip2", data=data, cache=tmp_path / "c", out=tmp_path / "o", dry_run=True)
    assert "the shortcut" in result.stages[0] and "LLaVA-665K" in result.stages[0]
    rows = {r["job"]: r for r in result.dry_run}
    assert list(rows) == ["extract-siglip2", "llm-siglip2", "report"]
    assert "--init" not in rows["llm-siglip2"]["command"] and "--llm qwen2-0.5b" in rows["llm-siglip2"]["command"]
    assert "--epochs" not in rows["llm-siglip2"]["command"]  # the paper's settings: ava's defaults


def test_sweep_dry_run_prints_its_jobs_with_the_same_printer_and_writes_nothing(data, tmp_path, capsys):
    out = tmp_path / "runs"
    args = ["sweep", "--vfm", "pixels", "--head", "knn", "--data", str(data), "--cache", str(tmp_path / "c")]
    code, stdout, _ = main_streams([*args, "--out", str(out), "--dry-run"], capsys)
    assert code == 0 and "2 job(s), 2 would run" in stdout and "nothing was run or written" in stdout
    assert "run knn-pixels [train, pending] after extract-pixels" in stdout
    code, stdout, _ = main_streams([*args, "--out", str(out), "--dry-run", "--json"], capsys)
    assert [r["job"] for r in json.loads(stdout)["jobs"]] == ["extract-pixels", "knn-pixels"]
    assert not out.exists()


# -- the executor ---------------------------------------------------------------------------------------------------
def _job(name: str, log: Path, *, fail: bool = False, after: list[str] | None = None):
    from ava.sweep.jobs import Job

    code = f"open({str(log)!r}, 'a').write({name!r} + '\\n')" + ("; import sys; sys.exit(3)" if fail else "")
    return Job(name, "train", "v", [sys.executable, "-c", code], after=after or [])


def test_the_local_executor_runs_a_chain_in_order_and_blocks_what_comes_after_a_failure(tmp_path):
    from ava.sweep.jobs import BLOCKED, DONE, FAILED, JobState
    from ava.sweep.local import run_local

    log = tmp_path / "order"
    todo = [
        _job("s1", log),
        _job("s2", log, after=["s1"]),
        _job("s3", log, after=["s2"]),
        _job("t1", log, fail=True),
        _job("t2", log, after=["t1"]),
        _job("report", log, after=["s3", "t2"]),
    ]
    state = JobState(tmp_path / "state")
    outcome = run_local(todo, state, jobs=2, finished={})
    assert outcome == {"s1": DONE, "s2": DONE, "s3": DONE, "t1": FAILED, "t2": BLOCKED, "report": BLOCKED}
    order = log.read_text().split()
    assert order.index("s1") < order.index("s2") < order.index("s3") and "t2" not in order
    assert state.read(todo[4])["error"].startswith("the job it waits for, t1 failed")


def test_a_job_whose_process_died_is_run_again_and_done_jobs_are_not(tmp_path):
    from types import SimpleNamespace

    from ava.sweep.jobs import RUNNING, Job, JobState
    from ava.sweep.plan import SlurmOptions
    from ava.sweep.run import run_jobs

    log = tmp_path / "order"
    jobs = [_job("a", log), _job("b", log, after=["a"])]
    state = JobState(tmp_path / "state")
    plan = SimpleNamespace(folder=tmp_path / "state", executor="local", jobs=1, slurm=SlurmOptions(), out="runs")
    first = run_jobs(jobs, plan)
    assert first["submitted"] == ["a", "b"]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs: the executor that recorded it was killed
    state.write(jobs[1], state=RUNNING, pid=gone.pid)
    again = run_jobs(jobs, plan)
    assert again["submitted"] == ["b"] and again["skipped"] == ["a"]
    assert log.read_text().split() == ["a", "b", "b"]
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    busy = [jobs[0], Job("b", "train", "v", sleeper, after=["a"])]
    alive = subprocess.Popen(sleeper)
    try:  # a job whose process still runs (another executor's) is left alone
        state.write(busy[1], state=RUNNING, pid=alive.pid)
        assert run_jobs(busy, plan)["submitted"] == []
    finally:
        alive.kill()
        alive.wait()


# -- end to end (slow) ----------------------------------------------------------------------------------------------
def _args(data: Path, out: Path, cache: Path, vfms: str) -> list[str]:
    args = ["--vfm", vfms, "--data", str(data), "--cache", str(cache), "--out", str(out)]
    for k, v in QUICK.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


@pytest.mark.slow
def test_reproduce_on_a_cpu_with_tiny_random_models_killed_mid_way_and_run_again(data, tmp_path):
    out, cache = tmp_path / "runs", tmp_path / "cache"
    env = {**os.environ, "COLUMNS": "200"}
    child = subprocess.Popen(
        [sys.executable, "-m", "ava", "reproduce", *_args(data, out, cache, "tiny-siglip2,tiny-dinov2")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    first_done = out / "reproduce" / "jobs" / "llm-tiny-siglip2.json"
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and child.poll() is None:
            if first_done.is_file() and json.loads(first_done.read_text()).get("state") == "done":
                break
            time.sleep(0.2)
        assert child.poll() is None, "the reproduction ended before the point it is killed at"
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the executor and its running job, at once
        child.wait()
    logs = {p.name: p.stat().st_mtime_ns for p in (out / "reproduce" / "logs").glob("*.log")}
    result = reproduce(["tiny-siglip2", "tiny-dinov2"], data=data, cache=cache, out=out, **QUICK)
    assert {"extract-tiny-siglip2", "extract-tiny-dinov2", "llm-tiny-siglip2"} <= set(result.skipped)
    assert result.submitted[-1] == "report" and "llm-tiny-siglip2" not in result.submitted
    for name in ("extract-tiny-siglip2.log", "llm-tiny-siglip2.log"):
        assert (out / "reproduce" / "logs" / name).stat().st_mtime_ns == logs[name]  # not run again
    assert all(r["state"] == "done" for r in result.jobs), result.jobs
    assert "the shortcut" in result.stages[0]
    (block,) = result.report["published"]
    (cmp,) = block["comparisons"]
    banners = " ".join(cmp["banners"])
    assert "random weights (VFM and LLM)" in banners and "synthetic data" in banners
    line = " ".join(cmp["settings_differ"])
    for setting in (
        "LLM: tiny-random-qwen2 here",
        "LoRA rank: 8 here",
        "epochs: 1 here",
        "global batch: 4 here",
        "stages 1-2: none",
        "dtype: float32 here",
    ):
        assert setting in line, line
    diffs = {d["vfm"]: d for d in result.diff}
    assert set(diffs) == {"tiny-siglip2", "tiny-dinov2"} and set(diffs["tiny-dinov2"]["abilities"]) == {
        "color",
        "spatial",
    }
    assert diffs["tiny-siglip2"]["abilities"]["color"]["inside"] is None  # the paper's SigLIP-2 colour cell: flagged
    md = (out / "report" / "report.md").read_text()
    assert "Ours - published: tiny-dinov2 vs DINOv2" in md and "random weights" in md
    again = reproduce(["tiny-siglip2", "tiny-dinov2"], data=data, cache=cache, out=out, **QUICK)
    assert again.submitted == []  # resumed: everything done


@pytest.mark.slow
def test_reproduce_runs_stages_1_and_2_from_caption_and_instruction_data(data, stage_data, tmp_path):
    captions, instructions = stage_data
    out = tmp_path / "runs"
    result = reproduce(
        "tiny-siglip2",
        data=data,
        cache=tmp_path / "cache",
        out=out,
        captions=captions,
        instructions=instructions,
        **QUICK,
    )
    assert all(r["state"] == "done" for r in result.jobs), result.jobs
    assert [r["job"] for r in result.jobs][3:] == [
        "stage1-tiny-siglip2",
        "stage2-tiny-siglip2",
        "llm-tiny-siglip2",
        "report",
    ]
    run = json.loads((out / "llm-tiny-siglip2" / "run.json").read_text())
    assert run["init"] == str(out / "stage2-tiny-siglip2")
    assert run["llm_random_weights"] and run["llm_base"] == LLM  # the stage-2 LLM was tuned from a random one
    (cmp,) = result.report["published"][0]["comparisons"]
    line = " ".join(cmp["settings_differ"])
    assert "LLM: tiny-random-qwen2 here" in line and f"stages 1-2: from {out / 'stage2-tiny-siglip2'} here" in line
    assert "random weights (VFM and LLM)" in " ".join(cmp["banners"])


def _slurm_up() -> bool:
    import shutil

    if shutil.which("sinfo") is None:
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return any(s.strip() in ("idle", "mixed", "mix", "allocated", "alloc") for s in out.stdout.split())


@pytest.mark.slow
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM cluster answers here (start one: bash .ci/slurm-up.sh)")
def test_reproduce_on_slurm_chains_the_jobs_by_dependency_and_a_rerun_reports(data, tmp_path):
    pytest.importorskip("submitit")
    partition = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True).stdout.split()[0]
    options = {"executor": "slurm", "slurm": {"partition": partition.rstrip("*"), "time_min": 20}, **QUICK}
    out = tmp_path / "runs"
    first = reproduce("tiny-dinov2", data=data, cache=tmp_path / "cache", out=out, **options)
    assert first.submitted == ["extract-tiny-dinov2", "llm-tiny-dinov2", "report"] and first.report is None
    ids = {r["job"]: r["slurm_id"] for r in first.jobs}
    assert all(ids.values())
    from ava.reproduce import ReproducePlan, plan_jobs
    from ava.sweep.plan import SlurmOptions
    from ava.sweep.run import job_status

    settings = {k: v for k, v in options.items() if k not in ("executor", "slurm")}
    plan = ReproducePlan(
        ["tiny-dinov2"],
        str(data),
        str(tmp_path / "cache"),
        str(out),
        executor="slurm",
        slurm=SlurmOptions(**options["slurm"]),
        **settings,
    )
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:  # each job's state as SLURM says it (queue, then the result file)
        rows = job_status(plan_jobs(plan), plan.folder, "")["jobs"]
        if all(r["state"] in ("done", "failed", "blocked") for r in rows):
            break
        time.sleep(3)
    again = reproduce("tiny-dinov2", data=data, cache=tmp_path / "cache", out=out, **options)
    assert again.submitted == [] and all(r["state"] == "done" for r in again.jobs), again.jobs
    assert again.diff and again.diff[0]["vfm"] == "tiny-dinov2"


def test_an_llm_tuned_in_stage_2_from_a_random_llm_stays_labelled_random(tmp_path):
    """Stage 3 from a stage-2 directory loads the LLM from that directory: what it was tuned from, and that its
    weights were random, come with it (else a reproduction with a random LLM would read as a real one)."""
    import shutil

    from ava.heads.llm.llms import LLMS, TEMPLATE_FILE, build_random_llm, load_llm

    stage2 = tmp_path / "stage2"
    shutil.copytree(build_random_llm(LLMS.get(LLM)), stage2)
    described = {"template": "qwen2_base", "stage": 2, "tuned_from": LLM, "llm_random_weights": True}
    (stage2 / TEMPLATE_FILE).write_text(json.dumps(described))
    _, _, info = load_llm(str(stage2))
    assert info["llm_random_weights"] is True and info["llm_base"] == LLM
    (stage2 / TEMPLATE_FILE).write_text(json.dumps({"template": "qwen2_base"}))  # a directory from elsewhere
    _, _, info = load_llm(str(stage2))
    assert info["llm_random_weights"] is False and "llm_base" not in info
