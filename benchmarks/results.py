"""Benchmark results as files: one JSON file per device, date and torch version under ``benchmarks/results/``.

Every benchmark script's ``--json`` writes its figures here through :func:`record`; ``docs/make_performance.py``
renders ``docs/performance.md`` from these files (a table per device), so the docs show the current figures and
the history stays in git. A file::

    {"schema": 1,
     "device": {"slug": "cpu-2c-amd-epyc", "kind": "cpu", "name": "AMD EPYC 7B13", "cores": 2},
     "date": "2026-12-06", "torch": "2.13.0+cpu", "revision": "abc1234",
     "figures": {"<benchmark>/<figure>": {"benchmark", "figure", "value", "unit", "target", "command", "note"}},
     "rows": {"<benchmark>": [{...}, ...]}}

``figures`` are the headline numbers (what the docs table shows: a value, its unit, the target it is held to,
the command that measured it); ``rows`` keep a script's full table. A second run of a script on the same device,
date and torch replaces that script's figures and rows in the file and keeps the other scripts'.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = 1


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: str = "cpu") -> dict[str, Any]:
    """The device a figure was measured on: ``slug`` names its results files (``nvidia-h200``, ``cpu-2c-amd-epyc``)."""
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(torch.device(device))
        slug = "nvidia-" + re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-").split("-")[0]
        return {"slug": slug, "kind": "cuda", "name": name}
    name = _cpu_name()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    words = re.sub(r"\(r\)|\(tm\)|processor|cpu|\d+-core|@.*", " ", name.lower())
    family = "-".join(w for w in re.split(r"[^a-z0-9]+", words) if w and not w.isdigit())[:24].strip("-")
    return {"slug": f"cpu-{cores}c-{family or 'unknown'}", "kind": "cpu", "name": name, "cores": cores}


def _torch_version() -> str:
    try:
        import torch

        return str(torch.__version__)
    except ImportError:
        return "none"


def _revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=RESULTS.parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def figure(
    name: str, value: float | int | str | None, unit: str = "", target: str | None = None, note: str | None = None
) -> dict[str, Any]:
    """One headline figure: ``target`` as it is held (``">= 0.8"``, ``"<= 13x"``), ``note`` a short qualifier."""
    return {"figure": name, "value": value, "unit": unit, "target": target, "note": note}


def results_path(device: dict[str, Any], date: str, torch_version: str, root: Path = RESULTS) -> Path:
    ver = re.sub(r"[^0-9A-Za-z.]+", ".", torch_version).strip(".")
    return root / f"{device['slug']}-{date}-torch{ver}.json"


def command_line() -> str:
    """The command that ran this script, as a user would type it from the repository's root."""
    script = Path(sys.argv[0])
    with contextlib.suppress(ValueError):
        script = script.resolve().relative_to(RESULTS.parent.parent)
    return " ".join(["python", str(script), *sys.argv[1:]])


def record(
    benchmark: str,
    figures: list[dict[str, Any]],
    rows: list[dict[str, Any]] | None = None,
    *,
    device: str | dict[str, Any] = "cpu",
    command: str | None = None,
    date: str | None = None,
    root: Path = RESULTS,
) -> Path:
    """Write ``benchmark``'s figures (and rows) into the results file of this device, date and torch version,
    replacing what that benchmark wrote there before; returns the file's path."""
    info = device if isinstance(device, dict) else device_info(device)
    date = date or datetime.date.today().isoformat()
    torch_version = _torch_version()
    path = results_path(info, date, torch_version, root)
    data: dict[str, Any] = {"schema": SCHEMA, "figures": {}, "rows": {}}
    if path.is_file():
        data = json.loads(path.read_text())
    data.update(schema=SCHEMA, device=info, date=date, torch=torch_version, revision=_revision())
    cmd = command or command_line()
    kept = {k: v for k, v in data.get("figures", {}).items() if v.get("benchmark") != benchmark}
    for f in figures:
        kept[f"{benchmark}/{f['figure']}"] = {"benchmark": benchmark, **f, "command": f.get("command") or cmd}
    data["figures"] = dict(sorted(kept.items()))
    data["rows"] = {**data.get("rows", {}), benchmark: rows or []} if rows is not None else data.get("rows", {})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path
