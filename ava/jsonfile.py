"""Reading JSON a user can hand ava (a dataset's files, build sources, specs, predictions, run and cache metadata).

``json.loads`` raises :class:`RecursionError` on a text nested deeper than Python's parser goes (``[[[[...]]]]``
a few thousand levels deep): valid JSON that no ava file is, and a failure nothing would name. :func:`loads` and
:func:`read_json` refuse it in one line naming the file; every other outcome (a value, a
:class:`json.JSONDecodeError`, an OSError) is ``json``'s and the file system's own.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ava.errors import AvaError, too_deep


class JsonDepthError(AvaError, ValueError):
    """A JSON text nested too deeply to read (a ValueError too, as a decode error is, for callers that skip one)."""


def loads(text: str | bytes, where: object = None) -> Any:
    """``json.loads(text)``; a text nested too deeply is a :class:`JsonDepthError` naming ``where`` (the file, or
    the file and line; None: the caller names them)."""
    try:
        return json.loads(text)
    except RecursionError:
        at = f"{where}: " if where is not None else ""
        raise JsonDepthError(at + too_deep()) from None


def read_json(path: str | os.PathLike[str] | Any, encoding: str = "utf-8") -> Any:
    """The JSON value of the file at ``path`` (:func:`loads`): a local path, or any path object with ``read_text``
    (a cache's :class:`~ava.cache.location.RemotePath`)."""
    from pathlib import Path

    file = path if hasattr(path, "read_text") else Path(path)
    return loads(file.read_text(encoding=encoding), path)
