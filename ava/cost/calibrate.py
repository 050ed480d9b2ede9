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
- a head job's work per ability and per sample is Python bookkeeping like a job's start: the table's figures are
  scaled by this machine's start over the table's.

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

from ava.cost.speeds import CPU, CostError, from_table, kinds, save_calibration

JOB_IMPORTS = "import torch, ava.api, ava.cli.main, ava.cache.extraction, ava.heads.probe.train, ava.heads.knn.train"


def _timed(fn: Any, min_s: float = 0.3, most: int = 50) -> float:
    """Seconds per call of ``fn``: one call to warm up, then calls until ``min_s`` has passed (at least 2)."""
    fn()
    n, t0 = 0, time.perf_counter()
    while n < 2 or (time.perf_counter() - t0 < min_s and n < most):
        fn()
        n += 1
    return (time.perf_counter() - t0) / n


def job_start_s(device: str) -> float:
    """A fresh process importing what a job imports (and creating its CUDA context on a GPU)."""
    code = JOB_IMPORTS + ("; torch.zeros(1, device='cuda')" if device.startswith("cuda") else "")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        raise CostError(f"calibrating a job's start failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
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


def calibrate(
    kind: str, device: str, vfms: list[str], data: str | os.PathLike[str] | None = None, *, say: Any = None
) -> Path:
    """Measure this machine's figures on ``device`` (see the module's docstring) for the device kind ``kind``,
    keep them under ``$AVA_HOME/speeds``, and return the file's path. ``say``: a function told each figure."""
    import torch

    from ava.cache.extraction import default_workers
    from ava.threads import apply_threads

    say = say or (lambda line: None)
    base = from_table(kind if kind in kinds() else CPU)
    threads = apply_threads()["threads"]  # as a job picks them (OMP_NUM_THREADS when the sweep sets it)
    t0 = time.perf_counter()
    start = job_start_s(device)
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
    scale = start / base.job_start_s
    figures["ability_s"] = base.ability_s * scale
    figures["sample_s"] = base.sample_s * scale
    say(
        f"calibrate: matmul {figures['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, probe step "
        f"{figures['probe_linear_step_s'] * 1e3:.2f} ms; per ability and sample x{scale:.2f} the table's "
        f"({time.perf_counter() - t0:.1f} s in all)"
    )
    return save_calibration(
        kind,
        figures,
        per_vfm,
        device=device,
        threads=threads,
        torch=torch.__version__,
        seconds=round(time.perf_counter() - t0, 1),
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
    args = parser.parse_args(argv)
    try:
        path = calibrate(args.kind, args.device, args.vfm, args.data, say=print)
    except AvaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"calibrate: kept in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
