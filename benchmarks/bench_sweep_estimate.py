"""A sweep's estimate beside what it took: the CLI as a user runs it, on this machine's CPU.

Default: ``ava data synth``, then ``ava sweep --dry-run`` (the speed table's figures, then ``--calibrate``: this
machine timed first), then the same sweep for real, then ``ava sweep status --json``; per job and for the whole
sweep, the estimate over the time it took (a ratio of 1 is exact; the target is within 2x either way). Everything is
written under a temporary folder, ``$AVA_HOME`` included (the calibration is kept there).

``--table``: measure the figures of the speed table's ``cpu`` entry on this machine (what ``ava/cost/speeds.json``
ships for CPUs): a job's start, the forward and preprocessing rates, matrix products and a probe's least step
(as ``--calibrate`` does), and from real jobs at two data sizes and two ability counts the head jobs' work per
ability and per sample, and the extraction's write rate. Prints the entry as JSON.

    python benchmarks/bench_sweep_estimate.py [--jobs 2] [--per-ava 40] [--json [FILE]]
    python benchmarks/bench_sweep_estimate.py --table [--json [FILE]]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import results  # benchmarks/, beside this script

UNITS = {  # of the speed table's figures (ava.cost.speeds)
    "job_start_s": "s",
    "extract_start_s": "s",
    "forward_flops_per_s": "FLOP/s",
    "prep_s_per_mpix": "s/Mpix",
    "extract_efficiency": "",
    "write_bytes_per_s": "B/s",
    "read_bytes_per_s": "B/s",
    "matmul_flops_per_s": "FLOP/s",
    "probe_linear_step_s": "s",
    "probe_attn_step_s": "s",
    "ability_s": "s",
    "sample_s": "s",
    "llm_tokens_per_s": "token/s",
    "llm_warmup_s": "s",
}
VFMS = "pixels#size=64,random-vit"
HEADS = "knn,probe-linear"


def fastest(n: int, fn: Any) -> float:
    """The least of ``n`` timings (the machine is shared: the others carry other processes' load)."""
    return min(fn() for _ in range(n))


def ava(*args: str, env: dict[str, str] | None = None, check: bool = True) -> tuple[float, str]:
    """Run ``python -m ava ARGS``; (wall seconds, stdout)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "ava", *args], capture_output=True, text=True, env=env)
    took = time.perf_counter() - t0
    if check and out.returncode != 0:
        raise SystemExit(f"ava {' '.join(args)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return took, out.stdout


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def check(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    env = {**os.environ, "AVA_HOME": str(work / "home")}
    data, cache, runs = work / "data", work / "cache", work / "runs"
    ava("data", "synth", "--out", str(data), "--per-ava", str(args.per_ava), "--size", "128", env=env)
    grid = ["--vfm", VFMS, "--head", HEADS, "--data", str(data), "--cache", str(cache), "--out", str(runs)]
    grid += ["--device", "cpu", "--jobs", str(args.jobs)]
    _, text = ava("sweep", *grid, "--dry-run", "--json", env=env)
    table = json.loads(text)["estimate"]
    cal_s, text = ava("sweep", *grid, "--dry-run", "--calibrate", "--json", env=env)
    calibrated = json.loads(text)["estimate"]
    load_before = load()
    t0 = time.perf_counter()
    ava("sweep", *grid, "--json", env=env)
    wall = time.perf_counter() - t0
    _, text = ava("sweep", "status", str(runs), "--json", env=env)
    rows = json.loads(text)["jobs"]
    actual = {r["job"]: r["elapsed_s"] for r in rows if r["current"]}
    out_rows = []
    for r in calibrated["jobs"]:
        name = r["job"]
        t = next(j for j in table["jobs"] if j["job"] == name)
        out_rows.append(
            {
                "job": name,
                "actual_s": actual[name],
                "calibrated_s": r["seconds"],
                "table_s": t["seconds"],
                "calibrated_ratio": round(r["seconds"] / actual[name], 3),
                "table_ratio": round(t["seconds"] / actual[name], 3),
            }
        )

    def worst(key: str) -> float:
        return max(max(r[key], 1 / r[key]) for r in out_rows)

    return {
        "rows": out_rows,
        "wall_s": round(wall, 1),
        "calibrated_wall_s": calibrated["wall_s"],
        "table_wall_s": table["wall_s"],
        "calibrate_s": round(cal_s, 1),
        "wall_ratio_calibrated": round(calibrated["wall_s"] / wall, 3),
        "wall_ratio_table": round(table["wall_s"] / wall, 3),
        "worst_job_calibrated": round(worst("calibrated_ratio"), 3),
        "worst_job_table": round(worst("table_ratio"), 3),
        "load": f"{load_before} before, {load()} after",
        "jobs": args.jobs,
    }


def table_entry(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The ``cpu`` entry of the speed table, measured here (see the module's docstring)."""
    from ava.cache.pooling import pool_dim
    from ava.cache.reader import open_cache
    from ava.cost.calibrate import calibrate
    from ava.cost.model import fit_seconds
    from ava.cost.shapes import data_shape, vfm_shape
    from ava.cost.speeds import FIGURES, Speeds
    from ava.data.format import Dataset

    small, large = work / "small", work / "large"
    ava("data", "synth", "--out", str(small), "--per-ava", "40", "--size", "128")
    ava("data", "synth", "--out", str(large), "--per-ava", "200", "--size", "128")
    os.environ["AVA_HOME"] = str(work / "home")  # the calibration below is kept there, not in the user's home
    cal = json.loads(calibrate("cpu", "cpu", ["random-vit", "pixels#size=64"], large, jobs=2, say=print).read_text())
    figures: dict[str, float] = {k: v for k, v in cal["figures"].items() if k in FIGURES}
    figures["extract_efficiency"] = 1.0  # on a CPU every part of an extraction is counted (added)
    # the extraction's write rate: pixels (no forward) at two sizes; what the preprocessing does not explain
    runs = iter(range(1000))
    px = vfm_shape("pixels#size=64")
    pixels_prep = cal["vfm"]["pixels#size=64"]["prep_s"]

    def extract(d: Path) -> float:
        cache = str(work / f"c{next(runs)}")
        return ava("cache", "extract", "--vfm", "pixels#size=64", "--data", str(d), "--cache", cache)[0]

    ex = {d: fastest(args.repeat, lambda d=d: extract(d)) for d in (small, large)}
    shapes = {d: data_shape(d) for d in (small, large)}
    from ava.cache.plan import group_bytes

    views = ["mean", "grid2", "grid4"]
    written = {d: group_bytes("fp16", shapes[d].images, px.patch_tokens, px.dim, 1, views)["total"] for d in ex}
    spare = (ex[large] - shapes[large].images * pixels_prep) - (ex[small] - shapes[small].images * pixels_prep)
    figures["write_bytes_per_s"] = (written[large] - written[small]) / spare if spare > 0 else 0.0
    for d in (small, large):
        ava("cache", "extract", "--vfm", "pixels#size=64", "--data", str(d), "--cache", str(work / f"c-{d.name}"))
    # the cache's read rate, through the reader the heads use
    cache = open_cache(work / "c-large", "pixels#size=64")
    shas = sorted({s.image_sha256 for s in Dataset(large)})

    def read() -> float:
        t0 = time.perf_counter()
        got = [cache.read_view(shas, None, v) for v in views]
        return (time.perf_counter() - t0) / sum(v.nbytes for v in got)

    figures["read_bytes_per_s"] = 1 / fastest(args.repeat, read)
    # a head job's work per sample: kNN (its search is tiny here) on every ability at 40 and 200 samples each
    speeds = Speeds(kind="cpu", **{k: figures.get(k, 0.0) for k in FIGURES})
    row = 4 * sum(pool_dim(px.dim, v) for v in views)

    def knn(d: Path) -> tuple[float, int]:
        args_ = ["head", "train", "--head", "knn", "--vfm", "pixels#size=64", "--data", str(d), "--device", "cpu"]
        args_ += ["--cache", str(work / f"c-{d.name}")]
        took = fastest(args.repeat, lambda: ava(*args_, "--out", str(work / f"knn{next(runs)}"))[0])
        counts = list(shapes[d].abilities.values())
        n = sum(c.train + c.test for c in counts)
        known = n * row / figures["read_bytes_per_s"] + sum(fit_seconds("knn", px, c, speeds, "")[0] for c in counts)
        return took - known, n

    at_small, at_large = knn(small), knn(large)
    figures["sample_s"] = max(0.0, (at_large[0] - at_small[0]) / (at_large[1] - at_small[1]))
    job = cal["small_jobs"]  # the calibration's real kNN job: its time beyond the start, less its samples
    figures["ability_s"] = max(0.0, job["knn_s"] - figures["job_start_s"] - job["samples"] * figures["sample_s"])
    figures["ability_s"] /= job["abilities"]
    figures["llm_tokens_per_s"] = 0.0
    figures["llm_warmup_s"] = 0.0
    return {
        "figures": figures,
        "threads": cal["threads"],
        "cores": cal["cores"],
        "concurrency": cal["concurrency"],
        "runs": {
            "knn_14_small": at_small,
            "knn_14_large": at_large,
            "extract_s": {d.name: t for d, t in ex.items()},
            "calibration": cal,
            "repeat": args.repeat,
        },
        "load_now": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="measure the speed table's cpu entry instead")
    parser.add_argument("--jobs", type=int, default=2, help="the sweep's jobs at once")
    parser.add_argument("--repeat", type=int, default=2, help="--table: timings per figure (the least is kept)")
    parser.add_argument("--per-ava", type=int, default=40, help="synthetic samples per ability")
    results.json_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ava-bench-sweep-") as tmp:
        result = table_entry(args, Path(tmp)) if args.table else check(args, Path(tmp))
    print(json.dumps(result, indent=1))
    if args.table:
        figures = [
            results.figure(f"speed table, cpu: {k}", float(f"{v:.4g}"), UNITS[k], note=f"load {result['load_now']}")
            for k, v in result["figures"].items()
        ]
        figures.append(
            results.figure("speed table, cpu: 2 jobs at once / one alone", result["concurrency"].get("2"), "x")
        )
        results.write(args.json, "bench_sweep_estimate", figures, [result["runs"]], result)
        return
    load_note = f"load {result['load']}"
    figures = [
        results.figure(
            "sweep wall, estimate / actual, calibrated", result["wall_ratio_calibrated"], "x", "0.5-2", load_note
        ),
        results.figure("sweep, worst job's estimate off by, calibrated", result["worst_job_calibrated"], "x", "<= 2"),
        results.figure(
            "sweep wall, estimate / actual, the table's cpu figures",
            result["wall_ratio_table"],
            "x",
            "0.5-2",
            load_note,
        ),
        results.figure(
            "sweep, worst job's estimate off by, the table's figures", result["worst_job_table"], "x", "<= 2"
        ),
        results.figure(
            "sweep wall", result["wall_s"], "s", note=f"{VFMS} x {HEADS}, --jobs {result['jobs']}, {load_note}"
        ),
        results.figure("--calibrate", result["calibrate_s"], "s", "<= 60 s"),
    ]
    results.write(args.json, "bench_sweep_estimate", figures, result["rows"], result)


if __name__ == "__main__":
    main()
