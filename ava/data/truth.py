"""Structured ground truth for a sample, derived from its ability, question and reference answer.

The release stores only text (a question and the "gpt" answer). Scoring, splitting and the probes
need the structured value: the option index, the count, the depth bin, the box, the colour. It is
derived here with the same reply parsers that score model replies (``ava.abilities.parsers``), so
the truth and a prediction are read by one set of rules. See ``Sample``'s docstring for the
``truth`` dict per answer kind.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from ava.abilities import Ability
from ava.abilities.subgroups import INDOOR_MAX_DEPTH
from ava.errors import AvaError

# Object names inside the paper's question templates, used as the sample's class where the answer is not.
_CLASS_PATTERNS = {
    "counting": re.compile(r"how many (.+?) are there", re.I),
    "rel_depth": re.compile(r"\bthe ([^,()]+?) \(highlighted by a red box\)", re.I),
    "abs_depth": re.compile(r"closest point of the (.+?) \(highlighted", re.I),
    "localization": re.compile(r"coordinates? for (?:the )?(.+?)\.?\s*$", re.I),
}
SOURCE_COLUMNS = ("source", "source_dataset", "dataset", "data_source")


class TruthError(AvaError, ValueError):
    """A reference answer that cannot be turned into a structured truth."""


@dataclass
class Truth:
    truth: dict[str, Any]
    options: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def derive_truth(ability: Ability, question: str, answer: str, *, image_size: tuple[int, int] | None = None) -> Truth:
    """The truth dict, option list and derived meta (``class``, ``scene_type``) of one sample.

    Raises :class:`TruthError` when the answer cannot be parsed (or names no listed option).
    """
    if not isinstance(answer, str) or not answer.strip():
        raise TruthError("empty answer")
    kind = ability.answer_kind
    if kind == "option":
        return _option_truth(ability, question, answer)
    if kind == "depth_bin":
        return _depth_truth(ability, question, answer)
    from ava.abilities.parsers import parse_box, parse_reply

    if kind == "box":  # unbounded, so a box outside the image is reported as such below
        found = parse_box(answer, image_size, bounded=False)
        value = None if found is None else found[0]
    else:
        value = parse_reply(ability, answer, image_size=image_size)
    if value is None:
        raise TruthError(f"cannot parse the {kind} answer {answer!r}")
    meta = _question_class(ability, question)
    if kind == "integer":
        if float(value) != int(value):
            raise TruthError(f"count answer {answer!r} is not a whole number")
        return Truth({"value": int(value)}, None, meta)
    if kind == "box":
        box = [float(v) for v in value]
        if not all(0.0 <= v <= 1.0 for v in box):
            raise TruthError(f"box answer {answer!r} is not inside the image (normalized {box})")
        return Truth({"box": box}, None, meta)
    if kind == "rgb":
        return Truth({"rgb": [int(v) for v in value]}, None, meta)
    return Truth({"text": str(value)}, None, meta)


@functools.lru_cache(maxsize=4096)
def _extract_options(question: str) -> tuple[str, ...] | None:
    """``extract_options`` cached: many abilities ask the very same question thousands of times."""
    from ava.abilities.parsers import extract_options

    found = extract_options(question)
    return tuple(found[0]) if found and found[0] else None


def _options(ability: Ability, question: str) -> list[str]:
    from ava.abilities.parsers import sample_options

    found = _extract_options(question)
    options = sample_options(ability, list(found) if found else None)
    if not options:
        raise TruthError("the question lists no options")
    return options


def _option_truth(ability: Ability, question: str, answer: str) -> Truth:
    from ava.abilities.parsers import parse_reply

    options = _options(ability, question)
    index = parse_reply(ability, answer, options=options)
    if index is None or not 0 <= int(index) < len(options):
        raise TruthError(f"answer {answer!r} names none of the {len(options)} options")
    text = options[int(index)]
    meta: dict[str, Any] = {}
    if ability.key == "rel_depth":
        meta.update(_question_class(ability, question))  # the answer (red/blue) is no class
    else:
        meta["class"] = text
    return Truth({"index": int(index), "text": text}, options, meta)


def _depth_truth(ability: Ability, question: str, answer: str) -> Truth:
    from ava.abilities.parsers import parse_bin, parse_reply

    options = _options(ability, question)
    bins = [parse_bin(o) for o in options]
    if any(b is None for b in bins):
        bad = next(o for o, b in zip(options, bins, strict=True) if b is None)
        raise TruthError(f"depth option {bad!r} is not a bin like '2-3'")
    metres = parse_reply(ability, answer, options=options)
    if metres is None:
        raise TruthError(f"cannot parse the depth answer {answer!r}")
    index = _bin_index(bins, float(metres))  # type: ignore[arg-type]
    if index is None:
        raise TruthError(f"depth answer {answer!r} ({metres} m) falls in none of the bins {options}")
    lo, hi = bins[index]  # type: ignore[misc]
    meta = _question_class(ability, question)
    meta["scene_type"] = "indoor" if all(b[1] <= INDOOR_MAX_DEPTH for b in bins) else "outdoor"  # type: ignore[index]
    return Truth({"index": index, "bin": [lo, hi]}, options, meta)


def _bin_index(bins: list[tuple[float, float]], metres: float) -> int | None:
    """The bin whose midpoint is ``metres`` (what the parser returns for a bin), else the one containing it."""
    for i, (lo, hi) in enumerate(bins):
        if abs((lo + hi) / 2 - metres) < 1e-6:
            return i
    for i, (lo, hi) in enumerate(bins):
        if lo <= metres < hi:
            return i
    return None


def _question_class(ability: Ability, question: str) -> dict[str, Any]:
    pattern = _CLASS_PATTERNS.get(ability.key)
    m = pattern.search(question) if pattern else None
    return {"class": m.group(1).strip()} if m else {}


def source_of(extra: dict[str, Any]) -> str | None:
    """The source dataset named by an extra release column, if any."""
    for col in SOURCE_COLUMNS:
        value = extra.get(col)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None
