"""Time the synthetic suite: 14 abilities x 500 samples at 384 px (held to 2 minutes on 2 cores).

    python benchmarks/bench_synth.py [--per-ava 500] [--size 384] [--workers 2] [--difficulty easy]

Prints wall time, images per second and the dataset size; the dataset goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import results  # benchmarks/, beside this script

from ava.synth import SynthConfig, generate


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-ava", type=int, default=500)
    parser.add_argument("--size", type=int, default=384)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--difficulty", default="easy")
    results.json_option(parser)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_synth_"))
    try:
        cfg = SynthConfig(
            out=str(tmp / "ds"), per_ava=args.per_ava, size=args.size, workers=args.workers, difficulty=args.difficulty
        )
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        c0 = _cpu_seconds()
        generate(cfg, progress=False)
        dt = time.perf_counter() - t0
        cpu = _cpu_seconds() - c0
        n = 14 * args.per_ava
        mb = sum(p.stat().st_size for p in (tmp / "ds").rglob("*") if p.is_file()) / 1e6
        print(
            f"synth: {n} samples at {args.size}px, {args.workers} workers, {args.difficulty}: {dt:.1f} s "
            f"({n / dt:.0f} samples/s, {mb:.0f} MB); load average before start {load:.1f} on {os.cpu_count()} cpus"
        )
        # CPU time of this process and its workers does not depend on other jobs sharing the machine: divided by
        # the worker count it estimates the wall time on idle cores.
        print(
            f"cpu: {cpu:.1f} s in all processes ({cpu / n * 1000:.1f} ms/sample) -> about {cpu / args.workers:.0f} s "
            f"wall on {args.workers} idle cores"
        )
        what = f"14 x {args.per_ava} at {args.size} px, {args.difficulty}"
        figures = [
            results.figure(
                f"synthetic suite, {what}",
                round(dt, 1),
                "s",
                target="<= 120 s" if args.per_ava == 500 else None,
                note=f"{args.workers} workers, load {load:.1f}, {mb:.0f} MB",
            ),
            results.figure(f"CPU per sample, {what}", round(cpu / n * 1000, 1), "ms", note="all processes"),
        ]
        row = {"samples": n, "wall_s": round(dt, 2), "cpu_s": round(cpu, 2), "mb": round(mb, 1), "load": load}
        results.write(args.json, "bench_synth", figures, [row], row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
