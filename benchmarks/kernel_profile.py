"""What the device ran during a few training steps, from ``torch.profiler``: where a step's time goes, to choose what
raises MFU (CUDA graphs, fused LoRA, larger micro-batches) from a GPU run rather than by guess.

On CUDA, from the kernels the profiler saw:

- ``kernels_per_step``: kernel launches per optimizer step;
- ``busy_fraction``: the share of the window from the first kernel's start to the last one's end in which some
  kernel ran (the rest the device waited: on the host, on a copy, on the data);
- ``short_kernels``: kernels under 10 us (launch-sized work) and their share of the kernel time;
- ``by_category``: kernel time by kind (matmul, attention, inductor's fused kernels, other elementwise, copies);
- ``top``: the kernels that took the most time, with counts and mean durations;
- ``gaps``: where the device waited: the idle stretches between kernels by length (count and ms per step in each
  bin), and the longest few, with the kernels before and after each and how far into the window each came (a
  launch-bound step has many short gaps; a step that waits on the host's data or a sync, a few long ones);
- ``host_calls``: the CUDA runtime calls the profiler saw on the host (synchronizations, copies, launches): count
  and ms per step of each, where the profiler recorded them.

On a CPU (``gpu.sh run --dry-run``) there are no device kernels: the same fields are filled from the host ops the
profiler saw at the top level, so the code path runs and reports, but the figures are host figures.

The profiler adds host time to every op it records, so ``busy_fraction`` is a lower bound of the unprofiled run's.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

SHORT_US = 10.0  # a kernel shorter than this does launch-sized work
CATEGORIES = (  # (kind, substrings of the kernel's name, lower case), first match wins
    ("attention", ("flash", "fmha", "attention", "attn")),
    (
        "matmul",
        (
            "gemm",
            "xmma",
            "cutlass",
            "nvjet",
            "cublas",
            "aten::mm",
            "aten::bmm",
            "aten::addmm",
            "matmul",
            "aten::linear",
            "mmbackward",
        ),
    ),
    ("memcpy/memset", ("memcpy", "memset", "aten::copy_")),
    ("fused (inductor)", ("triton_", "cpp_fused", "compiledfxgraph")),
    ("optimizer", ("adam", "foreach", "multi_tensor")),
)


def category(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in CATEGORIES if any(k in low for k in keys)), "other")


GAP_BINS_US = (10.0, 100.0, 1000.0, 10000.0)  # idle stretches: < 10 us, 10-100 us, 0.1-1 ms, 1-10 ms, >= 10 ms


def idle_stretches(kernels: list[tuple[str, float, float]]) -> list[tuple[float, float, str, str]]:
    """The holes in the union of ``kernels``' (name, start, end) intervals between the first start and the last end:
    (length, where it starts, the kernel before, the kernel after), in time order (microseconds)."""
    ordered = sorted(kernels, key=lambda k: k[1])
    found: list[tuple[float, float, str, str]] = []
    end, last = ordered[0][2], ordered[0][0]
    for name, a, b in ordered[1:]:
        if a > end:
            found.append((a - end, end, last, name))
        if b > end:
            end, last = b, name
    return found


def gaps(
    kernels: list[tuple[str, float, float]], steps: int, found: list[tuple[float, float, str, str]], longest: int = 6
) -> dict[str, Any]:
    """The device's idle stretches (``found``: :func:`idle_stretches` of ``kernels``): per-step count and ms in each
    bin of :data:`GAP_BINS_US`, and the ``longest`` ones with their neighbours."""
    start0, span_end = min(a for _, a, _ in kernels), max(b for _, _, b in kernels)
    edges = (0.0, *GAP_BINS_US, float("inf"))
    labels = ["< 10 us", "10-100 us", "0.1-1 ms", "1-10 ms", ">= 10 ms"]
    bins = {}
    for label, lo, hi in zip(labels, edges[:-1], edges[1:], strict=True):
        inside = [g for g, *_ in found if lo <= g < hi]
        bins[label] = {"per_step": round(len(inside) / steps, 1), "ms_per_step": round(sum(inside) / steps / 1e3, 3)}
    window = max(span_end - start0, 1e-9)
    return {
        "idle_ms_per_step": round(sum(g for g, *_ in found) / steps / 1e3, 3),
        "by_length": bins,
        "longest": [
            {
                "ms": round(g / 1e3, 3),
                "at": round((at - start0) / window, 3),
                "before": before[:60],
                "after": after[:60],
            }
            for g, at, before, after in sorted(found, reverse=True)[:longest]
        ],
    }


def host_calls(events: Any, steps: int) -> dict[str, Any]:
    """The CUDA runtime's calls on the host (``cuda*``, ``cu*`` driver calls), count and ms per step, most time
    first: a ``cudaStreamSynchronize`` or ``cudaMemcpy`` (not Async) among them is the host waiting on the device."""
    by: dict[str, list[float]] = defaultdict(list)
    for e in events:
        name = e.name
        if e.device_type == torch.autograd.DeviceType.CPU and name.startswith("cu"):
            by[name].append(e.time_range.end - e.time_range.start)
    ranked = sorted(by.items(), key=lambda kv: -sum(kv[1]))[:8]
    return {
        name: {"per_step": round(len(d) / steps, 1), "ms_per_step": round(sum(d) / steps / 1e3, 3)}
        for name, d in ranked
    }


def summarize(events: Any, steps: int, device_type: str, top: int = 12) -> dict[str, Any]:
    """The figures above from ``events`` (``prof.events()``) of ``steps`` optimizer steps."""
    if device_type == "cuda":
        kind = torch.autograd.DeviceType.CUDA
        kernels = [(e.name, e.time_range.start, e.time_range.end) for e in events if e.device_type == kind]
        source = "device kernels"
    else:  # a CPU run: the top-level host ops stand in for kernels
        kernels = [
            (e.name, e.time_range.start, e.time_range.end)
            for e in events
            if e.device_type == torch.autograd.DeviceType.CPU and e.cpu_parent is None
        ]
        source = "host ops at the top level (a CPU run: no device kernels)"
    if not kernels:
        return {"source": source, "steps": steps, "error": "the profiler saw no kernels"}
    total = sum(b - a for _, a, b in kernels)
    span = max(b for _, _, b in kernels) - min(a for _, a, _ in kernels)
    by_cat: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(list)
    for name, a, b in kernels:
        by_cat[category(name)] += b - a
        by_name[name].append(b - a)
    short = [b - a for _, a, b in kernels if b - a < SHORT_US]
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    idle = idle_stretches(kernels)  # busy = the span less these holes
    return {
        "source": source,
        "steps": steps,
        "kernels_per_step": round(len(kernels) / steps, 1),
        "kernel_ms_per_step": round(total / steps / 1e3, 3),
        "span_ms_per_step": round(span / steps / 1e3, 3),
        "busy_fraction": round(1 - sum(g for g, *_ in idle) / span, 3) if span > 0 else None,
        "short_kernels": {
            "under_us": SHORT_US,
            "per_step": round(len(short) / steps, 1),
            "time_share": round(sum(short) / total, 3) if total else None,
        },
        "by_category": {k: round(v / total, 3) for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
        "top": [
            {
                "name": name[:100],
                "per_step": round(len(d) / steps, 1),
                "mean_us": round(sum(d) / len(d), 1),
                "share": round(sum(d) / total, 3),
            }
            for name, d in ranked
        ],
        "gaps": gaps(kernels, steps, idle),
        **({"host_calls": host_calls(events, steps)} if device_type == "cuda" else {}),
    }


def profile_steps(run: Callable[[], int], device: torch.device) -> dict[str, Any]:
    """``run()`` (which returns how many optimizer steps it ran) under the profiler, summarized; ``{"error": ...}``
    where the profiler could not run or be read (the part says so instead of failing its stage)."""
    from torch.profiler import ProfilerActivity, profile

    # on CUDA the kernels alone (the host ops would double the events to parse, and the summary does not use them)
    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    try:
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            steps = max(1, int(run()))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            wall = time.perf_counter() - t0
        t1 = time.perf_counter()
        out = summarize(prof.events(), steps, device.type)
    except Exception as e:  # noqa: BLE001 - the profiler's own failures are reported, not raised
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    out["wall_ms_per_step"] = round(wall / steps * 1e3, 3)
    out["parse_s"] = round(time.perf_counter() - t1, 2)
    return out


def table(summary: dict[str, Any]) -> str:
    """The summary as lines for a log: the headline figures, then the top kernels as a Markdown table."""
    if "error" in summary:
        return f"profile: not measured ({summary['error']})"
    s = summary
    lines = [
        f"profile ({s['source']}, {s['steps']} steps): {s['kernels_per_step']} kernels/step, kernel time "
        f"{s['kernel_ms_per_step']} ms/step over a {s['span_ms_per_step']} ms span (busy {s['busy_fraction']}), "
        f"wall {s.get('wall_ms_per_step', '-')} ms/step; under {s['short_kernels']['under_us']:.0f} us: "
        f"{s['short_kernels']['per_step']}/step, {s['short_kernels']['time_share']} of kernel time",
        "by kind: " + ", ".join(f"{k} {v}" for k, v in s["by_category"].items()),
        "| kernel | per step | mean us | share |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {t['name']} | {t['per_step']} | {t['mean_us']} | {t['share']} |" for t in s["top"]]
    g = s.get("gaps")
    if g:
        lines.append(
            f"idle {g['idle_ms_per_step']} ms/step: "
            + ", ".join(f"{k} {v['per_step']}/step ({v['ms_per_step']} ms)" for k, v in g["by_length"].items())
        )
        lines += [
            f"  idle {x['ms']} ms at {x['at']:.0%} of the window, after {x['before']}, before {x['after']}"
            for x in g["longest"]
        ]
    if s.get("host_calls"):
        lines.append(
            "host calls: "
            + ", ".join(f"{k} {v['per_step']}/step ({v['ms_per_step']} ms)" for k, v in s["host_calls"].items())
        )
    return "\n".join(lines)
