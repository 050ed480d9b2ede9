"""How each stage of the pipeline grows with the samples: the CLI, stage by stage, at several dataset sizes.

    python benchmarks/bench_scale.py --sizes 2100,21000,218000 --json    # the recorded run (about 25 min, 2 cores)
    python benchmarks/bench_scale.py --sizes 140,280                     # a quick check that it runs
    python benchmarks/bench_scale.py --sizes 21000 --skip knn,llm --profile prof/   # cProfile of each stage

At each size (the total over the 14 abilities: ``--per-ava`` = size / 14) the synthetic suite is generated and every
stage runs as a user runs it, ``python -m ava ...`` in its own process: ``data synth``, ``data info``, ``cache
extract`` (``--vfm pixels#size=64``: raw pixels, so the VFM costs next to nothing and ``ava``'s own machinery is
what is timed), ``fingerprint`` once per head (``probe-linear``, ``probe-attn``, ``knn``, each timed alone),
``head train --head llm`` (the tiny random Qwen2, one ability, one epoch) and ``report`` over the three heads' runs.
Each stage's wall time, CPU time and peak RSS (the largest resident set of the stage's process or of any process it
waited for, from ``os.wait4``) are measured, and between consecutive sizes the growth of each against the growth of
the samples. A stage that grows more than 1.25x linearly (``--tolerance``) is named, with its known cause when
there is one. Threads are pinned (``--threads``, also ``OMP_NUM_THREADS`` of every stage); the load average is
recorded beside each stage.

``--json`` records one figure per stage (its growth between the two largest sizes, held to 1.25x the samples' growth)
and every (stage, size) row in ``benchmarks/results/``; ``docs/make_performance.py`` renders the rows as a table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import results  # benchmarks/, beside this script

ABILITIES = 14
VFM = "pixels#size=64"
HEADS = ("probe-linear", "probe-attn", "knn")
LLM = "tiny-random-qwen2"
LLM_ABILITY = "color"
STAGES = ("synth", "info", "extract", *HEADS, "llm", "report")

# What a stage's cost grows with beyond the samples, when it is known: printed when a stage is over the line.
CAUSES = {
    "knn": "the exact search of every test sample against every train sample (test x train), and the pick of k and "
    "the pooled view by leave-one-out on an ability of up to --loo-max-rows train samples (N x N)",
}


@dataclass
class Stage:
    """One stage at one size, as measured."""

    stage: str
    samples: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    load: float
    exit: int

    def row(self) -> dict:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _ava(*args: str, profile: Path | None) -> list[str]:
    prefix = [sys.executable, "-m", "cProfile", "-o", str(profile)] if profile else [sys.executable]
    return [*prefix, "-m", "ava", *args]


def commands(stage: str, work: Path, per_ava: int, image_size: int, threads: int) -> list[str]:
    """The CLI arguments of ``stage`` (after ``python -m ava``), its data, cache and runs under ``work``."""
    data, cache, runs = str(work / "data"), str(work / "cache"), work / "runs"
    on = ["--vfm", VFM, "--data", data, "--cache", cache, "--device", "cpu"]
    if stage == "synth":
        size = ["--per-ava", str(per_ava), "--size", str(image_size), "--workers", str(threads)]
        return ["data", "synth", "--out", data, *size, "--seed", "0"]
    if stage == "info":
        return ["data", "info", "--data", data]
    if stage == "extract":
        return ["cache", "extract", *on, "--quiet"]
    if stage in HEADS:
        return ["fingerprint", *on, "--head", stage, "--out", str(runs), "--quiet", "--threads", str(threads)]
    if stage == "llm":
        llm = ["--llm", LLM, "--ava", LLM_ABILITY, "--epochs", "1", "--threads", str(threads)]
        return ["head", "train", "--head", "llm", *on, *llm, "--out", str(runs / "llm")]
    if stage == "report":
        done = [str(p) for h in HEADS for p in sorted(runs.glob(f"{h}-*"))]  # (the VFM's name, made a folder's)
        return ["report", *done, "--out", str(work / "report"), "--quiet"]
    raise ValueError(f"no stage {stage!r}")


def run_stage(stage: str, samples: int, argv: list[str], log: Path, threads: int) -> Stage:
    """``argv`` in a child process (its output to ``log``): wall and CPU seconds and peak RSS, from ``os.wait4``
    (the child's and those of the processes it waited for: a pool's workers)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    load = os.getloadavg()[0]
    with log.open("w") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        t0 = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux
    return Stage(stage, samples, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, load, child.returncode)


def run_size(size: int, args: argparse.Namespace, root: Path) -> list[Stage]:
    per_ava = max(1, round(size / ABILITIES))
    samples = per_ava * ABILITIES
    work = root / f"n{samples}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    measured = []
    for stage in STAGES:
        if stage in args.skip:
            continue
        profile = args.profile / f"{stage}-{samples}.prof" if args.profile else None
        argv = _ava(*commands(stage, work, per_ava, args.image_size, args.threads), profile=profile)
        m = run_stage(stage, samples, argv, work / f"{stage}.log", args.threads)
        print(f"  {stage:<13} {samples:>7} samples  {m.wall_s:8.1f} s  {m.peak_rss_mb:7.0f} MB", flush=True)
        measured.append(m)
        if m.exit != 0:
            tail = (work / f"{stage}.log").read_text().splitlines()[-15:]
            raise SystemExit(f"{stage} at {samples} samples exited {m.exit}:\n" + "\n".join(tail))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return measured


def growth(rows: list[Stage], tolerance: float) -> list[dict]:
    """Between consecutive sizes, per stage: time and memory growth against the samples' growth, and a verdict."""
    out = []
    by_stage: dict[str, list[Stage]] = {}
    for r in rows:
        by_stage.setdefault(r.stage, []).append(r)
    for stage, seq in by_stage.items():
        for a, b in zip(seq, seq[1:], strict=False):
            n = b.samples / a.samples
            t, m = b.wall_s / max(a.wall_s, 1e-9), b.peak_rss_mb / max(a.peak_rss_mb, 1e-9)
            cpu = b.cpu_s / max(a.cpu_s, 1e-9)  # (beside the wall time: what other jobs on the machine do not change)
            over = [what for what, x in (("time", t), ("memory", m)) if x > tolerance * n]
            out.append(
                {
                    "stage": stage,
                    "from": a.samples,
                    "to": b.samples,
                    "samples_x": round(n, 2),
                    "time_x": round(t, 2),
                    "memory_x": round(m, 2),
                    "cpu_x": round(cpu, 2),
                    "limit_x": round(tolerance * n, 2),
                    "over": over,
                    "cause": (CAUSES.get(stage, "no known cause: profile it (--profile)") if over else None),
                }
            )
    return out


def with_growth(rows: list[Stage], ratios: list[dict]) -> list[dict]:
    """The rows to record: each (stage, size) with its growth from the size before (none at the first size)."""
    steps = {(g["stage"], g["to"]): g for g in ratios}
    out = []
    for r in rows:
        g = steps.get((r.stage, r.samples), {})
        grown = {k: g[k] for k in ("samples_x", "time_x", "memory_x", "cpu_x", "limit_x") if k in g}
        out.append({**r.row(), **grown, **({"over": g["over"], "cause": g["cause"]} if g.get("over") else {})})
    return out


def table(rows: list[Stage], ratios: list[dict]) -> list[str]:
    sizes = sorted({r.samples for r in rows})
    columns = [f"{n:,} s / MB" for n in sizes]
    columns += [f"{a:,} -> {b:,} time x / memory x" for a, b in zip(sizes, sizes[1:], strict=False)]
    lines = ["| stage | " + " | ".join(columns) + " |", "|---" * (1 + len(columns)) + "|"]
    for stage in dict.fromkeys(r.stage for r in rows):
        cells = {r.samples: f"{r.wall_s:.1f} / {r.peak_rss_mb:.0f}" for r in rows if r.stage == stage}
        grow = [g for g in ratios if g["stage"] == stage]
        marks = [f"{g['time_x']} / {g['memory_x']}{' OVER' if g['over'] else ''}" for g in grow]
        lines.append(f"| {stage} | " + " | ".join([*(cells.get(n, "-") for n in sizes), *marks]) + " |")
    return lines


def verdicts(ratios: list[dict], tolerance: float) -> list[str]:
    """For the last step of sizes: each stage within the line or over it, with its cause."""
    if not ratios:
        return []
    last = max(g["to"] for g in ratios)
    lines = []
    for g in (g for g in ratios if g["to"] == last):
        where = f"{g['from']:,} -> {g['to']:,} samples ({g['samples_x']}x, limit {g['limit_x']}x)"
        if g["over"]:
            lines.append(f"{g['stage']}: OVER in {' and '.join(g['over'])}, {where}: {g['cause']}")
        else:
            lines.append(f"{g['stage']}: within {tolerance}x of linear, {where}")
    return lines


def figures(ratios: list[dict]) -> list[dict]:
    """One figure per stage: its time growth over the last step of sizes, held to the limit."""
    if not ratios:
        return []
    last = max(g["to"] for g in ratios)
    out = []
    for g in (g for g in ratios if g["to"] == last):
        name = f"growth of `{g['stage']}`, {g['from']:,} -> {g['to']:,} samples ({g['samples_x']}x)"
        note = f"memory {g['memory_x']}x" + (f"; over: {g['cause']}" if g["over"] else "")
        out.append(results.figure(name, g["time_x"], "x", target=f"<= {g['limit_x']}x", note=note))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2100,21000,218000", help="total samples per run, comma-separated")
    parser.add_argument("--image-size", type=int, default=64, help="the synthetic images' side (default 64)")
    parser.add_argument("--threads", type=int, default=2, help="threads (and synth workers) of every stage")
    parser.add_argument("--tolerance", type=float, default=1.25, help="allowed growth over linear (default 1.25)")
    parser.add_argument("--skip", default="", help=f"stages not run, comma-separated, of {','.join(STAGES)}")
    parser.add_argument("--profile", type=Path, help="write a cProfile of each stage here (STAGE-SAMPLES.prof)")
    parser.add_argument("--keep", action="store_true", help="keep each size's data, cache, runs and logs")
    parser.add_argument("--work", type=Path, help="the folder for data, cache and runs (default: a temporary one)")
    results.json_option(parser)
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: give whole numbers, comma-separated")
    if not sizes or min(sizes) < ABILITIES:
        parser.error(f"--sizes {args.sizes!r}: each size needs at least {ABILITIES} samples (one per ability)")
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if unknown := args.skip - set(STAGES):
        parser.error(f"--skip: no stage {', '.join(sorted(unknown))} (stages: {', '.join(STAGES)})")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    root = args.work or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    t0 = time.perf_counter()
    try:
        rows: list[Stage] = []
        for size in sizes:
            print(f"== {size:,} samples", flush=True)
            rows += run_size(size, args, root)
    finally:
        if not (args.keep or args.work):
            shutil.rmtree(root, ignore_errors=True)
    wall = time.perf_counter() - t0
    ratios = growth(rows, args.tolerance)
    print()
    print("\n".join(table(rows, ratios)))
    print()
    print("\n".join(verdicts(ratios, args.tolerance)))
    print(f"\nwhole run: {wall:.0f} s on {os.cpu_count()} cpus, {args.threads} threads")
    table_rows = with_growth(rows, ratios)
    payload = {"rows": table_rows, "growth": ratios, "wall_s": round(wall, 1), "sizes": sizes}
    results.write(args.json, "bench_scale", figures(ratios), table_rows, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
