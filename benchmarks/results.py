"""Benchmark results as files: one JSON file per device, date and torch version under ``benchmarks/results/``.

Every benchmark script's ``--json`` writes its figures here through :func:`record` (``--json FILE`` writes the
script's whole JSON to FILE instead: what ``gpu.sh`` reads back; ``AVA_BENCH_RESULTS`` records into another folder,
e.g. a test's); ``docs/make_performance.py``
renders ``docs/performance.md`` from these files (a table per device), so the docs show the current figures and
the history stays in git. A file::

    {"schema": 1,
     "device": {"slug": "cpu-2c-amd-epyc", "kind": "cpu", "name": "AMD EPYC 7B13", "cores": 2},
     "date": "2026-12-06", "torch": "2.13.0+cpu", "revision": "abc1234",
     "figures": {"<benchmark>/<figure>": {"benchmark", "figure", "value", "unit", "target", "command", "note"}},
     "rows": {"<benchmark>": [{...}, ...]}}

``figures`` are the headline numbers (what the docs table shows: a value, its unit, the target it is held to,
the command that measured it); ``rows`` keep a script's full table (its latest run's). A second run on the same
device, date and torch replaces the figures it measures again and keeps the others (another mode or model of the
same script, the other scripts'); the page shows each device's latest value of each figure.
"""

from __future__ import annotations

import argparse
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

HERE = Path(__file__).resolve().parent  # benchmarks/
# where --json records (AVA_BENCH_RESULTS: elsewhere, e.g. a test's temporary folder)
RESULTS = Path(os.environ.get("AVA_BENCH_RESULTS") or HERE / "results")
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
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def figure(
    name: str, value: float | int | str | None, unit: str = "", target: str | None = None, note: str | None = None
) -> dict[str, Any]:
    """One headline figure: ``target`` as it is held (``">= 0.8"``, ``"<= 13x"``), ``note`` a short qualifier."""
    return {"figure": name, "value": value, "unit": unit, "target": target, "note": note}


def results_path(device: dict[str, Any], date: str, torch_version: str, root: Path | None = None) -> Path:
    root = root or RESULTS
    ver = re.sub(r"[^0-9A-Za-z.]+", ".", torch_version).strip(".")
    return root / f"{device['slug']}-{date}-torch{ver}.json"


def command_line() -> str:
    """The command that ran this script, as a user would type it from the repository's root."""
    script = Path(sys.argv[0])
    with contextlib.suppress(ValueError):
        script = script.resolve().relative_to(HERE.parent)
    return " ".join(["python", str(script), *sys.argv[1:]])


def record(
    benchmark: str,
    figures: list[dict[str, Any]],
    rows: list[dict[str, Any]] | None = None,
    *,
    device: str | dict[str, Any] = "cpu",
    command: str | None = None,
    date: str | None = None,
    root: Path | None = None,
    environment: dict[str, Any] | None = None,
) -> Path:
    """Write ``benchmark``'s figures (and rows) into the results file of this device, date and torch version,
    replacing the figures of the same names there; returns the file's path. ``environment`` replaces what this
    process would record (``torch``, ``revision``, other versions) for figures copied from another machine's run."""
    info = device if isinstance(device, dict) else device_info(device)
    date = date or datetime.date.today().isoformat()
    env = dict(environment) if environment is not None else {"revision": _revision()}
    env.setdefault("torch", _torch_version())
    env.setdefault("revision", None)
    path = results_path(info, date, env["torch"], root)
    data: dict[str, Any] = {"schema": SCHEMA, "figures": {}, "rows": {}}
    if path.is_file():
        data = json.loads(path.read_text())
    data.update(schema=SCHEMA, device=info, date=date, **env)
    cmd = command or command_line()
    kept = dict(data.get("figures", {}))
    for f in figures:
        kept[f"{benchmark}/{f['figure']}"] = {"benchmark": benchmark, **f, "command": f.get("command") or cmd}
    data["figures"] = dict(sorted(kept.items()))
    data["rows"] = {**data.get("rows", {}), benchmark: rows or []} if rows is not None else data.get("rows", {})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)
    return path


def _json_file_arg(value: str) -> Path:
    """``--json FILE``, refused before the benchmark runs when it cannot be written."""
    path = Path(value)
    if path.resolve() == RESULTS.resolve():
        return RESULTS
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a folder: give a file, or --json alone to record the run")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: no folder {path.parent}")
    return path


def json_option(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """The scripts' ``--json``: alone, record the headline figures and rows under ``benchmarks/results/``; with a
    FILE, write the script's whole JSON there instead (what ``gpu.sh`` reads back)."""
    parser.add_argument(
        "--json",
        nargs="?",
        const=RESULTS,
        type=_json_file_arg,
        default=None,
        required=required,
        metavar="FILE",
        help="record the figures in benchmarks/results/; with FILE, write the whole JSON there instead",
    )


def json_file(dest: Path | None) -> Path | None:
    """The file ``--json FILE`` names; None for no ``--json``, or for ``--json`` alone (the results folder)."""
    return None if dest is None or dest.resolve() == RESULTS.resolve() else dest


def write(
    dest: Path | None,
    benchmark: str,
    figures: list[dict[str, Any]],
    rows: list[dict[str, Any]] | None,
    payload: Any,
    *,
    device: str | dict[str, Any] = "cpu",
) -> Path | None:
    """Where ``--json`` points (see :func:`json_option`): :func:`record` the figures and rows when it names the
    results folder, else ``payload`` (the script's own JSON) into that file. Nothing when ``dest`` is None."""
    if dest is None:
        return None
    if json_file(dest) is None:
        path = record(benchmark, figures, rows, device=device)
        print(f"recorded {len(figures)} figures in {path}")
        return path
    dest.write_text(json.dumps(payload, indent=2, default=str) + "\n")  # (paths among a script's arguments)
    return dest


def schema_errors(data: Any) -> list[str]:
    """What a results file lacks, one line each (empty: it follows the schema the docs page is rendered from)."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    errors = [f"no {k!r}" for k in ("schema", "device", "date", "torch", "figures") if k not in data]
    device = data.get("device")
    if not isinstance(device, dict) or not all(isinstance(device.get(k), str) for k in ("slug", "kind", "name")):
        errors.append("device: needs slug, kind and name")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(data.get("date", ""))):
        errors.append(f"date {data.get('date')!r}: not YYYY-MM-DD")
    for key, f in (data.get("figures") or {}).items():
        missing = [k for k in ("benchmark", "figure", "value", "unit", "target", "command") if k not in f]
        if missing:
            errors.append(f"figure {key!r}: no {', '.join(missing)}")
        elif key != f"{f['benchmark']}/{f['figure']}":
            errors.append(f"figure {key!r}: key is not benchmark/figure")
        elif not isinstance(f["value"], (int, float, str, type(None))) or not f["command"]:
            errors.append(f"figure {key!r}: value must be a number, text or null, and command given")
    return errors
