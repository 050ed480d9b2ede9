"""`ava data build` speed on a COCO-style set with masks (held to 5K images on 2 cores in <= 2 minutes, excluding
any depth model).

The sources are the synthetic scenes of ``ava.curate.synthetic`` at COCO's size (``scale 4``: 640x480,
512x640 and 576x576 images, 2-8 polygon instances each, one crowd RLE region in every eighth image), stored as
JPEG as COCO is. They are written once into ``--work`` (not timed) and reused. The build is then timed end to
end (read and check the annotations, run every rule, balance, split, draw, encode, write, rename), with the 14
abilities the COCO file allows and, in a second row, the task-augmentation tasks as well. The machine's load
average is recorded before and after, since the build shares the CPUs with whatever else runs.

    python benchmarks/bench_build.py                          # 5000 images, workers 2
    python benchmarks/bench_build.py --images 500 --workers 1
    python benchmarks/bench_build.py --tasks all --phases     # + wall and CPU seconds of each phase
    # before/after in one run: the code of another commit (a git worktree) and this one, alternating, best of 2
    git worktree add --detach /tmp/ava-base COMMIT
    python benchmarks/bench_build.py --tasks none --baseline /tmp/ava-base --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import results  # benchmarks/, beside this script


def sources(work: Path, n: int) -> Path:
    write_sources = _curate("synthetic").write_sources
    src = work / f"src-{n}"
    if not (src / "instances.json").is_file():
        t = time.perf_counter()
        write_sources(src, n_images=n, seed=0, scale=4, image_format="jpeg")
        print(f"wrote {n} source images in {time.perf_counter() - t:.0f} s (not timed)", flush=True)
    return src


def _curate(name: str = ""):
    """``ava.curate`` (or its module ``name``); a baseline checkout from before the package's rename has it as
    ``ava.data.build``."""
    import importlib

    for package in ("ava.curate", "ava.data.build"):
        try:
            return importlib.import_module(f"{package}.{name}" if name else package)
        except ModuleNotFoundError as e:
            if e.name not in ("ava.curate", "ava.data.build"):
                raise
    raise ModuleNotFoundError("neither ava.curate nor ava.data.build")


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the build's worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _time_phases() -> dict[str, list[float]]:
    """Wrap the build's phases so each call adds its [wall, CPU] seconds to the returned dict."""
    build, pixels = _curate("build"), _curate("pixels")

    spent: dict[str, list[float]] = {}
    for module, name in (
        (build, "read_sources"),
        (pixels, "run_pass"),
        (build, "make_questions"),
        (build, "assign"),
        (build, "_write"),
    ):

        def timed(*args, _f=getattr(module, name), _name=name, **kwargs):
            t, c = time.perf_counter(), _cpu()
            try:
                return _f(*args, **kwargs)
            finally:
                w = spent.setdefault(_name, [0.0, 0.0])
                w[0] += time.perf_counter() - t
                w[1] += _cpu() - c

        setattr(module, name, timed)
    return spent


def run(src: Path, out: Path, workers: int, tasks: bool, phases: bool = False) -> dict:
    curate = _curate()
    BuildConfig, build_dataset = curate.BuildConfig, curate.build_dataset
    shutil.rmtree(out, ignore_errors=True)
    spent = _time_phases() if phases else None
    load_before = os.getloadavg()
    cpu = _cpu()
    t = time.perf_counter()
    result = build_dataset(
        BuildConfig(
            out=out, coco=src / "instances.json", images=src / "images", tasks=None if tasks else [], workers=workers
        )
    )
    seconds = time.perf_counter() - t
    n = sum(c["train"] + c["test"] for c in result.counts.values())
    row = {
        "tasks": tasks,
        "workers": workers,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(_cpu() - cpu, 1),
        "samples": n,
        "abilities": len(result.counts),
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
    }
    if spent is not None:  # make_questions includes run_pass (and the builders that run meanwhile)
        row["phases"] = {k: {"seconds": round(w, 1), "cpu_seconds": round(c, 1)} for k, (w, c) in spent.items()}
    return row


def run_code(code: Path | None, src: Path, out: Path, workers: int, tasks: bool, phases: bool = False) -> dict:
    """``run`` in a fresh process, importing ``ava`` from ``code`` (a checkout of another commit) when given."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    prog = (
        f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import ava, bench_build as b; "
        f"r = b.run(b.Path({str(src)!r}), b.Path({str(out)!r}), {workers}, {tasks}, {phases}); "
        "r['code'] = ava.__file__; print(json.dumps(r))"
    )
    # run from the code's own directory: `python -c` puts the working directory first on sys.path
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", prog],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=code or Path(__file__).parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ava-bench-build"))
    results.json_option(parser)
    parser.add_argument("--tasks", choices=("none", "all", "both"), default="both", help="rows without / with tasks")
    parser.add_argument("--baseline", type=Path, default=None, help="a checkout of another commit, timed alongside")
    parser.add_argument("--repeats", type=int, default=1, help="runs per row (the best is kept: the CPUs are shared)")
    parser.add_argument("--phases", action="store_true", help="also time each phase of the build (wall and CPU)")
    args = parser.parse_args()
    src = sources(args.work, args.images)
    rows = []
    codes = [args.baseline, None] if args.baseline else [None]
    for tasks in {"none": (False,), "all": (True,), "both": (False, True)}[args.tasks]:
        best: dict[Path | None, dict] = {}
        for _ in range(args.repeats):  # the codes alternate, so a drift of the machine's speed hits both alike
            for code in codes:
                row = run_code(code, src, args.work / "out", args.workers, tasks, args.phases and code is None)
                print(json.dumps({**row, "code": "baseline" if code else "this checkout"}), flush=True)
                if code not in best or row["seconds"] < best[code]["seconds"]:
                    best[code] = row
        rows += [{**best[code], "code": "baseline" if code else "this checkout"} for code in codes]
    meta = {
        "images": args.images,
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
    }
    print("| code | images | tasks | workers | seconds (best) | samples | abilities | load before | load after |")
    print("|---|---:|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(
            f"| {r['code']} | {args.images} | {'yes' if r['tasks'] else 'no'} | {r['workers']} | {r['seconds']} "
            f"| {r['samples']} | {r['abilities']} | {r['load_before']} | {r['load_after']} |"
        )
    results.write(args.json, "bench_build", figures(rows, args.images), rows, {"meta": meta, "rows": rows})


def figures(rows: list[dict], images: int) -> list[dict]:
    """This checkout's build seconds, with and without the tasks (the default build, every task, is held to 2
    minutes for 5,000 images on 2 cores), and the ratio to ``--baseline`` where one ran."""
    out = []
    for r in rows:
        if r["code"] != "this checkout":
            continue
        base = next((b for b in rows if b["code"] == "baseline" and b["tasks"] == r["tasks"]), None)
        ratio = f", {base['seconds'] / r['seconds']:.2f}x the baseline's speed" if base else ""
        out.append(
            results.figure(
                f"`ava data build`, {images} COCO-style images, {'every task' if r['tasks'] else 'abilities only'}",
                r["seconds"],
                "s",
                target="<= 120 s" if r["tasks"] and images == 5000 else None,
                note=f"{r['samples']} questions, {r['workers']} workers, load {r['load_before'][0]}{ratio}",
            )
        )
    return out


if __name__ == "__main__":
    main()
