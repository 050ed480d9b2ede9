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
from ava.abilities.subgroups import INDOOR_MAX_DEPTH, UNKNOWN
from ava.errors import AvaError

# How the paper's questions mark a boxed object (supplement, Appendix A, and the release's data): "(highlighted by
# a red box)", "(highlighted in red)", "(annotated by the red box)", "(red box)", "(marked in blue)", ...
_MARK = (
    r"\(\s*(?:(?:highlighted|annotated|marked|outlined|shown|indicated|enclosed|bounded|labell?ed|denoted)\s+"
    r"(?:by|in|with|using)\s+)?(?:an?\s+|the\s+)?{colour}(?:\s+(?:bounding\s+)?(?:box|rectangle|frame))?\s*\)"
)
_RED = _MARK.format(colour="red")  # the target: the object whose class a depth question is about
# An object name: no punctuation; a leading conjunction ("or the sofa") and the article dropped.
_OBJECT = r"(?:(?:or|and|to|from)\s+)?(?:the\s+|an?\s+)?([^,()?.:;]+?)"
# Object names inside the paper's question templates, used as the sample's class where the answer is not; tried
# in order, the first match wins. Each ability's list covers ava's own templates and the supplement's wordings.
_CLASS_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "counting": (
        re.compile(r"\bhow many\s+(.+?)\s+(?:are|is)\s+(?:there|in|visible|shown|present)\b", re.I),
        re.compile(r"\bhow many\s+(.+?)\s+(?:can|do)\s+(?:you|i|we)\b", re.I),
        re.compile(r"\bcount(?:\s+the\s+number\s+of)?\s+(?:the\s+)?(.+?)\s+(?:in|on|shown|visible)\b", re.I),
        re.compile(r"\bnumber of\s+(.+?)\s+(?:in|on|shown|visible)\b", re.I),
    ),
    "rel_depth": (
        re.compile(rf"\b{_OBJECT}\s*{_RED}", re.I),  # the red-marked object, wherever it stands
        re.compile(r"\bcloser to the camera,?\s+(?:the\s+)?([^,()?]+?)\s+or\s+", re.I),
    ),
    "abs_depth": (
        re.compile(rf"\b(?:closest|nearest)\s+(?:point|part|surface|region)\s+of\s+{_OBJECT}\s*{_RED}", re.I),
        re.compile(
            r"\b(?:closest|nearest)\s+(?:point|part|surface|region)\s+of\s+(?:the\s+)?([^,()?.]+?)"
            r"\s+(?:is|to|from|\()",
            re.I,
        ),
        re.compile(rf"\b{_OBJECT}\s*{_RED}", re.I),
    ),
    "localization": (
        re.compile(r"\bregion this sentence describes:\s*(.+?)\s*[.?]?\s*$", re.I),  # LLaVA's RefCOCO wording
        re.compile(r"\bcoordinates?\s+(?:for|of)\s+(?:the\s+|an?\s+)?(.+?)\s*[.?]?\s*$", re.I),
        re.compile(r"\b(?:locate|find|detect)\s+(?:the\s+|an?\s+)?(.+?)\s*(?:in the image)?\s*[.?]?\s*$", re.I),
    ),
}
# The abilities whose class is read from the question (the others' class is their answer).
QUESTION_CLASS_ABILITIES = tuple(_CLASS_PATTERNS)
SOURCE_COLUMNS = ("source", "source_dataset", "dataset", "data_source")
MAX_COUNT = 10_000  # the release's counts are 1..40; a larger reference count is a broken row
_EXPONENT = re.compile(r"\d\s*[eE]\s*[+-]?\d")


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
        if _EXPONENT.search(answer) or not 1 <= int(value) <= MAX_COUNT:  # "1e23" must not become 1 (or 10**23)
            raise TruthError(f"count answer {answer!r} is not a count in 1..{MAX_COUNT} (MAE/GT divides by it)")
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


def question_class(ability: Ability, question: str) -> str | None:
    """The object a question is about (its class), for the abilities whose answer is no class; None when the
    question names it in no known wording."""
    for pattern in _CLASS_PATTERNS.get(ability.key, ()):
        m = pattern.search(question)
        if m:
            name = " ".join(m.group(1).split()).strip(" \"'")
            if name and not re.fullmatch(r"(?:object|objects|one|it|this|that)", name, re.I):
                return name
    return None


def _question_class(ability: Ability, question: str) -> dict[str, Any]:
    """``{"class": ...}`` for the abilities whose class is in the question; :data:`UNKNOWN` when it cannot be read
    (kept, so it is counted and shown), ``{}`` for the others."""
    if ability.key not in _CLASS_PATTERNS:
        return {}
    return {"class": question_class(ability, question) or UNKNOWN}


def source_of(extra: dict[str, Any]) -> str | None:
    """The source dataset named by an extra release column, if any."""
    for col in SOURCE_COLUMNS:
        value = extra.get(col)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None
