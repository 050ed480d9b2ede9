"""Task-augmentation tasks (``ava.abilities.tasks``): truth from rules over instance annotations, a depth map,
raters' attributes, or the image alone (a variant made here, so its truth is exact by construction).

Every multiple-choice task balances its answers (:func:`ava.curate.core.balance` over every option), and
every question whose answer would be ambiguous is dropped with its reason: objects of nearly the same size for
"which is larger", masks neither touching nor clearly apart for "touching", raters tied for "occluded".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

from ava.abilities.tasks import RED_BLUE, TASK_PREFIX, TILES, YES_NO
from ava.curate.abilities import (
    boxed,
    images_with_objects,
    instance_depths,
    instances_by_class,
    judged_pairs,
    usable_instances,
)
from ava.curate.core import (
    BLUE,
    PAD,
    RED,
    Change,
    Context,
    Drop,
    Question,
    Region,
    ask,
    balance,
    cached_image,
    marked,
    option_truth,
    plain,
    plural,
    point_mark,
)
from ava.curate.sources import Instance, SourceImage, majority

MIN_AREA_RATIO = 1.5  # "which is larger": the larger mask at least 1.5x the smaller
MIN_SHIFT = 0.1  # "further left / down": box centres at least 10% of the image apart
TOUCH_GAP = 0.02  # "not touching": masks at least 2% of the image's longer side apart
MIN_DEPTH_DIFF = 0.5  # m (10% of the nearer depth for a relative-depth model's map)
MIN_BRIGHTNESS_DIFF = 40.0  # 0..255 luminance between the two points
MIN_VARIANT_DIFF = 8.0  # mean absolute difference (0..255) of SMOOTH px averages that tells variants or tiles apart
SMOOTH = 4  # variants and tiles are compared as averages of 4 x 4 px, where noise cannot pass for a difference
TILE = 128  # side of each variant in the 2x2 grids
CUT = 48  # side of the cut-out of the jigsaw and colour-tile tasks (on a 2*TILE square)


def _key(name: str) -> str:
    return TASK_PREFIX + name


def _q(
    ctx: Context,
    name: str,
    qid: str,
    answer: str,
    options: list[str] | None,
    im: SourceImage | None,
    anns: tuple[Instance, ...],
    render: Callable[[], Image.Image],
    fine: str,
    extra: dict | None = None,
    **fields: str,
) -> Question:
    key = _key(name)
    origin = {
        "file": im.file_name if im else "",
        "image_id": im.id if im else None,
        "annotations": [a.id for a in anns],
    }
    meta = {"source": ctx.source_name, "origin": origin, **(extra or {})}
    truth = option_truth(options, answer) if options else {"value": int(answer)}
    return Question(key, qid, ask(key, options, **fields), answer, truth, options, meta, render, fine, answer)


def _plain(im: SourceImage) -> Callable[[], Image.Image]:
    return plain(im.path)


def _yes_no(ctx: Context, name: str, qs: list[Question]) -> list[Question]:
    return balance(qs, lambda q: q.answer, ctx.summary, "answer balance", expect=YES_NO)


def _red_blue(ctx: Context, name: str, qs: list[Question]) -> list[Question]:
    return balance(qs, lambda q: q.answer, ctx.summary, "answer balance", expect=RED_BLUE)


# -- T1: presence and counts ----------------------------------------------------------------------------------------


def presence(ctx: Context) -> list[Question]:
    classes = ctx.coco.class_names  # type: ignore[union-attr]
    out = []
    for im, _ in images_with_objects(ctx, _key("presence")):
        present = sorted({a.category for a in im.instances})  # crowd regions count as present
        absent = [c for c in classes if c not in present]
        ctx.summary.consider(_key("presence"), 2)  # one "yes" and one "no" question per image
        if not present or not absent:
            ctx.summary.drop(_key("presence"), "image holds no class, or every class", im.file_name, n=2)
            continue
        rng = ctx.rng("presence", im.id)
        for answer, cls in (("yes", present[rng.integers(len(present))]), ("no", absent[rng.integers(len(absent))])):
            ids = tuple(a for a in im.instances if a.category == cls)
            out.append(
                _q(
                    ctx,
                    "presence",
                    f"{im.id}-{answer}",
                    answer,
                    list(YES_NO),
                    im,
                    ids,
                    _plain(im),
                    f"{cls}|{answer}",
                    {"class": cls},
                    object=cls,
                )
            )
    return _yes_no(ctx, "presence", out)


def count(ctx: Context) -> list[Question]:
    out = []
    for im in ctx.coco.images.values():  # type: ignore[union-attr]
        for cls, anns in sorted(instances_by_class(im).items()):
            ctx.summary.consider(_key("count"))
            if any(a.iscrowd for a in anns) or len(anns) > 40:
                ctx.summary.drop(_key("count"), "a crowd region of the class, or over 40", f"image {im.id} {cls}")
                continue
            out.append(
                _q(
                    ctx,
                    "count",
                    f"{im.id}-{cls}",
                    str(len(anns)),
                    None,
                    im,
                    tuple(anns),
                    _plain(im),
                    f"{cls}|{len(anns)}",
                    {"class": cls},
                    object=plural(cls),
                )
            )
    return out


def more_than_one(ctx: Context) -> list[Question]:
    out = []
    for im in ctx.coco.images.values():  # type: ignore[union-attr]
        for cls, anns in sorted(instances_by_class(im).items()):
            ctx.summary.consider(_key("more_than_one"))
            if any(a.iscrowd for a in anns):
                ctx.summary.drop(_key("more_than_one"), "a crowd region of the class", f"image {im.id} {cls}")
                continue
            answer = "yes" if len(anns) > 1 else "no"
            out.append(
                _q(
                    ctx,
                    "more_than_one",
                    f"{im.id}-{cls}",
                    answer,
                    list(YES_NO),
                    im,
                    tuple(anns),
                    _plain(im),
                    f"{cls}|{answer}",
                    {"class": cls},
                    object=cls,
                )
            )
    return _yes_no(ctx, "more_than_one", out)


# -- T2: occlusion, truncation, corruption --------------------------------------------------------------------------


def _rated(ctx: Context, name: str, attribute: str) -> list[Question]:
    """A question per annotation the raters judged: the majority answer, the ambiguity (share disagreeing)."""
    attrs = ctx.attributes
    options = sorted({v for per in attrs.values.values() for v in per.get(attribute, [])})  # type: ignore[union-attr]
    if len(options) < 2:
        return []
    out = []
    for aid, per in sorted(attrs.values.items()):  # type: ignore[union-attr]
        votes = per.get(attribute)
        if not votes:
            continue
        ctx.summary.consider(_key(name))
        answer, ambiguity = majority(votes)
        a = ctx.coco.instance(aid)  # type: ignore[union-attr]
        if answer is None:
            ctx.summary.drop(_key(name), "raters tied: no majority", f"annotation {aid}")
            continue
        im = ctx.coco.images[a.image_id]  # type: ignore[union-attr]
        out.append(
            _q(
                ctx,
                name,
                f"{im.id}-{aid}",
                answer,
                options,
                im,
                (a,),
                boxed(im, a),
                f"{a.category}|{answer}",
                {"class": a.category, "ambiguity": ambiguity, "raters": len(votes), "votes": votes},
                object=a.category,
            )
        )
    return balance(out, lambda q: q.answer, ctx.summary, "answer balance", expect=options)


def occluded(ctx: Context) -> list[Question]:
    return _rated(ctx, "occluded", "occluded")


def facing_camera(ctx: Context) -> list[Question]:
    return _rated(ctx, "facing_camera", "facing_camera")


def truncated(ctx: Context) -> list[Question]:
    out = []
    for im, anns in images_with_objects(ctx, _key("truncated")):
        for a in anns:
            ctx.summary.consider(_key("truncated"))
            touches = a.mask_touches_frame
            x1, y1, x2, y2 = a.xyxy
            inside = x1 >= 2 and y1 >= 2 and x2 <= im.width - 2 and y2 <= im.height - 2
            if not touches and not inside:
                ctx.summary.drop(
                    _key("truncated"), "mask within 2 px of the frame without touching it", f"annotation {a.id}"
                )
                continue
            answer = "yes" if touches else "no"
            out.append(
                _q(
                    ctx,
                    "truncated",
                    f"{im.id}-{a.id}",
                    answer,
                    list(YES_NO),
                    im,
                    (a,),
                    boxed(im, a),
                    f"{a.category}|{answer}",
                    {"class": a.category},
                    object=a.category,
                )
            )
    return _yes_no(ctx, "truncated", out)


def _blurred_region(image: Image.Image, box: tuple[float, ...], radius: float) -> Region:
    """``box`` blurred with its surroundings as context (a crop blurred alone keeps a flat object whose edges are
    the crop's edges exactly as it was)."""
    b = tuple(round(v) for v in box)
    m = round(3 * radius)
    g = (max(0, b[0] - m), max(0, b[1] - m), min(image.width, b[2] + m), min(image.height, b[3] + m))
    blurred = image.crop(g).filter(ImageFilter.GaussianBlur(radius))
    return b, blurred.crop((b[0] - g[0], b[1] - g[1], b[2] - g[0], b[3] - g[1]))  # type: ignore[return-value]


def _noisy_region(image: Image.Image, box: tuple[float, ...], sigma: float, seed: int) -> Region:
    b = tuple(round(v) for v in box)
    return b, Image.fromarray(_add_noise(np.asarray(image.crop(b)), sigma, np.random.default_rng(seed)))  # type: ignore[return-value]


CORRUPTIONS: dict[str, Callable[[Image.Image, tuple[float, ...], int], Region]] = {
    "blurred_object": lambda image, box, seed: _blurred_region(image, box, 4.0),
    "noisy_object": lambda image, box, seed: _noisy_region(image, box, 40.0, seed),
}
# The corruptions whose change is measured (MIN_CHANGE). Noise of sigma 40 cannot be invisible: whatever a value is,
# noise pointing away from the nearer end of 0..255 moves it by min(|noise|, 128) at least, so every value moves by
# about 40 * E[max(Z, 0)] = 16 or more on average (32 away from the ends), and a box of 24 x 24 px or more (1,728
# values) averages far above 1.
CHECKED = ("blurred_object",)


def _corrupted(name: str, a: Instance) -> Change:
    """The edit that corrupts ``a`` in its picture."""
    return lambda image: CORRUPTIONS[name](image, a.xyxy, a.id)


def _corrupted_choice(im: SourceImage) -> Instance | None:
    """The object a corrupted-object question asks about: the largest of at least 24 px a side."""
    big = [a for a in usable_instances(im) if min(a.bbox[2], a.bbox[3]) >= 24]
    return max(big, key=lambda a: (a.bbox[2] * a.bbox[3], -a.id)) if big else None


def _corrupted_change(name: str) -> Callable[[Context, SourceImage], float | None]:
    """The pixel pass's rule: how much corrupting the chosen object changes its box, mean absolute difference
    (made for every sampled image, used for the questions whose answer is "yes")."""

    def change(ctx: Context, im: SourceImage) -> float | None:
        a = _corrupted_choice(im)
        if a is None:
            return None
        image = cached_image(im.path)  # only read
        b, region = CORRUPTIONS[name](image, a.xyxy, a.id)
        return _diff(image.crop(b), region)

    return change


def _corrupted_object(ctx: Context, name: str) -> list[Question]:
    """One object per image (the largest of at least 24 px a side, not a crowd region); every other question
    corrupts it."""
    out = []
    changes = ctx.pixels[_key(name)] if name in CHECKED else None  # filled by the pixel pass
    for im in _images(ctx, name):
        a = _corrupted_choice(im)
        ctx.summary.consider(_key(name))
        if a is None:
            ctx.summary.drop(_key(name), "no object of at least 24 px a side", im.file_name)
            continue
        answer = YES_NO[len(out) % 2]
        edit = _corrupted(name, a) if answer == "yes" else None
        if edit is not None and changes is not None and changes[im.id] < MIN_CHANGE:
            ctx.summary.drop(
                _key(name), f"the change is invisible (mean under {MIN_CHANGE:g} inside the box)", f"annotation {a.id}"
            )
            continue
        out.append(
            _q(
                ctx,
                name,
                f"{im.id}-{a.id}",
                answer,
                list(YES_NO),
                im,
                (a,),
                boxed(im, a, edit=edit),
                f"{a.category}|{answer}",
                {"class": a.category},
                object=a.category,
            )
        )
    return _yes_no(ctx, name, out)


MIN_CHANGE = 1.0  # mean absolute change (0..255) inside the object's box that makes "blurred" true


def blurred_object(ctx: Context) -> list[Question]:
    return _corrupted_object(ctx, "blurred_object")


def noisy_object(ctx: Context) -> list[Question]:
    return _corrupted_object(ctx, "noisy_object")


# -- variants of a whole image in a 2x2 grid ------------------------------------------------------------------------


def _square(image: Image.Image, side: int) -> Image.Image:
    w, h = image.size
    s = min(w, h)
    box = ((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s)
    return image.resize((side, side), Image.Resampling.BOX, box=box)  # an area average: half a bilinear's time


@lru_cache(maxsize=8)
def _base(path: Path, side: int) -> Image.Image:
    """The centre square of a source image at 2 x TILE, which the cut-out tasks start from, or at TILE (that one
    halved), which the whole-image variant tasks start from: their variants are shown at TILE."""
    if side == TILE:  # (always called with side positional: lru_cache keys on the arguments as passed)
        return _base(path, 2 * TILE).reduce(2)
    return _square(cached_image(path), side)


def _grid(tiles: list[Image.Image], left: Image.Image | None = None) -> Image.Image:
    """Four tiles in a 2x2 grid, each labelled with its letter (A top left ... D bottom right); ``left`` (a
    2*TILE square) is shown beside the grid."""
    off = 0 if left is None else 2 * TILE + 8
    out = Image.new("RGB", (off + 2 * TILE + 4, 2 * TILE + 4), (255, 255, 255))
    if left is not None:
        out.paste(left, (0, 2))
    for i, tile in enumerate(tiles):
        x, y = off + (i % 2) * (TILE + 4), (i // 2) * (TILE + 4)
        out.paste(tile if tile.size == (TILE, TILE) else tile.resize((TILE, TILE)), (x, y))
        out.paste(_letter(i), (x, y))
    return out


@lru_cache(maxsize=4)
def _letter(i: int) -> Image.Image:
    """The label of tile ``i`` (A..D): black on a white 14 px square, drawn once."""
    label = Image.new("RGB", (14, 14), (255, 255, 255))
    ImageDraw.Draw(label).text((3, 1), "ABCD"[i], fill=(0, 0, 0))
    return label


def _diff(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute difference of two pictures of one size (0..255)."""
    return float(np.asarray(ImageChops.difference(a, b)).mean())  # |a - b| is exact in uint8


def _sampled(ctx: Context, name: str) -> tuple[list[SourceImage], int]:
    """The images a per-image task proposes questions on, and how many it leaves out: all of them, or, when
    ``--max-per-task`` caps what the task keeps, the first of a seeded order of them: 1.5 times the cap (the rest
    would be proposed only to be dropped), more where :func:`top_up` found that too few of those passed the rules."""
    images = list(ctx.coco.images.values()) if ctx.coco else []
    cap = ctx.max_per_task
    n = ctx.sample_sizes.get(name, len(images) if cap is None else int(1.5 * cap))
    if n >= len(images):
        return images, 0
    keep = np.sort(ctx.rng(name, "images").permutation(len(images))[:n])
    return [images[i] for i in keep], len(images) - n


def top_up(ctx: Context, key: str, kept: int) -> list[SourceImage]:
    """The next images of a per-image task's seeded order when it kept fewer questions than ``--max-per-task``
    and images are left (their pixel rule, if any, is to be run on them before the task is built again): as many as
    its pass rate so far says the cap needs, and a fifth more. A cap picks among the images that passed."""
    name = key[len(TASK_PREFIX) :]
    cap = ctx.max_per_task
    if name not in SAMPLED or cap is None or kept >= cap:
        return []
    before, left = _sampled(ctx, name)
    if not left:
        return []
    rate = kept / len(before) if before and kept else 0.0
    more = len(before) if rate == 0 else int(np.ceil(1.2 * (cap - kept) / rate))
    ctx.sample_sizes[name] = len(before) + max(1, more)
    known = {im.id for im in before}
    return [im for im in _sampled(ctx, name)[0] if im.id not in known]


def _images(ctx: Context, name: str) -> list[SourceImage]:
    """:func:`_sampled`, with the images left out counted in the summary."""
    images, left_out = _sampled(ctx, name)
    if left_out:
        ctx.summary.consider(_key(name), left_out)
        ctx.summary.cap(_key(name), "image not sampled (--max-per-task caps the task)", n=left_out)
    return images


Make = Callable[[Image.Image, np.random.Generator], tuple[list[Image.Image], int] | str]


@dataclass(frozen=True)
class Variant:
    """A task whose question shows four variants of an image (or of a tile cut from it) in a 2x2 grid.

    ``make`` gives the four variants and the index of the right one, from the image's centre square at ``side``
    px; ``check`` gives the reason to drop an image (None: kept), when the question is proposed, so the variants
    are made again only for the questions kept; ``left`` draws the picture shown beside the grid (from a
    generator seeded like ``make``'s, so it cuts the hole where ``make`` cut the tile); ``shown``, where given,
    makes them as shown (TILE px), where that is cheaper than enlarging each of ``make``'s."""

    make: Callable[[Image.Image, np.random.Generator], tuple[list[Image.Image], int]]
    check: Callable[[Image.Image, np.random.Generator], str | None] | None = None
    left: Callable[[Image.Image, np.random.Generator], Image.Image] | None = None
    side: int = TILE
    shown: Callable[[Image.Image, np.random.Generator], tuple[list[Image.Image], int]] | None = None


CUT_TRIES = 8  # cut-out places tried per image; the first whose tiles pass the task's rule is asked about


def _variant_rng(ctx: Context, name: str, im: SourceImage, attempt: int) -> np.random.Generator:
    """The generator of one try at an image's variants (the first try's is the one every earlier version used)."""
    return ctx.rng(name, im.id) if attempt == 0 else ctx.rng(name, im.id, attempt)


def _variant_verdict(name: str) -> Callable[[Context, SourceImage], tuple[str | None, dict]]:
    """The pixel pass's rule of a variant task: per image, the reason to drop it (None: kept), the cut-out and the
    try it came from. A task that cuts a tile tries up to CUT_TRIES places, so a photo whose first cut falls on
    plain sky still gives a question where it has a tile to ask about."""

    def verdict(ctx: Context, im: SourceImage) -> tuple[str | None, dict]:
        v = VARIANTS[name]
        base = _base(im.path, v.side)
        reason = None
        for attempt in range(CUT_TRIES if v.left else 1):
            rng = _variant_rng(ctx, name, im, attempt)
            reason = v.check(base, rng) if v.check is not None else None
            if reason is None:
                extra = {"cut": list(_cut(base, _variant_rng(ctx, name, im, attempt)))} if v.left else {}
                return None, {**extra, "attempt": attempt}
        return reason, {}

    return verdict


def _variants_of(name: str) -> Callable[[Context], list[Question]]:
    """The builder of the variant task ``name``."""
    return lambda ctx: _variant_task(ctx, name)


def _variant_task(ctx: Context, name: str) -> list[Question]:
    """Per image: the right variant goes to the position that keeps the four answers level, the others keep their
    order. The variants are made again when the question is drawn: holding every one would not fit."""
    v = VARIANTS[name]
    verdicts = ctx.pixels[_key(name)]
    out = []
    for im in _images(ctx, name):
        ctx.summary.consider(_key(name))
        reason, extra = verdicts[im.id]
        if reason is not None:
            ctx.summary.drop(_key(name), reason, im.file_name)
            continue
        pos = len(out) % 4  # round robin: the four positions stay level
        answer = TILES[pos]
        extra = dict(extra)
        attempt = extra.pop("attempt")

        def render(im=im, pos=pos, attempt=attempt) -> Image.Image:
            base = _base(im.path, v.side).copy()
            variants, right = (v.shown or v.make)(base, _variant_rng(ctx, name, im, attempt))
            others = [x for i, x in enumerate(variants) if i != right]
            shown = v.left(base, _variant_rng(ctx, name, im, attempt)) if v.left is not None else None
            return _grid(others[:pos] + [variants[right]] + others[pos:], shown)

        out.append(_q(ctx, name, str(im.id), answer, list(TILES), im, (), render, answer, extra))
    return balance(out, lambda q: q.answer, ctx.summary, "answer balance", expect=TILES)


def _alike(variants: list[Image.Image], right: int, what: str) -> str | None:
    """Why the right variant cannot be told from the others (None: it can). They are compared as averages of
    SMOOTH x SMOOTH px: grain and JPEG noise average out there, shapes and colours stay (a flat tile with grain of
    sigma 12, JPEG quality 75 or 95, has rotations up to 8.5 apart at full size, 2.2 as averages:
    benchmarks/variant_noise_floor.py)."""
    small = [v.reduce(SMOOTH) for v in variants]
    if min(_diff(small[right], v) for i, v in enumerate(small) if i != right) < MIN_VARIANT_DIFF:
        return f"{what} look alike (mean difference under {MIN_VARIANT_DIFF:g} in {SMOOTH} px averages)"
    return None


def _distinct(
    make: Callable[[Image.Image, np.random.Generator], tuple[list[Image.Image], int]], what: str
) -> Callable[[Image.Image, np.random.Generator], str | None]:
    """The check that ``make``'s right variant differs enough from the others."""
    return lambda base, rng: _alike(*make(base, rng), what)


def _sharpness(image: Image.Image) -> float:
    """Mean squared difference between neighbouring pixels: what blurring takes away."""
    a = np.asarray(image.convert("L"), np.float32)
    return float((np.diff(a, axis=0) ** 2).mean() + (np.diff(a, axis=1) ** 2).mean())


MIN_SHARPNESS_RATIO = 1.5  # the unblurred image at least 1.5x as sharp as the least blurred variant


BLUR_RADII = (1.0, 2.0, 3.0)  # px, on the variants as shown (TILE wide)


def _blurred_variants(base: Image.Image, rng: np.random.Generator):
    return [base] + [base.filter(ImageFilter.GaussianBlur(r)) for r in BLUR_RADII], 0


def _blur_visible(base: Image.Image, rng: np.random.Generator) -> str | None:
    """The least blurred variant is the sharpest of them."""
    if _sharpness(base) < MIN_SHARPNESS_RATIO * _sharpness(base.filter(ImageFilter.GaussianBlur(BLUR_RADII[0]))):
        return f"blurring changes too little (sharpness ratio under {MIN_SHARPNESS_RATIO})"
    return None


def _noisy(base: Image.Image, sigma: float, rng: np.random.Generator) -> Image.Image:
    return Image.fromarray(_add_noise(np.asarray(base), sigma, rng))


@lru_cache(maxsize=1)
def _normal_quantiles() -> np.ndarray:
    """The standard normal's quantiles at the midpoints of 65,536 equal steps of probability (float32): indexed by
    a uniform 16-bit integer, a normal deviate (quantized to those steps; the tails end at 4.17 sigma, beyond what
    0..255 keeps of any noise here) in a third of ``standard_normal``'s time."""
    from scipy.special import ndtri

    return ndtri((np.arange(65536) + 0.5) / 65536).astype(np.float32)


def _add_noise(pixels: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``pixels`` (uint8) plus Gaussian noise of ``sigma``, in float32, clipped and truncated to uint8."""
    a = _normal_quantiles()[rng.integers(0, 65536, pixels.shape, dtype=np.uint16)]
    a *= sigma
    a += pixels
    return np.clip(a, 0, 255, out=a).astype(np.uint8)


def _noisy_variants(base: Image.Image, rng: np.random.Generator):
    return [base] + [_noisy(base, s, rng) for s in (25.0, 40.0, 55.0)], 0


PERMUTATIONS = ((1, 2, 0), (2, 0, 1), (2, 1, 0))  # channel orders that change every colour that is not grey


def _permuted(image: Image.Image, order: tuple[int, int, int]) -> Image.Image:
    bands = image.split()
    return Image.merge("RGB", [bands[i] for i in order])


def _colour_variants(base: Image.Image, rng: np.random.Generator):
    return [base] + [_permuted(base, p) for p in PERMUTATIONS], 0


BRIGHTNESS = (0.45, 0.7, 1.0, 1.35)  # the third is the second brightest


def _brightness_variants(base: Image.Image, rng: np.random.Generator):
    a = np.asarray(base, np.float32)
    return [Image.fromarray(np.clip(a * f, 0, 255).astype(np.uint8)) for f in BRIGHTNESS], 2


def _brightness_apart(base: Image.Image, rng: np.random.Generator) -> str | None:
    means = [float(np.asarray(v, np.float32).mean()) for v in _brightness_variants(base, rng)[0]]
    if min(np.diff(means)) < MIN_VARIANT_DIFF / 2:
        return "brightness variants too alike (the image is saturated or dark)"
    return None


def _rotations(base: Image.Image, rng: np.random.Generator):
    return [base.rotate(angle) for angle in (0, 90, 180, 270)], 0


def _cut(base: Image.Image, rng: np.random.Generator) -> tuple[int, int]:
    side = base.width
    return int(rng.integers(0, side - CUT)), int(rng.integers(0, side - CUT))


def _with_hole(base: Image.Image, xy: tuple[int, int], grey: bool = False) -> Image.Image:
    shown = base.convert("L").convert("RGB") if grey else base.copy()
    ImageDraw.Draw(shown).rectangle([xy[0], xy[1], xy[0] + CUT - 1, xy[1] + CUT - 1], fill=PAD)
    return shown


def _tile(base: Image.Image, xy: tuple[int, int], side: int = CUT) -> Image.Image:
    tile = base.crop((xy[0], xy[1], xy[0] + CUT, xy[1] + CUT))
    return tile if side == CUT else tile.resize((side, side))


def _tile_colours(base: Image.Image, rng: np.random.Generator, side: int = CUT):
    """The cut-out and its channel orders, at ``side`` px (TILE: as shown, the tile enlarged once, not four times)."""
    tile = _tile(base, _cut(base, rng), side)
    return [tile] + [_permuted(tile, p) for p in PERMUTATIONS], 0


def _tile_rotations(base: Image.Image, rng: np.random.Generator, side: int = CUT):
    tile = _tile(base, _cut(base, rng), side)
    return [tile.rotate(a) for a in (0, 90, 180, 270)], 0


def _other_cuts(base: Image.Image, rng: np.random.Generator) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """The cut-out and up to three places elsewhere in the image, not overlapping it."""
    xy = _cut(base, rng)
    others: list[tuple[int, int]] = []
    tries = 0
    while len(others) < 3 and tries < 50:
        tries += 1
        o = (int(rng.integers(0, base.width - CUT)), int(rng.integers(0, base.width - CUT)))
        if abs(o[0] - xy[0]) >= CUT or abs(o[1] - xy[1]) >= CUT:
            others.append(o)
    return xy, others


def _jigsaw_tiles(base: Image.Image, rng: np.random.Generator):
    xy, others = _other_cuts(base, rng)
    return [_tile(base, xy)] + [_tile(base, o) for o in others], 0


def _jigsaw_check(base: Image.Image, rng: np.random.Generator) -> str | None:
    xy, others = _other_cuts(base, rng)
    if len(others) < 3:
        return "no room for three other tiles"
    return _alike([_tile(base, xy)] + [_tile(base, o) for o in others], 0, "the candidate tiles")


VARIANTS: dict[str, Variant] = {
    "least_blurred": Variant(_blurred_variants, _blur_visible),
    "not_noisy": Variant(_noisy_variants),
    "not_colour_corrupted": Variant(_colour_variants, _distinct(_colour_variants, "the colour variants")),
    "second_brightest": Variant(_brightness_variants, _brightness_apart),
    "unrotated": Variant(_rotations, _distinct(_rotations, "the rotations")),
    "true_colour_tile": Variant(
        _tile_colours,
        _distinct(_tile_colours, "the tile's colour variants"),
        left=lambda base, rng: _with_hole(base, _cut(base, rng), True),
        side=2 * TILE,
        shown=lambda base, rng: _tile_colours(base, rng, TILE),
    ),
    "rotated_jigsaw": Variant(
        _tile_rotations,
        _distinct(_tile_rotations, "the tile's rotations"),
        left=lambda base, rng: _with_hole(base, _cut(base, rng)),
        side=2 * TILE,
        shown=lambda base, rng: _tile_rotations(base, rng, TILE),
    ),
    "jigsaw": Variant(
        _jigsaw_tiles, _jigsaw_check, left=lambda base, rng: _with_hole(base, _cut(base, rng)), side=2 * TILE
    ),
}


# -- T3 / T4 / T6: pairs of objects ---------------------------------------------------------------------------------


def _pair_task(
    ctx: Context, name: str, judge: Callable[[SourceImage, Instance, Instance], bool | Drop], needs_depth: bool = False
) -> list[Question]:
    """Pairs of objects; ``judge(im, a, b)`` is True when a is the answer ("red" if a is red), False when b is,
    a :class:`Drop` naming the rule the pair breaks. Red is chosen so "red" and "blue" stay level."""
    out = []
    for im, anns in images_with_objects(ctx, _key(name)):
        if len(anns) < 2:
            continue
        for a, b, verdict in judged_pairs(ctx, _key(name), im, anns, lambda a, b, im=im: judge(im, a, b)):
            winner, loser = (a, b) if verdict else (b, a)
            answer = RED_BLUE[len(out) % 2]
            red, blue = (winner, loser) if answer == "red" else (loser, winner)
            out.append(
                _q(
                    ctx,
                    name,
                    f"{im.id}-{red.id}-{blue.id}",
                    answer,
                    list(RED_BLUE),
                    im,
                    (red, blue),
                    boxed(im, red, blue),
                    f"{red.category}|{answer}",
                    {"class": red.category},
                    a=red.category,
                    b=blue.category,
                )
            )
    return _red_blue(ctx, name, out)


def larger(ctx: Context) -> list[Question]:
    def judge(im, a, b):
        sa, sb = a.mask_area, b.mask_area
        if max(sa, sb) < MIN_AREA_RATIO * max(1, min(sa, sb)):
            return Drop(f"mask areas within {MIN_AREA_RATIO}x of each other")
        return sa > sb

    return _pair_task(ctx, "larger", judge)


def _centre(a: Instance) -> tuple[float, float]:
    x1, y1, x2, y2 = a.xyxy
    return (x1 + x2) / 2, (y1 + y2) / 2


def further_left(ctx: Context) -> list[Question]:
    def judge(im, a, b):
        da = _centre(b)[0] - _centre(a)[0]
        return (
            Drop(f"box centres under {MIN_SHIFT:.0%} of the width apart")
            if abs(da) < MIN_SHIFT * im.width
            else (da > 0)
        )

    return _pair_task(ctx, "further_left", judge)


def further_down(ctx: Context) -> list[Question]:
    def judge(im, a, b):
        dy = _centre(a)[1] - _centre(b)[1]
        return (
            Drop(f"box centres under {MIN_SHIFT:.0%} of the height apart")
            if abs(dy) < MIN_SHIFT * im.height
            else (dy > 0)
        )

    return _pair_task(ctx, "further_down", judge)


def nearer_object(ctx: Context) -> list[Question]:
    cache: dict = {}

    def judge(im, a, b):
        if im.id not in cache:
            cache.clear()
            cache[im.id] = instance_depths(ctx, im, im.instances)
        d = cache[im.id]
        if d is None:
            return Drop("no depth map for the image")
        if a.id not in d or b.id not in d:
            return Drop("an object without depth")
        za, zb = d[a.id][1], d[b.id][1]
        need = MIN_DEPTH_DIFF if ctx.depth.metric else 0.1 * min(za, zb)  # type: ignore[union-attr]
        return Drop("median depths too close") if abs(za - zb) < need else za < zb

    return _pair_task(ctx, "nearer_object", judge)


def _touch_verdicts(ctx: Context, im: SourceImage) -> dict[tuple[int, int], str | None]:
    """The pixel pass's rule of "touching", for every pair of the image's objects: "yes" (the masks overlap or are
    adjacent), "no" (at least the gap apart) or None (apart, but closer than the gap: dropped)."""
    import itertools

    from scipy.ndimage import distance_transform_cdt

    anns = usable_instances(im)
    gap = max(2, round(TOUCH_GAP * max(im.width, im.height)))
    masks: dict[int, np.ndarray] = {}
    out: dict[tuple[int, int], str | None] = {}
    for a, b in itertools.combinations(anns, 2):
        ea, eb = a.mask_extent, b.mask_extent
        if ea is None or eb is None or _l1_apart(ea, eb) > gap:  # no pixel of one within the gap of the other
            out[a.id, b.id] = "no"
            continue
        for x in (a, b):
            if x.id not in masks:
                masks[x.id] = x.mask
        ma, mb = _pair_crop(masks[a.id], masks[b.id], a, b, gap)
        if not ma.any() or not mb.any():
            out[a.id, b.id] = "no"
            continue
        # the least number of 4-neighbour steps from a's pixels to b's: what dilating a (a cross per step) takes
        steps = int(distance_transform_cdt(~ma, metric="taxicab")[mb].min())
        out[a.id, b.id] = "yes" if steps <= 1 else "no" if steps > gap else None
    return out


def _l1_apart(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> int:
    """The least L1 distance (px) two pixel sets can be apart given their extents (x0, y0, x1, y1, inclusive):
    a dilation of one by fewer steps (a cross each) cannot reach the other."""
    dx = max(0, b[0] - a[2], a[0] - b[2])
    dy = max(0, b[1] - a[3], a[1] - b[3])
    return dx + dy


def touching(ctx: Context) -> list[Question]:
    out = []
    verdicts = ctx.pixels[_key("touching")]
    for im, anns in images_with_objects(ctx, _key("touching")):
        if len(anns) < 2:
            continue
        gap = max(2, round(TOUCH_GAP * max(im.width, im.height)))

        def judge(a: Instance, b: Instance, im: SourceImage = im, gap: int = gap) -> str | Drop:
            answer = verdicts[im.id][a.id, b.id]
            return Drop(f"masks apart but closer than {gap} px") if answer is None else answer

        for a, b, answer in judged_pairs(ctx, _key("touching"), im, anns, judge):
            out.append(
                _q(
                    ctx,
                    "touching",
                    f"{im.id}-{a.id}-{b.id}",
                    answer,
                    list(YES_NO),
                    im,
                    (a, b),
                    boxed(im, a, b),
                    f"{a.category}|{answer}",
                    {"class": a.category},
                    a=a.category,
                    b=b.category,
                )
            )
    return _yes_no(ctx, "touching", out)


def _pair_crop(ma: np.ndarray, mb: np.ndarray, a: Instance, b: Instance, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Both masks cut to the pair's boxes grown by ``gap`` + 1 px (dilation never needs more), for speed."""
    x1, y1 = (int(max(0, min(a.xyxy[i], b.xyxy[i]) - gap - 2)) for i in (0, 1))
    x2, y2 = (int(max(a.xyxy[i], b.xyxy[i]) + gap + 2) for i in (2, 3))
    return ma[y1:y2, x1:x2], mb[y1:y2, x1:x2]


def _another(ctx: Context, name: str, axis: str) -> list[Question]:
    """Is there another object further left (axis x) / further down (axis y) than the boxed one? "yes": another
    box lies wholly beyond it; "no": no other box reaches beyond it at all; in between: ambiguous, dropped."""
    out = []
    for im, anns in images_with_objects(ctx, _key(name)):
        for a in anns:
            ctx.summary.consider(_key(name))
            x1, y1, x2, y2 = a.xyxy
            others = [o for o in im.instances if o.id != a.id]
            if axis == "x":
                wholly = any(o.xyxy[2] <= x1 for o in others)
                partly = any(o.xyxy[0] < x1 for o in others)
            else:
                wholly = any(o.xyxy[1] >= y2 for o in others)
                partly = any(o.xyxy[3] > y2 for o in others)
            if partly and not wholly:
                ctx.summary.drop(_key(name), "another object only partly beyond it", f"annotation {a.id}")
                continue
            answer = "yes" if wholly else "no"
            out.append(
                _q(
                    ctx,
                    name,
                    f"{im.id}-{a.id}",
                    answer,
                    list(YES_NO),
                    im,
                    (a,),
                    boxed(im, a),
                    f"{a.category}|{answer}",
                    {"class": a.category},
                    object=a.category,
                )
            )
    return _yes_no(ctx, name, out)


def another_left(ctx: Context) -> list[Question]:
    return _another(ctx, "another_left", "x")


def another_below(ctx: Context) -> list[Question]:
    return _another(ctx, "another_below", "y")


# -- T5.4 / T6.2: two points ----------------------------------------------------------------------------------------

PATCH = 2  # a point's value is the mean over a (2*PATCH+1)^2 patch, which must be flat


def _find_points(
    ctx: Context,
    name: str,
    im: SourceImage,
    field: np.ndarray | None,
    flat: float,
    need: Callable[[float, float], float],
) -> tuple[list[list[int]], list[float]] | None:
    """The first of 64 seeded point pairs whose patches are flat and whose values differ by ``need``."""
    if field is None:
        return None
    rng = ctx.rng(name, im.id)
    h, w = field.shape
    margin = max(PATCH + 1, round(0.05 * max(w, h)))
    for _ in range(64):
        pts = rng.integers([margin, margin], [w - margin, h - margin], size=(2, 2))
        if np.hypot(*(pts[0] - pts[1])) < 0.2 * max(w, h):
            continue
        patches = [field[y - PATCH : y + PATCH + 1, x - PATCH : x + PATCH + 1] for x, y in pts]
        if any(not np.isfinite(p).all() or np.ptp(p) > flat for p in patches):
            continue
        v = [float(p.mean()) for p in patches]
        if abs(v[0] - v[1]) >= need(*v):
            return pts.tolist(), v
    return None


def _point_task(ctx: Context, name: str, what: str) -> list[Question]:
    """Per image, the point pair the pixel pass found (:func:`_find_points`; a string: why there is none to
    look for); the answer is the point with the larger value."""
    out = []
    found_by_image = ctx.pixels[_key(name)]
    for im in _images(ctx, name):
        ctx.summary.consider(_key(name))
        found = found_by_image[im.id]
        if isinstance(found, str):  # no values to compare (an image without a depth map)
            ctx.summary.drop(_key(name), found, im.file_name)
            continue
        if found is None:
            ctx.summary.drop(_key(name), f"no two flat points whose {what.split('_')[0]} differs enough", im.file_name)
            continue
        (p0, p1), (v0, v1) = found
        answer = RED_BLUE[len(out) % 2]
        hi, lo = ((p0, v0), (p1, v1)) if v0 > v1 else ((p1, v1), (p0, v0))
        (red, v_red), (blue, v_blue) = (hi, lo) if answer == "red" else (lo, hi)
        shown = -1.0 if name == "nearer_point" else 1.0  # the nearer point's field is minus its depth
        render = marked(im.path, [point_mark(red, RED), point_mark(blue, BLUE)])
        out.append(
            _q(
                ctx,
                name,
                str(im.id),
                answer,
                list(RED_BLUE),
                im,
                (),
                render,
                answer,
                {
                    "points": {"red": [int(v) for v in red], "blue": [int(v) for v in blue]},
                    # red's then blue's, as every pair task gives them: luminance, or depth
                    "values": [round(shown * v_red, 3), round(shown * v_blue, 3)],
                    "values_of": what,
                },
            )
        )
    return _red_blue(ctx, name, out)


def _brighter_points(ctx: Context, im: SourceImage):
    luminance = np.asarray(cached_image(im.path).convert("L"), np.float32)
    return _find_points(ctx, "brighter_point", im, luminance, 10.0, lambda a, b: MIN_BRIGHTNESS_DIFF)


def brighter_point(ctx: Context) -> list[Question]:
    return _point_task(ctx, "brighter_point", "luminance")


def _nearer_points(ctx: Context, im: SourceImage):
    d = ctx.depth.load(im)  # type: ignore[union-attr]
    if d is None:
        return "no depth map for the image"

    def need(a: float, b: float) -> float:
        return MIN_DEPTH_DIFF if ctx.depth.metric else 0.1 * min(-a, -b)  # type: ignore[union-attr]

    return _find_points(ctx, "nearer_point", im, -d, 0.05, need)  # the larger value is the nearer point


def nearer_point(ctx: Context) -> list[Question]:
    return _point_task(ctx, "nearer_point", "depth_m" if ctx.depth.metric else "depth_relative")  # type: ignore[union-attr]


def _sample_of(name: str) -> Callable[[Context], list[SourceImage]]:
    return lambda ctx: _sampled(ctx, name)[0]


# the per-image tasks: one question per image, on a seeded sample of the images when --max-per-task caps them
SAMPLED = (*VARIANTS, "blurred_object", "noisy_object", "brighter_point", "nearer_point")


# name -> (the images it reads, per-image work): run by ava.curate.pixels before the builders
PIXEL_RULES: dict[str, tuple[Callable[[Context], list[SourceImage]] | None, Callable[[Context, SourceImage], Any]]] = {
    **{_key(name): (_sample_of(name), _variant_verdict(name)) for name in VARIANTS},
    **{_key(name): (_sample_of(name), _corrupted_change(name)) for name in CHECKED},
    _key("brighter_point"): (_sample_of("brighter_point"), _brighter_points),
    _key("nearer_point"): (_sample_of("nearer_point"), _nearer_points),
    _key("touching"): (None, _touch_verdicts),
}

# name -> (sources it needs, builder)
TASKS: dict[str, tuple[tuple[str, ...], Callable[[Context], list[Question]]]] = {
    _key("presence"): (("coco",), presence),
    _key("count"): (("coco",), count),
    _key("more_than_one"): (("coco",), more_than_one),
    _key("occluded"): (("coco", "attributes"), occluded),
    _key("truncated"): (("coco",), truncated),
    _key("blurred_object"): (("coco",), blurred_object),
    _key("noisy_object"): (("coco",), noisy_object),
    _key("least_blurred"): (("coco",), _variants_of("least_blurred")),
    _key("not_noisy"): (("coco",), _variants_of("not_noisy")),
    _key("larger"): (("coco",), larger),
    _key("further_left"): (("coco",), further_left),
    _key("further_down"): (("coco",), further_down),
    _key("another_left"): (("coco",), another_left),
    _key("another_below"): (("coco",), another_below),
    _key("touching"): (("coco",), touching),
    _key("facing_camera"): (("coco", "attributes"), facing_camera),
    _key("true_colour_tile"): (("coco",), _variants_of("true_colour_tile")),
    _key("second_brightest"): (("coco",), _variants_of("second_brightest")),
    _key("not_colour_corrupted"): (("coco",), _variants_of("not_colour_corrupted")),
    _key("brighter_point"): (("coco",), brighter_point),
    _key("nearer_object"): (("coco", "depth"), nearer_object),
    _key("nearer_point"): (("coco", "depth"), nearer_point),
    _key("rotated_jigsaw"): (("coco",), _variants_of("rotated_jigsaw")),
    _key("jigsaw"): (("coco",), _variants_of("jigsaw")),
    _key("unrotated"): (("coco",), _variants_of("unrotated")),
}
