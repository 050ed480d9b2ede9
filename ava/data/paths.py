"""Paths that come from data, confined to the directory they are relative to.

A dataset, an import record or a caption list names files: a sample's ``image``, a LLaVA record's
``image``, a parquet row's ``image.path``, an ability's sample file. Such a name is data, not a choice the
user made, so before anything is read it is resolved (symlinks followed) and must

- be relative (an absolute path is refused, not joined),
- stay inside its root after resolution (no ``..``, no symlink that leads out),
- be a regular file (no device such as ``/dev/zero``, no FIFO, no directory),
- be at most ``max_bytes`` long (checked on the size before reading, and again while reading).

Every reader of a path taken from data goes through :func:`confined_file` or :func:`read_confined`; the
names of per-ability files go through :func:`safe_name`.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ava.errors import AvaError

MAX_IMAGE_BYTES = 256 * 2**20  # a 24000 x 24000 PNG stays below this; larger is no image a VFM needs
MAX_TEXT_BYTES = 4 * 2**30  # a sample list or an import JSON: the full release's are a few hundred MB
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class PathError(AvaError, ValueError):
    """A path taken from data that is absolute, leaves its root, is no regular file or is too large."""


def safe_name(name: str, *, what: str) -> str:
    """``name`` when it is one plain path component (letters, digits, ``_ . -``; no leading dot)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PathError(f"{what} {name!r} is not a plain name (letters, digits, '_', '.', '-'; no '/' or '..')")
    return name


def confined_file(root: str | os.PathLike[str], rel: str | os.PathLike[str], *, what: str = "file") -> Path:
    """The resolved path of ``rel`` inside ``root``; :class:`PathError` naming ``what`` when it is not safe."""
    text = os.fspath(rel)
    if not text or "\x00" in text:
        raise PathError(f"{what} path {text!r} is empty or contains a NUL byte")
    if Path(text).is_absolute() or text.startswith("\\") or re.match(r"[A-Za-z]:[\\/]", text):
        raise PathError(f"{what} path {text!r} is absolute; paths in data must be relative to {root}")
    base = Path(root).resolve()
    try:
        path = (base / text).resolve(strict=True)
    except FileNotFoundError as e:
        raise PathError(f"{what} {Path(root) / text} cannot be read (it does not exist)") from e
    except (OSError, RuntimeError) as e:  # a symlink loop, a component that is a file, no permission
        raise PathError(f"{what} {Path(root) / text} cannot be read ({e})") from e
    if not path.is_relative_to(base):
        raise PathError(f"{what} path {text!r} leads outside {root} (to {path}); refused")
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        raise PathError(f"{what} {Path(root) / text} is not a regular file; refused")
    return path


def read_confined(
    root: str | os.PathLike[str], rel: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_IMAGE_BYTES
) -> bytes:
    """The bytes of ``rel`` inside ``root`` (see :func:`confined_file`), refusing files over ``max_bytes``."""
    path = confined_file(root, rel, what=what)
    check_size(path, max_bytes, what=what)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise PathError(f"{what} {path} cannot be read ({e.strerror or e})") from e
    if len(data) > max_bytes:  # it grew after the size check
        raise PathError(f"{what} {path} is larger than {max_bytes} bytes; refused")
    return data


def check_size(path: Path, max_bytes: int, *, what: str = "file") -> None:
    """:class:`PathError` when ``path`` is larger than ``max_bytes``."""
    size = path.stat().st_size
    if size > max_bytes:
        raise PathError(f"{what} {path} is {size} bytes, over the limit of {max_bytes}; refused")


def confined_dest(root: str | os.PathLike[str], rel: str) -> Path:
    """Where to write ``rel`` under ``root`` (which exists): a name from data must not lead out of it."""
    base = Path(root).resolve()
    path = base / rel
    if "\x00" in rel or Path(rel).is_absolute() or not path.resolve().is_relative_to(base):
        raise PathError(f"output name {rel!r} leads outside {root}; refused")
    return path
