"""Small datasets and helpers for the feature-cache tests (random images, two abilities sharing images)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from PIL import Image

from ava.data.format import Dataset, DatasetWriter, Sample

REPO = Path(__file__).resolve().parent.parent

# A child process that extracts with a given config; argv: data cache vfm hold-after hold-file. With hold-after
# N > 0, the child's forward pass N + 1 creates hold-file and then waits to be killed: a known point (the first N
# batches are through, the next is not), whatever the machine's load.
EXTRACT_SCRIPT = """
import json, sys, time
import torch
torch.set_num_threads(1)
from ava.cache import ExtractConfig, extract, extraction
hold_after, hold_file = int(sys.argv[4]), sys.argv[5]
if hold_after:
    real, calls = extraction._forward, []
    def held(*args, **kwargs):
        calls.append(1)
        if len(calls) > hold_after:
            open(hold_file, "w").close()
            while True:
                time.sleep(60)
        return real(*args, **kwargs)
    extraction._forward = held
summary = extract(ExtractConfig(vfm=sys.argv[3], data=sys.argv[1], cache=sys.argv[2], batch_size=2, shard_size=4,
                                device="cpu", progress=False))
print("SUMMARY " + json.dumps(summary))
"""


def kill_when_held(child: subprocess.Popen, hold_file: Path, ready: Callable[[], bool], timeout: float = 600) -> None:
    """SIGKILL ``child`` once it waits at its hold point (``hold_file`` exists) and ``ready()`` holds (what the
    test needs done before the kill, e.g. the first shard committed by the writer thread). The waiting is polling a
    state that no longer changes once reached, so it needs no timing: ``timeout`` only stops a test whose child
    died or hangs elsewhere."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while not (hold_file.exists() and ready()):
        if child.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"the child ended or hung before its hold point (exit {child.poll()}): "
                f"{child.stderr.read() if child.stderr else ''}"
            )
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def make_dataset(root: Path, n_images: int = 12, *, seed: int = 0, size: tuple[int, int] = (40, 28)) -> Path:
    """``n_images`` random RGB images; ``color`` has one sample per image, ``counting`` reuses the first
    half of the images (so images are shared across abilities), split train/test alternately."""
    rng = np.random.default_rng(seed)
    with DatasetWriter(root, {"source": "cache-test"}) as w:
        rels = []
        for _ in range(n_images):
            pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
            rels.append(w.add_image(Image.fromarray(pixels)))
        for i, rel in enumerate(rels):
            split = "train" if i % 2 == 0 else "test"
            w.add_sample(
                Sample(
                    f"c{i}", "color", rel, size[0], size[1], "What color?", "(1, 2, 3)", {"rgb": [1, 2, 3]}, split=split
                )
            )
        for i, rel in enumerate(rels[: n_images // 2]):
            w.add_sample(
                Sample(
                    f"n{i}",
                    "counting",
                    rel,
                    size[0],
                    size[1],
                    "How many?",
                    "3",
                    {"value": 3},
                    split="train" if i % 2 else "test",
                )
            )
    return root


def corrupt_image(root: Path, sample_id: str, ava: str = "color") -> Path:
    """Overwrite the image file of one sample with garbage; returns its path."""
    ds = Dataset(root)
    sample = next(s for s in ds.samples(ava) if s.id == sample_id)
    path = ds.image_path(sample)
    path.write_bytes(b"this is not a png")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_extract(
    data: Path, cache: Path, vfm: str, *, hold_after: int = 0, hold_file: Path | None = None, **env: str
) -> subprocess.Popen:
    """Run EXTRACT_SCRIPT in a child python (single-threaded) with extra environment variables; ``hold_after`` N:
    its forward pass N + 1 creates ``hold_file`` and waits there to be killed (see :func:`kill_when_held`)."""
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}, **env)
    cmd = [sys.executable, "-c", EXTRACT_SCRIPT, str(data), str(cache), vfm, str(hold_after), str(hold_file or "")]
    return subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


PAGE = 4096  # a tmpfs's size is whole pages


@contextlib.contextmanager
def small_filesystem(where: Path, nbytes: int) -> Iterator[Path]:
    """A tmpfs of ``nbytes`` (rounded up to a page) mounted at ``where`` for the block: a real filesystem that
    fills up (statvfs and ENOSPC from the kernel, nothing mocked). Needs root (CI runs as root); else skipped."""
    import pytest

    where.mkdir(parents=True, exist_ok=True)
    pages = -(-nbytes // PAGE) * PAGE
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={pages}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        pytest.skip(f"a small real filesystem needs `mount -t tmpfs` (root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
