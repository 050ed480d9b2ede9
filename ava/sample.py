"""One image-question pair with its structured ground truth: the record every layer passes along (abilities parse
and score it, the dataset format stores it, heads train on it). It lives below them all; the dataset format
(:mod:`ava.data.format`) reads and writes it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class Sample:
    """One image-question pair with its structured ground truth.

    ``truth`` by answer kind: option ``{"index": i, "text": s}``; integer ``{"value": n}``;
    depth_bin ``{"index": i, "bin": [lo, hi]}``; box ``{"box": [x1, y1, x2, y2]}`` (normalized 0..1);
    rgb ``{"rgb": [r, g, b]}`` (0..255); text ``{"text": s}``. ``options`` is the option list of a
    choice question (``None`` otherwise). ``meta`` carries everything else: source dataset, class,
    subgroup fields, extra release columns.
    """

    id: str
    ava: str
    image: str  # path relative to DIR/images, "<sha[:2]>/<sha>.<ext>"
    width: int
    height: int
    question: str
    answer: str  # the reference answer as text, as the release's "gpt" turn gives it
    truth: dict[str, Any]
    options: list[str] | None = None
    split: str | None = None  # "train", "test" or None before splitting
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def image_sha256(self) -> str:
        # the stem of ``Path(self.image).name``, read without building a Path where that gives the same name (a
        # fingerprint asks this millions of times)
        name = self.image.rpartition("/")[2]
        if name in ("", ".") or os.sep != "/":
            name = Path(self.image).name
        return name.split(".")[0]

    @property
    def key(self) -> tuple[str, str]:
        return (self.ava, self.id)

    def to_json(self) -> str:
        # fields as they are (no deep copy as asdict makes: the fields hold JSON values only, so the text is the same)
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(**d)
