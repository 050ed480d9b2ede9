"""The scripts under ``benchmarks/`` checked on the CPU: ``gpu.sh run``'s options (``--only`` runs the named stages
and says the others were skipped, so a second device call after a fix reruns what the fix touched; a wrong option
or stage name is refused before anything runs), the summary of a run's figures, and the benchmarks' own parts
(stand-in data, estimates, the preflight's GPU tests, the CUDA-graph buckets) at small sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO, D, T, benchmark_module, encoded_prompts, tiny_llm_head, varlen_2_11


def _gpu_sh(out: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu.sh"), "run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--dry-run", "--only", "llm,gpu"], "--only: no stage 'gpu'"),
        (["--dry-run", "--only"], "--only needs stage names"),
        (["--dry-run", "--only", ""], "--only needs stage names"),
        (["--dryrun"], "unknown option '--dryrun'"),
    ],
)
def test_a_wrong_option_is_refused_before_any_stage(tmp_path: Path, args: list[str], said: str) -> None:
    done = _gpu_sh(tmp_path / "out", *args, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
    assert "==" not in done.stdout  # no stage started
    assert not (tmp_path / "out" / "stages.jsonl").exists() or not (tmp_path / "out" / "stages.jsonl").read_text()


@pytest.mark.slow
def test_only_runs_the_named_stage_and_records_the_others_as_skipped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _gpu_sh(out, "--dry-run", "--only", "cache")
    assert done.returncode == 0, done.stdout + done.stderr
    stages = [json.loads(line) for line in (out / "stages.jsonl").read_text().splitlines()]
    assert [s["stage"] for s in stages] == ["preflight", "llm", "cache", "fingerprint"]
    assert [s.get("skipped", False) for s in stages] == [True, True, False, True]
    assert stages[2]["exit"] == 0
    assert (out / "cache.json").exists() and not (out / "llm.json").exists()
    assert "== llm: skipped (--only cache)" in done.stdout
    rows = json.loads((out / "cache.json").read_text())["rows"]
    assert rows and rows[0]["extract_img_s"] > 0
    # the summary comes last (the device call's reply shows the end of the output): the ran stage's figures, "-" for
    # the skipped ones'
    summary = done.stdout.split("== summary")[1]
    assert "| stages that report | 1 of 4 exit 0: preflight skipped, llm skipped, cache exit 0 in " in summary
    assert f"| extraction / forward | {rows[0]['extract_over_forward']:.3g} (" in summary
    assert "| LLM head MFU (measured matmul) | - window, - steady" in summary


def test_the_summary_gives_each_figure_against_its_target(tmp_path: Path) -> None:
    """benchmarks/gpu_summary.py over a run's JSONs: each figure where the stage put it, the failed GPU tests named,
    a part's error or skip said."""
    gpu_summary = benchmark_module("gpu_summary")

    (tmp_path / "preflight.json").write_text(
        json.dumps(
            {
                "gpu_tests": {
                    "passed": 17,
                    "failed": 1,
                    "skipped": 1,
                    "not_passed": ["SKIPPED [1] x: y", "FAILED tests/t.py::test_z - E"],
                }
            }
        )
    )
    (tmp_path / "cache.json").write_text(
        json.dumps(
            {
                "rows": [
                    {
                        "extract_over_forward": 0.71,
                        "steady_over_forward": 0.83,
                        "decoder": "nvjpeg",
                        "forward_img_s": 500.0,
                        "workers_extract_img_s": 400.0,
                        "device_rows_off": 0.0,
                        "device_vs_workers_rel_rms": "1.30e-02",
                        "decode_capacity_img_s": 1700.0,
                        "decode_cpu_ms_per_img": 8.2,
                    }
                ]
            }
        )
    )
    (tmp_path / "llm.json").write_text(
        json.dumps(
            {
                "results": [
                    {
                        "mode": "cache",
                        "mfu": 0.3,
                        "steady_mfu": 0.35,
                        "steady_s_per_step": 0.1,
                        "steady_data_wait_share": 0.001,
                        "warmup_s": 17.0,
                        "warmup_wall_s": 20.5,
                        "warmup_setup_s": 2.0,
                        "warmup_teardown_s": 1.0,
                        "warmup_compile_phases_s": {"inductor": 9.0, "dynamo": 3.0},
                        "graph_replay": {
                            "launch_ms": 100.0,
                            "replay_ms": 85.0,
                            "replay_over_launch": 0.85,
                            "capture": "ok",
                        },
                        "bucketed_graphs": {
                            "steady_ms_per_step": 90.0,
                            "padding_share": 0.02,
                            "captures": 5,
                            "error": "RuntimeError: boom",
                        },
                    },
                    {"mode": "online", "mfu": 0.2},
                    {"mode": "warm start", "warmup_wall_s": 9.0, "compile_cache": "loaded"},
                ]
            }
        )
    )
    (tmp_path / "fingerprint.json").write_text(
        json.dumps(
            {
                "rows": [
                    {"mode": "fingerprint", "scale": 0.02, "scaled_by_steps_s": 400.0},
                    {
                        "mode": "fingerprint (zarr)",
                        "scaled_by_steps_s_with_zarr_reads": 142.0,
                        "scaled_by_steps_s_two_jobs": 107,
                    },
                    {"mode": "estimate with reads at real size", "scaled_s": 166.4, "scaled_s_two_jobs": 135.5},
                ],
                "scaling_check": {"holds": True, "ratio": 0.95},
            }
        )
    )
    table = {figure: measured for figure, measured, _ in gpu_summary.rows(tmp_path)}
    assert table["tests marked gpu (preflight)"] == ("17 passed, 1 failed, 1 skipped; FAILED tests/t.py::test_z - E")
    assert table["extraction / forward"].startswith("0.71 (nvjpeg), steady 0.83; the workers' decode 0.8;")
    assert table["LLM head MFU (measured matmul)"].startswith("30.0% window, 35.0% steady (100.0 ms a step)")
    assert table["compile warm-up, a fresh machine"].endswith("; inductor 9.0; dynamo 3.0")
    assert table["one step replayed from a CUDA graph / launched"].startswith("0.85 (85.0 / 100.0 ms; capture ok)")
    assert "against the loop's 100.0 ms" in table["training from bucket graphs, steady step"]
    assert table["training from bucket graphs, steady step"].endswith("; RuntimeError: boom")
    assert "from Zarr 142 s, two heads 107 s; reads at real size 166 s" in table["fingerprint at real size, one GPU"]
    missing = {figure: measured for figure, measured, _ in gpu_summary.rows(tmp_path / "none")}
    assert missing["extraction / forward"] == "-" and missing["tests marked gpu (preflight)"] == "-"


def test_benchmark_stand_in_images_are_distinct_at_real_sizes() -> None:
    """The fingerprint benchmark's stand-in dataset has 15.6K samples x 14 abilities: every one gets its own image
    (the same image would be one cache row, and abilities would read less than they should)."""
    import hashlib

    from tests.helpers import distinct_image

    n = 15_600 * 14
    seen = {hashlib.sha256(distinct_image(i).tobytes()).digest() for i in range(0, n, 7)}
    seen |= {hashlib.sha256(distinct_image(i).tobytes()).digest() for i in range(65_530, 65_560)}
    assert len(seen) == len(range(0, n, 7)) + len(set(range(65_530, 65_560)) - set(range(0, n, 7)))


def test_llm_benchmark_times_no_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """bench_llm_head's warm-up and timed window write no checkpoint (copying ~0.9 GB to the host at real sizes would
    be timed as training): any checkpoint write fails this run."""
    import argparse
    import importlib

    bench = benchmark_module("bench_llm_head")
    tr = importlib.import_module("ava.heads.llm.train")

    class NoCheckpoints:
        def __init__(self, *a, **k) -> None:
            raise AssertionError("the benchmark wrote a checkpoint")

    monkeypatch.setattr(tr, "CheckpointWriter", NoCheckpoints)
    from ava.cache import ExtractConfig, extract

    data = bench.make_data(tmp_path / "data", 16)
    extract(
        ExtractConfig(
            vfm="random-vit", data=str(data), cache=str(tmp_path / "cache"), device="cpu", codec="fp16", progress=False
        )
    )
    args = argparse.Namespace(
        device="cpu",
        dtype="fp32",
        vfm="random-vit",
        llm="tiny-random-qwen2",
        batch_size=8,
        lora_r=8,
        num_workers=3,
        cache_workers=0,
        gradient_checkpointing=False,
        warmup=1,
        steps=2,
        compile="off",
        pack="auto",
        profile_steps=1,
        graph_replay=True,
    )
    row = bench.run_path("cache", args, data, tmp_path / "cache", tmp_path)
    assert row["steps"] == 2 and row["timed_window_checkpoints"] == 0
    assert row["num_workers"] == 0  # the cached path runs the head's default, not the online path's decode workers
    # the CUDA-graph part: on a CPU the launched step only, its batch the loop's first (packed: 8 samples' tokens)
    graph = row["graph_replay"]
    assert graph["launch_ms"] > 0 and graph["capture"] == "skipped: CUDA graphs need a GPU", graph
    assert graph["tokens"] > 8 * 196 and graph["attention"] == "sdpa-per-sample" and graph["compiled"] is False
    # ...and the training steps over length buckets: here eagerly (the padding checked, not the graphs)
    bucketed = row["bucketed_graphs"]
    assert bucketed["graphs"] == "skipped: CUDA graphs need a GPU" and bucketed["steps"] == 2, bucketed
    assert 0 < bucketed["padding_share"] < 0.2 and bucketed["captures"] == 0 and "error" not in bucketed
    assert row["profile"]["steps"] == 1 and row["profile"]["kernels_per_step"] > 0, row["profile"]
    assert row["attention"] == "sdpa-per-sample" and row["compiled"] is False and row["features_placement"] == "host"
    assert not (tmp_path / "run_cache" / "checkpoint").exists()
    # the part's time already spent (a long compile): the profile still runs within the time it may borrow, and says
    # why it did not where it may borrow none
    import time

    late = bench.run_path("cache", args, data, tmp_path / "cache", tmp_path, time.monotonic(), time.monotonic() + 600)
    assert late["steps"] == 2 and late["profile"]["steps"] == 1, late["profile"]
    none = bench.run_path("cache", args, data, tmp_path / "cache", tmp_path, time.monotonic())
    assert none["profile"]["error"].startswith("skipped: ") and none["profile"]["error"].endswith("s of the part left")
    assert none["graph_replay"]["error"].startswith("skipped: one step took"), none["graph_replay"]
    # with time for it, the window is sized from two probe fits and the row has the steady rate beside the window's
    args.steps, args.profile_steps = 10, 0
    timed = bench.run_path("cache", args, data, tmp_path / "cache", tmp_path, time.monotonic() + 600)
    assert "steady_samples_per_s" not in none and timed["steps"] == 10, timed
    assert timed["steady_samples_per_s"] > 0 and timed["steady_s_per_step"] > 0 and timed["fit_start_s"] >= 0
    assert timed["steady_data_wait_share"] >= 0


def test_kernel_profile_summary_of_device_kernels() -> None:
    """The profile's summary of CUDA kernels (built here as the profiler gives them): launches per step, the busy share
    of the span (overlapping kernels counted once), time by kind, the short kernels."""
    from types import SimpleNamespace

    kp = benchmark_module("kernel_profile")
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def event(name, start, end, device=cuda):
        return SimpleNamespace(
            name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end), cpu_parent=None
        )

    events = [
        event("aten::mm", 0, 500, cpu),
        event("cudaStreamSynchronize", 140, 180, cpu),  # host: not kernels
        event("sm90_xmma_gemm_bf16", 0, 60),
        event("triton_poi_fused_add_mul_0", 50, 70),  # overlap: 70 busy
        event("flash_fwd_kernel", 100, 130),
        event("void at::native::vectorized_elementwise_kernel", 190, 195),
        event("sm90_xmma_gemm_bf16", 200, 260),
    ]
    s = kp.summarize(events, 2, "cuda")
    assert s["kernels_per_step"] == 2.5 and s["span_ms_per_step"] == 0.13
    assert s["busy_fraction"] == round((70 + 30 + 5 + 60) / 260, 3)
    assert s["by_category"] == {
        "matmul": round(120 / 175, 3),
        "attention": round(30 / 175, 3),
        "fused (inductor)": round(20 / 175, 3),
        "other": round(5 / 175, 3),
    }
    assert s["short_kernels"]["per_step"] == 0.5 and s["top"][0] == {
        "name": "sm90_xmma_gemm_bf16",
        "per_step": 1.0,
        "mean_us": 60.0,
        "share": round(120 / 175, 3),
    }
    # the device's idle stretches: 70-100, 130-190 and 195-200 us; the longest first, with its neighbours
    g = s["gaps"]
    assert g["by_length"]["< 10 us"] == {"per_step": 0.5, "ms_per_step": 0.003}
    assert g["by_length"]["10-100 us"] == {"per_step": 1.0, "ms_per_step": 0.045}
    assert g["by_length"][">= 10 ms"] == {"per_step": 0.0, "ms_per_step": 0.0}
    assert g["longest"][0] == {
        "ms": 0.06,
        "at": 0.5,
        "before": "flash_fwd_kernel",
        "after": "void at::native::vectorized_elementwise_kernel",
    }
    assert [x["ms"] for x in g["longest"]] == [0.06, 0.03, 0.005]
    assert s["host_calls"] == {"cudaStreamSynchronize": {"per_step": 0.5, "ms_per_step": 0.02}}
    text = kp.table(s)
    assert "2 steps" in text and "idle 0.06 ms at 50% of the window" in text and "cudaStreamSynchronize" in text
    assert kp.summarize([], 1, "cuda")["error"]


def test_placement_reads_report_every_placement_offered(tmp_path: Path) -> None:
    """bench_fingerprint's placement part (gpu.sh's fingerprint stage) writes a real cache and reads it back at each
    placement the device offers: on a CPU, host memory, read where held, with its rate and memory."""
    bench = benchmark_module("bench_fingerprint")
    rows = bench.placement_reads(8, 16, 8, "cpu", tmp_path, float("inf"))
    assert [(r["placement"], r["way"], r["rows"]) for r in rows] == [("host", "read where held", 8)], rows
    assert rows[0]["held_on"] == "cpu" and rows[0]["at_real_size_s"] > 0 and "error" not in rows[0]


def test_fingerprint_scaling_check_by_both_rules() -> None:
    """bench_fingerprint's check of its scaling at two scales: the linear rule per ability and summed, and the rule by
    optimizer steps over whole runs (none where a scale did not finish every ability); warm-up rows are not scales."""
    bf = benchmark_module("bench_fingerprint")
    real = bf.REAL_SIZES

    def run(scale, walls, steps_s, done=("color", "ocr")):
        return {
            "mode": "fingerprint",
            "scale": scale,
            "abilities_done": list(done),
            "scaled_by_steps_s": steps_s,
            "ability_s": walls,
            "samples": {a: round(scale * real[a]) for a in walls},
        }

    warm = {"mode": "warm-up (untimed)", "wall_s": 9.0, "abilities_done": ["color", "ocr"]}
    a = run(0.01, {"color": 1.0, "ocr": 2.0}, 300.0)
    b = run(0.02, {"color": 2.0, "ocr": 4.4}, 330.0)
    check = bf.scaling_check([warm, b, a])
    assert check["scales"] == [0.01, 0.02] and check["abilities"] == ["color", "ocr"]
    lin = [sum(r["ability_s"][v] * real[v] / r["samples"][v] for v in ("color", "ocr")) for r in (a, b)]
    assert check["ratio"] == round(lin[1] / lin[0], 2) and check["holds"]
    assert check["per_ability"]["ocr"]["ratio"] == round(
        4.4 / round(0.02 * real["ocr"]) * round(0.01 * real["ocr"]) / 2.0, 2
    )
    assert check["by_steps"] == {"scaled_total_s": [300.0, 330.0], "ratio": 1.1, "holds": True}
    slow = run(0.02, {"color": 2.0, "ocr": 4.4}, 600.0)
    assert bf.scaling_check([a, slow])["by_steps"]["holds"] is False
    cut = run(0.02, {"color": 2.0}, 100.0, done=("color",))
    assert bf.scaling_check([a, cut])["by_steps"] is None and bf.scaling_check([a, cut])["abilities"] == ["color"]
    assert bf.scaling_check([warm, a]) is None
    # rows with each ability's estimate: a scale cut before its last ability is still checked, over those both did
    a["by_steps_ability_s"], cut["by_steps_ability_s"] = {"color": 120.0, "ocr": 180.0}, {"color": 126.0}
    assert bf.scaling_check([a, cut])["by_steps"] == {"scaled_total_s": [120.0, 126.0], "ratio": 1.05, "holds": True}


def test_fingerprint_scales_share_the_time_by_their_expected_cost() -> None:
    """The smaller scale's share of the time left counts the fixed part of a scale's time (the warm-up's wall time),
    not its size alone; the last scale gets what is left; no limit or no fixed part fall back to plain shares."""
    bf = benchmark_module("bench_fingerprint")
    # 90 s left, 12 s fixed a scale: 66 s in proportion to 0.02 + 0.04 -> 12 + 22 = 34 s for 2%
    assert bf.scale_share([0.02, 0.04], 12.0, 90.0) == pytest.approx(34 / 90)
    assert bf.scale_share([0.04], 12.0, 40.0) == 1.0
    assert bf.scale_share([0.02, 0.04], 0.0, 90.0) == pytest.approx(1 / 3)  # by size alone, as before
    assert bf.scale_share([0.02, 0.04], 50.0, 90.0) == 0.5  # the fixed parts alone exceed the time
    assert bf.scale_share([0.02, 0.04], 12.0, float("inf")) == 0.5 and bf.scale_share([None], 1.0, 0.0) == 1.0


def test_cache_bench_writes_each_part_as_it_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_cache (gpu.sh's cache stage) rewrites its JSON as each part ends: a run cut off after the forward part
    still leaves that part in the file, marked partial; a whole run has its rows, the main loop's time split (device
    decode apart) and the profiled batches."""
    import json
    import sys

    bench = benchmark_module("bench_cache")
    argv = [
        "bench_cache.py",
        "--device",
        "cpu",
        "--models",
        "pixels",
        "--codecs",
        "fp16",
        "--images",
        "16",
        "--batch-size",
        "8",
        "--shard-size",
        "16",
        "--error-images",
        "2",
        "--budget",
        "120",
        "--workdir",
        str(tmp_path / "work"),
    ]

    def cut(*a, **k):  # noqa: ANN002, ANN003, ANN202 - the stage's time limit, at a known point
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "extract_once", cut)
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(tmp_path / "cut.json")])
    monkeypatch.setattr(bench, "_REPORT", {"path": None, "meta": {}, "phases": [], "rows": []})
    with pytest.raises(KeyboardInterrupt):
        bench.main()
    doc = json.loads((tmp_path / "cut.json").read_text())
    assert doc["partial"] is True and doc["rows"] == [] and doc["meta"]["device"]
    assert [p["phase"] for p in doc["phases"]] == ["images written", "forward only", "decode + preprocess only"]

    monkeypatch.undo()
    monkeypatch.setattr(sys, "argv", [*argv, "--profile-batches", "1", "--json", str(tmp_path / "whole.json")])
    monkeypatch.setattr(bench, "_REPORT", {"path": None, "meta": {}, "phases": [], "rows": []})
    bench.main()
    doc = json.loads((tmp_path / "whole.json").read_text())
    row = doc["rows"][0]
    assert doc["partial"] is False and row["images"] == 16 and row["device_decode_s"] == 0.0
    assert row["profile"]["steps"] == 1 and row["profile"]["gaps"]["longest"], row["profile"]
    assert "extraction profiled" in [p["phase"] for p in doc["phases"]]


def test_fingerprint_bench_zarr_copy_holds_the_stand_ins_rows(tmp_path: Path) -> None:
    """bench_fingerprint's Zarr check reads a real fp16 cache of the stand-in's rows: the same tokens, bit for bit,
    and views pooled from them as an extraction pools them; the stand-in's read counts are left as they were."""

    import numpy as np

    from ava.cache.pooling import pool_tokens, token_grid

    bf = benchmark_module("bench_fingerprint")
    _, cache = bf.build(tmp_path / "data", {"color": 30, "counting": 50}, 16, 32, ("color", "counting"))
    shas = list(cache.signals)[:70]
    import ava.cache
    from ava.cache.reader import FeatureCache

    # as in the benchmark: every open_cache of the fingerprint answers the stand-in; the copy is still the Zarr cache
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ava.cache, "open_cache", lambda *a, **k: cache)
        real, made = bf.zarr_copy(cache, shas, tmp_path / "zarr", threads=3)
    assert isinstance(real, FeatureCache) and made["rows"] == 70 and made["write_s"] > 0
    assert (cache.reads, cache.rows_read) == (0, 0)
    picked = shas[::-7]
    tokens = real.read(picked)
    assert tokens.dtype == np.float32 and np.array_equal(tokens, cache.read(picked).astype(np.float32))
    for view in real.views:
        np.testing.assert_array_equal(real.read_view(picked, None, view), pool_tokens(tokens, view, token_grid(real)))
    before = cache.reads, cache.rows_read  # (the read just above)
    with pytest.raises(bf.OutOfTime, match="shard 0 of 2"):  # no time left: no shard is started
        bf.zarr_copy(cache, shas, tmp_path / "late", threads=1, deadline=0.0)
    assert (cache.reads, cache.rows_read) == before


def test_fingerprint_bench_zarr_estimate_scales_every_outside_part_by_the_read_aheads_ratio() -> None:
    """The Zarr check's ratio counts the abilities read ahead only (not the first), and the estimate replaces every
    ability's outside part, scaled to its real size, by that share of it."""
    bf = benchmark_module("bench_fingerprint")
    real = bf.REAL_SIZES
    fits = {"knn counting": 2.0, "probe-attn scene": 2.5, "knn scene": 0.5, "knn color": 4.5}
    stand_in = {
        "ability_s": {"counting": 3.0, "scene": 4.0, "color": 5.0},
        "scaled_by_steps_s": 400.0,
        "samples": {"counting": 100, "scene": 200, "color": 50},
        "detail": fits,
    }
    zarr = {"counting": 2.5, "scene": 3.25}
    detail = {"knn counting": 2.0, "probe-attn scene": 2.5, "knn scene": 0.5}
    got = bf.zarr_estimate(stand_in, zarr, detail, "counting")
    assert got["outside_ratio"] == 0.25  # scene: 0.25 s outside against 1.0 s (counting, read first, not counted)
    outside = 1.0 * real["counting"] / 100 + 1.0 * real["scene"] / 200 + 0.5 * real["color"] / 50
    assert got["scaled_by_steps_s_with_zarr_reads"] == round(400.0 - 0.75 * outside, 1)
    assert bf.zarr_estimate(stand_in, {"counting": 2.5}, detail, "counting") == {}  # none read ahead
    overlapped = {**stand_in, "ability_s": {"counting": 1.0, "scene": 2.0, "color": 1.0}}  # fits at once: no wall time
    assert bf.zarr_estimate(overlapped, zarr, detail, "counting") == {}


def test_fingerprint_bench_reads_estimate_adds_what_the_fits_do_not_hide() -> None:
    """Each ability's read blocks for what the previous ability's fits do not hide: onto the GPU where it fits beside
    the rows held, else through host memory and a whole copy; nothing where no read ran ahead onto a GPU."""
    bf = benchmark_module("bench_fingerprint")
    real = bf.REAL_SIZES
    a, b, c = "counting", "recognition", "scene"
    # by steps: fits of 10, 20 and 30 s at real size (nothing outside the fits in the stand-in's run)
    stand_in = {
        "ability_s": {a: 1.0, b: 2.0, c: 3.0},
        "by_steps_ability_s": {a: 10.0, b: 20.0, c: 30.0},
        "samples": {a: 10, b: 10, c: 10},
        "detail": {f"knn {a}": 1.0, f"knn {b}": 2.0, f"knn {c}": 3.0},
    }
    reads = {x: {"gb_s": 2.0, "held_on": ["cuda:0"]} for x in (a, b, c)}
    zarr_row = {"abilities": [a, b, c], "token_reads": reads, "two_jobs": {"over_one": 0.5}}
    placement = [
        {"placement": "host", "way": "read where held", "gb": 1.0, "seconds": 0.25, "gb_s": 4.0},
        {"placement": "on-device", "way": "host, then moved whole (before)", "gb": 1.0, "seconds": 0.5},
    ]
    row_gb = 1e-3  # a row's GB: counting 22.8, recognition 44.9, scene 23.8 at real size
    gb = {x: real[x] * row_gb for x in (a, b, c)}
    got = bf.reads_estimate(stand_in, zarr_row, placement, 1000.0, row_gb)  # room on the GPU for every read ahead
    want = gb[a] / 2.0 + max(0.0, gb[b] / 2.0 - 10.0) + max(0.0, gb[c] / 2.0 - 20.0)
    assert got["fits_s"] == 60.0 and got["scaled_s"] == round(60.0 + want, 1)
    assert [w for w, _ in got["by_ability"].values()] == ["read first, nothing to hide it"] + [
        "read ahead onto the GPU"
    ] * 2
    two = gb[a] / 2.0 + max(0.0, gb[b] / 2.0 - 5.0) + max(0.0, gb[c] / 2.0 - 10.0)
    assert got["scaled_s_two_jobs"] == round(30.0 + two, 1)
    small = bf.reads_estimate(stand_in, zarr_row, placement, 100.0, row_gb)  # recognition's 44.9 GB: through the host
    assert small["by_ability"][b][0] == "read ahead into host memory, copied whole"
    assert small["by_ability"][b][1] == round(max(0.0, gb[b] / 4.0 - 10.0) + gb[b] / 4.0, 1)  # whole copy: 4 GB/s
    on_cpu = {**zarr_row, "token_reads": {x: {"gb_s": 2.0, "held_on": ["cpu"]} for x in (a, b, c)}}
    assert bf.reads_estimate(stand_in, on_cpu, placement, 1000.0, row_gb) == {}
    assert bf.reads_estimate(stand_in, zarr_row, placement[:1], 1000.0, row_gb) == {}  # no whole-copy rate
    assert small["whole_copy_way"] == bf.BEFORE_WAY and small["rates_gb_s"]["whole copy"] == 4.0
    # the copy placing does now (pinned chunks), where measured: 1 GB in 0.3 - 0.25 s
    chunks = [*placement, {"placement": "on-device", "way": bf.CHUNKS_WAY, "gb": 1.0, "seconds": 0.3}]
    faster = bf.reads_estimate(stand_in, zarr_row, chunks, 100.0, row_gb)
    assert faster["whole_copy_way"] == bf.CHUNKS_WAY and faster["rates_gb_s"]["whole copy"] == 20.0
    assert faster["by_ability"][b][1] == round(max(0.0, gb[b] / 4.0 - 10.0) + gb[b] / 20.0, 1)


def test_preflight_runs_the_tests_marked_gpu(tmp_path: Path) -> None:
    """gpu.sh's preflight runs every test marked ``gpu`` (here they skip: no CUDA) and says which did not pass; with
    too little time left it says it skipped them. Every test file that skips without CUDA marks those tests ``gpu``,
    so the lent GPU runs them."""
    import re

    root = Path(__file__).resolve().parents[1]
    pre = benchmark_module("gpu_preflight")
    got = pre.gpu_tests(120)
    assert "tests/test_device_decode.py" in got["files"] and "tests/test_feature_placement.py" in got["files"]
    assert got["exit"] == 0 and got.get("passed", 0) + got.get("skipped", 0) >= 5 and "failed" not in got, got
    assert isinstance(got["durations"], list) and not any("s call " in line for line in got["tail"])  # (apart)
    if not torch.cuda.is_available():
        assert got["skipped"] >= 5 and all(line.startswith("SKIPPED") for line in got["not_passed"]), got
    assert pre.gpu_tests(5)["error"] == "skipped: 5 s left"
    skips = re.compile(r"skipif\(\s*not torch\.cuda\.is_available\(\)")
    for f in sorted((root / "tests").glob("test_*.py")):
        text = f.read_text()
        assert not skips.search(text) or pre.GPU_MARK in text, f"{f.name} skips without CUDA but marks nothing gpu"


@pytest.mark.parametrize("attention", ["sdpa-per-sample", "varlen"])
def test_a_packed_batch_padded_to_its_bucket_has_its_own_loss_and_gradients(
    attention: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark's CUDA-graph buckets (benchmarks/llm_graph_replay.py): a packed batch padded to a bucket's
    tokens, supervised positions and longest sequence gives the batch's own loss and LoRA/connector gradients,
    attending sample by sample or through the varlen kernel (a CPU stand-in that reads cu_seqlens)."""

    from ava.heads.llm import packing
    from ava.heads.llm.data import Collator
    from ava.heads.llm.packing import Varlen
    from ava.heads.llm.prompt import IGNORE

    graphs = benchmark_module("llm_graph_replay")
    cpu = torch.device("cpu")
    if attention == "varlen":
        monkeypatch.setitem(packing._VARLEN, (str(cpu), torch.float32), Varlen.of(varlen_2_11))
    head = tiny_llm_head().train()
    assert head.use_packing(cpu, torch.float32) and head.attention_path() == attention
    for p in head.modules():  # no dropout: the two passes draw the same masks only without it
        if isinstance(p, torch.nn.Dropout):
            p.p = 0.0
    feats = torch.randn(3, T, D)
    batch = Collator(encoded_prompts(), T, 0, pack=True)([{"index": i} for i in range(3)])
    tokens, targets, longest, samples = graphs.bucket_of(batch)
    assert tokens % graphs.TOKEN_STEP == 0 and tokens > batch["n_tokens"] and samples == 3
    assert targets >= batch["sup_pos"].numel() and longest >= batch["max_len"]
    padded = graphs.pad_packed(batch, tokens, targets, longest, pad_id=0)
    assert padded["input_ids"].shape == (1, tokens)
    assert padded["cu_seqlens"].tolist()[-2:] == [batch["n_tokens"], tokens]
    assert padded["sup_targets"][batch["sup_pos"].numel() :].eq(IGNORE).all() and padded["max_len"] == longest

    def loss_and_grads(b):
        head.zero_grad(set_to_none=True)
        loss = head(b, feats.index_select(0, b["index"]))
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in head.named_parameters() if p.requires_grad}

    (a, ga), (b, gb) = loss_and_grads(batch), loss_and_grads(padded)
    assert abs(a - b) < 1e-5 and ga.keys() == gb.keys()
    assert [n for n in ga if not torch.allclose(ga[n], gb[n], atol=1e-5, rtol=1e-4)] == []
    with pytest.raises(ValueError, match="cannot be padded"):
        graphs.pad_packed(batch, batch["n_tokens"], targets, longest, pad_id=0)  # no room for the pad sequence


def test_knn_select_bench_times_both_rules_and_records_their_agreement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_knn_select at a tiny size: the kNN head per ability with leave-one-out and with the subsample (a
    threshold below the train rows), the figures recorded through results.py, the data and cache reused by a second
    run, the pick it times put back afterwards."""
    from ava.heads.knn import train as knn_train

    bench = benchmark_module("bench_knn_select")
    monkeypatch.setattr(bench.results, "RESULTS", tmp_path / "results")
    pick = knn_train.select_pool
    work = tmp_path / "work"
    args = ["--samples", "40", "--abilities", "scene,counting", "--loo-max-rows", "10", "--heldout-rows", "8"]
    monkeypatch.setattr(sys, "argv", ["bench_knn_select.py", *args, "--threads", "1", "--work", str(work), "--json"])
    bench.main()
    assert knn_train.select_pool is pick
    (path,) = (tmp_path / "results").glob("*.json")
    data = json.loads(path.read_text())
    figures = {f["figure"]: f for f in data["figures"].values()}
    assert figures["kNN fit per ability at 40 samples, selection auto"]["value"] > 0
    assert figures["kNN fit per ability at 40 samples, selection loo"]["target"] is None  # held only at the real size
    assert figures["auto picks leave-one-out's (view, k), 2 abilities x 40 samples"]["value"].endswith("of 2")
    rows = [r for r in data["rows"]["bench_knn_select"] if "ability" in r]
    assert {(r["ability"], r["method"], r["n_answered"]) for r in rows} == {
        ("scene", "loo", 32),
        ("scene", "subsample", 8),
        ("counting", "loo", 32),
        ("counting", "subsample", 8),
    }
    assert all(0 < r["pick_s"] < r["fit_s"] < r["wall_s"] for r in rows)
    assert not list((work / "runs").iterdir())  # each run removed once measured
    out = tmp_path / "again.json"
    monkeypatch.setattr(sys, "argv", ["bench_knn_select.py", *args, "--selections", "auto", "--work", str(work)])
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--json", str(out)])
    bench.main()
    again = json.loads(out.read_text())
    assert again["prepare_s"] == 0.0 and [r["selection"] for r in again["rows"]] == ["auto", "auto"]


def test_scale_benchmark_names_each_stage_over_linear_with_its_cause() -> None:
    """bench_scale's verdicts: between consecutive sizes, a stage whose time or memory grows more than 1.25x the
    samples' growth is said to be over, with its known cause (or the advice to profile it); the others within."""
    scale = benchmark_module("bench_scale")
    rows = [
        scale.Stage(stage, n, wall, 1.0, rss, 0.5, 0)
        for stage, n, wall, rss in [
            ("info", 2100, 1.0, 100.0),
            ("info", 21000, 10.0, 150.0),
            ("info", 218400, 103.0, 160.0),  # 10.3x for 10.4x: linear
            ("knn", 2100, 1.0, 100.0),
            ("knn", 21000, 10.0, 100.0),
            ("knn", 218400, 150.0, 100.0),  # 15x: over in time
            ("report", 21000, 10.0, 100.0),
            ("report", 218400, 20.0, 1400.0),  # 14x in memory: over, no known cause
        ]
    ]
    ratios = scale.growth(rows, 1.25)
    last = {g["stage"]: g for g in ratios if g["to"] == 218400}
    assert last["info"]["over"] == [] and last["info"]["limit_x"] == 13.0 and last["info"]["samples_x"] == 10.4
    assert last["knn"]["over"] == ["time"] and "test x train" in last["knn"]["cause"]
    assert last["report"]["over"] == ["memory"] and "profile it" in last["report"]["cause"]
    said = scale.verdicts(ratios, 1.25)
    assert said[0].startswith("info: within 1.25x of linear, 21,000 -> 218,400 samples (10.4x, limit 13.0x)")
    assert said[1].startswith("knn: OVER in time, 21,000 -> 218,400") and "test x train" in said[1]
    figures = {f["figure"]: f for f in scale.figures(ratios)}
    knn = figures["growth of `knn`, 21,000 -> 218,400 samples (10.4x)"]
    assert knn["value"] == 15.0 and knn["target"] == "<= 13.0x" and "over: " in knn["note"]
    recorded = scale.with_growth(rows, ratios)
    assert "time_x" not in recorded[0] and recorded[2]["time_x"] == 10.3 and recorded[5]["over"] == ["time"]
    table = scale.table(rows, ratios)
    assert table[0].startswith("| stage | 2,100 s / MB | 21,000 s / MB | 218,400 s / MB |")
    assert "| report | - | 10.0 / 100 | 20.0 / 1400 | 2.0 / 14.0 OVER |" in table


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--sizes", "140,ten"], "give whole numbers"),
        (["--sizes", "7"], "at least 14 samples"),
        (["--skip", "knn,nope"], "--skip: no stage nope"),
    ],
)
def test_scale_benchmark_refuses_bad_options_before_any_stage(tmp_path: Path, args: list[str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_scale.py"), *args, "--work", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_scale_benchmark_runs_every_stage_at_two_sizes_and_records_them(tmp_path: Path) -> None:
    """bench_scale.py end to end at tiny sizes: every stage runs through the CLI at each size, the rows (time,
    peak memory, growth) go to the results file, and a verdict line names every stage."""
    env = {**os.environ, "AVA_BENCH_RESULTS": str(tmp_path / "results")}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_scale.py"), "--sizes", "140,280", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    scale = benchmark_module("bench_scale")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import results

    (path,) = (tmp_path / "results").glob("*.json")
    data = json.loads(path.read_text())
    assert results.schema_errors(data) == []
    rows = data["rows"]["bench_scale"]
    assert [(r["stage"], r["samples"]) for r in rows] == [(s, n) for n in (140, 280) for s in scale.STAGES]
    assert all(r["exit"] == 0 and r["wall_s"] > 0 and r["peak_rss_mb"] > 20 for r in rows)
    assert all(r["samples_x"] == 2.0 and r["limit_x"] == 2.5 for r in rows if r["samples"] == 280)
    assert len(data["figures"]) == len(scale.STAGES)
    verdicts = [line for line in done.stdout.splitlines() if " of linear, 140 -> 280" in line or "OVER in" in line]
    assert sorted(line.split(":")[0] for line in verdicts) == sorted(scale.STAGES)


def test_the_soak_tells_an_internal_error_from_a_stores_own_words() -> None:
    soak = benchmark_module("soak")
    outage = (
        "error: s3://b/c: the object store at http://127.0.0.1:9 cannot be reached or stopped answering (ClientError: "
        "An error occurred (InternalError) when calling the PutObject operation: We encountered an internal error.); "
        "what was committed before is kept: run the command again once it answers and it resumes"
    )
    ours = "error: internal error: KeyError: 'x' (run with AVA_DEBUG=1 for the traceback, and report it)"
    uncaught = "Task exception was never retrieved\nTraceback (most recent call last):\n  File ...\nOSError: gone"
    assert not soak.INTERNAL.search(outage)
    assert soak.INTERNAL.search(ours) and soak.INTERNAL.search(uncaught)
    assert soak._first_report(f"progress\n{uncaught}").startswith("Task exception was never retrieved\nTraceback")
