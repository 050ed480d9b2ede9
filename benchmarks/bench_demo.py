"""Time `ava demo` from scratch: one command for the demo's 10-minute budget on 2 CPU cores.

    python benchmarks/bench_demo.py                # the default demo, in a fresh temporary --out
    python benchmarks/bench_demo.py --keep DIR     # keep the outputs in DIR (must not exist yet)
    python benchmarks/bench_demo.py -- --quick     # anything after -- goes to `ava demo`

Runs `python -m ava demo --device cpu` in a subprocess with a fresh ``--out`` and a fresh ``AVA_HOME`` (so
EfficientNet-Lite0's one-time weight conversion is counted, as on a fresh machine), then prints the wall time,
the stage and per-extractor times the demo wrote to ``OUT/demo_timings.json``, the load average before and
after (timings beside other work say little), and whether the run fit the 600 s budget. The install
(pip) is not included: time the README's quickstart line for that.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import results  # benchmarks/, beside this script

BUDGET_S = 600.0


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run(out: Path, home: Path, demo_args: list[str]) -> tuple[float, int]:
    env = {**os.environ, "AVA_HOME": str(home)}
    cmd = [sys.executable, "-m", "ava", "demo", "--out", str(out), "--device", "cpu", *demo_args]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, env=env)
    return time.perf_counter() - t0, rc


def table(timings: dict, wall: float) -> list[str]:
    stages = timings.get("stages_s", {})
    lines = ["| stage | s |", "|---|---:|"]
    per_vfm = timings.get("per_vfm_s", {})
    for name, seconds in stages.items():
        detail = per_vfm.get(name)
        extra = f" ({', '.join(f'{k} {v:.1f}' for k, v in detail.items())})" if detail else ""
        lines.append(f"| {name}{extra} | {seconds:.1f} |")
    lines.append(f"| total (demo's own clock) | {timings.get('total_s', float('nan')):.1f} |")
    lines.append(f"| wall, with interpreter start | {wall:.1f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="write the demo's outputs here instead of a temporary folder")
    results.json_option(parser)
    args, demo_args = parser.parse_known_args()
    demo_args = [a for a in demo_args if a != "--"]
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep} exists; the benchmark times a fresh run")
    tmp = Path(tempfile.mkdtemp(prefix="ava-bench-demo-"))
    out = args.keep or tmp / "demo"
    try:
        before = _load()
        wall, rc = run(out, tmp / "ava-home", demo_args)
        after = _load()
        timings_file = out / "demo_timings.json"
        timings = json.loads(timings_file.read_text()) if timings_file.is_file() else {}
        print()
        print(
            f"`ava demo` {' '.join(demo_args)}: exit {rc}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
            f"{platform.machine()} CPU, {_cpus()} cores usable, threads {timings.get('threads')}, "
            f"load average before {before}, after {after} (no GPU used)"
        )
        print("\n".join(table(timings, wall)))
        verdict = "within" if rc == 0 and wall <= BUDGET_S else "OVER"
        print(f"\n{verdict} the {BUDGET_S:.0f} s budget ({wall:.0f} s wall)")
        said = f"exit {rc}, " if rc else ""
        figure = results.figure(
            f"`ava demo {' '.join(demo_args)}`".replace(" `", "`"),
            round(wall, 1),
            "s",
            target=f"<= {BUDGET_S:.0f} s",
            note=f"{said}a fresh run, threads {timings.get('threads')}, load before {before}, after {after}",
        )
        rows = [{"stage": k, "seconds": v} for k, v in timings.get("stages_s", {}).items()]
        results.write(args.json, "bench_demo", [figure], rows, {"wall_s": wall, "exit": rc, "timings": timings})
        return rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
