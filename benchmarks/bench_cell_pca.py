"""The linear probe's fixed transforms of a grid view (``Probe.fit_input`` + ``prepare``: the cell PCA, a float64
covariance of every train cell, then the standardization) at a fingerprint's real sizes: seconds and peak memory,
this checkout against another (``--baseline``), each run in a process of its own.

At real size the ``grid4`` view of a SigLIP-so400m ability is 17 x 1152 float32 values per row (the mean and 16
cell means), and an ability has up to ~32K fit rows (recognition). The transforms were fitted on the host whatever
the device, on a float64 copy of the whole view; they now run where the probe trains (``--device``), the covariance
summed over float64 blocks of at most ``ava.heads.probe.model.COV_CELLS`` cells.

    python benchmarks/bench_cell_pca.py --rows 2000,8000,32000 --threads 2 --baseline /tmp/ava-base
    python benchmarks/bench_cell_pca.py --device cuda --rows 2000,8000,32000          # on a GPU

The rows are random (the cost depends on shapes only). ``--baseline`` is a checkout of the code before (its
``Probe`` runs on the host, as it did in every run). The child prints one JSON line: seconds of ``fit_input`` and of
``prepare`` (the device synchronized), and the process's peak resident memory above what it held before.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import results  # benchmarks/, beside this script

HERE = Path(__file__).resolve()


def child(rows: int, dim: int, cells: int, rank: int, device: str, threads: int) -> dict[str, Any]:
    """One measurement in this process (``--child``)."""
    import numpy as np
    import torch

    from ava.heads.probe.model import Probe

    if threads:
        torch.set_num_threads(threads)
    side = int(round(cells**0.5))
    x = np.random.default_rng(0).standard_normal((rows, (1 + cells) * dim), dtype=np.float32)
    probe = Probe(dim, 10, "mean", cells=side, layers=1, rank=rank)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    where = "host (this code fits on the host)"
    t0 = time.perf_counter()
    if _fits_on_device():  # this checkout: the transforms run on the device the probe trains on
        probe = probe.to(device)
        rows_t = torch.from_numpy(x).to(device)
        where = device
    else:
        rows_t = torch.from_numpy(x)
    probe.fit_input(rows_t)
    sync()
    t1 = time.perf_counter()
    with torch.no_grad():
        z = probe.prepare(rows_t)
    sync()
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {
        "rows": rows,
        "where": where,
        "fit_input_s": round(t1 - t0, 3),
        "prepare_s": round(t2 - t1, 3),
        "view_gb": round(x.nbytes / 1e9, 2),
        "prepared_dims": int(z.shape[1]),
        "peak_rss_gb_above_start": round((peak - before) / 1e6, 2),
    }
    if device.startswith("cuda"):
        out["peak_device_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    return out


def _fits_on_device() -> bool:
    """Whether this checkout's CellReduce sums its covariance in blocks on the rows' device (COV_CELLS)."""
    import ava.heads.probe.model as model

    return hasattr(model, "COV_CELLS")


def run_one(tree: Path | None, args: argparse.Namespace, rows: int) -> dict[str, Any]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    argv = [
        sys.executable,
        str(HERE),
        "--child",
        str(rows),
        "--dim",
        str(args.dim),
        "--cells",
        str(args.cells),
        "--rank",
        str(args.rank),
        "--device",
        args.device,
        "--threads",
        str(args.threads or 0),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"rows": rows, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="2000,8000,32000", help="fit rows per run (comma-separated)")
    p.add_argument("--dim", type=int, default=1152)
    p.add_argument("--cells", type=int, default=16, help="cells of the grid view (16: grid4)")
    p.add_argument("--rank", type=int, default=64)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--baseline", type=Path, help="a checkout of the code before, run alternately with this one")
    p.add_argument("--repeats", type=int, default=1)
    results.json_option(p)
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.dim, args.cells, args.rank, args.device, args.threads or 0)))
        return
    mine = HERE.parents[1]
    trees = [("this checkout", mine)] + ([("baseline", args.baseline)] if args.baseline else [])
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
        f"{args.threads or 'default'}, device {args.device}, {dt.date.today()}; grid view of {args.cells} cells "
        f"x {args.dim} dims (+ the mean), rank {args.rank}"
    )
    print("| rows | code | where | fit_input s | prepare s | view GB | peak RSS GB above start |")
    print("|---:|---|---|---:|---:|---:|---:|")
    runs = []
    for rows in [int(r) for r in args.rows.split(",")]:
        for rep in range(args.repeats):
            for name, tree in trees if rep % 2 == 0 else trees[::-1]:  # alternated
                r = {"code": name, "repeat": rep, **run_one(tree, args, rows)}
                runs.append(r)
                if "error" in r:
                    print(f"| {rows} | {name} | error: {r['error']} | | | | |")
                    continue
                print(
                    f"| {rows} | {name} | {r['where']} | {r['fit_input_s']} | {r['prepare_s']} | {r['view_gb']} "
                    f"| {r['peak_rss_gb_above_start']} |",
                    flush=True,
                )
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": runs}
    results.write(args.json, "bench_cell_pca", figures(runs), runs, payload, device=args.device)


def figures(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This checkout's best fit and its peak memory, per number of rows."""
    out = []
    for n in sorted({r["rows"] for r in runs}):
        mine = [r for r in runs if r["rows"] == n and r["code"] == "this checkout" and "error" not in r]
        if mine:
            best = min(mine, key=lambda r: r["fit_input_s"])
            out += [
                results.figure(f"transforms' fit, {n} rows", best["fit_input_s"], "s", note=f"on {best['where']}"),
                results.figure(f"peak memory above start, {n} rows", best["peak_rss_gb_above_start"], "GB"),
            ]
    return out


if __name__ == "__main__":
    main()
