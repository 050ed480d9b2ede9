"""Time ``ava data options`` with the cached-feature miner: 15.6K choice questions over 100 classes (held to <= 30 s
on 2 cores).

    python benchmarks/bench_options.py [--n 15600] [--classes 100] [--k 4] [--work DIR]

Setup (not timed): a split ``fine_grained`` dataset of ``n`` distinct 16x16 images, each question listing all
``classes`` options as the release's 100-option questions do, and its ``pixels#size=16`` features in a cache.
Timed: ``rewrite_options(..., miner="cache:pixels#size=16")`` end to end (read the dataset, read the features,
train-split centroids, faiss search, rewrite every question, link the images, write the copy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import results  # benchmarks/, beside this script


def make_dataset(root: Path, n: int, classes: int, seed: int = 0) -> None:
    from PIL import Image

    from ava.abilities import format_options, get_ability
    from ava.data.format import DatasetWriter, Sample

    rng = np.random.default_rng(seed)
    names = [f"species {i:03d}" for i in range(classes)]
    template = get_ability("fine_grained").question_templates[0]
    centres = rng.integers(0, 256, size=(classes, 3))
    with DatasetWriter(
        root, info={"source": "bench_options", "synthetic": True, "split": {"made_by": "synthetic", "seed": seed}}
    ) as w:
        for i in range(n):
            c = i % classes
            pixels = np.clip(centres[c] + rng.normal(0, 40, size=(16, 16, 3)), 0, 255).astype(np.uint8)
            rel = w.add_image(Image.fromarray(pixels))
            opts = [names[j] for j in rng.permutation(classes)]
            q = template.format(family="bird", options=format_options(opts))
            w.add_sample(
                Sample(
                    id=f"b{i:06d}",
                    ava="fine_grained",
                    image=rel,
                    width=16,
                    height=16,
                    question=q,
                    answer=names[c],
                    truth={"index": opts.index(names[c]), "text": names[c]},
                    options=opts,
                    split="test" if i % 5 == 4 else "train",
                )
            )


def main() -> None:
    import ava

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15600)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--work", default=None, help="keep the dataset and cache here (default: a temporary dir)")
    results.json_option(parser)
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench_options_"))
    try:
        data, cache = work / "data", work / "cache"
        t0 = time.perf_counter()
        if not (data / "dataset.json").is_file():
            make_dataset(data, args.n, args.classes)
        ava.extract(vfm="pixels#size=16", data=data, cache=cache, threads="auto")
        setup = time.perf_counter() - t0
        shutil.rmtree(work / "out", ignore_errors=True)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        result = ava.rewrite_options(data, work / "out", miner="cache:pixels#size=16", cache=cache, k=args.k)
        dt = time.perf_counter() - t0
        n = sum(result.rewritten.values())
        print(
            f"ava data options, miner cache:pixels#size=16: {n} questions x {args.classes} classes -> k={args.k} "
            f"in {dt:.1f} s ({n / dt:.0f} questions/s); setup {setup:.0f} s; load average before {load:.1f} on "
            f"{os.cpu_count()} cpus"
        )
        figure = results.figure(
            f"`ava data options`, {n} questions x {args.classes} classes, cached-feature miner",
            round(dt, 1),
            "s",
            target="<= 30 s" if (n, args.classes) == (15600, 100) else None,
            note=f"k {args.k}, load {load:.1f}",
        )
        row = {"questions": n, "classes": args.classes, "k": args.k, "seconds": round(dt, 2), "load": round(load, 2)}
        results.write(args.json, "bench_options", [figure], [row], row)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
