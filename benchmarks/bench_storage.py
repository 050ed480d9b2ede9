"""Feature caches in object storage, against a real S3-compatible server on loopback (moto's
server mode, through s3fs, as the tests use it):

1. ``read``: one ability's token rows read into host memory the way heads place them (``ResidentFeatures``: parallel
   runs of range reads), from the S3 server and from the same cache pulled to local disk, in the same run (MB/s of
   fp16 values delivered, best of ``--repeats``; ratio S3 / local).
2. ``objects``: objects per GB of cache at SigLIP shapes (729 tokens x 1152, fp16, pooled views stored), shards
   sized for object storage by ``default_shard_size``: ``--shards`` shards of Gaussian fp16 values written to S3
   through the extraction's own ``write_shard``, objects and bytes counted by listing the server.
3. ``kill``: ``--kills`` extractions into S3 killed with SIGKILL at random points, each resumed, its content digest
   compared with an uninterrupted local extraction's.

    python benchmarks/bench_storage.py --vfm random-vit --per-ava 64 --kills 10 --json storage.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import results  # noqa: E402  (benchmarks/, beside this script)

ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


def start_server() -> Any:
    """moto's S3 server in its own process (in this one it would share the GIL with the reader being measured)."""
    import subprocess
    import urllib.request

    import boto3

    from tests.helpers import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    os.environ.update({**ENV, "AWS_ENDPOINT_URL": endpoint})
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    return server


def bench_read(data: Path, vfm: str, ability: str, root: Path, repeats: int) -> dict[str, Any]:
    from ava.cache import ExtractConfig, extract, open_cache
    from ava.cache.reader import ResidentFeatures
    from ava.cache.transfer import copy_cache
    from ava.data.format import Dataset

    url = "s3://bench/read"
    t0 = time.perf_counter()
    summary = extract(ExtractConfig(vfm=vfm, data=str(data), cache=url, device="cpu", progress=False))
    extract_s = time.perf_counter() - t0
    pulled = copy_cache(url, root / "local")  # the same objects, byte for byte, on local disk
    shas = list(dict.fromkeys(s.image_sha256 for s in Dataset(data).samples(ability)))
    rows: dict[str, Any] = {
        "vfm": vfm,
        "ability": ability,
        "images": len(shas),
        "extract_images_per_s_to_s3": round(summary["extracted"] / extract_s, 2),
        "pull_mb_per_s": pulled["mb_per_s"],
    }
    for name, where in (("s3", url), ("local", root / "local")):
        cache = open_cache(where, vfm)
        rows["shard_size"] = cache.group.shard_size
        best = None
        for _ in range(repeats):
            cache.group.reload()
            r = ResidentFeatures(cache, shas, device="cpu")
            r.wait()
            best = r.seconds if best is None else min(best, r.seconds)
        rows[f"{name}_s"] = round(best, 3)
        rows[f"{name}_mb_per_s"] = round(r.nbytes / 1e6 / best, 1)
    rows["ratio_s3_to_local"] = round(rows["s3_mb_per_s"] / rows["local_mb_per_s"], 2)
    return rows


def bench_objects(shards: int) -> dict[str, Any]:
    import numpy as np

    from ava.cache.extraction import write_shard
    from ava.cache.pooling import STORED_VIEWS
    from ava.cache.store import add_rows, create_group, default_shard_size
    from ava.cache.transfer import _all_files

    t, d, grid = 729, 1152, (27, 27)
    url = "s3://bench/objects"
    size = default_shard_size(url, t, d)
    spec = {
        "format": "ava-feature-cache",
        "format_version": 2,
        "vfm": "siglip-shapes",
        "requested": "siglip-shapes",
        "identity": {"bench": "siglip shapes, Gaussian values"},
        "codec": "fp16",
        "preprocess": "pad",
        "layers": [-2],
        "dtype": "fp32",
        "num_tokens": t,
        "dim": d,
        "grid": list(grid),
        "random_weights": True,
        "views": list(STORED_VIEWS),
    }
    group = create_group(url, spec, shard_size=size)
    add_rows(group, [f"{i:064x}" for i in range(shards * size)])
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for s in range(shards):
        values = rng.standard_normal((size, t, d), dtype=np.float32).astype(np.float16)
        write_shard(group, s, {s * size + i: [(values[i], None)] for i in range(size)})
    seconds = time.perf_counter() - t0
    files = _all_files(group.path)
    data_objects = {k: v for k, v in files.items() if "/c/" in k}
    total = sum(files.values())
    token_shards = [v for k, v in data_objects.items() if k.startswith("features/")]
    return {
        "shapes": f"{t} x {d} fp16, views {','.join(spec['views'])}",
        "shard_size": size,
        "shards": shards,
        "objects": len(files),
        "data_objects": len(data_objects),
        "bytes": total,
        "objects_per_gb": round(len(files) / (total / 1e9), 1),
        "data_objects_per_gb": round(len(data_objects) / (total / 1e9), 1),
        "token_shard_mb": round(statistics.mean(token_shards) / 1e6, 1) if token_shards else None,
        "write_mb_per_s": round(total / 1e6 / seconds, 1),
    }


def _done_rows(url: str) -> int:
    from ava.cache.store import CacheGroup, group_keys

    try:
        keys = group_keys(url)
        return int(CacheGroup.open(url, keys[0]).done_mask().sum()) if keys else 0
    except Exception:  # noqa: BLE001 - the child is still creating the store
        return 0


def bench_kills(data: Path, kills: int, root: Path, seed: int) -> dict[str, Any]:
    from ava.cache import ExtractConfig, content_digest, extract, open_cache
    from tests.helpers import start_extract

    def run(cache: str | Path) -> dict:
        return extract(
            ExtractConfig(
                vfm="pixels", data=str(data), cache=str(cache), batch_size=2, shard_size=4, device="cpu", progress=False
            )
        )

    total = run(root / "ref")["extracted"]
    reference = content_digest(open_cache(root / "ref", "pixels").group)
    rng = random.Random(seed)
    rows = []
    for i in range(kills):
        url = f"s3://bench/kill{i}"
        child = start_extract(data, url, "pixels", delay=0.15)  # type: ignore[arg-type]
        # a random point of the run: once a random number of rows is committed, plus a random part of a shard's time
        target, extra = rng.randrange(0, total - 4), rng.uniform(0.0, 0.6)
        t0 = time.monotonic()
        while _done_rows(url) < target and child.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        time.sleep(extra)
        wait = time.monotonic() - t0
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        done = _done_rows(url)
        resumed = run(url)
        same = content_digest(open_cache(url, "pixels").group) == reference
        rows.append(
            {
                "kill_after_s": round(wait, 2),
                "rows_done_at_kill": done,
                "redone": resumed["extracted"],
                "digest_identical": same,
            }
        )
        print(
            f"kill {i}: after {wait:.2f}s, {done}/{total} rows committed, {resumed['extracted']} redone, "
            f"digest {'identical' if same else 'DIFFERENT'}",
            flush=True,
        )
    return {"images": total, "kills": rows, "identical": sum(r["digest_identical"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vfm", default="random-vit")
    parser.add_argument("--ability", default="counting")
    parser.add_argument("--per-ava", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shards", type=int, default=2, help="SigLIP-shape shards written for the objects count")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--kill-images", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("read", "objects", "kill"), action="append")
    results.json_option(parser)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    from ava.synth import SynthConfig, generate
    from tests.helpers import make_dataset

    server = start_server()
    from bench_cache import environment  # the device in words, the date and the versions, as every benchmark

    out: dict[str, Any] = {"environment": environment("cpu"), "argv": sys.argv[1:]}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            only = args.only or ["read", "objects", "kill"]
            if "read" in only:
                data = root / "synth"
                generate(
                    SynthConfig(out=str(data), per_ava=args.per_ava, ava=[args.ability, "color"], size=224, seed=0),
                    progress=False,
                )
                out["read"] = bench_read(data, args.vfm, args.ability, root, args.repeats)
                print(json.dumps(out["read"]), flush=True)
            if "objects" in only:
                out["objects"] = bench_objects(args.shards)
                print(json.dumps(out["objects"]), flush=True)
            if "kill" in only:
                data = make_dataset(root / "killdata", n_images=args.kill_images)
                out["kill"] = bench_kills(data, args.kills, root, args.seed)
                print(json.dumps({k: v for k, v in out["kill"].items() if k != "kills"}), flush=True)
    finally:
        server.terminate()
    rows = [{"part": k, **v} for k, v in out.items() if k in ("read", "objects", "kill")]
    results.write(args.json, "bench_storage", figures(out), rows, out)


def figures(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The object store's figures against their targets: an ability's read from S3 at least half as fast as from
    local disk, at most 100 objects per GB at SigLIP shapes, every killed extraction resumed to the same digest."""
    found = []
    if "read" in out:
        r = out["read"]
        found.append(
            results.figure(
                "read of one ability, S3 / local disk",
                r["ratio_s3_to_local"],
                target=">= 0.5",
                note=f"{r['s3_mb_per_s']} against {r['local_mb_per_s']} MB/s; moto on loopback bounds the S3 side",
            )
        )
    if "objects" in out:
        o = out["objects"]
        found.append(
            results.figure(
                "objects per GB at SigLIP shapes",
                o["data_objects_per_gb"],
                target="<= 100",
                note=f"data objects, shards of {o['shard_size']}; {o['objects_per_gb']} with {o['shards']} shards' "
                "metadata",
            )
        )
    if "kill" in out:
        k = out["kill"]
        n = len(k["kills"])
        found.append(
            results.figure(
                "kill -9 during extraction into S3, resumed: digest identical",
                k["identical"],
                f"of {n}",
                target=f"{n} of {n}",
            )
        )
    return found


if __name__ == "__main__":
    main()
