"""How many values share one fp16 scale in the ``int4`` codec: error and bytes per value for each group size.

Features of the synthetic suite's images are computed once per extractor (the cache's layer, as ``ava cache extract``
computes them), then encoded with the int4 scheme at each group size (``Int4Codec(group_size=G)``; ``G = D`` is one
scale per token) and with int8 for scale. Reported per extractor and group size: relative RMS error against the
float32 features, the largest error over its token's largest magnitude, raw bytes per value (codes + scales) and
bytes per value after the cache's compressor (zstd-3 per image, as a cache group stores them).

    python benchmarks/bench_int4_groups.py --per-ava 10 --size 160
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import results  # benchmarks/, beside this script
from bench_codecs import features

EXTRACTORS = ("pixels#size=160", "random-vit", "effnet-lite0#size=160")
GROUPS = (32, 64, 128, 256)


def measure(codec: object, x: np.ndarray) -> dict[str, float]:
    import torch
    from numcodecs import Zstd

    values, scale = codec.encode(torch.from_numpy(x))  # type: ignore[attr-defined]
    got = codec.decode(values, scale)  # type: ignore[attr-defined]
    token_max = np.abs(x).max(axis=-1, keepdims=True)
    zstd = Zstd(level=3)
    stored = sum(
        len(zstd.encode(np.ascontiguousarray(values[i]))) + len(zstd.encode(np.ascontiguousarray(scale[i])))
        for i in range(len(x))
    )
    return {
        "rel_rms": float(np.linalg.norm(got - x) / max(np.linalg.norm(x), 1e-30)),
        "max_over_token_max": float((np.abs(got - x) / np.maximum(token_max, 1e-30)).max()),
        "raw_bytes_per_value": (values.nbytes + scale.nbytes) / x.size,
        "zstd_bytes_per_value": stored / x.size,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-ava", type=int, default=10, help="synthetic samples per ability")
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--images", type=int, default=128, help="images encoded per extractor")
    p.add_argument("--extractors", default=",".join(EXTRACTORS))
    results.json_option(p)
    args = p.parse_args()
    import torch

    import ava
    from ava.cache.codecs import Int4Codec, get_codec

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="ava-int4-groups-"))
    data = ava.synthesize(work / "data", per_ava=args.per_ava, size=args.size, force=True).path
    rows = []
    for name in args.extractors.split(","):
        x = features(name, data, args.images, dtype="float32")
        dim = x.shape[-1]
        for group in (*GROUPS, dim):
            codec = Int4Codec(f"int4-g{group}", "uint8", True, "measured", group_size=group)
            rows.append(
                {
                    "extractor": name,
                    "tokens_x_dim": f"{x.shape[1]}x{dim}",
                    "codec": "int4",
                    "group": "token" if group == dim else group,
                    **measure(codec, x),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        rows.append(
            {
                "extractor": name,
                "tokens_x_dim": f"{x.shape[1]}x{dim}",
                "codec": "int8",
                "group": "token",
                **measure(get_codec("int8"), x),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    cols = [
        "extractor",
        "tokens_x_dim",
        "codec",
        "group",
        "rel_rms",
        "max_over_token_max",
        "raw_bytes_per_value",
        "zstd_bytes_per_value",
    ]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    from ava.cache.codecs import INT4_GROUP

    figures = [
        results.figure(
            f"int4 relative RMS error, {r['extractor']}",
            round(r["rel_rms"], 4),
            note=f"{INT4_GROUP} values a scale (the codec's), {r['raw_bytes_per_value']:.4g} bytes a value",
        )
        for r in rows
        if r["codec"] == "int4" and r["group"] == INT4_GROUP
    ]
    results.write(args.json, "bench_int4_groups", figures, rows, rows)


if __name__ == "__main__":
    main()
