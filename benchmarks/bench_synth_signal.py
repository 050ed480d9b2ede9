"""Does every synthetic ability carry signal? The floor, the control and a trained extractor, with the cheap heads.

    python benchmarks/bench_synth_signal.py [--per-ava 200] [--size 160] [--vfms pixels,random-vit,effnet-lite0]
        [--heads knn,probe-linear,probe-attn] [--out DIR] [--threads 2] [--json FILE]

With ``ava demo``'s settings by default (read from ``ava.demo``: its samples per ability, image size, extractors at
their demo input sizes, e.g. ``effnet-lite0#size=160``, and feature heads): generates the suite, extracts each VFM,
trains every head on every ability (``ava.synth.calibrate``), and prints one markdown row per ability: the chance
level, each VFM's best head, and whether the ability separates the VFMs (see ``ava/synth/calibrate.py`` for the
rules), then the sentences that open the demo's report for such runs. A VFM that cannot load here (``effnet-lite0``
without timm + torchvision) is left out with a note. Wall and CPU seconds are printed; CPU seconds do not depend on
other jobs sharing the machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path

import results  # benchmarks/, beside this script


def _cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _loadable(vfms: list[str]) -> list[str]:
    """The VFMs whose code can be imported here (a timm VFM needs timm, and timm needs torchvision)."""
    from ava.vfm import resolve_vfm

    kept = []
    for name in vfms:
        if resolve_vfm(name).model_class == "timm":
            try:
                import timm  # noqa: F401
            except Exception as e:  # noqa: BLE001 - any import failure: one line, the others still run
                print(f"note: {name} left out: timm cannot be imported here ({type(e).__name__}: {e})")
                continue
        kept.append(name)
    return kept


def main() -> None:
    from ava.demo import DEMO_VFMS, FULL, demo_vfms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-ava", type=int, default=FULL["per_ava"])
    parser.add_argument("--size", type=int, default=FULL["size"])
    parser.add_argument("--ava", default="", help="comma-separated abilities (default: all 14)")
    parser.add_argument("--vfms", default="", help="comma-separated (default: the demo's, at the demo's input sizes)")
    parser.add_argument("--heads", default=",".join(FULL["heads"]))
    parser.add_argument("--difficulty", default="easy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="", help="keep the data, cache and runs here (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    results.json_option(parser)
    args = parser.parse_args()

    import torch

    from ava.synth.calibrate import CalibrateConfig, calibrate, fingerprint_sentences, table_lines

    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_synth_signal_"))
    vfms = [v for v in args.vfms.split(",") if v] or demo_vfms(list(DEMO_VFMS), args.size)
    config = CalibrateConfig(
        out=str(out),
        per_ava=args.per_ava,
        size=args.size,
        seed=args.seed,
        ava=[a for a in args.ava.split(",") if a] or None,
        difficulty=args.difficulty,
        vfms=_loadable(vfms),
        heads=[h for h in args.heads.split(",") if h],
        progress=False,
    )
    device = f"CPU {platform.processor() or platform.machine()} ({os.cpu_count()} cores), torch threads {args.threads}"
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), _cpu_seconds()
    try:
        rows = calibrate(config)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    print(f"{device}; load average before start {load:.1f}; {datetime.date.today()}")
    print(
        f"{args.per_ava} samples per ability at {args.size} px ({args.difficulty}), heads {args.heads}; "
        f"wall {wall:.0f} s, cpu {cpu:.0f} s"
    )
    print("\n".join(table_lines(rows)))
    print("\nThe opening `ava demo` writes from such runs:\n")
    print("\n".join(f"- {line}" for line in fingerprint_sentences(rows)))
    table = [r.to_dict() for r in rows]
    doc = {"device": device, "date": str(datetime.date.today()), "wall_s": wall, "cpu_s": cpu, "config": vars(args)}
    dead = sum(r.verdict in ("saturated", "chance") for r in rows)
    figures = [
        results.figure(
            "abilities that separate the extractors",
            sum(r.verdict == "separates" for r in rows),
            f"of {len(rows)}",
            note=", ".join(config.vfms),
        ),
        results.figure("abilities saturated or at chance for every extractor", dead, f"of {len(rows)}", target="0"),
        results.figure(
            "every extractor and head on every ability, wall",
            round(wall, 1),
            "s",
            note=f"{cpu:.0f} s CPU, load {load:.1f}, torch threads "
            f"{args.threads}, {args.per_ava} samples an ability at {args.size} px",
        ),
    ]
    results.write(args.json, "bench_synth_signal", figures, table, {**doc, "rows": table})


if __name__ == "__main__":
    main()
