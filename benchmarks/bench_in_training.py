"""Time one in-training fingerprint evaluation (``ava.callbacks.FingerprintMonitor.run``) of a ViT-S/16-size model.

The model is timm's ``vit_small_patch16_224`` built with random init (speed depends on shapes, not weights), wrapped
with ``vfm_from_module`` at its second-to-last block (``blocks.10``, the release's layer choice; the last block is not
computed) with 1 prefix token (CLS). The suite is the built-in synthetic one (14 abilities x ``--per-ava`` at
``--size`` px, generated once under ``--suite-root``); heads: linear probe + kNN, trained on the CPU. The first
evaluation also decodes and keeps the suite's pixels (uint8); later ones decode nothing, as in training.

Each ``--configs`` entry is ``FORWARD/PARALLEL``: FORWARD is ``fp32``, ``autocast-bf16`` (``vfm_from_module(...,
autocast="bf16")``) or ``bf16`` (``dtype="bf16"``: the forward on a bf16 copy of the weights); PARALLEL is how the
heads share the cores (``fingerprint_in_memory(parallel=...)``): ``heads`` (one ability's heads at once, as ``ava
fingerprint``) or ``abilities`` (whole abilities at once). The configs' evaluations are interleaved (run 1 of each,
then run 2 of each...), so a change of load hits them alike; compare the best run of each. ``CPU s`` is the
process's CPU time during the evaluation (both threads; on a busy machine, two-thread operations also spin).

    python benchmarks/bench_in_training.py                  # before (autocast-bf16/heads) vs after (bf16/abilities)
    python benchmarks/bench_in_training.py --configs fp32/heads --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # bench_cache's environment()

import results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vit_small_patch16_224")
    ap.add_argument("--layer", default="blocks.10")
    ap.add_argument("--per-ava", type=int, default=150)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="evaluations per config (the very first keeps pixels)")
    ap.add_argument(
        "--configs",
        default="autocast-bf16/heads,bf16/abilities",
        help="comma-separated FORWARD/PARALLEL: FORWARD fp32, autocast-bf16, autocast-fp16, bf16, fp16; "
        "PARALLEL heads or abilities",
    )
    ap.add_argument("--suite-root", default=None, help="where the suite is generated (default $AVA_HOME/suites)")
    ap.add_argument("--ava", default=None, help="comma-separated abilities (default: all 14)")
    results.json_option(ap)
    args = ap.parse_args()

    import torch
    from bench_cache import environment  # the device in words, the date and the versions, as every benchmark

    from ava.callbacks import FingerprintMonitor, default_suite
    from ava.heads import memory
    from ava.heads.memory import EvalSuite
    from ava.vfm.module import vfm_from_module
    from ava.vfm.spec import IMAGENET_MEAN, IMAGENET_STD

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    data = default_suite(args.per_ava, args.size, root=args.suite_root)
    suite_s = time.perf_counter() - t0
    model = _model(args.model)
    suite = EvalSuite(data, args.ava.split(",") if args.ava else None, keep_pixels=True)
    configs = [tuple(c.split("/")) for c in args.configs.split(",")]
    monitors = {}
    for forward, parallel in configs:
        if parallel not in memory.PARALLEL_MODES:
            raise SystemExit(f"--configs: {forward}/{parallel}: PARALLEL is one of {memory.PARALLEL_MODES}")
        vfm = vfm_from_module(
            model,
            name=args.model,
            version="random-init",
            size=args.size,
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
            output=args.layer,
            prefix_tokens=1,
            random_weights=True,
            **_forward(forward),
        )
        monitors[(forward, parallel)] = FingerprintMonitor(vfm, every=1, suite=suite, baselines=())
    rows = []
    for i in range(args.repeats):
        for (forward, parallel), monitor in monitors.items():
            memory.PARALLEL = parallel  # fingerprint_in_memory's default, which the monitor uses
            t, cpu = time.perf_counter(), time.process_time()
            rec = monitor.run(i + 1)
            rows.append(
                {
                    "forward": forward,
                    "parallel": parallel,
                    "run": i + 1,
                    "wall_s": round(time.perf_counter() - t, 2),
                    "cpu_s": round(time.process_time() - cpu, 1),
                    "extract_s": rec["seconds"]["extract"],
                    "heads_s": rec["seconds"]["heads"],
                    "images": len(suite.images),
                    "load_avg": round(os.getloadavg()[0], 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    info = {
        "model": args.model,
        "layer": args.layer,
        "suite": str(data),
        "suite_s": round(suite_s, 1),
        "per_ava": args.per_ava,
        "size": args.size,
        "threads": args.threads,
        "environment": environment("cpu"),
        "rows": rows,
    }
    env = info["environment"]
    print(
        f"\n{args.model} ({args.layer}) on {len(suite.images)} images, {args.threads} threads, {env['device']}, "
        f"torch {torch.__version__}, {env['date']}"
    )
    print(
        "| forward | heads in parallel over | run | wall s | extract s | heads s | CPU s | load avg (1 min) |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|"
    )
    for r in rows:
        print(
            f"| {r['forward']} | {r['parallel']} | {r['run']} | {r['wall_s']} | {r['extract_s']} | {r['heads_s']} "
            f"| {r['cpu_s']} | {r['load_avg']} |"
        )
    best = {c: min(r["wall_s"] for r in rows if (r["forward"], r["parallel"]) == c) for c in configs}
    print("\nbest wall s: " + ", ".join(f"{'/'.join(c)} {v}" for c, v in best.items()))
    if len(configs) == 2:
        print(f"ratio {'/'.join(configs[0])} / {'/'.join(configs[1])}: {best[configs[0]] / best[configs[1]]:.2f}x")
    figures = []
    for c, wall in best.items():
        run = next(r for r in rows if (r["forward"], r["parallel"]) == c and r["wall_s"] == wall)
        figures.append(
            results.figure(
                f"one in-training fingerprint evaluation, {args.model} at {args.size} px, {'/'.join(c)}",
                wall,
                "s",
                target="<= 60 s",
                note=f"best of {args.repeats} (run 1 decodes the suite), run {run['run']}, load {run['load_avg']}",
            )
        )
    results.write(args.json, "bench_in_training", figures, rows, info)


def _forward(name: str) -> dict[str, str | None]:
    """vfm_from_module's keywords for a FORWARD name."""
    if name == "fp32":
        return {}
    if name.startswith("autocast-"):
        return {"autocast": name.removeprefix("autocast-")}
    return {"dtype": name}


def _model(name: str):
    """The timm model with random init (timm is imported after ava, whose import mends a torchvision that fails)."""
    import timm

    return timm.create_model(name, pretrained=False, num_classes=0)


if __name__ == "__main__":
    main()
