"""Small datasets and helpers for the feature-cache tests (random images, two abilities sharing images)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from ava.data.format import Dataset, DatasetWriter, Sample

REPO = Path(__file__).resolve().parent.parent

# A child process that extracts with a given config; argv: data cache vfm delay-seconds-per-batch.
EXTRACT_SCRIPT = """
import json, sys, time
import torch
torch.set_num_threads(1)
from ava.cache import ExtractConfig, extract, extraction
delay = float(sys.argv[4])
if delay:
    real = extraction._forward
    def slow(*args, **kwargs):
        time.sleep(delay)
        return real(*args, **kwargs)
    extraction._forward = slow
summary = extract(ExtractConfig(vfm=sys.argv[3], data=sys.argv[1], cache=sys.argv[2], batch_size=2, shard_size=4,
                                device="cpu", progress=False))
print("SUMMARY " + json.dumps(summary))
"""


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


def start_extract(data: Path, cache: Path, vfm: str, *, delay: float = 0.0, **env: str) -> subprocess.Popen:
    """Run EXTRACT_SCRIPT in a child python (single-threaded) with extra environment variables."""
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}, **env)
    cmd = [sys.executable, "-c", EXTRACT_SCRIPT, str(data), str(cache), vfm, str(delay)]
    return subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
