"""Where a VFM's weights are on disk, and what identifies them.

A hub id is looked up in the Hugging Face cache first (``HF_HOME``); it is downloaded (safetensors and JSON
only) only when the hub is reachable and ``HF_HUB_OFFLINE`` is not set. A hub snapshot is identified by its
commit hash; any other local directory by the sha256 of its safetensors files.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ava.errors import AvaError

ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


@dataclass(frozen=True)
class Weights:
    path: Path
    hub_id: str | None  # None for a plain local directory
    identity: str  # "hub:<id>@<commit>" or "sha256:<hex of the safetensors files>"


def looks_like_path(source: str) -> bool:
    """Hub ids are "name" or "org/name"; anything else (absolute, ./, ~, a/b/c, an existing path) is a path."""
    return source.startswith(("/", ".", "~")) or source.count("/") > 1 or Path(source).exists()


def offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on") for v in ("HF_HUB_OFFLINE", "AVA_OFFLINE"))


def locate(
    source: str,
    revision: str | None = None,
    *,
    key: str = "",
    config_only: bool = False,
    code: bool = False,
    gated: bool = False,
    local_form: str | None = None,
) -> Weights:
    """The directory holding ``source``'s weights (a local directory, or the hub snapshot of a hub id).

    ``key``: the VFM name it was asked as, ``local_form``: the option that takes a local copy instead (``--miner
    clip@/path/to/dir``); a hub id that cannot be had says so with that form (default: ``--vfm KEY@/path/to/dir``
    and ``--vfm hf:/path/to/dir``).
    ``config_only``: just the JSON files (enough to resolve a spec); the weights are neither fetched nor hashed.
    ``code``: also the repository's Python files (only for ``--trust-remote-code``; otherwise never downloaded).
    """
    path = Path(source).expanduser()
    if path.is_dir():
        return Weights(path, None, "") if config_only else _local(path)
    if looks_like_path(source):
        raise AvaError(f"VFM weights directory {source} does not exist")
    patterns = ["*.json"] if config_only else ALLOW_PATTERNS
    return _hub(
        source,
        revision,
        key=key,
        patterns=[*patterns, "*.py"] if code else patterns,
        gated=gated,
        local_form=local_form,
    )


def _local(path: Path) -> Weights:
    commit = snapshot_commit(path)
    if commit is not None:
        return Weights(path, _hub_id_of_snapshot(path), f"hub:{_hub_id_of_snapshot(path)}@{commit}")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        bins = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt*"))
        extra = f" (found {', '.join(bins[:3])}: ava loads safetensors only; convert them)" if bins else ""
        raise AvaError(f"no *.safetensors weights in {path}{extra}")
    # The config is hashed with the weights: the same tensors under another config give other features.
    config = path / "config.json"
    return Weights(path, None, f"sha256:{hash_files(files + ([config] if config.is_file() else []))}")


def hash_files(files: list[Path]) -> str:
    """sha256 over (name, content) of each file, in order; remembered per (path, size, mtime) in this process."""
    stats = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _hash_files(stats)


@lru_cache(maxsize=32)
def _hash_files(stats: tuple[tuple[str, int, int], ...]) -> str:
    files = [Path(name) for name, _, _ in stats]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with file.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def snapshot_commit(path: Path) -> str | None:
    """The commit hash when ``path`` is a snapshot inside the Hugging Face cache (.../models--o--n/snapshots/<c>)."""
    path = path.resolve()
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.name
    return None


def _hub_id_of_snapshot(path: Path) -> str:
    return path.resolve().parent.parent.name.removeprefix("models--").replace("--", "/")


def _hub(
    hub_id: str,
    revision: str | None,
    *,
    key: str,
    patterns: list[str],
    gated: bool = False,
    local_form: str | None = None,
) -> Weights:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError

    need_weights = "*.safetensors" in patterns
    folder, why = None, "no copy in the Hugging Face cache"
    try:
        folder = snapshot_download(hub_id, revision=revision, allow_patterns=patterns, local_files_only=True)
    except Exception as e:  # not in the cache
        why = f"{why} ({type(e).__name__})"
    if folder is None or (need_weights and not list(Path(folder).glob("*.safetensors"))):
        if offline():
            raise _not_found(hub_id, key, f"offline mode (HF_HUB_OFFLINE) and {why}", gated, local_form)
        try:
            folder = snapshot_download(hub_id, revision=revision, allow_patterns=patterns)
        except GatedRepoError as e:
            raise _not_found(
                hub_id, key, "the repository is gated and this account has no access to it", True, local_form
            ) from e
        except Exception as e:
            raise _not_found(hub_id, key, f"{type(e).__name__}: {e}".splitlines()[0], gated, local_form) from e
    path = Path(folder)
    if need_weights and not list(path.glob("*.safetensors")):
        raise AvaError(f"{hub_id} has no *.safetensors weights (ava never loads pickled .bin files)")
    return Weights(path, hub_id, f"hub:{hub_id}@{snapshot_commit(path) or revision or 'unknown'}")


def _not_found(hub_id: str, key: str, why: str, gated: bool = False, local_form: str | None = None) -> AvaError:
    name = key.split("@")[0] if key and not key.startswith("hf:") and not any(c.isspace() for c in key) else None
    if local_form:
        point = f"'{local_form}'"
    else:
        point = (f"'--vfm {name}@/path/to/dir' or " if name else "") + "'--vfm hf:/path/to/dir'"
    access = (
        f" It is a gated repository: open https://huggingface.co/{hub_id} signed in, accept its licence and wait "
        f"for access, then log in here (hf auth login, or set HF_TOKEN) before downloading."
        if gated
        else ""
    )
    return AvaError(
        f"cannot load VFM weights {hub_id!r}: {why}.{access} Download it where the hub is reachable "
        f"(hf download {hub_id} --local-dir DIR) and point ava at the directory: {point}, "
        f"or set HF_HOME to a Hugging Face cache that holds it."
    )
