"""What every builder shares: the question it proposes, the summary of what rules kept and dropped, the context
(sources, seed, options), drawing, and answer balancing.

A builder proposes :class:`Question` objects whose image is rendered lazily, so a question that balancing drops
is never drawn or encoded.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from ava.abilities import get_ability
from ava.abilities.base import format_options
from ava.curate.sources import Attributes, ClassFolders, CocoSource, DepthSource, Word, load_rgb
from ava.data.choices import OptionSampler, random_options

RULE_VERSION = 5  # bumped whenever a rule changes what is kept or asked; recorded in dataset.json
RED = (255, 0, 0)  # target box (the paper's curation: red = target, blue = reference)
BLUE = (0, 0, 255)  # reference box
PAD = (124, 120, 111)  # square padding of localization / recognition images
# The paper's option counts for sampled option lists (docs/benchmark.md); None: every class.
PAPER_OPTIONS = {"recognition": 70, "fine_grained": 100, "scene": 30, "action": 100, "texture": None}


@dataclass
class Question:
    """One proposed sample; ``render`` draws its image only if the question is kept."""

    ava: str
    id: str
    question: str
    answer: str
    truth: dict[str, Any]
    options: list[str] | None
    meta: dict[str, Any]
    render: Callable[[], Image.Image]
    fine: str  # the split's stratum (class x answer bin); ``coarse`` is the fallback when it is too small
    coarse: str
    # Questions whose images are the same (the source image as is, or padded) share this key, so the image is
    # drawn and encoded once however many questions ask about it.
    image_key: tuple | None = None

    def __post_init__(self) -> None:
        if self.image_key is None:
            self.image_key = getattr(self.render, "image_key", None)


class Drop(str):
    """A rule's reason not to keep a record (what a judge returns instead of its verdict)."""


@dataclass
class Summary:
    """Per ability: questions considered and kept, and what was not kept per reason, with one example record
    each. A reason is a rule the record broke (``dropped``: the curation rules, ambiguity, answer balance) or a cap
    on how many records that passed every rule are taken (``capped``: ``--max-pairs`` per image,
    ``--max-per-task``)."""

    considered: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    dropped: Counter[tuple[str, str]] = field(default_factory=Counter)
    example: dict[tuple[str, str], str] = field(default_factory=dict)
    caps: set[tuple[str, str]] = field(default_factory=set)  # the (ability, reason) pairs that are caps

    def consider(self, ava: str, n: int = 1) -> None:
        self.considered[ava] += n

    def drop(self, ava: str, reason: str, record: str = "", n: int = 1) -> None:
        self.dropped[(ava, reason)] += n
        self.example.setdefault((ava, reason), record)

    def forget(self, ava: str) -> None:
        """Drop what was counted for ``ava`` (it is proposed again, from more records)."""
        self.considered.pop(ava, None)
        self.kept.pop(ava, None)
        for key in [k for k in self.dropped if k[0] == ava]:
            del self.dropped[key]
            self.example.pop(key, None)
            self.caps.discard(key)

    def cap(self, ava: str, reason: str, record: str = "", n: int = 1) -> None:
        """Count records that passed every rule but were not taken: a cap chose among them."""
        self.drop(ava, reason, record, n)
        self.caps.add((ava, reason))

    def rows(self) -> list[dict[str, Any]]:
        """One row per ability and reason (JSON-ready; the CLI prints it as a table): considered = kept + dropped
        + capped."""
        out = []
        for ava in sorted(set(self.considered) | set(self.kept)):
            reasons = {r: n for (a, r), n in sorted(self.dropped.items()) if a == ava}
            capped = sum(n for r, n in reasons.items() if (ava, r) in self.caps)
            out.append(
                {
                    "ability": ava,
                    "considered": self.considered[ava],
                    "kept": self.kept[ava],
                    "dropped": sum(reasons.values()) - capped,
                    "capped": capped,
                    "reasons": [
                        {
                            "reason": r,
                            "n": n,
                            "example": self.example[(ava, r)],
                            "kind": "cap" if (ava, r) in self.caps else "rule",
                        }
                        for r, n in reasons.items()
                    ],
                }
            )
        return out

    def line(self, ava: str) -> str:
        """What became of an ability's records, in one line ("spatial: 256 considered, 0 kept: ...")."""
        row = next((r for r in self.rows() if r["ability"] == ava), None)
        if row is None:
            return f"{ava}: nothing to consider"
        reasons = sorted(row["reasons"], key=lambda r: -r["n"])
        why = "; ".join(f"{r['reason']} ({r['n']}{', e.g. ' + r['example'] if r['example'] else ''})" for r in reasons)
        return f"{ava}: {row['considered']} considered, {row['kept']} kept" + (f": {why}" if why else "")


@dataclass
class Context:
    """The sources and settings one build reads."""

    seed: int = 0
    coco: CocoSource | None = None
    depth: DepthSource | None = None
    classes: dict[str, ClassFolders] = field(default_factory=dict)
    words: list[Word] | None = None
    attributes: Attributes | None = None
    options_k: int | None = None
    boxes: bool = True
    family: str = "object"
    max_pairs: int = 4
    max_per_task: int | None = None
    summary: Summary = field(default_factory=Summary)
    miner: Any = None  # a --miner that ranks classes per picture (ava.curate.mining.BuildMiner)
    workers: int = 1  # processes for per-image work that dominates proposal (colour's superpixels)
    scratch: Path | None = None  # a depth model's maps, removed when the build ends
    sampler: Callable[[str, int | None], OptionSampler] = field(default=lambda ava, k: random_options(k))
    pixels: dict[str, dict[Any, Any]] = field(default_factory=dict)  # rule -> image id -> ava.curate.pixels' result
    sample_sizes: dict[str, int] = field(default_factory=dict)  # per-image task -> images sampled, once topped up

    @cached_property  # read once the sources are in: by every question the builders propose
    def source_name(self) -> str:
        """What every sample's ``meta.source`` names: the COCO file's stem (``build`` without one)."""
        return self.coco.path.stem if self.coco else "build"

    def rng(self, *keys: object) -> np.random.Generator:
        """A generator seeded by the build's seed and ``keys`` (stable across runs and Python versions)."""
        digest = hashlib.sha256(repr((self.seed, *keys)).encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "little"))

    def options_for(
        self,
        ava: str,
        truth: str,
        classes: Sequence[str],
        key: object,
        image: tuple[str, Callable[[], Image.Image]] | None = None,
    ) -> list[str]:
        """Sampled options (the paper's count, or ``--options``), through the one :class:`OptionSampler` seam;
        ``image`` (a key and its picture) is what a ``--miner`` ranks the classes for."""
        k = self.options_k if self.options_k is not None else PAPER_OPTIONS.get(ava)
        k = None if k is None else min(k, len(classes))
        if image is not None and self.miner is not None:
            self.miner.images[image[0]] = image[1]
        return self.sampler(ava, k)(
            truth, classes, self.rng(ava, "options", key), image=None if image is None else image[0]
        )


def ask(ava: str, options: Sequence[str] | None = None, **fields: str) -> str:
    """The ability's question template filled in (options formatted as the paper writes them)."""
    return _ask(ava, None if options is None else tuple(options), tuple(sorted(fields.items())))


@lru_cache(maxsize=4096)  # a build asks the same few questions (yes/no about one class) thousands of times
def _ask(ava: str, options: tuple[str, ...] | None, fields: tuple[tuple[str, str], ...]) -> str:
    ability = get_ability(ava)
    values = dict(fields)
    if options is not None:
        values["options"] = format_options(list(options), ability.option_style)
    return with_articles(ability.question_templates[0], values).format(**values)


_ARTICLE = re.compile(r"\b([Aa]) \{(\w+)\}")


def with_articles(template: str, values: dict[str, str]) -> str:
    """``template`` with each "a {field}" given the article its value takes ("an oven", "a unicorn", "an hour"),
    chosen by inflect."""

    def article(m: re.Match[str]) -> str:
        word = _inflect().a(values[m.group(2)]).split(" ", 1)[0]
        return f"{word.capitalize() if m.group(1) == 'A' else word} {{{m.group(2)}}}"

    return _ARTICLE.sub(article, template)


@lru_cache(maxsize=1)
def _inflect() -> Any:
    """inflect's engine. inflect decorates 23 methods with typeguard's ``@typechecked``, which re-parses and
    recompiles each method's source when inflect is imported: 1.7-3.6 s of a build on a shared 2-core machine, 0.4 s
    without. Those checks only guard the argument types (ava passes strings), so inflect is imported with the
    decorator left out, and typeguard is put back as it was; where inflect is already imported it is used as is."""
    import sys

    if "inflect" not in sys.modules:
        import typeguard

        checked = typeguard.typechecked
        typeguard.typechecked = lambda target=None, **_: target if target is not None else (lambda f: f)  # type: ignore[assignment]
        try:
            import inflect
        finally:
            typeguard.typechecked = checked
    import inflect

    return inflect.engine()


def option_truth(options: Sequence[str], answer: str) -> dict[str, Any]:
    return {"index": list(options).index(answer), "text": answer}


def stable_hash(*keys: object) -> str:
    return hashlib.sha256(repr(keys).encode()).hexdigest()


# -- images ---------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def cached_image(path: Path) -> Image.Image:
    """Source images are read once per build even when many questions use them (questions come image by image)."""
    return load_rgb(path)


@lru_cache(maxsize=4)
def cached_padded(path: Path) -> tuple[Image.Image, tuple[int, int]]:
    """The source image padded to a square (not to be drawn on: copy it) and the paste offset."""
    return pad_square(cached_image(path))


def plain(path: Path) -> Callable[[], Image.Image]:
    """The source image as it is (its encoded bytes are shared by every question that shows it so)."""
    render = marked(path, ())
    render.source = path  # type: ignore[attr-defined]  # stored as its own bytes where they are a plain RGB file
    return render


def padded(path: Path) -> Callable[[], Image.Image]:
    """The source image padded to a square."""
    return marked(path, (), pad=True)


def box_width(size: int) -> int:
    return max(2, round(size / 128))


def draw_box(
    image: Image.Image,
    box: Sequence[float],
    color: tuple[int, int, int],
    picture: tuple[int, int, int, int] | None = None,
) -> None:
    """Outline ``box`` (x1, y1, x2, y2 px), grown by a margin so the outline does not cover the object and kept
    inside the picture. ``picture`` (x, y, width, height): where the picture ``box`` is about lies in ``image``
    (a square padding of it, as :func:`pad_square` makes), which is then drawn on exactly as the picture itself
    would be before it is padded."""
    _box_outline(image, box, color, picture, draw=True)


def _box_outline(
    image: Image.Image,
    box: Sequence[float],
    color: tuple[int, int, int],
    picture: tuple[int, int, int, int] | None,
    draw: bool,
) -> list[tuple[int, int, int, int]]:
    px, py, pw, ph = picture if picture is not None else (0, 0, image.width, image.height)
    w = box_width(max(pw, ph))
    m = w + 1
    x0, y0, x1, y1 = box
    drawn = [round(v) for v in (max(0, x0 - m), max(0, y0 - m), min(pw - 1, x1 + m), min(ph - 1, y1 + m))]
    a, b, c, d = drawn[0] + px, drawn[1] + py, drawn[2] + px, drawn[3] + py
    if draw:
        ImageDraw.Draw(image).rectangle([a, b, c, d], outline=color, width=w)
    # the outline is ``w`` px wide inside [a, c] x [b, d]; a pixel more each way, in case the rasteriser strays
    return [
        (a - 1, b - 1, c + 2, b + w + 1),
        (a - 1, d - w, c + 2, d + 2),
        (a - 1, b - 1, a + w + 1, d + 2),
        (c - w, b - 1, c + 2, d + 2),
    ]


def draw_point(
    image: Image.Image, xy: tuple[float, float], color: tuple[int, int, int], draw: bool = True
) -> list[tuple[int, int, int, int]]:
    """A ring around the point (the point itself stays visible); returns the square of ``image`` it lies in."""
    r = max(4, round(max(image.size) / 60))
    x, y = xy
    if draw:
        ImageDraw.Draw(image).ellipse([x - r, y - r, x + r, y + r], outline=color, width=max(2, r // 3))
    return [(math.floor(x - r) - 1, math.floor(y - r) - 1, math.ceil(x + r) + 2, math.ceil(y + r) + 2)]


# ("box", (x1, y1, x2, y2), colour), ("point", (x, y), colour) or ("frame", (), colour): a box around the whole picture
Mark = tuple[str, tuple[float, ...], tuple[int, int, int]]


def box_mark(box: Sequence[float], color: tuple[int, int, int]) -> Mark:
    return ("box", tuple(map(float, box)), color)


def point_mark(xy: Sequence[float], color: tuple[int, int, int]) -> Mark:
    return ("point", tuple(map(float, xy)), color)


def _draw_mark(
    image: Image.Image, mark: Mark, picture: tuple[int, int, int, int] | None, draw: bool = True
) -> list[tuple[int, int, int, int]]:
    """Draw ``mark`` on ``image`` (``picture`` as for :func:`draw_box`) where ``draw``; the strips it lies in."""
    kind, geometry, color = mark
    if kind == "point":
        return draw_point(image, geometry, color, draw=draw)  # type: ignore[arg-type]
    pw, ph = picture[2:] if picture is not None else image.size
    box = geometry if kind == "box" else (0, 0, pw - 1, ph - 1)
    return _box_outline(image, box, color, picture, draw=draw)


Region = tuple[tuple[int, int, int, int], Image.Image]  # a box (px) of a picture and what is shown there instead
Change = Callable[[Image.Image], Region]  # from a picture (only read), the region a corruption changes


def marked(
    path: Path, marks: Sequence[Mark], pad: bool = False, edit: Change | None = None
) -> Callable[[], Image.Image]:
    """The source image, changed by ``edit`` where given (a corruption of the picture before it is padded), padded
    to a square where ``pad`` (the marks are drawn as on the picture before it is padded), with boxes and rings
    drawn on it.

    ``render()`` gives a new image. ``render.drawn()``, which the writer uses, changes and draws on the cached
    picture itself and gives it with the function that puts back the pixels under the change and the marks (kept
    before anything is drawn) and the boxes (x0, y0, x1, y1, end exclusive) those pixels lie in: most questions
    are a source image and a box or two, and a copy of the whole picture per question was a tenth of a build's
    drawing time; the writer re-encodes only the rows of ``render.picture``'s file that the boxes reach
    (:mod:`.jpeg`). Questions with the same marks on the same picture and no edit share ``image_key``: drawn and
    encoded once."""
    marks = tuple(marks)

    def drawn() -> tuple[Image.Image, Callable[[], None], list[tuple[int, int, int, int]]]:
        if pad:
            image, (ox, oy) = cached_padded(path)
            picture: tuple[int, int, int, int] | None = (ox, oy, *cached_image(path).size)
        else:
            image, picture, ox, oy = cached_image(path), None, 0, 0
        strips = [s for mark in marks for s in _draw_mark(image, mark, picture, draw=False)]
        change = None
        if edit is not None:
            box, shown = edit(cached_image(path))
            x, y = box[0] + ox, box[1] + oy
            change = ((x, y), shown)
            strips.append((x, y, x + shown.width, y + shown.height))
        saved = []
        for x0, y0, x1, y1 in strips:
            x0, y0, x1, y1 = max(0, x0), max(0, y0), min(image.width, x1), min(image.height, y1)
            if x1 > x0 and y1 > y0:
                saved.append(((x0, y0), image.crop((x0, y0, x1, y1))))  # every strip before anything is drawn
        if change is not None:
            image.paste(change[1], change[0])
        for mark in marks:
            _draw_mark(image, mark, picture)

        def undo() -> None:
            for xy, pixels in saved:
                image.paste(pixels, xy)

        return image, undo, [(x0, y0, x0 + pixels.width, y0 + pixels.height) for (x0, y0), pixels in saved]

    def render() -> Image.Image:
        image, undo, _ = drawn()
        try:
            return image.copy()
        finally:
            undo()

    render.drawn = drawn  # type: ignore[attr-defined]
    render.image_key = None if edit else ("marked", str(path), pad, marks)  # type: ignore[attr-defined]
    render.picture = (str(path), pad)  # type: ignore[attr-defined]  # what is drawn on, marks aside
    return render


def pad_square(image: Image.Image) -> tuple[Image.Image, tuple[int, int]]:
    """``image`` centred on a square of PAD (the paper's padding, so no box is cropped away); returns it and the
    paste offset."""
    w, h = image.size
    side = max(w, h)
    if w == h:
        return image, (0, 0)
    out = Image.new("RGB", (side, side), PAD)
    off = ((side - w) // 2, (side - h) // 2)
    out.paste(image, off)
    return out, off


def fmt_box(box: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in box) + "]"


def fmt_rgb(rgb: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(v)) for v in rgb) + ")"


# Names that are plural already (inflect, asked for their plural, adds another "s": "skiss").
PLURAL_ALREADY = frozenset(
    {"skis", "scissors", "glasses", "sunglasses", "binoculars", "pants", "jeans", "shorts", "trousers"}
)


@lru_cache(maxsize=4096)
def plural(name: str) -> str:
    """The plural of a class name, by inflect ("person" -> "people", "knife" -> "knives", "bus" -> "buses")."""
    return name if name in PLURAL_ALREADY else str(_inflect().plural_noun(name))


# -- balance --------------------------------------------------------------------------------------------------------


def balance(
    questions: list[Question],
    key: Callable[[Question], Hashable],
    summary: Summary,
    rule: str,
    groups: Callable[[Question], Hashable] = lambda q: None,
    expect: Sequence[Hashable] = (),
) -> list[Question]:
    """Keep equally many questions per ``key`` value (the smallest group's size) within each ``groups`` value;
    which ones is decided by a hash of the question id, so the choice does not depend on input order. With
    ``expect`` (every answer a question can have), an answer that never occurs keeps nothing: a yes/no task
    whose sources give only "yes" would teach nothing."""
    by: dict[Hashable, dict[Hashable, list[Question]]] = defaultdict(lambda: defaultdict(list))
    for q in questions:
        by[groups(q)][key(q)].append(q)
    kept_ids = set()
    for members in by.values():
        cap = min(len(members.get(k, ())) for k in expect) if expect else min(len(m) for m in members.values())
        missing = [str(k) for k in expect if not members.get(k)]
        reason = (
            f"{rule}: no question answers {', '.join(missing)}"
            if missing
            else f"{rule}: over the smallest group's {cap}"
        )
        for qs in members.values():
            qs.sort(key=lambda q: stable_hash(q.ava, q.id))
            kept_ids.update(q.id for q in qs[:cap])
            for q in qs[cap:]:
                summary.drop(q.ava, reason, q.id)
    return [q for q in questions if q.id in kept_ids]
