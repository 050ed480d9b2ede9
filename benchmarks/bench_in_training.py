"""Time one in-training fingerprint evaluation (``ava.callbacks.FingerprintMonitor.run``) of a ViT-S/16-size model.

The model is timm's ``vit_small_patch16_224`` built with random init (speed depends on shapes, not weights), wrapped
with ``vfm_from_module`` at its second-to-last block (``blocks.10``, the release's layer choice; the last block is not
computed) with 1 prefix token (CLS). The suite is the built-in synthetic one (14 abilities x ``--per-ava`` at
``--size`` px, generated once under ``--suite-root``); heads: linear probe + kNN, trained on the CPU. The first
evaluation also decodes and keeps the suite's pixels (uint8); later ones decode nothing, as in training.

    python benchmarks/bench_in_training.py                       # 14 x 150 at 224, fp32 and bf16 autocast
    python benchmarks/bench_in_training.py --autocast none --repeats 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # bench_cache's environment()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vit_small_patch16_224")
    ap.add_argument("--layer", default="blocks.10")
    ap.add_argument("--per-ava", type=int, default=150)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="evaluations per autocast setting (the first keeps pixels)")
    ap.add_argument("--autocast", default="none,bf16", help="comma-separated: none, bf16, fp16")
    ap.add_argument("--suite-root", default=None, help="where the suite is generated (default $AVA_HOME/suites)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch
    from bench_cache import environment  # the device in words, the date and the versions, as every benchmark

    from ava.callbacks import FingerprintMonitor, default_suite
    from ava.heads.memory import EvalSuite
    from ava.vfm.module import vfm_from_module
    from ava.vfm.spec import IMAGENET_MEAN, IMAGENET_STD

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    data = default_suite(args.per_ava, args.size, root=args.suite_root)
    suite_s = time.perf_counter() - t0
    model = _model(args.model)
    suite = EvalSuite(data, keep_pixels=True)
    rows = []
    for mode in args.autocast.split(","):
        vfm = vfm_from_module(model, name=args.model, version="random-init", size=args.size, mean=IMAGENET_MEAN,
                              std=IMAGENET_STD, output=args.layer, prefix_tokens=1, random_weights=True,
                              autocast=None if mode == "none" else mode)  # fmt: skip
        monitor = FingerprintMonitor(vfm, every=1, suite=suite, baselines=())
        for i in range(args.repeats):
            t = time.perf_counter()
            rec = monitor.run(i + 1)
            rows.append({"autocast": mode, "run": i + 1, "wall_s": round(time.perf_counter() - t, 2),
                         "extract_s": rec["seconds"]["extract"], "heads_s": rec["seconds"]["heads"],
                         "images": len(suite.images), "load_avg": round(os.getloadavg()[0], 2)})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    info = {"model": args.model, "layer": args.layer, "suite": str(data), "suite_s": round(suite_s, 1),
            "per_ava": args.per_ava, "size": args.size, "threads": args.threads,
            "environment": environment("cpu"), "rows": rows}  # fmt: skip
    if args.json:
        print(json.dumps(info))
        return
    env = info["environment"]
    print(f"\n{args.model} ({args.layer}) on {len(suite.images)} images, {args.threads} threads, {env['device']}, "
          f"torch {torch.__version__}, {env['date']}")
    print("| autocast | run | wall s | extract s | heads s | load avg |\n|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['autocast']} | {r['run']} | {r['wall_s']} | {r['extract_s']} | {r['heads_s']} | {r['load_avg']} |")


def _model(name: str):
    """The timm model with random init (timm is imported after ava, whose import mends a torchvision that fails)."""
    import timm

    return timm.create_model(name, pretrained=False, num_classes=0)


if __name__ == "__main__":
    main()
