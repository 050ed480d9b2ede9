"""An ability's rows from an int8/int4 cache, held three ways by ``AbilityFeatures``: in float32 (where they fit), as
the stored codes decoded batch by batch (where float32 would not fit but the codes do), and not held (streamed from
the cache, where nothing fits). Held bytes, load seconds, and the time of one training batch's gather (what the
attentive probe pays per step), side by side in one process on one cache.

The cache is ``--images`` stand-in rows of ``--tokens`` x ``--dim`` written through the extraction's own writers
(``bench_cache.StandIn``); the memory each way sees is set by replacing ``ava.cache.placement``'s free-memory
functions (the device's too on CUDA), so the three ways run on one machine.

    python benchmarks/bench_coded_rows.py --threads 1                     # CPU: SigLIP-so400m shapes, int4
    python benchmarks/bench_coded_rows.py --device cuda                   # a GPU: the codes on the device
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))

import bench_cache  # noqa: E402
import results  # noqa: E402

from ava.cache import ExtractConfig, extract, open_cache, placement  # noqa: E402
from ava.data.format import Dataset  # noqa: E402
from ava.heads.features import AbilityFeatures  # noqa: E402


def held_bytes(tokens: Any) -> int:
    if isinstance(tokens, torch.Tensor):
        return tokens.numel() * tokens.element_size()
    return sum(t.numel() * t.element_size() for t in (tokens.values, tokens.scales))


def one_way(way: str, cache: Any, samples: list, args: argparse.Namespace) -> dict[str, Any]:
    codec, n = cache.group.codec, len(samples)
    row32 = cache.num_tokens * cache.dim * 4
    codes = n * sum(codec.row_bytes(cache.num_tokens, cache.dim))
    free = {"float32": None, "codes": int(1.2 * codes / placement.SHARE), "streamed": 1}[way]
    saved = placement.host_free_bytes, placement.device_free_bytes
    if free is not None:  # only the codes fit (codes), or nothing does (streamed)
        assert way != "codes" or codes * 1.2 < n * row32
        placement.host_free_bytes = lambda: free
        placement.device_free_bytes = lambda device: free
    try:
        t0 = time.perf_counter()
        features = AbilityFeatures(cache, samples, [None], device=args.device)
        load = time.perf_counter() - t0
        rows = features.held_rows(samples, [None], args.device)
        rng = np.random.default_rng(0)
        times = []
        for _ in range(args.gathers):
            index = rng.choice(n, args.batch_size, replace=False)
            t0 = time.perf_counter()
            x = rows[index]
            if x.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    finally:
        placement.host_free_bytes, placement.device_free_bytes = saved
    held = 0 if features.placement == placement.STREAMED else held_bytes(features.tokens())
    return {
        "way": way,
        "held_as": features.held_as,
        "placement": features.placement,
        "held_mb": round(held / 1e6),
        "load_s": round(load, 2),
        "gather_ms": round(1e3 * float(np.median(times)), 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--codec", default="int4", choices=("int8", "int4"))
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--tokens", type=int, default=729)
    p.add_argument("--dim", type=int, default=1152)
    p.add_argument("--batch-size", type=int, default=32, help="rows per gather (the attentive probe's batch)")
    p.add_argument("--gathers", type=int, default=20)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    results.json_option(p)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench-coded-"))
    try:
        data = bench_cache.make_images(work / "data", args.images)
        standin = bench_cache.StandIn(args.tokens, args.dim)
        extract(
            ExtractConfig(
                vfm="",
                data=str(data),
                cache=str(work / "cache"),
                batch_size=32,
                shard_size=64,
                num_workers=0,
                progress=False,
                codec=args.codec,
                views=(),
            ),
            vfm=standin,
        )
        cache = open_cache(str(work / "cache"), f"standin-{args.tokens}x{args.dim}")
        samples = list(Dataset(data).samples())
        rows = []
        for r in range(args.repeats):
            for way in ("float32", "codes", "streamed"):
                rows.append({**one_way(way, cache, samples, args), "repeat": r})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{args.device} ({platform.processor() or platform.machine()}), torch {torch.__version__}, threads "
        f"{torch.get_num_threads()}, {dt.date.today()}; {args.codec}, {args.images} rows of {args.tokens} x "
        f"{args.dim}, gathers of {args.batch_size}"
    )
    print("| way | held as | placement | held MB | load s | ms per gather (each repeat) |")
    print("|---|---|---|---:|---|---|")
    for way in ("float32", "codes", "streamed"):
        mine = [x for x in rows if x["way"] == way]
        print(
            f"| {way} | {mine[0]['held_as']} | {mine[0]['placement']} | {mine[0]['held_mb']} | "
            f"{' / '.join(str(x['load_s']) for x in mine)} | {' / '.join(str(x['gather_ms']) for x in mine)} |"
        )
    label = {"float32": "held as float32", "codes": "held as their codes", "streamed": "streamed"}
    figures = []
    for way in ("float32", "codes", "streamed"):
        mine = [x for x in rows if x["way"] == way]
        figures.append(
            results.figure(
                f"{args.batch_size}-row gather, {args.codec} rows {label[way]}",
                min(x["gather_ms"] for x in mine),
                "ms",
                note=f"{mine[0]['held_mb']} MB held, {mine[0]['placement']}",
            )
        )
    results.write(args.json, "bench_coded_rows", figures, rows, rows, device=args.device)


if __name__ == "__main__":
    main()
