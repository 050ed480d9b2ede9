"""Strict JSON for report files: no NaN or Infinity tokens (which strict parsers reject), ever.

Every number a report leaves undefined is already ``null`` beside a ``reason``; :func:`clean` is the last
guard, turning any non-finite float that slipped through into ``null``, and :func:`dumps` then refuses (raises)
rather than write a non-standard token.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def clean(obj: Any) -> Any:
    """A copy of ``obj`` with numpy scalars as Python numbers, tuples as lists, non-finite floats as None."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return clean(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj: Any) -> str:
    """``obj`` as indented strict JSON (``allow_nan=False`` after :func:`clean`)."""
    return json.dumps(clean(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _reject(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


def loads_strict(text: str) -> Any:
    """Parse JSON and reject NaN / Infinity (what a strict parser does)."""
    return json.loads(text, parse_constant=_reject)
