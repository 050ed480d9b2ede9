"""Reading a model's free-text reply into the structured value its metric scores.

One set of rules reads both the release's reference answers (``ava.data.truth``) and model replies, so
the truth and a prediction are never read differently. The rules, per answer kind:

- **option** -> 0-based index into the question's options. Accepted: the option text (case and
  punctuation ignored), its number or letter (``"3"``, ``"C"``, ``"(b)"``, ``"Option 2"``), a label with
  its text (``"3. left"``, ``"C. Right above"``), an answer phrase (``"the answer is (b)"``), and a sentence
  that names one option as a whole phrase (``"it faces front right"``; the longest option named wins, so
  ``"front right"`` beats ``"front"``). A number always means a 1-based option number, a letter A, B, ...
  When a label and a text disagree, or two different options are named equally, the reply is unparsed:
  a reply is never guessed. A negated reply (``"not red"``, ``"it is not the left one"``, ``"isn't B"``)
  asserts no option and is unparsed (a negation inside an option's own text does not count). The release's
  spatial scorer tested substrings in the wrong direction and marked ``"Left below"`` right for ``"Left above"``;
  here ``"left below"`` only ever matches itself.
- **integer** -> int. Digits or number words up to ninety-nine (``"seven"``, ``"twenty-one"``). A
  decimal (``"2.5"``) stays one number (the release split it into 2 and 5) and is returned as a float,
  scored as given. Several different numbers without an answer phrase are unparsed, and so are a negative
  and a negated count (``"not 5"``).
- **depth_bin** -> metres (float). A bin (``"2-3"``, ``"2 - 3 m"``, ``"between 2 and 3 meters"``) or an
  option letter gives the bin midpoint; a single distance (``"about 2.5 m"``, ``"250 cm"``, ``"three
  meters"``) gives that value. For letter-style questions a bare number is metres, not an option number.
  A negative distance (``"-5 m"``) is out of range and a negated one (``"not 2-3"``) asserts none: unparsed.
- **box** -> ``(x1, y1, x2, y2)`` normalized to 0..1, corners reordered so x1<=x2, y1<=y2. Four numbers in
  any brackets, or labelled (``x1=.., y1=..``, ``xmin``.., ``left/top/right/bottom``), signs kept (``-0.05``).
  ``box_format`` says how they are read (:data:`BOX_FORMATS`); by default (``auto``) if any value is beyond 2
  in magnitude the box is in pixels and is divided by ``image_size=(width, height)`` (unparsed without it).
  A normalized coordinate outside :data:`BOX_RANGE` (-1..2) is no box of the image: unparsed.
- **rgb** -> ``(r, g, b)`` ints 0..255: ``"(12, 200, 3)"``, ``"[12,200,3]"``, ``"12 200 3"``, ``"#0cc803"``,
  ``"rgb(12,200,3)"``, ``"R: 12, G: 200, B: 3"``; three fractions 0..1 written with a decimal point are scaled
  by 255. Signs are kept, and a value outside 0..255 (``"-251"``, ``"300"``) is unparsed. Colour names are
  not parsed.
- **text** -> the reply stripped of surrounding whitespace and one pair of enclosing quotes; nothing else
  is removed (ANLS lowercases and collapses whitespace itself). An empty reply is unparsed.
"""

from __future__ import annotations

import functools
import math
import numbers as _numbers
import re
from typing import Any

from ava.abilities.base import Ability, option_label
from ava.errors import AvaError
from ava.sample import Sample

# -- shared lexical helpers --------------------------------------------------------------------------------------

_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORD_NUMBER = re.compile(
    rf"\b(?:({'|'.join(_TENS)})(?:[\s-]+({'|'.join(_UNITS[1:10])}))?|({'|'.join(_UNITS)}|none))\b", re.I
)
# A non-negative number that is not part of a word ("x1") or of a longer number; a decimal stays whole.
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?(?![0-9])")
# The same with its sign: a minus (or U+2212) written against the digits and not against a preceding word or
# number is a sign ("-0.05", "[0.1,-0.05", "R: -251"); "2-3" and "2 - 3" stay a range of two positive numbers.
_SIGNED_NUMBER = re.compile(r"(?:(?<![\w.])[-\u2212](?=\d))?(?<![A-Za-z0-9_.])\d+(?:\.\d+)?(?![0-9])")
_SIGNED = r"(?:[-\u2212](?=\d))?\d+(?:\.\d+)?"
# A negated answer ("not red", "it isn't the left one") asserts no option; read on normalize_text's output.
_NEGATION = re.compile(r"\b(?:not|never|neither|nor|no|cannot)\b|\b\w+n t\b")
_ANSWER_PREFIX = re.compile(
    r"^(?:(?:the|my|final|correct|best|right)\s+)*(?:answer|option|choice)\s*(?:is\b|would be\b|:|-)?\s*:?\s*", re.I
)
# An answer phrase anywhere in a reply; a bare letter must be a capital ("answer is a dog" names no option), and the
# pronoun in "the answer I would give is ..." is not the letter I.
_ANSWER_PHRASE = re.compile(
    r"\b(?:answer|option|choice)\s*(?:is\b|would be\b)?\s*:?\s*"
    r"(?:\(([A-Za-z]|\d{1,3})\)|((?-i:(?!I\s+[a-z])[A-Z])|\d{1,3})(?=[\s.,;:)!]|$))",
    re.I,
)
_LABEL_ONLY = re.compile(r"^\(?([A-Za-z]|\d{1,3})\)?$")
_LABEL_TEXT = (
    re.compile(r"^\(([A-Za-z]|\d{1,3})\)\s*(.+)$", re.S),
    re.compile(r"^([A-Za-z]|\d{1,3})[.):,]\s+(.+)$", re.S),
)
_QUOTES = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb"}


def words_to_digits(text: str) -> str:
    """Number words to digits: ``"twenty-one birds"`` -> ``"21 birds"``, ``"seven"`` -> ``"7"``."""

    def repl(m: re.Match[str]) -> str:
        if m.group(1):
            tens = (_TENS.index(m.group(1).lower()) + 2) * 10
            return str(tens + (_UNITS.index(m.group(2).lower()) if m.group(2) else 0))
        word = m.group(3).lower()
        return "0" if word == "none" else str(_UNITS.index(word))

    return _WORD_NUMBER.sub(repl, text)


def numbers(text: str, *, signed: bool = False) -> list[str]:
    """The numbers written in ``text`` as strings, decimals kept whole; with ``signed``, a leading minus kept
    (``"-0.05"``; the Unicode minus is written as ``-``)."""
    if not signed:
        return _NUMBER.findall(text)
    return [n.replace("\u2212", "-") for n in _SIGNED_NUMBER.findall(text)]


def negated(text: str, options: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether ``text`` negates, outside the words of any option (``"not red"``, ``"it is not the left one"``)."""
    norm = normalize_text(text)
    for option in sorted((normalize_text(o) for o in options), key=len, reverse=True):
        if option:
            norm = re.sub(rf"(?<!\w){re.escape(option)}(?!\w)", " ", norm)
    return bool(_NEGATION.search(norm))


@functools.lru_cache(maxsize=1 << 16)
def normalize_text(text: str) -> str:
    """Lowercase, punctuation to spaces, whitespace collapsed: how option texts are compared.

    Kept for the last 65,536 texts: every reply to a choice question normalizes each of its options, and a model
    selection scores hundreds of thousands of replies to the same few option lists."""
    return " ".join(re.sub(r"[^\w\s]|_", " ", text.lower()).split())


def _clean(reply: str) -> str:
    """The reply without markdown emphasis, enclosing quotes, an answer prefix and final punctuation."""
    text = reply.strip().replace("**", "").replace("__", "").strip()
    text = _strip_quotes(text)
    for _ in range(2):  # "Answer: the answer is C"
        text = _ANSWER_PREFIX.sub("", text, count=1).strip()
    return _strip_quotes(text.rstrip(" \t\n.!;,")).strip()


def _strip_quotes(text: str) -> str:
    if len(text) >= 2 and _QUOTES.get(text[0]) == text[-1]:
        return text[1:-1].strip()
    return text


# -- options -----------------------------------------------------------------------------------------------------


def extract_options(question: str) -> tuple[list[str], str] | None:
    """The options listed in a question and their label style, or None when it lists fewer than two.

    ``"... Choose one: 1. front, 2. front right."`` -> ``(["front", "front right"], "number")``;
    ``"... Select: A. 1-2, B. 2-3."`` -> ``(["1-2", "2-3"], "letter")``. Labels must run in order (1, 2, 3 or
    A, B, C), which keeps a stray "1." elsewhere in the question from being read as an option.
    """
    best: tuple[list[str], str] | None = None
    for style in ("number", "letter"):
        found = _longest_option_run(question, style)
        if found and len(found) >= 2 and (best is None or len(found) > len(best[0])):
            best = (found, style)
    return best


def _label_positions(question: str, label: str) -> list[re.Match[str]]:
    return list(re.finditer(rf"(?:(?<=[\s:(\[])|^){re.escape(label)}[.)]\s+", question))


def _longest_option_run(question: str, style: str) -> list[str] | None:
    best: list[str] | None = None
    for first in _label_positions(question, option_label(0, style)):  # type: ignore[arg-type]
        marks = [first]
        while len(marks) < 200:
            label = option_label(len(marks), style)  # type: ignore[arg-type]
            if style == "letter" and len(marks) >= 26:
                break
            nxt = next((m for m in _label_positions(question, label) if m.start() >= marks[-1].end()), None)
            if nxt is None:
                break
            marks.append(nxt)
        if len(marks) < 2:
            continue
        pairs = zip(marks, marks[1:], strict=False)
        opts = [question[a.end() : b.start()].strip().rstrip(",;.").strip() for a, b in pairs]
        last = question[marks[-1].end() :].split("\n")[0].strip()
        opts.append(re.sub(r"[.?!]+$", "", last).strip())
        if all(opts) and (best is None or len(opts) >= len(best)):  # on a tie, the later (tighter) run
            best = opts
    return best


def _label_index(label: str, n: int) -> int | None:
    """A 1-based number or a letter as a 0-based option index, when in range."""
    index = int(label) - 1 if label.isdigit() else ord(label.upper()) - ord("A")
    return index if 0 <= index < n else None


def _text_index(text: str, options: list[str]) -> int | None:
    """The option a text names: exact (normalized) first, else the longest option named as a whole phrase."""
    norm = normalize_text(text)
    if not norm:
        return None
    normed = [normalize_text(o) for o in options]
    exact = {i for i, o in enumerate(normed) if o == norm}
    if exact:
        return exact.pop() if len(exact) == 1 else None
    spans: dict[str, list[tuple[int, int]]] = {}
    owners: dict[str, set[int]] = {}
    for i, o in enumerate(normed):
        hits = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(o)}(?!\w)", norm)] if o else []
        if hits:
            spans[o] = hits
            owners.setdefault(o, set()).add(i)
    if not spans:
        return None
    longest = max(spans, key=len)
    if sum(len(o) == len(longest) for o in spans) > 1 or len(owners[longest]) > 1:
        return None
    # Shorter options may only occur inside the chosen one ("front" inside "front right"), else it is ambiguous.
    inside = all(
        any(a <= s and e <= b for a, b in spans[longest]) for o, hits in spans.items() if o != longest for s, e in hits
    )
    return next(iter(owners[longest])) if inside else None


def _label_and_text(text: str, options: list[str]) -> tuple[bool, int | None]:
    """``(matched, index)`` for a reply that starts with a label: ``"3"``, ``"(b)"``, ``"C. Right above"``."""
    m = _LABEL_ONLY.match(text)
    if m:
        return True, _label_index(m.group(1), len(options))
    for pattern in _LABEL_TEXT:
        m = pattern.match(text)
        if m:
            by_label = _label_index(m.group(1), len(options))
            by_text = _text_index(m.group(2), options)
            if by_label is None or by_text is None:
                return True, by_label if by_text is None else by_text
            return True, by_label if by_label == by_text else None
    return False, None


FOCI_RULE = "foci"  # a sample's meta["reply_rule"]: its reply is read by FOCI's rule (:func:`parse_foci_letter`)
_FOCI_LETTER = re.compile(r"\s*[(\[]?([A-Z])(?![A-Za-z])")


def parse_foci_letter(reply: str, n_options: int) -> int | None:
    """FOCI's reply rule: a reply is the option whose letter it begins with (``"B"``, ``"B."``, ``"(B)"``,
    ``"B is the answer"``: option B), after leading spaces and one opening bracket; a capital letter followed by
    another letter begins a word (``"Bird"``), not a choice. None when it begins with no option's letter."""
    m = _FOCI_LETTER.match(reply)
    if m is None:
        return None
    index = ord(m.group(1)) - ord("A")
    return index if index < n_options else None


def _parse_option(reply: str, options: list[str]) -> int | None:
    text = _clean(reply)
    if not text:
        return None
    norm = normalize_text(text)
    exact = [i for i, o in enumerate(options) if normalize_text(o) == norm]
    if len(exact) == 1:
        return exact[0]
    if negated(text, options):
        return None
    matched, index = _label_and_text(text, options)
    if matched:
        return index
    labels = (_label_index(a or b, len(options)) for a, b in _ANSWER_PHRASE.findall(reply))
    phrases = {i for i in labels if i is not None}
    if len(phrases) == 1:
        return phrases.pop()
    if len(phrases) > 1:
        return None
    return _text_index(text, options)


# -- integers and depth ------------------------------------------------------------------------------------------


def _as_number(s: str) -> int | float:
    value = float(s)
    return int(value) if value.is_integer() and "." not in s else value


def _parse_integer(reply: str) -> int | float | None:
    text = words_to_digits(_clean(reply))
    if re.search(r"(?:^|\s)[-\u2212]\s*\d", text) or negated(text):  # a negative or a negated count is no count
        return None
    found = {_as_number(s) for s in numbers(text)}
    if len(found) == 1:
        return found.pop()
    if len(found) > 1:
        phrase = re.search(r"\b(?:answer|total)\b[^0-9]{0,20}?(\d+(?:\.\d+)?)(?![0-9])", text, re.I)
        return _as_number(phrase.group(1)) if phrase else None
    return None


_BIN = re.compile(
    r"(?:between\s+)?(?<![A-Za-z0-9_.])(\d+(?:\.\d+)?)\s*(?:m\b|meters?|metres?)?\s*(?:-|–|—|to|and)\s*"
    r"(\d+(?:\.\d+)?)(?![0-9])",
    re.I,
)
_DISTANCE = re.compile(r"(?<![\w.])((?:[-\u2212](?=\d))?\d+(?:\.\d+)?)\s*(cm|centimet(?:er|re)s?)?(?![0-9])", re.I)


def parse_bin(text: str) -> tuple[float, float] | None:
    """The one depth bin written in ``text``: ``"2-3"`` / ``"2 - 3 m"`` / ``"between 2 and 3 meters"`` ->
    ``(2.0, 3.0)``; None when it names no bin or several different ones."""
    bins = {(float(a), float(b)) for a, b in _BIN.findall(words_to_digits(text))}
    return bins.pop() if len(bins) == 1 else None


def bin_midpoint(text: str) -> float | None:
    """The midpoint of the depth bin :func:`parse_bin` reads in ``text``, or None."""
    found = parse_bin(text)
    return None if found is None else (found[0] + found[1]) / 2


def _parse_depth(ability: Ability, reply: str, options: list[str] | None) -> float | None:
    text = _clean(reply)
    if not text or negated(text, options or ()):
        return None
    label = re.match(r"^\(?([A-Za-z])\)?(?:[.):,]\s*(.*))?$", text, re.S)
    if ability.option_style == "number":
        label = re.match(r"^\(?(\d{1,2}|[A-Za-z])\)?(?:[.):,]\s+(.*))?$", text, re.S) or label
    if label and options:
        index = _label_index(label.group(1), len(options))
        by_label = bin_midpoint(options[index]) if index is not None else None
        by_text = bin_midpoint(label.group(2)) if label.group(2) else None
        if by_label is not None and by_text is not None and by_label != by_text:
            return None
        if by_label is not None or by_text is not None:
            return by_label if by_label is not None else by_text
    mid = bin_midpoint(text)
    phrases = {a or b for a, b in _ANSWER_PHRASE.findall(reply) if (a or b).isalpha()}
    if len(phrases) == 1 and options:
        index = _label_index(phrases.pop(), len(options))
        by_phrase = bin_midpoint(options[index]) if index is not None else None
        if by_phrase is not None:
            return by_phrase if mid is None or mid == by_phrase else None  # "3-4 m, option B" is ambiguous
    if mid is not None:
        return mid
    return _single_distance(words_to_digits(text))


def _single_distance(text: str) -> float | None:
    """One distance in metres; a negative one is out of range (a distance from the camera), so unparsed."""
    values = {float(v.replace("\u2212", "-")) / (100.0 if unit else 1.0) for v, unit in _DISTANCE.findall(text)}
    if len(values) != 1:
        return None
    value = values.pop()
    return value if value >= 0.0 else None


# -- boxes and colours -------------------------------------------------------------------------------------------

_BOX_KEYS = (("x1", "y1", "x2", "y2"), ("xmin", "ymin", "xmax", "ymax"), ("left", "top", "right", "bottom"))
# How a reply's four box numbers are read (``ava score --box-format``): "normalized" (0..1 as given), "pixels"
# (divided by the image's width and height), "1000" (a 0..1000 grid, as Qwen-VL writes ``<box>[193,315,630,576]``),
# or "auto": pixels when any value is beyond 2 in magnitude, else normalized.
BOX_FORMATS = ("auto", "normalized", "pixels", "1000")
# A normalized coordinate outside this range is no box of the image (off by more than one image size): unparsed.
BOX_RANGE = (-1.0, 2.0)

Box = tuple[float, float, float, float]


def parse_box(
    reply: str, image_size: tuple[int, int] | None = None, box_format: str = "auto", *, bounded: bool = True
) -> tuple[Box, str] | None:
    """``(box normalized to 0..1 with ordered corners, the rule that read it)`` or None; see :data:`BOX_FORMATS`.

    ``bounded=False`` skips the :data:`BOX_RANGE` check (for callers that report an outside box themselves).
    """
    if box_format not in BOX_FORMATS:
        raise AvaError(f"unknown box format {box_format!r}: choose one of {', '.join(BOX_FORMATS)}")
    values = _labelled_box(reply)
    if values is None:
        found = numbers(reply, signed=True)
        if len(found) != 4:
            return None
        values = [float(v) for v in found]
    rule = box_format
    if rule == "auto":  # "1.02", a normalized box that overshoots a little, stays normalized
        rule = "pixels" if any(abs(v) > 2.0 for v in values) else "normalized"
    if rule == "pixels":
        if image_size is None:
            return None
        w, h = image_size
        values = [values[0] / w, values[1] / h, values[2] / w, values[3] / h]
    elif rule == "1000":
        values = [v / 1000.0 for v in values]
    if bounded and not all(BOX_RANGE[0] <= v <= BOX_RANGE[1] for v in values):
        return None
    x1, y1, x2, y2 = values
    return (min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)), rule


_BOX_LABELS = tuple(tuple(re.compile(rf"\b{key}\s*[=:]\s*({_SIGNED})", re.I) for key in keys) for keys in _BOX_KEYS)


def _labelled_box(reply: str) -> list[float] | None:
    """``x1=.. y1=.. x2=.. y2=..`` (or xmin/ymin/xmax/ymax, left/top/right/bottom; ``:`` for ``=``), in that order.

    Every label is followed by ``=`` or ``:``, so a reply with neither has none (a fingerprint's heads reply
    ``[x1, y1, x2, y2]``: scoring one kNN pass over localization's held-out rows parsed ~250K of them)."""
    if "=" not in reply and ":" not in reply:
        return None
    for patterns in _BOX_LABELS:
        got = []
        for pattern in patterns:
            m = pattern.search(reply)
            if not m:
                break
            got.append(float(m.group(1).replace("\u2212", "-")))
        else:
            return got
    return None


_HEX_COLOUR = re.compile(r"(?:#|\b0x)([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b")
_RGB_LABELS = tuple(
    re.compile(rf"\b(?:{c}|{name})\s*[=:]\s*({_SIGNED})", re.I)
    for c, name in (("r", "red"), ("g", "green"), ("b", "blue"))
)


def _parse_rgb(reply: str) -> tuple[int, int, int] | None:
    hexes = set(_HEX_COLOUR.findall(reply))
    if len(hexes) == 1:
        h = hexes.pop()
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))
    if hexes:
        return None
    # every label is followed by "=" or ":": a reply with neither has none (as the box labels)
    labelled = [p.search(reply) for p in _RGB_LABELS] if "=" in reply or ":" in reply else [None]
    found = [m.group(1) for m in labelled if m] if all(labelled) else numbers(reply, signed=True)
    if len(found) != 3:
        return None
    values = [float(v.replace("\u2212", "-")) for v in found]
    if all(v <= 1.0 for v in values) and any("." in v for v in found):
        values = [v * 255.0 for v in values]
    if any(not 0.0 <= v <= 255.0 for v in values):  # "-251" is no sRGB value
        return None
    r, g, b = (int(math.floor(v + 0.5)) for v in values)
    return (r, g, b)


def _parse_text(reply: str) -> str | None:
    text = _strip_quotes(reply.strip())
    return text if text else None


# -- public API --------------------------------------------------------------------------------------------------


def sample_options(ability: Ability, options: list[str] | None) -> list[str] | None:
    """A question's options, else the ability's fixed options, else None: the list replies are read against."""
    if options:
        return list(options)
    return list(ability.fixed_options) or None


def parse_reply(
    ability: Ability,
    reply: str,
    *,
    options: list[str] | None = None,
    image_size: tuple[int, int] | None = None,
    box_format: str = "auto",
) -> Any | None:
    """The structured value of a reply (see the module docstring), or None when it cannot be read.

    ``options`` is the question's option list (the ability's fixed options when omitted); ``image_size`` is
    ``(width, height)``, used to normalize boxes given in pixels; ``box_format`` is one of :data:`BOX_FORMATS`.
    """
    if not isinstance(reply, str):
        return None
    kind = ability.answer_kind
    if kind == "option":
        opts = sample_options(ability, options)
        if not opts:
            raise AvaError(f"cannot parse a {ability.key} reply without the question's options")
        return _parse_option(reply, opts)
    if kind == "integer":
        return _parse_integer(reply)
    if kind == "depth_bin":
        return _parse_depth(ability, reply, sample_options(ability, options))
    if kind == "box":
        found = parse_box(reply, image_size, box_format)
        return None if found is None else found[0]
    if kind == "rgb":
        return _parse_rgb(reply)
    if kind == "text":
        return _parse_text(reply)
    raise AvaError(f"ability {ability.key!r} has an unknown answer kind {kind!r}")


def _fmt_coord(x: float) -> str:
    return f"{x:.3f}" if round(x, 3) == x else repr(float(x))


def format_reply(ability: Ability, value: Any, *, options: list[str] | None = None) -> str:
    """The canonical reply for a structured value, such that ``parse_reply`` reads back the same value.

    Heads that predict structured values (probes, kNN) turn them into replies with this, so every head is
    scored by the same parser. A depth value may be a bin index (int) or metres (float); metres at a bin's
    midpoint are written as that bin (``"2-3"``), other metres as ``"2.7 m"``.
    """
    kind = ability.answer_kind
    opts = sample_options(ability, options)
    if kind == "option":
        if not opts or not 0 <= int(value) < len(opts):
            raise AvaError(f"{ability.key}: option index {value!r} is outside the {len(opts or [])} options")
        return opts[int(value)]
    if kind == "integer":
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if kind == "depth_bin":
        return _format_depth(ability, value, opts)
    if kind == "box":
        return "[" + ", ".join(_fmt_coord(float(v)) for v in value) + "]"
    if kind == "rgb":
        r, g, b = (int(round(float(v))) for v in value)
        return f"({r}, {g}, {b})"
    return str(value)


def _format_depth(ability: Ability, value: Any, opts: list[str] | None) -> str:
    if isinstance(value, _numbers.Integral) and not isinstance(value, bool):  # numpy ints too
        value = int(value)
        if not opts or not 0 <= value < len(opts):
            raise AvaError(f"{ability.key}: bin index {value} is outside the {len(opts or [])} options")
        return opts[value]
    metres = float(value)
    for o in opts or []:
        if bin_midpoint(o) == metres:
            return o
    return f"{metres:g} m" if float(f"{metres:g}") == metres else f"{metres!r} m"


def truth_value(ability: Ability, sample: Sample) -> Any:
    """``sample.truth`` as the value ``parse_reply`` returns for the right reply."""
    truth = sample.truth or {}
    kind = ability.answer_kind
    try:
        if kind == "option":
            return int(truth["index"])
        if kind == "integer":
            return _as_number(str(truth["value"]))
        if kind == "depth_bin":
            lo, hi = truth["bin"]
            return (float(lo) + float(hi)) / 2
        if kind == "box":
            x1, y1, x2, y2 = (float(v) for v in truth["box"])
            return (min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))
        if kind == "rgb":
            r, g, b = (int(v) for v in truth["rgb"])
            return (r, g, b)
        return str(truth["text"])
    except (KeyError, TypeError, ValueError) as e:
        raise AvaError(f"sample {sample.ava}/{sample.id}: truth {truth!r} is not a valid {kind} truth ({e})") from e
