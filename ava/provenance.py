"""What produced a result: package versions, git revision, machine. Recorded in every results file."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

import ava
from ava.threads import threads_in_use

_PACKAGES = (
    "torch",
    "transformers",
    "peft",
    "zarr",
    "numcodecs",
    "numpy",
    "faiss-cpu",
    "faiss-gpu",
    "colour-science",
    "rapidfuzz",
    "pillow",
)


def git_revision() -> str | None:
    """The git commit of the ava source tree, when it runs from a checkout."""
    root = Path(ava.__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True, timeout=5
    ).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def provenance() -> dict[str, Any]:
    return {
        "ava_version": ava.__version__,
        "git_revision": git_revision(),
        "packages": package_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": threads_in_use(),  # torch's intra-/inter-op threads (ava --threads), None without torch
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
