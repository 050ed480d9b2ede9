"""What ``torch.compile`` made for the LLM head's decoder layers, kept under ``$AVA_HOME/compile/`` and loaded by
later runs, so that only the first run of a setup pays the compilation.

Compiling the decoder layers (one graph, shared by all of them: they are the same code with other weights) cost
87.8 s of warm-up on an H200, once per process; a sweep pays it in every job, and a fresh machine (a SLURM node's
empty ``/tmp``, a lent GPU) in every run, because inductor's own caches live in ``/tmp``. PyTorch can package
everything its caches hold (``torch.compiler.save_cache_artifacts``: inductor's generated code and kernels, AOT
autograd's graphs, Triton's binaries) and preload it in another process (``load_cache_artifacts``); the compiled
code is then looked up instead of made.

The file is named by what the artifacts depend on: the torch version, the device (GPU name and compute capability),
the decoder layer (its class and configuration, LoRA included), the dtype and the attention path. The artifacts are
code that torch runs; ``$AVA_HOME`` is the user's own cache (as ``/tmp/torchinductor_<user>`` is inductor's), and
nothing is loaded from a dataset, cache or run directory. Where the installed torch has no such API, nothing is
saved or loaded (``"off"``).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import torch

from ava.home import ava_home


def available() -> bool:
    """Whether this torch can save and load compile artifacts (``torch.compiler``'s mega-cache, torch >= 2.7)."""
    compiler = getattr(torch, "compiler", None)
    return hasattr(compiler, "save_cache_artifacts") and hasattr(compiler, "load_cache_artifacts")


def artifacts_path(head: Any, device: torch.device, dtype: torch.dtype, attention: str) -> Path:
    """Where this setup's artifacts live: ``$AVA_HOME/compile/<torch>-<hash>.bin``."""
    layer = head.base.get_decoder().layers[0]
    if device.type == "cuda":
        where = f"{torch.cuda.get_device_name(device)} sm{''.join(map(str, torch.cuda.get_device_capability(device)))}"
    else:
        where = device.type
    what = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": where,
        "dtype": str(dtype),
        "attention": attention,
        "layer": type(layer).__name__,
        "module": repr(layer),
        "config": head.base.config.to_json_string(use_diff=False),
    }
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    return ava_home() / "compile" / f"{torch.__version__.replace('+', '_')}-{digest}.bin"


def load(path: Path) -> str:
    """Preload the artifacts at ``path``: ``"loaded"``, ``"none"`` (no file yet), ``"off"`` (this torch cannot), or
    ``"unreadable"`` (a file this torch refuses: compiled from scratch, and saved anew after)."""
    if not available():
        return "off"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "none"
    import logging

    quiet = logging.getLogger("torch.compiler._cache")  # it logs a refused file's traceback, then returns None
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        info = torch.compiler.load_cache_artifacts(data)
    except Exception:  # noqa: BLE001 - another torch's artifacts, a torn file: compiling from scratch is the fallback
        info = None
    finally:
        quiet.setLevel(level)
    return "loaded" if info is not None else "unreadable"


def save(path: Path) -> bool:
    """Write what this process compiled to ``path`` (atomically: a concurrent run reads the old file or the new)."""
    if not available():
        return False
    try:
        out = torch.compiler.save_cache_artifacts()
    except Exception:  # noqa: BLE001 - a cache that cannot be packaged only costs the next run its compilation
        return False
    if not out or not out[0]:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(out[0])
        os.replace(tmp, path)
    except OSError:  # a read-only or full $AVA_HOME: the run goes on, the next one compiles again
        tmp.unlink(missing_ok=True)
        return False
    return True
