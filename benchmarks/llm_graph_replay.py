"""What CUDA graphs could give the LLM head's step at most: one packed batch's forward + backward launched as the loop
launches it, against the same work replayed from a CUDA graph, side by side on one GPU.

The H200's cached step took 107 ms while its kernels took 87 ms (a profile of ~3,750 kernels a step, most under
10 us): the difference is time the GPU waited for launches, or for something else. A replayed graph launches
nothing from the host, so ``replay_ms`` is the device's own time for the work, and ``1 - replay_ms / launch_ms`` the
most that graphs (over length buckets, or any way of capturing the step) could take off it. ``host_ms`` is the
host's time to return from launching the steps: well below ``launch_ms``, the host ran ahead and the device set the
pace; near it, either the host set it or the launch queue (about a thousand kernels, a third of a step) was full and
the host waited for the device, which this figure cannot tell apart. Whether a graph is worth building (and with
which buckets) is the GPU's to say; this part only measures.

The batch is the run's first micro-batch of the loop's own plan, collated (packed), on the device, with the loop's
features (``LoopData.featurize``), under the loop's autocast and Dynamo settings (``ava.heads.llm.train.compiling``)
and with the head's layers as the timed fits left them (compiled, or eager where they fell back). The optimizer
step is not in either figure (fused AdamW and the clipping: a few dozen kernels of ~3,750). On a CPU only the
launched figure is taken (``capture: skipped``).

    from llm_graph_replay import graph_replay    # (bench_llm_head.run_path calls it after the cached path's window)
"""

from __future__ import annotations

import time
from typing import Any

import torch

GRAPH_REPS = 8  # launched and replayed steps each (bench_llm_head reserves the part's time by it)


def first_batch(loop: Any, micro: int, device: torch.device) -> dict[str, Any]:
    """The loop's first micro-batch (epoch 0 of seed 0), collated as the loop collates it, on ``device``."""
    from ava.heads.llm.data import Collator, length_grouped_batches
    from ava.heads.llm.devices import to_device

    lengths = [e.length(loop.num_image_tokens) for e in loop.encoded]
    index = length_grouped_batches(lengths, micro, seed=0, epoch=0)[0]
    host = Collator(loop.encoded, loop.num_image_tokens, loop.pad_id, pack=True)([loop.items[i] for i in index])
    if device.type == "cuda":
        host = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in host.items()}
    batch = to_device(host, device)
    batch["index_host"] = host["index"]  # (as the loop's step: rows held in host memory are gathered without a sync)
    return batch


def _timed(fn: Any, reps: int, device: torch.device) -> tuple[float, float]:
    """(ms a call, all done; ms a call of the host's launching alone) over ``reps`` calls."""
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        ms = (time.perf_counter() - start) * 1e3 / reps
        return ms, ms
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host = time.perf_counter()
    begin.record()
    for _ in range(reps):
        fn()
    end.record()
    host_ms = (time.perf_counter() - host) * 1e3 / reps
    end.synchronize()
    return begin.elapsed_time(end) / reps, host_ms


def graph_replay(head: Any, loop: Any, micro: int, device: torch.device, dtype: torch.dtype, deadline: float,
                 reps: int = GRAPH_REPS) -> dict[str, Any]:  # fmt: skip
    """``launch_ms``, ``host_ms`` and (on a GPU) ``replay_ms`` of one micro-batch's forward + backward, with
    ``replay_over_launch``; stops early, saying so, where ``deadline`` (``time.monotonic``) would be passed."""
    from ava.heads.llm.devices import autocast
    from ava.heads.llm.train import compiling

    layers = head.base.get_decoder().layers
    out: dict[str, Any] = {
        "compiled": all(getattr(layer, "_compiled_call_impl", None) is not None for layer in layers),
        "reps": reps, "what": "one micro-batch's forward + backward (no optimizer step)",
    }  # fmt: skip
    packed = head.use_packing(device, dtype)
    out["attention"] = head.attention_path()
    try:
        batch = first_batch(loop, micro, device)
        out["tokens"] = int(batch["n_tokens"])
        head.train()

        def step() -> torch.Tensor:
            with autocast(device, dtype):
                loss = head(batch, loop.featurize(batch))
            loss.backward()
            return loss

        with compiling():
            t = time.monotonic()
            step()  # (compiled layers: the timed fits' graph; a new token count may recompile nothing: dynamic)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            one = time.monotonic() - t
            if time.monotonic() + one * (3 * reps + 4) + 5 > deadline:
                return {**out, "error": f"skipped: one step took {one:.2f} s, {deadline - time.monotonic():.0f} s "
                        "left"}  # fmt: skip
            out["launch_ms"], out["host_ms"] = _timed(step, reps, device)
            if device.type != "cuda":
                return {**out, "capture": "skipped: CUDA graphs need a GPU"}
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):  # warm-up on a side stream before a capture (PyTorch's recipe)
                for _ in range(3):
                    step()
            torch.cuda.current_stream(device).wait_stream(side)
            torch.cuda.synchronize(device)
            if time.monotonic() + one * (reps + 2) + 5 > deadline:
                return {**out, "capture": f"skipped: {deadline - time.monotonic():.0f} s left after the launched steps"}
            graph, stream = torch.cuda.CUDAGraph(), torch.cuda.current_stream(device)
            t = time.monotonic()
            try:
                with torch.cuda.graph(graph):
                    step()
            except Exception as e:  # noqa: BLE001 - what stops a capture here is the finding
                torch.cuda.set_stream(stream)  # (a failed capture_end leaves the capture's stream current)
                torch.cuda.synchronize(device)
                return {**out, "capture": f"failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"}
            out["capture_s"] = round(time.monotonic() - t, 2)
            out["replay_ms"], _ = _timed(graph.replay, reps, device)
            del graph
            out["capture"] = "ok"
            out["replay_over_launch"] = out["replay_ms"] / out["launch_ms"]
    finally:
        for p in head.parameters():
            p.grad = None
        if packed:
            head.use_packing(device, dtype, on=False)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the graph's private pool
    return out
