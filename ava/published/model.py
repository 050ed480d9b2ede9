"""What a published results source is, in memory: the paper's table and a results folder read the same way.

A source has columns (one per ability: metric, direction, and the scale its values were published in), entries
(one per VFM and head: a value per ability, in ava's units, with what was printed, the printed rank, n and an
interval where the source has them), flags (cells the source itself gets wrong, each with a one-line reason and what
it rules out) and the identity of the data it was scored on, which decides what a user's run may be compared with.

Units: ava's results store accuracy and ANLS as fractions; a source may print them in % (the paper does). Each
column's ``scale`` says how: printed = value x scale. Conversions go through :class:`decimal.Decimal`, so 97.38%
becomes 0.9738 exactly as a decimal, never 0.9738000000000001.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from ava.errors import AvaError

# What a flag rules out of every recomputed rank: the printed value itself, or only the printed rank (or average).
EXCLUDES = ("value", "printed_rank", "printed_average_rank")
AVERAGE_RANK = "average_rank"  # the pseudo-ability a flag on a printed average rank names

# The range each metric's value may take in ava's units; a value outside it is a wrong unit or a wrong file.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0),
    "anls": (0.0, 1.0),
    "giou": (-1.0, 1.0),
    "mae_gt": (0.0, math.inf),
    "ciede2000": (0.0, math.inf),
}


class PublishedError(AvaError):
    """A published source that cannot be read as given: malformed, truncated, inconsistent or tampered with."""


@dataclass(frozen=True)
class Column:
    """One ability of a source: its metric and direction, and how its values were published."""

    ability: str
    metric: str
    higher_is_better: bool
    scale: int = 1  # printed value = ava value x scale (100: accuracy and ANLS printed in %)
    printed_as: str = ""  # the unit as printed, in words
    title: str = ""  # the column's heading in the source

    def to_ava(self, printed: float) -> float:
        """A printed value in ava's units (exact decimal arithmetic, then the nearest float)."""
        return float(Decimal(repr(printed)) / self.scale) if self.scale != 1 else float(printed)

    def to_printed(self, value: float) -> float:
        """A value in ava's units on the source's printed scale."""
        return value * self.scale


@dataclass(frozen=True)
class Flag:
    """Cells of a source that are not self-consistent as published, what that rules out, and why (one line)."""

    id: str
    kind: str  # value_contradicts_rank, tie_ranked_apart, average_rank_not_mean
    excludes: str  # one of EXCLUDES
    cells: tuple[tuple[str, str], ...]  # (vfm, ability or "average_rank")
    reason: str


@dataclass
class Cell:
    """One published value. ``value`` is in ava's units, ``printed`` as published; None where it was not."""

    value: float | None
    printed: float | None = None
    rank: float | None = None  # the rank as printed (a source that prints ranks)
    n: int | None = None
    n_unparsed: int | None = None
    interval: tuple[float, float] | None = None  # 95% interval in ava's units, where the source gives one
    sample_set: str | None = None  # hash of the scored samples (a results folder)


@dataclass
class Entry:
    """One VFM under one head in a source."""

    vfm: str  # the VFM's registry key (the name its runs carried, for a VFM ava does not know)
    name: str  # as the source names it ("SigLIP-2")
    head: str  # the head's registry name ("llm", "knn" ...)
    head_id: str  # the head's stable id ("llm:qwen2-0.5b:generate")
    head_label: str
    cells: dict[str, Cell]
    average_rank: float | None = None  # as printed (the paper's)
    random_weights: bool = False
    synthetic: bool = False
    split: dict[str, Any] = field(default_factory=dict)
    data_identity: dict[str, str] = field(default_factory=dict)  # ability -> digest of its sample records
    details: dict[str, Any] = field(default_factory=dict)  # checkpoint, run identity, config, versions ...


@dataclass
class Source:
    """A published results source (see the module docstring)."""

    kind: str  # "paper" (built into ava) or "folder" (a results folder, `ava results export`)
    location: str  # "built-in" or the folder's path or URL
    title: str
    provenance: dict[str, Any]
    columns: dict[str, Column]  # ability -> column, in the source's order
    entries: list[Entry]
    flags: list[Flag] = field(default_factory=list)
    remarks: list[dict[str, str]] = field(default_factory=list)
    split_public: bool = True  # whether the samples it was scored on can be had (the paper's test split cannot)
    split_text: str = ""

    def heads(self) -> list[str]:
        return list(dict.fromkeys(e.head_id for e in self.entries))

    def flag(self, vfm: str, ability: str) -> Flag | None:
        """The flag on one cell (``ability`` may be ``"average_rank"``), or None."""
        return next((f for f in self.flags if (vfm, ability) in f.cells), None)

    def excluded(self, vfm: str, ability: str) -> Flag | None:
        """The flag that rules a cell's value out of every recomputed rank, or None."""
        f = self.flag(vfm, ability)
        return f if f is not None and f.excludes == "value" else None

    def to_dict(self) -> dict[str, Any]:
        """The source as plain JSON-able data (report.json's ``published[].source``)."""
        return {
            "kind": self.kind,
            "location": self.location,
            "title": self.title,
            "provenance": self.provenance,
            "split": self.split_text,
            "split_public": self.split_public,
            "columns": {k: asdict(c) for k, c in self.columns.items()},
            "entries": [
                {
                    **{k: v for k, v in asdict(e).items() if k != "cells"},
                    "cells": {a: asdict(c) for a, c in e.cells.items()},
                }
                for e in self.entries
            ],
            "flags": [{**asdict(f), "cells": [list(c) for c in f.cells]} for f in self.flags],
            "remarks": self.remarks,
        }


def check_value(where: str, metric: str, value: Any) -> float | None:
    """``value`` as a float in ava's units: a finite number within the metric's range, or None (not published).
    Anything else (a string, a boolean, NaN, a percentage where a fraction belongs) is an error naming ``where``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PublishedError(f"{where}: value must be a finite number or null, not {value!r}")
    lo, hi = METRIC_RANGES.get(metric, (-math.inf, math.inf))
    if not lo <= value <= hi:
        raise PublishedError(
            f"{where}: value {value!r} is outside {metric}'s range [{lo:g}, {hi:g}] in ava's units "
            "(accuracy and ANLS are fractions, not %)"
        )
    return float(value)
