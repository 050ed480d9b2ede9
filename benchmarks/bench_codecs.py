"""Which lossless compressor the feature cache should put behind its fp16/bf16/int8 values: ratio and MB/s.

For each feature source, features of real dataset images are computed once (the VFM's forward, as
``ava cache extract`` does), stored the cache's way (fp16 values, one image per chunk), and every candidate
compressor is run over the chunks on one thread: none, zstd at levels 1/3/9, and Blosc with byte shuffle or bit
shuffle in front of lz4 or zstd (numcodecs, the codecs Zarr v3 uses). Reported: compression ratio (raw / stored),
compress and decompress MB/s of raw fp16 bytes, one thread. The choice is made from these numbers: the writer needs
roughly the GPU's feature rate in MB/s per thread budget, so the fp16/bf16 default is the one that keeps up.

    python benchmarks/bench_codecs.py --data DIR --vfms pixels,random-vit --images 64
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import results  # benchmarks/, beside this script

DEFAULT = "blosc-lz4-5-byteshuffle"  # what fp16 and bf16 groups are written with (ava.cache.codecs)


def candidates() -> dict[str, object]:
    from numcodecs import Blosc, Zstd

    out: dict[str, object] = {"none": None}
    for level in (1, 3, 9):
        out[f"zstd-{level}"] = Zstd(level=level)
    for cname in ("lz4", "zstd"):
        for shuffle, name in ((Blosc.SHUFFLE, "byteshuffle"), (Blosc.BITSHUFFLE, "bitshuffle")):
            out[f"blosc-{cname}-5-{name}"] = Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=0)
    return out


def features(vfm_name: str, data: str | Path, images: int, batch: int = 16, dtype: str = "float16") -> np.ndarray:
    """Features [N, T, D] (``dtype``: fp16 as the cache stores them, or float32) of the first ``images`` images of
    ``data`` at the cache's default layer (-2; the raw pixels' -1)."""
    import torch

    from ava.cache.extraction import collect_images
    from ava.data.format import Dataset
    from ava.vfm import load_vfm

    vfm = load_vfm(vfm_name, device="cpu", layers=(-2,) if vfm_name != "pixels" else (-1,))
    vfm.eval()
    ds = Dataset(data)
    pre = vfm.preprocess_fn()
    paths = [img.path for img in list(collect_images(data, None, None).values())[:images]]
    out = []
    with torch.no_grad():
        for i in range(0, len(paths), batch):
            x = torch.stack([pre(ds.load_image(p)) for p in paths[i : i + batch]])
            out.append(vfm(x)[:, 0].to(getattr(torch, dtype)).numpy())
    return np.concatenate(out)


def measure(codec: object, chunks: list[bytes], repeat: int = 3) -> dict[str, float]:
    raw = sum(len(c) for c in chunks)
    if codec is None:
        return {"ratio": 1.0, "compress_mb_s": float("inf"), "decompress_mb_s": float("inf")}
    best_c = best_d = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        enc = [codec.encode(c) for c in chunks]  # type: ignore[attr-defined]
        best_c = min(best_c, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for e in enc:
            codec.decode(e)  # type: ignore[attr-defined]
        best_d = min(best_d, time.perf_counter() - t0)
    stored = sum(len(e) for e in enc)
    return {
        "ratio": round(raw / stored, 3),
        "compress_mb_s": round(raw / best_c / 1e6, 1),
        "decompress_mb_s": round(raw / best_d / 1e6, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a dataset directory (its images are encoded)")
    ap.add_argument("--vfms", default="pixels,random-vit")
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    results.json_option(ap)
    args = ap.parse_args()
    import numcodecs.blosc
    import torch

    torch.set_num_threads(1)
    numcodecs.blosc.set_nthreads(1)  # one thread per codec call: the writer's unit of work
    rows = []
    for name in args.vfms.split(","):
        feats = features(name, args.data, args.images, args.batch_size)
        chunks = [np.ascontiguousarray(f).tobytes() for f in feats]  # one image per chunk, as the cache stores them
        for cname, codec in candidates().items():
            row = {"vfm": name, "shape": "x".join(map(str, feats.shape[1:])), "codec": cname, **measure(codec, chunks)}
            rows.append(row)
            print(json.dumps(row))
    print("\n| features | T x D | compressor | ratio | compress MB/s | decompress MB/s |\n|---|---|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['vfm']} | {r['shape']} | {r['codec']} | {r['ratio']} | {r['compress_mb_s']} | "
            f"{r['decompress_mb_s']} |"
        )
    print(
        f"\ndevice: CPU {platform.processor() or platform.machine()}, one thread, numcodecs "
        f"{numcodecs.__version__}; {args.images} images of {args.data}"
    )
    figures = []
    for r in rows:
        if r["codec"] == DEFAULT:
            figures += [
                results.figure(f"default compressor's ratio, {r['vfm']}", r["ratio"], note=DEFAULT),
                results.figure(f"default compressor's speed, {r['vfm']}", r["compress_mb_s"], "MB/s", note="1 thread"),
            ]
    rows = [{k: (None if v == float("inf") else v) for k, v in r.items()} for r in rows]  # strict JSON
    results.write(args.json, "bench_codecs", figures, rows, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
