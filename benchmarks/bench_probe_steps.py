"""The probes' training step at small widths, where the arithmetic costs next to nothing: the ops it dispatches (on a
GPU each is a kernel launch, and a fingerprint at real size runs tens of thousands of such steps) and its host time.

Both grids of a fingerprint's probes, trained by ``ava.heads.probe.train.train_grid`` as a fingerprint trains them:
the linear probes' stacked grid (4 learning rates, one view) and the attentive probes' (2 learning rates, 4 queries
each), a classification target. ``GridAdamW``'s two updates alternate in one process, ``--repeats`` times: torch's
fused AdamW kernel once per learning rate (the default where it runs) and the 14 multi-tensor ops. Ops are counted
with a ``TorchDispatchMode`` over one epoch, views and other metadata-only ops apart.

    python benchmarks/bench_probe_steps.py --threads 1
    python benchmarks/bench_probe_steps.py --device cuda --dim 1152 --tokens 729    # a GPU: real widths

``--fingerprint VFM DATA CACHE`` instead runs the probes of ``ava fingerprint`` on a real cache twice, with each
update, and prints every ability's score under both and whether each grid picked the same member::

    python benchmarks/bench_probe_steps.py --fingerprint effnet-lite0 synth/ cache/
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import platform
import time
from typing import Any

import results  # benchmarks/, beside this script
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# metadata-only ops: no kernel on any device
VIEWS = {
    "view",
    "_unsafe_view",
    "t",
    "transpose",
    "permute",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "expand",
    "detach",
    "as_strided",
    "alias",
    "reshape",
    "unflatten",
    "flatten",
    "split",
    "unbind",
    "lift_fresh",
}


class Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


class Classify:
    kind = "classify"

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(out, y)


def grid(kind: str, dim: int, tokens: int, classes: int, n: int, device: str) -> tuple[Any, list[float], Any]:
    from ava.heads.probe.grid import StackedAttentive, StackedLinears
    from ava.heads.probe.model import Probe, ProbeGrid

    g = torch.Generator().manual_seed(0)
    if kind == "linear":
        lrs = [1e-3, 3e-3, 1e-2, 3e-2]
        members = [Probe(dim, classes, "mean") for _ in lrs]
        for m in members:
            m.init_weights(g)
        return StackedLinears(members, [slice(0, dim)] * len(lrs)).to(device), lrs, torch.randn(n, dim, device=device)
    lrs = [3e-3, 1e-2]
    side = int(tokens**0.5)
    members = ProbeGrid(dim, classes, len(lrs), "attn", 4, tokens, (side, side), g).members
    # made where they are used (SigLIP's widths: 1.7 GB, seconds of the host's time on the stage's clock otherwise)
    return StackedAttentive(list(members)).to(device), lrs, torch.randn(n, tokens, dim, device=device)


def chosen(fused: bool) -> type:
    """``GridAdamW`` with the update under test (the fused kernel where it runs, or the foreach ops)."""
    from ava.heads.probe.grid import GridAdamW

    class Chosen(GridAdamW):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **{**k, "fused": None if fused else False})

    return Chosen


def run(kind: str, fused: bool, args: argparse.Namespace) -> dict[str, Any]:
    from ava.heads.probe import train

    made = train.GridAdamW
    train.GridAdamW = chosen(fused)
    try:
        trainer, lrs, rows = grid(kind, args.dim, args.tokens, 10, args.rows, args.device)
        rows = rows.to(args.device)
        y = torch.randint(0, 10, (args.rows,)).to(args.device)
        per_epoch = args.rows // args.batch_size
        kw = dict(batch_size=args.batch_size, weight_decay=1e-4, device=args.device, task=Classify())
        train.train_grid(trainer, lrs, rows, y, epochs=1, generator=torch.Generator().manual_seed(0), **kw)  # warm
        with Count() as count:
            train.train_grid(trainer, lrs, rows, y, epochs=1, generator=torch.Generator().manual_seed(1), **kw)
        epochs = max(1, args.steps // per_epoch)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        train.train_grid(trainer, lrs, rows, y, epochs=epochs, generator=torch.Generator().manual_seed(2), **kw)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    finally:
        train.GridAdamW = made
    kernels = {k: v / per_epoch for k, v in count.ops.items() if k not in VIEWS}
    optimizer = sum(v for k, v in kernels.items() if "foreach" in k or "adam" in k)
    return {
        "grid": kind,
        "update": "fused" if fused else "foreach",
        "us_per_step": round(1e6 * seconds / (epochs * per_epoch)),
        "ops_per_step": round(sum(kernels.values()), 1),
        "optimizer_ops_per_step": round(optimizer, 1),
    }


def compare_fingerprints(vfm: str, data: str, cache: str) -> None:
    """The probes' scores and picks with each update, on one cache (see the module doc)."""
    import tempfile

    from ava.heads.fingerprint import FingerprintConfig, fingerprint
    from ava.heads.probe import train

    made = train.GridAdamW
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for update in ("foreach", "fused"):
            train.GridAdamW = chosen(update == "fused")
            try:
                res = fingerprint(
                    FingerprintConfig(
                        vfm=vfm,
                        data=data,
                        cache=cache,
                        out=f"{tmp}/{update}",
                        heads=["probe-linear", "probe-attn"],
                        progress=False,
                    )
                )
            finally:
                train.GridAdamW = made
            out[update] = {
                h: {
                    a: (r["value"], r.get("extra", {}).get("pool"), r.get("extra", {}).get("lr"))
                    for a, r in res.results[h]["abilities"].items()
                }
                for h in res.results
            }
    print("| head | ability | score, foreach | score, fused | same pick |")
    print("|---|---|---:|---:|---|")
    for head, per in out["foreach"].items():
        for ava, (score, pool, lr) in per.items():
            other = out["fused"][head][ava]
            print(f"| {head} | {ava} | {score:.6g} | {other[0]:.6g} | {(pool, lr) == other[1:]} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--tokens", type=int, default=49)
    p.add_argument("--rows", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=1600, help="timed steps per run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    results.json_option(p)
    p.add_argument(
        "--fingerprint",
        nargs=3,
        metavar=("VFM", "DATA", "CACHE"),
        help="the probes of a fingerprint on this cache with each update: scores and picks",
    )
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.fingerprint:
        compare_fingerprints(*args.fingerprint)
        return
    from ava.heads.probe.grid import fused_adamw_runs

    if not fused_adamw_runs(torch.zeros(1, device=args.device)):
        raise SystemExit(f"this torch has no fused AdamW kernel for {args.device}: nothing to compare")
    rows = []
    for r in range(args.repeats):
        for kind in ("linear", "attn"):
            for fused in (False, True):
                rows.append({**run(kind, fused, args), "repeat": r})
                print(json.dumps(rows[-1]), flush=True)
    print(
        f"\n{args.device} ({platform.processor() or platform.machine()}), torch {torch.__version__}, threads "
        f"{torch.get_num_threads()}, {dt.date.today()}; {args.tokens} x {args.dim} tokens, "
        f"batch {args.batch_size}"
    )
    print("| grid | update | ops / step | of them the optimizer's | us / step (each repeat) |")
    print("|---|---|---:|---:|---|")
    for kind in ("linear", "attn"):
        for update in ("foreach", "fused"):
            mine = [x for x in rows if x["grid"] == kind and x["update"] == update]
            print(
                f"| {kind} | {update} | {mine[0]['ops_per_step']} | {mine[0]['optimizer_ops_per_step']} | "
                f"{' / '.join(str(x['us_per_step']) for x in mine)} |"
            )
    figures = []
    for kind in ("linear", "attn"):
        for update in ("foreach", "fused"):
            mine = [x for x in rows if x["grid"] == kind and x["update"] == update]
            figures.append(
                results.figure(
                    f"probe step, {'attentive' if kind == 'attn' else 'linear'} grid, {update} AdamW",
                    min(x["us_per_step"] for x in mine),
                    "us",
                    note=f"best of {len(mine)}; {mine[0]['ops_per_step']} ops a step, {args.tokens} x {args.dim}",
                )
            )
    results.write(args.json, "bench_probe_steps", figures, rows, rows, device=args.device)


if __name__ == "__main__":
    main()
