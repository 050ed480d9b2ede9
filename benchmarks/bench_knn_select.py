"""The kNN head's pick of pooled view and k at an ability's real size: leave-one-out against the subsample rule.

The synthetic suite (``--abilities`` x ``--samples``, ``--size`` px) extracted with ``--vfm`` (pooled views stored),
then the kNN head trained on one ability at a time, once per ``--selections`` entry, the entries alternating ability
by ability in this one process (threads pinned to ``--threads``, torch's and faiss's). Per ability and selection:
the seconds of the head's fit (``KNNRun.fit``: the pick, the saved index, the test split's predictions; what
``bench_fingerprint`` times per head, the features being read once for every head before it), of its pick, and of
the whole run (wall and CPU, the feature read included), the rule the ability got, the train rows answered, the
(view, k) chosen and the test score. Where the subsample rule picks another (view, k) than leave-one-out, its test
score is set against the 95% bootstrap interval of leave-one-out's (``ava.report.bootstrap``).

    python benchmarks/bench_knn_select.py --threads 2 --json        # 3 abilities x 15600 samples, pixels#size=64
    python benchmarks/bench_knn_select.py --samples 1500 --abilities all --loo-max-rows 500 --heldout-rows 300
    python benchmarks/bench_knn_select.py --work /tmp/knn-bench    # keep the data and cache there (and reuse them)
    python benchmarks/bench_knn_select.py --selections loo,auto,auto:2000   # also auto with 2000 rows answered

``--loo-max-rows`` and ``--heldout-rows`` set the ``auto`` rule's threshold and subsample (defaults: the config's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (benchmarks/results.py)

DEFAULT_ABILITIES = ("scene", "counting", "localization")  # a choice, a count, a box: each reply rule
TARGET = "<= 15 s"  # the kNN head on one ability of ~15.6K samples on 2 CPU cores, the pick included


def prepare(work: Path, args: argparse.Namespace, abilities: list[str]) -> tuple[Path, Path, float]:
    """(dataset, cache, seconds): the synthetic suite and its cache under ``work``, built unless already there with
    the same settings."""
    from ava.cache import ExtractConfig, extract
    from ava.data.format import Dataset
    from ava.synth import SynthConfig, generate

    data, cache = work / "data", work / "cache"
    wanted = {"per_ava": args.samples, "size": args.size, "ava": abilities, "seed": 0}
    if (data / "dataset.json").is_file() and (work / "vfm.txt").is_file():
        made = Dataset(data).info.get("synth_config", {})
        same = {k: made.get(k) for k in wanted} | {"ava": sorted(made.get("ava") or [])}  # (kept in its own order)
        if same == wanted | {"ava": sorted(abilities)} and (work / "vfm.txt").read_text() == args.vfm:
            print(f"reusing {data} and {cache}", flush=True)
            return data, cache, 0.0
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    generate(SynthConfig(out=str(data), **wanted), progress=False)
    extract(ExtractConfig(vfm=args.vfm, data=str(data), cache=str(cache), device="cpu", progress=False))
    (work / "vfm.txt").write_text(args.vfm)
    return data, cache, time.perf_counter() - t0


@contextlib.contextmanager
def timed_fit() -> Iterator[dict[str, float]]:
    """While inside: the seconds of the kNN head's fit of an ability (``KNNRun.fit``: the pick, the saved index, the
    test split's predictions and their scores; what ``bench_fingerprint`` times per head, the features being read
    before it, once for every head) into the dict's ``fit``, and of its pick (``select_pool``) into ``pick``."""
    from ava.heads.knn import train as knn_train

    spent = {"fit": 0.0, "pick": 0.0}
    pick, fit = knn_train.select_pool, knn_train.KNNRun.fit

    def timer(real: Any, name: str) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0

        return timed

    knn_train.select_pool, knn_train.KNNRun.fit = timer(pick, "pick"), timer(fit, "fit")
    try:
        yield spent
    finally:
        knn_train.select_pool, knn_train.KNNRun.fit = pick, fit


def run_one(
    data: Path, cache: Path, work: Path, args: argparse.Namespace, ava: str, selection: str, spent: dict
) -> dict[str, Any]:
    from ava.heads.knn import KNNConfig
    from ava.heads.knn.train import META_FILE, train

    out = work / "runs" / f"{selection.replace(':', '-')}-{ava}"
    shutil.rmtree(out, ignore_errors=True)
    extra = {k: getattr(args, k) for k in ("loo_max_rows", "heldout_rows") if getattr(args, k) is not None}
    name, _, rows = selection.partition(":")  # "auto:1000": auto with 1000 rows answered
    if rows:
        extra["heldout_rows"] = int(rows)
    config = KNNConfig(
        ava=[ava], vfm=args.vfm, data=str(data), cache=str(cache), out=str(out), device="cpu", progress=False,
        selection=name, **extra,
    )  # fmt: skip
    spent.update(fit=0.0, pick=0.0)
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    train(config)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    meta = json.loads((out / META_FILE).read_text())[ava]
    result = json.loads((out / "results_test.json").read_text())["abilities"][ava]
    scores = [json.loads(line)["score"] for line in (out / "predictions_test.jsonl").read_text().splitlines()]
    shutil.rmtree(out)
    return {
        "ability": ava,
        "selection": selection,
        "method": meta["selection"],
        "n_train": meta["n_train"],
        "n_answered": meta["n_heldout"],
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "fit_s": round(spent["fit"], 3),
        "pick_s": round(spent["pick"], 3),
        "load_1min": round(load, 2),
        "pool": meta["pool"],
        "k": meta["k"],
        "test": result["value"],
        "scores": scores,
    }


def agreement(rows: list[dict[str, Any]], new: str, base: str = "loo") -> list[dict[str, Any]]:
    """Per ability: whether ``new`` picked ``base``'s (view, k), and where not, whether its test score lies in the
    95% bootstrap interval of ``base``'s test score."""
    from ava.abilities import get_ability
    from ava.report import bootstrap as bs

    by = {(r["ability"], r["selection"]): r for r in rows}
    out = []
    for ava in dict.fromkeys(r["ability"] for r in rows):
        a, b = by.get((ava, new)), by.get((ava, base))
        if a is None or b is None:
            continue
        same = (a["pool"], a["k"]) == (b["pool"], b["k"])
        scores = np.array(b["scores"], dtype=float)
        lo, hi = bs.interval(bs.replicate_means(scores[None], rng=bs.rng_for(ava)))[0]
        better = a["test"] >= b["test"] if get_ability(ava).higher_is_better else a["test"] <= b["test"]
        out.append(
            {
                "ability": ava,
                "same": same,
                "within_interval": bool(lo <= a["test"] <= hi),
                "not_worse": bool(better),
                "interval": [round(lo, 4), round(hi, 4)],
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=15600, help="samples per ability (the official size: ~15.6K)")
    ap.add_argument("--abilities", default=",".join(DEFAULT_ABILITIES), help="comma-separated, or all")
    ap.add_argument("--size", type=int, default=64, help="synthetic image side in px")
    ap.add_argument("--vfm", default="pixels#size=64", help="the feature extractor (a cheap one: 4x4 x 768 tokens)")
    ap.add_argument(
        "--selections",
        default="loo,auto",
        help="the kNN selections compared, in this order (auto:N: auto with N rows answered above the threshold)",
    )
    ap.add_argument("--loo-max-rows", type=int, default=None)
    ap.add_argument("--heldout-rows", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2, help="torch and faiss threads")
    ap.add_argument("--work", type=Path, default=None, help="folder for the data and cache (default: a temporary one)")
    results.json_option(ap)
    args = ap.parse_args()

    import faiss
    import torch

    from ava.abilities import ABILITY_KEYS

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    abilities = list(ABILITY_KEYS) if args.abilities == "all" else args.abilities.split(",")
    selections = args.selections.split(",")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-knn-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        data, cache, prepare_s = prepare(work, args, abilities)
        rows = []
        with timed_fit() as spent:
            for ava in abilities:
                for selection in selections:
                    row = run_one(data, cache, work, args, ava, selection, spent)
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "scores"}), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report(args, abilities, selections, rows, prepare_s)


def report(
    args: argparse.Namespace, abilities: list[str], selections: list[str], rows: list[dict], prepare_s: float
) -> None:
    setup = f"{args.threads} threads, {args.vfm}, {args.size} px"
    what = f"{len(abilities)} abilities x {args.samples} samples"
    figures, fits = [], {}
    for selection in selections:
        mine = [r for r in rows if r["selection"] == selection]
        fits[selection] = round(statistics.median(r["fit_s"] for r in mine), 2)
        wall, pick = (round(statistics.median(r[k] for r in mine), 2) for k in ("wall_s", "pick_s"))
        setup_load = f"{setup}, load {min(r['load_1min'] for r in mine)}-{max(r['load_1min'] for r in mine)}"
        methods = "/".join(sorted({r["method"] for r in mine}))
        held = TARGET if selection == "auto" and args.samples >= 15000 and args.threads <= 2 else None
        figures.append(
            results.figure(
                f"kNN fit per ability at {args.samples} samples, selection {selection}",
                fits[selection],
                "s",
                held,
                f"median of {what} ({methods}): the pick {pick} s of it; {wall} s with the feature read; {setup_load}",
            )
        )
    agree = {s: agreement(rows, s) for s in selections if s != "loo" and "loo" in selections}
    for selection, found in agree.items():
        same = sum(a["same"] for a in found)
        figures.append(
            results.figure(
                f"leave-one-out / {selection}, kNN fit at {args.samples} samples",
                round(fits["loo"] / fits[selection], 1),
                "x",
            )
        )
        figures.append(
            results.figure(
                f"{selection} picks leave-one-out's (view, k), {what}",
                f"{same} of {len(found)}",
                "abilities",
                note=f"where not, the test score within leave-one-out's 95% bootstrap interval on "
                f"{sum(a['within_interval'] for a in found if not a['same'])} of {len(found) - same}",
            )
        )
    for f in figures:
        print(f"{f['figure']}: {f['value']} {f['unit']}" + (f"  ({f['note']})" if f["note"] else ""))
    kept = [{k: v for k, v in r.items() if k != "scores"} for r in rows]
    agreed = [{"selection": s, **a} for s, found in agree.items() for a in found]
    payload = {"rows": kept, "agreement": agreed, "prepare_s": round(prepare_s, 1), "figures": figures}
    results.write(args.json, "bench_knn_select", figures, [*kept, *({"agreement": a} for a in agreed)], payload)


if __name__ == "__main__":
    main()
