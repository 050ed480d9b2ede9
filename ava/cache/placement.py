"""Where a set of feature rows is held while heads train on it: on the GPU, in host memory for heads on a GPU (each
batch staged through a pinned buffer), in host memory, or not held at all and streamed from the cache batch by batch.

A set held in host memory for a GPU is not pinned whole: a gather reads it on the CPU either way, and only the
batch's copy to the GPU needs pinned memory. PyTorch's pinned allocator rounds every block up to a power of two and
keeps it after use, so a pinned 75 GB set (recognition's tokens at SigLIP-so400m's 729 x 1152) would ask for 128 GiB
of locked memory, and every ability's block would stay locked after its release.

Free GPU memory is what the driver reports free plus what PyTorch's caching allocator holds but no tensor uses
(``memory_reserved - memory_allocated``): features released by the previous ability sit there, and
``torch.cuda.mem_get_info`` alone does not count them. Free host memory is ``MemAvailable`` (and the cgroup's limit
where one is set). Each kind of memory is used up to :data:`SHARE` of what is free, leaving room for the heads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ON_DEVICE, STAGED, HOST, STREAMED = "on-device", "host-staged", "host", "streamed"
SHARE = 0.7  # of the free memory a held set may take


def concrete_device(device: Any) -> Any:
    """``device`` with its index: ``cuda`` is the current CUDA device, ``cuda:0`` say (a tensor's ``.device`` always
    has one, and ``torch.device("cuda") != torch.device("cuda:0")``: compare tensors' devices with this)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def held_empty(shape: tuple[int, ...], dtype: Any, device: Any = "cpu") -> Any:
    """An uninitialized tensor to hold feature rows on ``device``; in host memory, allocated by numpy and shared with
    torch (``torch.from_numpy``; bfloat16 as 16-bit integers, viewed).

    numpy asks the kernel for transparent huge pages for arrays of 4 MB or more (``madvise``, where the kernel
    offers them); PyTorch's CPU allocator does not, unless ``THP_MEM_ALLOC_ENABLE`` was set before it started. A held
    set's first touch then faults once per 2 MB instead of once per 4 KB page, and page faults were a large share of a
    token read's CPU."""
    import numpy as np
    import torch

    device = torch.device(device)
    if device.type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    probe = torch.empty(0, dtype=dtype)
    try:
        as_numpy = probe.numpy().dtype
    except TypeError:  # a type numpy lacks (bfloat16): its bytes as integers of the same width, viewed
        as_numpy = np.dtype(f"int{8 * probe.element_size()}")
    return torch.from_numpy(np.empty(shape, dtype=as_numpy)).view(dtype)


def staging_array(shape: tuple[int, ...], dtype: Any, pinned: bool = False) -> Any:
    """A reused host buffer for rows on their way to a GPU (numpy, ``dtype`` a numpy type). ``pinned``: in page-locked
    memory from PyTorch's pinned allocator, which keeps the block for the next read once this one is dropped; a GPU
    copies from it by DMA, while pageable memory goes through the driver's bounce buffer, which roughly halved the
    rate of an on-device token read."""
    import numpy as np

    if not pinned:
        return np.empty(shape, dtype=dtype)
    import torch

    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy().view(dtype).reshape(shape)


COPY_CHUNK_BYTES = 64 << 20  # a host set's copy to a GPU goes through two pinned buffers of this size (to_device)


def to_device(host: Any, device: Any, chunk_bytes: int = COPY_CHUNK_BYTES) -> Any:
    """``host`` (a tensor in pageable host memory) copied to ``device``: to a GPU chunk by chunk through two pinned
    buffers, each filled by this thread with PyTorch's intra-op threads while the other's copy to the GPU runs on a
    stream of its own; else (or for a set of one chunk) as ``host.to(device)``. The same values, bit for bit.

    A plain copy from pageable memory goes through the driver's own staging buffers and was slower than a host copy
    with two threads, so for the largest abilities it was a visible part of a real-size fingerprint. Two pinned
    chunks, not the set: PyTorch's pinned blocks are powers of two, kept after use."""
    import torch

    device = torch.device(device)
    nbytes = host.numel() * host.element_size()
    if device.type != "cuda" or host.device.type != "cpu" or nbytes <= chunk_bytes:
        return host.to(device)
    src = host.contiguous().view(-1)
    out = torch.empty(host.shape, dtype=host.dtype, device=device)
    dst, per = out.view(-1), max(1, chunk_bytes // host.element_size())
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))  # ``out``'s block may still be in use by queued work
    buffers = [torch.empty(per, dtype=host.dtype, pin_memory=True) for _ in range(2)]
    copied: list[Any] = [None, None]  # each buffer's last copy to the GPU (an event), waited for before refilling it
    with torch.cuda.stream(stream):
        for k, lo in enumerate(range(0, src.numel(), per)):
            hi, b = min(lo + per, src.numel()), k % 2
            if copied[b] is not None:
                copied[b].synchronize()
            buffers[b][: hi - lo].copy_(src[lo:hi])
            dst[lo:hi].copy_(buffers[b][: hi - lo], non_blocking=True)
            copied[b] = stream.record_event()
    stream.synchronize()  # the rows are whole when this returns, for work on any stream
    return out


def device_free_bytes(device: str) -> int:
    """Bytes a new tensor can take on CUDA ``device``: the driver's free memory plus the caching allocator's
    reserved-but-unused bytes."""
    import torch

    dev = torch.device(device)
    free, _ = torch.cuda.mem_get_info(dev)
    unused = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    return int(free) + max(0, int(unused))


def host_free_bytes() -> int:
    """Host memory this process can still take: ``MemAvailable``, capped by a cgroup v2 memory limit."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return 1 << 62  # unknown: assume it fits (reading then fails loudly, as before)
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(0, available)


@dataclass(frozen=True)
class Placement:
    """``kind`` (:data:`ON_DEVICE`, :data:`STAGED`, :data:`HOST` or :data:`STREAMED`) and the torch device the
    held tensors live on (``"cpu"`` for host memory; None when streamed)."""

    kind: str
    device: str | None


def place(device: str, nbytes: int) -> Placement:
    """Where ``nbytes`` of features for heads computing on ``device`` go: on the GPU when they fit in its free memory,
    else in host memory, batches staged to the GPU (:data:`STAGED`), else (or on a CPU run, when they do not fit in host
    memory) streamed."""
    import torch

    fits_host = nbytes <= SHARE * host_free_bytes()
    if device.startswith("cuda") and torch.cuda.is_available():
        if nbytes <= SHARE * device_free_bytes(device):
            return Placement(ON_DEVICE, device)
        return Placement(STAGED, "cpu") if fits_host else Placement(STREAMED, None)
    return Placement(HOST, "cpu") if fits_host else Placement(STREAMED, None)
