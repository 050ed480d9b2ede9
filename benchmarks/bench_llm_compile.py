"""The LLM head's compile warm-up at real shapes: a first run (nothing compiled anywhere) against a second run on a
fresh machine (empty inductor and Triton caches, the same ``$AVA_HOME``, where the first run left what it compiled:
``ava.heads.llm.compiled``) and a third run on the first run's machine (inductor's and Triton's own caches kept as
well), each in a process of its own, side by side.

The model is Qwen2-0.5B's decoder layer at its real sizes (random weights, ``--layers`` of them: the layers share one
compiled graph, so the compilation does not grow with their number) with LoRA r 128 on its 7 linears and the
mlp2x_gelu connector from SigLIP's 1152 features, trained ``--steps`` optimizer steps through the training loop
itself (``ava.heads.llm.train.fit``, compiled layers). The warm-up is the wall time of the first step (compilation
included); the later steps' mean is given beside it, and the compile overhead is the difference.

A CPU run's artifacts hold the C++ source inductor generated, not what gcc built from it, so the second run calls gcc
again; a GPU run's hold the Triton binaries. The third run, which finds gcc's output in inductor's cache, is the
CPU's stand-in for the second run on a GPU.

    python benchmarks/bench_llm_compile.py                      # CPU inductor, 2 layers, 4 samples
    python benchmarks/bench_llm_compile.py --baseline /tmp/ava-base --warm-repeats 3   # beside another checkout
    python benchmarks/bench_llm_compile.py --device cuda --layers 24

On a CPU, inductor compiles C++ (gcc); on a GPU it compiles Triton kernels, so only the ratio carries over.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import results  # benchmarks/, beside this script

CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
from pathlib import Path
import torch
torch.set_num_threads({threads})
import ava
import llm_proxies as lp
from ava.heads.llm.config import LLMHeadConfig
from ava.heads.llm.data import IndexItems, LoopData
from ava.heads.llm.devices import Dist
import importlib
tr = importlib.import_module("ava.heads.llm.train")  # (the package exports a train function of that name)

device = torch.device({device!r})
dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
head = lp._model({layers}, 128, dtype).to(device)
feats = torch.randn({samples}, lp.T, lp.D).to(torch.float16).to(device)
data = LoopData(IndexItems({samples}), lp._encoded({samples}, seed=1), lp.T, 0,
                lambda b: feats.index_select(0, b["index"]))
cfg = LLMHeadConfig(batch_size={batch}, epochs=1, progress=False, compile=True, stop_after_steps=1)
times = []
for steps in (1, {steps}):
    cfg.stop_after_steps = steps
    t = time.perf_counter()
    s = tr.fit(head, data, cfg, Path({out!r}), dist=Dist(), device=device, dtype=dtype, epochs=1, lr=1e-4,
               batch_size={batch}, checkpoints=False)
    if device.type == "cuda":
        torch.cuda.synchronize()
    times.append((time.perf_counter() - t, s))
first, later = times
print("RESULT " + json.dumps({{"warmup_s": round(first[0], 2), "compile_cache": first[1]["compile_cache"],
                              "compiled": first[1]["compiled"],
                              "later_step_s": round(later[0] / max(1, later[1]["step"]), 3)}}))
"""


def run(
    label: str, work: Path, home: Path, args: argparse.Namespace, machine: str | None = None, tree: Path | None = None
) -> dict:
    """One run in a process of its own; ``machine`` names an earlier run whose inductor and Triton caches it finds;
    ``tree``: another checkout's ``ava`` is imported (``--baseline``)."""
    machine = machine or label
    env = {
        **os.environ,
        "AVA_HOME": str(home),
        "TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{machine}"),
        "TRITON_CACHE_DIR": str(work / f"triton-{machine}"),
    }
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    prog = CHILD.format(
        here=str(Path(__file__).parent),
        threads=args.threads,
        device=args.device,
        layers=args.layers,
        samples=args.samples,
        batch=args.samples,
        steps=args.steps,
        out=str(work / f"run-{label}"),
    )
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", prog], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{label} run failed:\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.split("RESULT ", 1)[1])
    row["overhead_s"] = round(row["warmup_s"] - row["later_step_s"], 2)
    return {"run": label, **row, "process_s": round(time.perf_counter() - t, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--samples", type=int, default=4, help="samples per optimizer step")
    p.add_argument("--steps", type=int, default=3, help="steps timed after the first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout of ava (a git worktree): its first and third runs are timed first, as 'today'",
    )
    p.add_argument(
        "--warm-repeats",
        type=int,
        default=0,
        help="with --baseline: then both checkouts again on their first run's machine, alternated",
    )
    results.json_option(p)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-llm-compile-"))
    home = work / "ava-home"
    rows = []
    if args.baseline:  # its first run, then a run on that run's machine (every cache of it kept)
        for label, machine in (("today", None), ("today-third", "today")):
            rows.append(run(label, work, work / "ava-home-today", args, machine, tree=args.baseline.resolve()))
            print(json.dumps(rows[-1]), flush=True)
    for label, machine in (("first", None), ("second", None), ("third", "first")):
        rows.append(run(label, work, home, args, machine))
        print(json.dumps(rows[-1]), flush=True)
    for r in range(args.warm_repeats if args.baseline else 0):  # both checkouts again on their warm caches, in turn
        for label, machine, tree in ((f"today-warm{r}", "today", args.baseline.resolve()), (f"warm{r}", "first", None)):
            rows.append(run(label, work, work / ("ava-home-today" if tree else "ava-home"), args, machine, tree=tree))
            print(json.dumps(rows[-1]), flush=True)
    first, second, third = (next(r for r in rows if r["run"] == k) for k in ("first", "second", "third"))
    ratio = first["warmup_s"] / max(second["warmup_s"], 1e-9)
    print(
        f"warm-up: first run {first['warmup_s']} s (compile cache {first['compile_cache']}), second run on a "
        f"fresh machine {second['warmup_s']} s (compile cache {second['compile_cache']}): {ratio:.1f}x; third run "
        f"on the first's machine {third['warmup_s']} s: {first['warmup_s'] / max(third['warmup_s'], 1e-9):.1f}x"
    )
    if args.baseline:
        today = rows[0]["warmup_s"]
        print(
            f"against today's first run ({today} s, {args.baseline}): first {today / first['warmup_s']:.1f}x, "
            f"second {today / second['warmup_s']:.1f}x, third {today / third['warmup_s']:.1f}x; compile overhead "
            f"(warm-up less a later step): today {rows[0]['overhead_s']} s, today's third run "
            f"{rows[1]['overhead_s']} s, third {third['overhead_s']} s: "
            f"{rows[0]['overhead_s'] / max(third['overhead_s'], 1e-9):.1f}x"
        )
    if args.json is not None:
        from bench_cache import environment

        payload = {"environment": environment(args.device), "args": vars(args), "rows": rows, "ratio": ratio}
        results.write(args.json, "bench_llm_compile", figures(first, second, third, args.device), rows, payload)


def figures(first: dict, second: dict, third: dict, device: str) -> list[dict]:
    """The compile overhead (the warm-up less a later step) of the three runs, and the first over the third: the
    warm-up is held to 20 s on a GPU; a CPU, whose second run calls gcc again, is held to the GPU's ratio (4.4x)."""
    gpu = device.startswith("cuda")
    return [
        results.figure(
            "compile overhead, first run (nothing compiled)",
            first["overhead_s"],
            "s",
            target="<= 20 s" if gpu else None,
        ),
        results.figure("compile overhead, a fresh machine with the saved artifacts", second["overhead_s"], "s"),
        results.figure("compile overhead, the first run's machine (every cache kept)", third["overhead_s"], "s"),
        results.figure(
            "first run / the first run's machine, compile overhead",
            round(first["overhead_s"] / max(third["overhead_s"], 1e-9), 1),
            "x",
            target=None if gpu else ">= 4.4x",
            note=None if gpu else "CPU inductor, a proxy for the GPU's warm-up",
        ),
    ]


if __name__ == "__main__":
    main()
