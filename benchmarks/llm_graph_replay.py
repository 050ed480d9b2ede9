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

Then :func:`bucketed_graphs` trains as a loop with graphs would: each packed batch padded to its length bucket
(:func:`pad_packed`: the batch's own loss and gradients), its forward + backward replayed from the bucket's graph,
the update launched; its steady step is the figure to set beside the loop's.

    from llm_graph_replay import graph_replay, bucketed_graphs   # (bench_llm_head.run_path, after its window)
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any

import torch

GRAPH_REPS = 8  # launched and replayed steps each (bench_llm_head reserves the part's time by it)


def error_line(e: BaseException) -> str:
    """``Type: the first line of its message`` (at most 300 characters): what a part reports when it stops."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"


def first_batches(loop: Any, micro: int, n: int) -> tuple[list[list[int]], Any]:
    """The loop's first ``n`` micro-batches (epoch 0 of seed 0: sample indices) and a collator packing them as the
    loop packs them."""
    from ava.heads.llm.data import Collator, length_grouped_batches

    lengths = [e.length(loop.num_image_tokens) for e in loop.encoded]
    plan = length_grouped_batches(lengths, micro, seed=0, epoch=0)[:n]
    return plan, Collator(loop.encoded, loop.num_image_tokens, loop.pad_id, pack=True)


def first_batch(loop: Any, micro: int, device: torch.device) -> dict[str, Any]:
    """The loop's first micro-batch, collated as the loop collates it, on ``device``."""
    from ava.heads.llm.devices import to_device

    (index,), collate = first_batches(loop, micro, 1)
    host = collate([loop.items[i] for i in index])
    if device.type == "cuda":
        host = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in host.items()}
    batch = to_device(host, device)
    batch["index_host"] = host["index"]  # (as the loop's step: rows held in host memory are gathered without a sync)
    return batch


def forward_backward(
    head: Any,
    loop: Any,
    batch: dict[str, Any],
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor:
    """One micro-batch's forward and backward as the loop's step runs them (autocast, the loop's features); the
    loss."""
    from ava.heads.llm.devices import autocast

    with autocast(device, dtype):
        loss = head(batch, loop.featurize(batch))
    loss.backward()
    return loss


def warm_on_side_stream(fn: Any, device: torch.device, times: int = 3) -> None:
    """``fn()`` ``times`` times on a side stream, then everything done: PyTorch's recipe before a first capture."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(times):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)


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


def graph_replay(
    head: Any, loop: Any, micro: int, device: torch.device, dtype: torch.dtype, deadline: float, reps: int = GRAPH_REPS
) -> dict[str, Any]:
    """``launch_ms``, ``host_ms`` and (on a GPU) ``replay_ms`` of one micro-batch's forward + backward, with
    ``replay_over_launch``; stops early, saying so, where ``deadline`` (``time.monotonic``) would be passed."""
    from ava.heads.llm.train import compiling

    layers = head.base.get_decoder().layers
    out: dict[str, Any] = {
        "compiled": all(getattr(layer, "_compiled_call_impl", None) is not None for layer in layers),
        "reps": reps,
        "what": "one micro-batch's forward + backward (no optimizer step)",
    }
    packed = head.use_packing(device, dtype)
    out["attention"] = head.attention_path()
    try:
        batch = first_batch(loop, micro, device)
        out["tokens"] = int(batch["n_tokens"])
        head.train()

        def step() -> torch.Tensor:
            return forward_backward(head, loop, batch, device, dtype)

        with compiling():
            t = time.monotonic()
            step()  # (compiled layers: the timed fits' graph; a new token count may recompile nothing: dynamic)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            one = time.monotonic() - t
            if time.monotonic() + one * (3 * reps + 4) + 5 > deadline:
                return {**out, "error": f"skipped: one step took {one:.2f} s, {deadline - time.monotonic():.0f} s left"}
            out["launch_ms"], out["host_ms"] = _timed(step, reps, device)
            if device.type != "cuda":
                return {**out, "capture": "skipped: CUDA graphs need a GPU"}
            warm_on_side_stream(step, device)
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
                return {**out, "capture": f"failed: {error_line(e)}"}
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


# -- training steps replayed from graphs over length buckets ----------------------------------------------------------
TOKEN_STEP = 512  # a padded batch's tokens: the next multiple of this above its own (<= 3.9% padding at ~13K tokens)
TARGET_STEP = 32  # its supervised positions: the next multiple of this
LEN_STEP = 256  # the longest sequence the varlen kernel is told of: the next multiple of this
BUCKETED_STEPS = 24  # the loop's first micro-batches, trained from graphs (bench_llm_head reserves time by it)


def bucket_of(batch: dict[str, Any]) -> tuple[int, int, int, int]:
    """(tokens, supervised positions, longest sequence, samples) a packed batch is padded to: one graph each."""
    n, s = int(batch["n_tokens"]), int(batch["sup_pos"].numel())
    tokens = (n // TOKEN_STEP + 1) * TOKEN_STEP  # at least one pad token: every batch has B + 1 sequences
    longest = max(int(batch["max_len"]), tokens - n)
    return tokens, -(-s // TARGET_STEP) * TARGET_STEP, -(-longest // LEN_STEP) * LEN_STEP, len(batch["seq_lens"])


def pad_packed(batch: dict[str, Any], tokens: int, targets: int, longest: int, pad_id: int) -> dict[str, Any]:
    """A packed host batch (``ava.heads.llm.data.Collator``, ``pack=True``) padded to ``tokens`` tokens and
    ``targets`` supervised positions, its sequences attended with ``longest`` as their maximum length: the same loss
    and gradients as the batch itself.

    The pad tokens are one more sequence after the samples (pad ids, ignored labels, positions from 0, no image), so
    attention keeps them apart; the extra supervised positions point at its last token with the ignored target, which
    the cross-entropy leaves out of its mean."""
    from ava.heads.llm.prompt import IGNORE

    n, s = int(batch["n_tokens"]), int(batch["sup_pos"].numel())
    extra = tokens - n
    if extra < 1 or targets < s or longest < max(int(batch["max_len"]), extra):
        raise ValueError(f"a batch of {n} tokens, {s} targets cannot be padded to ({tokens}, {targets}, {longest})")

    def cat(key: str, value: Any, k: int) -> torch.Tensor:
        t = batch[key]
        return torch.cat([t, torch.full((*t.shape[:-1], k), value, dtype=t.dtype)], -1)

    out = dict(batch)
    out.update(
        input_ids=cat("input_ids", pad_id, extra),
        labels=cat("labels", IGNORE, extra),
        image_mask=cat("image_mask", False, extra),
        attention_mask=cat("attention_mask", 1, extra),
        position_ids=torch.cat([batch["position_ids"], torch.arange(extra).unsqueeze(0)], -1),
        cu_seqlens=cat("cu_seqlens", tokens, 1),
        sup_pos=cat("sup_pos", tokens - 1, targets - s),
        sup_targets=cat("sup_targets", IGNORE, targets - s),
        sup_rows=cat("sup_rows", len(batch["seq_lens"]), targets - s),
        seq_lens=(*batch["seq_lens"], extra),
        max_len=longest,
    )
    return out


def bucketed_graphs(
    head: Any,
    loop: Any,
    micro: int,
    device: torch.device,
    dtype: torch.dtype,
    deadline: float,
    placement: str | None,
    steps: int = BUCKETED_STEPS,
) -> dict[str, Any]:
    """Training steps of the loop's first ``steps`` micro-batches, each padded to its bucket (:func:`bucket_of`) and
    its forward + backward replayed from that bucket's CUDA graph (captured the first time the bucket comes; all the
    graphs share one memory pool), then the clipping and the fused AdamW update as the loop launches them (a few
    dozen kernels). The figure to set beside the loop's own steady step is ``steady_ms_per_step``: the steps after
    the last capture, timed on the device (CUDA events, no sync between steps), with the padding's share of the
    tokens and what the captures cost.

    On a CPU, or where the features are not held on the GPU (a graph would replay one batch's host gather), the same
    padded steps run eagerly: that checks the padding, not the graphs."""
    from ava.heads.llm.devices import adamw, to_device
    from ava.heads.llm.train import compiling

    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = adamw(params, 1e-4, 0.0)
    plan, collate = first_batches(loop, micro, steps)
    cuda = device.type == "cuda"
    packed = head.use_packing(device, dtype)
    attention = head.attention_path()
    graphs_on = cuda and placement == "on-device" and attention == "varlen"
    out: dict[str, Any] = {
        "steps_asked": len(plan),
        "buckets_of": [TOKEN_STEP, TARGET_STEP, LEN_STEP],
        "attention": attention,
    }
    if not cuda:
        out["graphs"] = "skipped: CUDA graphs need a GPU"
    elif not graphs_on:  # a graph would replay its capture's host gather, or its capture's sample lengths
        out["graphs"] = (
            f"skipped: the features are held {placement}, not on the GPU"
            if placement != "on-device"
            else f"skipped: attention {attention} attends by host lengths, not the varlen kernel's"
        )
    head.train()
    graphs: dict[tuple[int, ...], tuple[Any, dict[str, Any], torch.Tensor]] = {}
    pool, losses, ends, real, padded, last_capture, captured, capture_s = None, [], [], 0, 0, -1, 0, 0.0

    try:
        for p in params:
            p.grad = torch.zeros_like(p)  # static: the graphs accumulate into them, the update reads and zeroes them
        grads = [p.grad for p in params]
        with compiling():
            for i, index in enumerate(plan):
                if time.monotonic() > deadline:
                    out["stopped"] = f"the part's time ran out after {i} steps"
                    break
                host = collate([loop.items[j] for j in index])
                key = bucket_of(host)
                batch = pad_packed(host, key[0], key[1], key[2], loop.pad_id)
                real, padded = real + int(host["n_tokens"]), padded + key[0]
                if not graphs_on:
                    loss = forward_backward(head, loop, to_device(batch, device), device, dtype)
                else:
                    if key not in graphs:
                        static = to_device(batch, device)
                        if pool is None:  # before a first capture
                            warm = functools.partial(forward_backward, head, loop, static, device, dtype)
                            warm_on_side_stream(warm, device)
                            for p in params:
                                p.grad.zero_()
                        torch.cuda.synchronize(device)
                        c, graph = time.perf_counter(), torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph, pool=pool):
                            loss_out = forward_backward(head, loop, static, device, dtype)
                        pool = graph.pool() if pool is None else pool
                        if any(p.grad is not g for p, g in zip(params, grads, strict=True)):  # (accumulated in place)
                            raise RuntimeError("a capture replaced a gradient tensor: the update would not see it")
                        graphs[key] = (graph, static, loss_out)
                        last_capture, captured, capture_s = i, captured + 1, capture_s + time.perf_counter() - c
                    graph, static, loss_out = graphs[key]
                    for k, v in batch.items():
                        if isinstance(v, torch.Tensor):
                            static[k].copy_(v.pin_memory(), non_blocking=True)
                    graph.replay()
                    loss = loss_out.detach().clone()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
                losses.append(loss.detach())
                if cuda:
                    ends.append(torch.cuda.Event(enable_timing=True))
                    ends[-1].record()
                else:
                    ends.append(time.perf_counter())
    except Exception as e:  # noqa: BLE001 - what stops the graphs here is the finding
        out["error"] = error_line(e)
        if cuda:
            torch.cuda.set_stream(torch.cuda.default_stream(device))  # (a failed capture leaves its stream current)
    finally:
        if cuda:
            with contextlib.suppress(Exception):  # (after a failed capture; the parts after this one still try)
                torch.cuda.synchronize(device)
        for p in params:
            p.grad = None
        graphs.clear()
        if packed:
            head.use_packing(device, dtype, on=False)
        if cuda:
            torch.cuda.empty_cache()  # the graphs' pool
    first = max(last_capture, 0)  # the steady steps: after the last capture (and after the first step)
    if len(ends) - 1 - first >= 4:
        span = ends[first].elapsed_time(ends[-1]) if cuda else 1e3 * (ends[-1] - ends[first])
        out["steady_ms_per_step"], out["steady_steps"] = span / (len(ends) - 1 - first), len(ends) - 1 - first
    out.update(
        steps=len(ends),
        captures=captured,
        capture_s=round(capture_s, 2),
        padding_share=round(1 - real / padded, 4) if padded else None,
        losses=[round(float(x), 5) for x in losses],
    )
    return out
