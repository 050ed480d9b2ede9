"""Samples in and out: the dataset format, import, split, export and info.

The public functions are importable from here; they load lazily so ``import ava.data.format``
(which every area does) pulls in nothing else.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "import_dataset": "ava.data.importers",
    "ImportReport": "ava.data.importers",
    "split_dataset": "ava.data.split",
    "assign_splits": "ava.data.split",
    "stratum": "ava.data.split",
    "export_dataset": "ava.data.export",
    "dataset_info": "ava.data.info",
    "normalize_image": "ava.data.images",
    "derive_truth": "ava.data.truth",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ava.data' has no attribute {name!r}")
