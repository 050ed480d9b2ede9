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
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh"), "run", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


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
