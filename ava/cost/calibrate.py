"""``--calibrate``: this machine's speed figures, measured in seconds before a sweep's estimate.

What is timed, on the device the jobs will use, with the CPU threads a job would pick:

- a job's start: a fresh Python process importing what a job imports (and setting up CUDA on a GPU);
- each VFM: loading it as an extraction does (its weights, at the extraction's dtype), then a few batches of its
  forward pass after one to warm up (seconds per image; the VFMs with parameters also give the table's
  ``forward_flops_per_s``);
- preprocessing: up to 16 of the data's images read and preprocessed for each VFM as an extraction's workers do
  (per image, over the workers an extraction starts on this machine; per megapixel read and written for the
  others);
- float32 matrix products at the VFM's width (the kNN search, a probe step's arithmetic), and the least a probe's
  optimizer step takes (a tiny one);
- two real jobs on a small synthetic suite (every ability, 10 samples each): its extraction by the ``pixels`` VFM,
  whose time beyond a job's start and its images' preprocessing is an extraction's own work (scanning the data,
  making the group, starting workers and writers, the checks at the end), and kNN on it, whose time beyond a job's
  start is its work per ability; the work per sample (too little to time here) is the table's, scaled by this
  machine's start over the table's;
- on a CPU, a job's start alone and ``jobs`` at once (each pinned to its share of the CPUs, as a local sweep runs
  them): how much longer each of the sweep's jobs takes beside the others, on this machine as busy as it is now.

The LLM head's figures (tokens per second, warm-up) and the cache's read and write rates are not timed here: the
table's are kept. The figures are kept under ``$AVA_HOME/speeds`` (:func:`ava.cost.speeds.save_calibration`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ava.cost.speeds import CPU, CostError, kinds, save_calibration, table

JOB_IMPORTS = "import torch, ava.api, ava.cli.main, ava.cache.extraction, ava.heads.probe.train, ava.heads.knn.train"


def _timed(fn: Any, min_s: float = 0.3, most: int = 50) -> float:
    """Seconds per call of ``fn``: one call to warm up, then calls until ``min_s`` has passed (at least 2)."""
    fn()
    n, t0 = 0, time.perf_counter()
    while n < 2 or (time.perf_counter() - t0 < min_s and n < most):
        fn()
        n += 1
    return (time.perf_counter() - t0) / n


def job_start_s(device: str, jobs: int = 1) -> float:
    """A fresh process importing what a job imports (and creating its CUDA context on a GPU); with ``jobs`` > 1,
    that many at once, each pinned to its share of this process's CPUs with as many threads (as a local sweep
    runs them): the seconds until the last has ended."""
    code = JOB_IMPORTS + ("; torch.zeros(1, device='cuda')" if device.startswith("cuda") else "")
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = []
    size = len(cpus) // jobs if jobs > 1 else 0
    procs = []
    t0 = time.perf_counter()
    for i in range(jobs):
        pin = f"import os; os.sched_setaffinity(0, {cpus[i * size : (i + 1) * size]}); " if size else ""
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, size))} if jobs > 1 else None
        procs.append(subprocess.Popen([sys.executable, "-c", pin + code], stderr=subprocess.PIPE, text=True, env=env))
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise CostError(f"calibrating a job's start failed: {(err.strip().splitlines() or ['?'])[-1]}")
    return time.perf_counter() - t0


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def vfm_speed(name: str, device: str, batch: int | None = None) -> dict[str, float]:
    """Seconds to load ``name`` for extraction, and its forward seconds per image at the extraction's dtype."""
    import torch

    from ava.vfm import load_vfm

    dtype = "bf16" if device.startswith("cuda") else "fp32"
    t0 = time.perf_counter()
    vfm = load_vfm(name, device=device, dtype=dtype)
    _sync(device)
    load = time.perf_counter() - t0
    size = vfm.spec.image_size
    b = batch or (32 if device.startswith("cuda") else 4)
    x = torch.randn(b, 3, size, size, device=device)

    def step() -> None:
        vfm(x)
        _sync(device)

    per = _timed(step, min_s=0.5, most=5) / b
    return {"forward_s": per, "load_s": load}


def prep_s(data: str | os.PathLike[str], vfm: str, workers: int, images: int = 16) -> tuple[float, float] | None:
    """Reading and preprocessing up to ``images`` of the data's images for ``vfm`` as an extraction's workers do:
    (seconds per image over ``workers`` workers, the megapixels each touches: read and written); None when the
    data has no image."""
    from ava.data.format import Dataset
    from ava.vfm import resolve_vfm
    from ava.vfm.preprocess import pad_preprocess

    ds = Dataset(data)
    seen: dict[str, Any] = {}
    for s in ds:
        seen.setdefault(s.image, s)
        if len(seen) >= images:
            break
    if not seen:
        return None
    spec = resolve_vfm(vfm)
    samples = list(seen.values())
    mpix = sum(s.width * s.height for s in samples) / len(samples) / 1e6 + spec.image_size**2 / 1e6

    def prep() -> None:
        for s in samples:
            pad_preprocess(ds.load_image(s), spec.image_size, spec.mean, spec.std)

    return _timed(prep, min_s=0.3, most=3) / len(samples) / max(1, workers), mpix


def matmul_flops_per_s(device: str, dim: int = 1024, rows: int = 1024) -> float:
    import torch

    a = torch.randn(rows, dim, device=device)
    b = torch.randn(dim, rows, device=device)

    def mm() -> None:
        a @ b
        _sync(device)

    return 2.0 * rows * dim * rows / _timed(mm)


def probe_step_s(device: str) -> float:
    """The least an optimizer step takes: a tiny linear layer, batch 32, AdamW (launches and the optimizer)."""
    import torch

    model = torch.nn.Linear(64, 8).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device=device)
    y = torch.randint(0, 8, (32,), device=device)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        _sync(device)

    return _timed(step, min_s=0.2, most=200)


def small_jobs_s(device: str) -> dict[str, float]:
    """Two real jobs, timed: ``ava cache extract`` of a small synthetic suite (every ability, 10 samples each,
    64-pixel images) by the ``pixels`` VFM (no forward pass: its time is a job's own work), then ``ava head train
    --head knn`` on it, in a temporary folder: their seconds, the images, samples and abilities."""
    import tempfile

    def ava(*args: str) -> float:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "ava", *args], capture_output=True, text=True)
        if out.returncode != 0:
            raise CostError(f"calibrating a job failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
        return time.perf_counter() - t0

    with tempfile.TemporaryDirectory(prefix="ava-calibrate-") as tmp:
        data, cache = f"{tmp}/data", f"{tmp}/cache"
        ava("data", "synth", "--out", data, "--per-ava", "10", "--size", "64")
        vfm = ["--vfm", "pixels#size=32", "--data", data, "--cache", cache, "--device", device]
        extract = ava("cache", "extract", *vfm, "--quiet")
        knn = ava("head", "train", "--head", "knn", *vfm, "--out", f"{tmp}/knn")
        from ava.data.format import Dataset

        ds = Dataset(data)
        samples = ds.samples()
        mpix = sum(s.width * s.height for s in samples) / len(samples) / 1e6 + 32 * 32 / 1e6
        return {
            "extract_s": extract,
            "images": len({s.image for s in samples}),
            "mpix": mpix,
            "knn_s": knn,
            "samples": len(samples),
            "abilities": len(ds.abilities()),
        }


def calibrate(
    kind: str,
    device: str,
    vfms: list[str],
    data: str | os.PathLike[str] | None = None,
    *,
    jobs: int = 1,
    say: Any = None,
) -> Path:
    """Measure this machine's figures on ``device`` (see the module's docstring) for the device kind ``kind``,
    keep them under ``$AVA_HOME/speeds``, and return the file's path. ``jobs``: the jobs a sweep runs at once (on a
    CPU, how much longer each takes than alone is measured too). ``say``: a function told each figure."""
    import torch

    from ava.cache.extraction import default_workers
    from ava.threads import apply_threads

    say = say or (lambda line: None)
    entry = table()["devices"][kind if kind in kinds() else CPU]["figures"]  # the figures calibration scales

    def base(name: str) -> float:
        return float(entry[name]["value"])

    threads = apply_threads()["threads"]  # as a job picks them (OMP_NUM_THREADS when the sweep sets it)
    t0 = time.perf_counter()
    start = job_start_s(device)
    concurrency = {}
    if jobs > 1 and not device.startswith("cuda"):  # alone, at once, alone again: a ratio taken in one window
        together = job_start_s(device, jobs)
        start = (start + job_start_s(device)) / 2
        concurrency[str(jobs)] = round(together / start, 3)
        say(f"calibrate: {jobs} jobs at once on the CPU: each x{concurrency[str(jobs)]:.2f} the time alone")
    say(f"calibrate: a job's start {start:.2f} s")
    per_vfm = {}
    workers = max(1, default_workers(torch.device(device)))
    preps = []
    for name in vfms:
        per_vfm[name] = vfm_speed(name, device)
        prep = prep_s(data, name, workers) if data is not None else None
        if prep is not None:
            per_vfm[name]["prep_s"] = prep[0]
            preps.append(prep[0] / prep[1])
        load, forward = per_vfm[name]["load_s"], per_vfm[name]["forward_s"]
        say(f"calibrate: {name}: load {load:.2f} s, forward {forward * 1e3:.2f} ms/image")
    figures: dict[str, float] = {"job_start_s": start}
    from ava.cost.shapes import vfm_shape

    rates = [vfm_shape(n).forward_flops / v["forward_s"] for n, v in per_vfm.items() if vfm_shape(n).params > 0]
    if rates:
        figures["forward_flops_per_s"] = statistics.median(rates)
    if preps:
        figures["prep_s_per_mpix"] = statistics.median(preps)
        say(f"calibrate: preprocessing {figures['prep_s_per_mpix'] * 1e3:.1f} ms per megapixel ({workers} worker(s))")
    figures["matmul_flops_per_s"] = matmul_flops_per_s(device)
    figures["probe_linear_step_s"] = figures["probe_attn_step_s"] = probe_step_s(device)
    scale = start / base("job_start_s")
    figures["sample_s"] = base("sample_s") * scale
    jobs_s = small_jobs_s(device)
    prep = figures.get("prep_s_per_mpix", base("prep_s_per_mpix")) * jobs_s["mpix"] * jobs_s["images"]
    figures["extract_start_s"] = max(0.0, jobs_s["extract_s"] - start - prep)
    ability = jobs_s["knn_s"] - start - jobs_s["samples"] * figures["sample_s"]
    figures["ability_s"] = max(0.0, ability) / max(1, jobs_s["abilities"])
    say(
        f"calibrate: matmul {figures['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, probe step "
        f"{figures['probe_linear_step_s'] * 1e3:.2f} ms; an extraction's own work {figures['extract_start_s']:.1f} s, "
        f"a kNN job's {figures['ability_s']:.2f} s an ability ({time.perf_counter() - t0:.1f} s in all)"
    )
    return save_calibration(
        kind,
        figures,
        per_vfm,
        device=device,
        threads=threads,
        cores=os.cpu_count() or 1,
        concurrency=concurrency,
        torch=torch.__version__,
        seconds=round(time.perf_counter() - t0, 1),
        small_jobs={k: round(v, 4) for k, v in jobs_s.items()},
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m ava.cost.calibrate --kind K --device D [--data DIR] --vfm A --vfm B``: what ``--calibrate`` runs
    (in its own process, so the sweep's driver never holds a GPU)."""
    import argparse

    from ava.errors import AvaError

    parser = argparse.ArgumentParser(prog="python -m ava.cost.calibrate", description=main.__doc__)
    parser.add_argument("--kind", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data")
    parser.add_argument("--vfm", action="append", default=[])
    parser.add_argument("--jobs", type=int, default=1, help="the jobs a sweep runs at once")
    args = parser.parse_args(argv)
    try:
        path = calibrate(args.kind, args.device, args.vfm, args.data, jobs=args.jobs, say=print)
    except AvaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"calibrate: kept in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
