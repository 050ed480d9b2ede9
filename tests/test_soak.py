"""The soak (``benchmarks/soak.py``) for two minutes and at least 20 cycles: extract, fingerprint, sweep, push and pull
while commands are killed at random moments, a small disk fills and the object store fails; afterwards no digest or
result differs from the fault-free run's, no error was an internal error and nothing is left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"


@pytest.mark.slow
def test_two_minutes_of_faults_lose_nothing(tmp_path: Path) -> None:
    pytest.importorskip("moto.server", reason="the soak needs moto[server] (the s3 extra)")
    argv = [sys.executable, str(SOAK), "--minutes", "2", "--min-cycles", "20", "--seed", "0", "--work", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    out = done.stdout
    found = json.loads(out[out.index("\n{") :])
    assert done.returncode == 0, (found["differences"], found["internal_errors"], found["leftovers"])
    assert found["cycles"] >= 20
    assert found["differences"] == found["internal_errors"] == found["leftovers"] == []
    assert found["killed"] > 0 and found["failed_clearly"] > 0 and found["resumed"] > 0  # faults landed
    assert found["faults"].get("store", 0) > 0 and found["proxy"]["requests"] > 0
    if found["small_disk"]:
        assert found["faults"].get("disk", 0) > 0
