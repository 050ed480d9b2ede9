"""``benchmarks/gpu.sh run``'s options on the CPU: ``--only`` runs the named stages and says the others were skipped
(a second device call after a fix reruns what the fix touched), and a wrong option or stage name is refused before
anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _gpu_sh(out: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu.sh"), "run", *args],
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
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_summary

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
