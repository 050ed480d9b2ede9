"""Non-matmul bytes per token of ONE Qwen2-0.5B decoder layer with LoRA r 128, eager vs ``torch.compile``, one run.

Imported by ``llm_proxies.py`` (``bench_llm_head.py --compiled-bytes``); runs on a CPU with a C++ compiler.

- **compiled**: inductor's own count (``torch._inductor.metrics.num_bytes_accessed``, filled at code generation
  when the ``inductor_metrics`` log is on: for each scheduled kernel, the bytes of the buffers it reads and writes,
  each once). The layer is compiled (``dynamic=False``) and run forward + backward under bf16 autocast; kernels that
  inductor hands to an external library (matmuls, attention: ``ExternKernel`` nodes) are kept apart, as the eager
  counter keeps matmul and attention ops apart. What inductor generates for a CPU is counted (C++ kernels); the
  same graph on a GPU fuses the same way (Triton), though its kernel boundaries can differ.
- **eager**: the dispatch-mode counter of ``llm_proxies.OpCounter`` on the same layer, inputs and autocast.

Both per token over the batch's tokens (2 rows x ``seq`` by default, the proxies' ~844 tokens per sample).

Run alone, it also compares the layer with LoRA (the head's r 128, dropout 0.05), without LoRA's dropout, and
without LoRA, each compiled from scratch: what LoRA adds to a step's memory traffic and kernels::

    python benchmarks/llm_compiled_bytes.py --variants lora,lora-no-dropout,no-lora
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import torch

MATMUL_WORDS = ("mm", "addmm", "bmm", "matmul", "linear", "attention", "sdpa", "flash")


def _layer_inputs(
    samples: int,
    seq: int,
    lora_r: int,
    lora_dropout: float = 0.05,
) -> tuple[Any, dict[str, Any], torch.Tensor]:
    from llm_proxies import D, _model  # (a sibling module: benchmarks/ is on sys.path)

    del D
    head = _model(1, lora_r, torch.bfloat16, lora_dropout)
    head.train()
    decoder = head.base.get_decoder()
    layer = decoder.layers[0]
    torch.manual_seed(0)
    hidden = torch.randn(samples, seq, decoder.config.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(seq).unsqueeze(0).expand(samples, -1)
    cos, sin = decoder.rotary_emb(hidden, pos)
    kwargs = {"attention_mask": None, "position_embeddings": (cos, sin), "position_ids": pos, "use_cache": False}
    return layer, kwargs, hidden


def _fwd_bwd(layer: Any, kwargs: dict[str, Any], hidden: torch.Tensor, grad: torch.Tensor) -> None:
    """Forward + backward, the output's gradient given (made beforehand: no harness op is counted)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(hidden, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(grad)


def eager_bytes(samples: int = 2, seq: int = 844, lora_r: int = 128, lora_dropout: float = 0.05) -> dict[str, Any]:
    from llm_proxies import OpCounter

    layer, kwargs, hidden = _layer_inputs(samples, seq, lora_r, lora_dropout)
    grad = torch.ones_like(hidden)
    with OpCounter(fake_matmul=True):
        _fwd_bwd(layer, kwargs, hidden, grad)  # warm (lazy inits)
    layer.zero_grad(set_to_none=True)
    hidden.grad = None
    with OpCounter(fake_matmul=True) as count:
        _fwd_bwd(layer, kwargs, hidden, grad)
    tokens = samples * seq
    return {
        "bytes": count.bytes,
        "tokens": tokens,
        "mb_per_token": count.bytes / tokens / 1e6,
        "top": {k: round(v / tokens / 1e6, 4) for k, v in count.ops.most_common(8)},
    }


def compiled_bytes(
    samples: int = 2,
    seq: int = 844,
    lora_r: int = 128,
    lora_dropout: float = 0.05,
) -> dict[str, Any]:
    """Compile the layer, run forward + backward once, and read inductor's byte counts of the kernels it made."""
    import shutil

    from torch._inductor import graph as inductor_graph
    from torch._inductor import metrics

    if shutil.which("g++") is None and shutil.which("c++") is None and shutil.which("clang++") is None:
        return {"error": "no C++ compiler on PATH: inductor cannot build CPU kernels"}
    from torch._inductor.compile_fx import inductor_metrics_log as log

    # inductor counts bytes only while its metrics log is on: on, into a null handler (the count, not the lines)
    before = (log.level, log.propagate, list(log.handlers))
    log.setLevel(logging.INFO)
    log.propagate, log.handlers = False, [logging.NullHandler()]
    kernels: list[tuple[str, str, int]] = []
    graphs: list[int] = []  # bytes of each graph inductor generated (forward, backward)
    original = inductor_graph.GraphLowering.count_bytes

    def count_bytes(self: Any) -> Any:
        total, counts, runtimes = original(self)
        graphs.append(total)
        for node in self.scheduler.nodes:
            kind = type(node).__name__
            name = ""
            inner = getattr(node, "node", None)
            if inner is not None:
                name = str(getattr(inner, "python_kernel_name", "") or getattr(inner, "op_overload", "") or "")
            kernels.append((kind, name, node.get_read_write_buffers_sizes()))
        return total, counts, runtimes

    inductor_graph.GraphLowering.count_bytes = count_bytes  # type: ignore[method-assign]
    # a graph served from inductor's caches is not generated again, so nothing would be counted: no caches
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    caches = (
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    )
    for c in caches:
        c.__enter__()
    try:
        torch._dynamo.reset()
        metrics.reset()
        layer, kwargs, hidden = _layer_inputs(samples, seq, lora_r, lora_dropout)
        compiled = torch.compile(layer, dynamic=False)
        grad = torch.ones_like(hidden)
        t0 = time.perf_counter()
        _fwd_bwd(compiled, kwargs, hidden, grad)
        seconds = time.perf_counter() - t0
        total = int(metrics.num_bytes_accessed)
    finally:
        for c in reversed(caches):
            c.__exit__(None, None, None)
        inductor_graph.GraphLowering.count_bytes = original  # type: ignore[method-assign]
        log.setLevel(before[0])
        log.propagate, log.handlers = before[1], before[2]
    if not graphs or sum(graphs) != total:  # (e.g. a graph from a cache: counted, its kernels not seen)
        return {"error": f"inductor counted {total} bytes but generated {len(graphs)} graphs of {sum(graphs)} here"}
    extern = [(k, n, b) for k, n, b in kernels if k == "ExternKernelSchedulerNode"]
    matmul = sum(b for _, n, b in extern if any(w in n.lower() for w in MATMUL_WORDS))
    tokens = samples * seq
    other_extern = Counter()
    for _, n, b in extern:
        if not any(w in n.lower() for w in MATMUL_WORDS):
            other_extern[n or "?"] += b
    return {
        "graphs": graphs,
        "bytes_all_kernels": total,
        "bytes_matmul_attention": matmul,
        "bytes": total - matmul,
        "tokens": tokens,
        "mb_per_token": (total - matmul) / tokens / 1e6,
        "kernels": len(kernels),
        "extern_kernels": len(extern),
        "other_extern_mb_per_token": {k: round(v / tokens / 1e6, 4) for k, v in other_extern.most_common(6)},
        "compile_and_run_s": seconds,
    }


VARIANTS = {"lora": (128, 0.05), "lora-no-dropout": (128, 0.0), "no-lora": (0, 0.0)}  # (r, dropout)


if __name__ == "__main__":
    import argparse
    import json
    import sys
    from pathlib import Path

    import ava  # noqa: F401  (first: its torchvision fix, which transformers' model classes need on a CPU torch)

    sys.path.insert(0, str(Path(__file__).parent))
    import results

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("seq", type=int, nargs="?", default=844)
    p.add_argument(
        "--variants",
        default="lora",
        help=f"comma-separated, of {', '.join(VARIANTS)}: LoRA r 128 with the head's dropout (0.05), "
        "without it, and the layer without LoRA; each compiled from scratch",
    )
    results.json_option(p)
    args = p.parse_args()
    torch.set_num_threads(1)
    out = {}
    for name in args.variants.split(","):
        r, dropout = VARIANTS[name]
        out[name] = {
            "eager": eager_bytes(seq=args.seq, lora_r=r, lora_dropout=dropout),
            "compiled": compiled_bytes(seq=args.seq, lora_r=r, lora_dropout=dropout),
        }
        print(json.dumps({name: out[name]}), flush=True)
    print("| variant | eager non-matmul MB / token / layer | compiled | kernels | all kernels MB / token |")
    print("|---|---:|---:|---:|---:|")
    for name, r in out.items():
        c = r["compiled"]
        if "error" in c:
            print(f"| {name} | {r['eager']['mb_per_token']:.3f} | {c['error']} | | |")
            continue
        print(
            f"| {name} | {r['eager']['mb_per_token']:.3f} | {c['mb_per_token']:.3f} | {c['kernels']} "
            f"| {c['bytes_all_kernels'] / c['tokens'] / 1e6:.3f} |"
        )
    figures = [
        results.figure(
            f"non-matmul MB a token a layer, compiled, {name}",
            round(r["compiled"]["mb_per_token"], 3),
            "MB",
            target="<= 0.5 MB" if name == "lora" else None,
            note=f"eager {r['eager']['mb_per_token']:.3f}; {r['compiled']['kernels']} kernels; CPU inductor, a proxy "
            "for the GPU's compiled layer",
        )
        for name, r in out.items()
        if "error" not in r["compiled"]
    ]
    results.write(args.json, "llm_compiled_bytes", figures, [{"variant": k, **v} for k, v in out.items()], out)
