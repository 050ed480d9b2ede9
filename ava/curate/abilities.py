"""The 14 AVA abilities, built by the paper's curation rules (docs/build.md) from the sources at hand.

Each ``build_<ability>(ctx)`` proposes questions, drops (and counts) what a rule does not keep, balances the
answers as the paper does, and returns the kept questions. ``BUILDERS`` says which sources each one needs.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ava.abilities import EMOTIONS, INDOOR_DEPTH_BINS, ORIENTATION_VIEWS, OUTDOOR_DEPTH_BINS, SPATIAL_ANSWERS
from ava.abilities.subgroups import INDOOR_MAX_DEPTH
from ava.curate.core import (
    BLUE,
    RED,
    Change,
    Context,
    Drop,
    Question,
    ask,
    balance,
    box_mark,
    cached_image,
    fmt_box,
    fmt_rgb,
    marked,
    option_truth,
    padded,
    plain,
    plural,
)
from ava.curate.sources import Instance, SourceError, SourceImage

AREA_RANGE = (0.002, 0.5)  # normalized box area kept for localization and recognition (the paper's rule)
MAX_COUNT = 40
COUNTS_PER_CLASS = 5  # the paper: 4-5 distinct counts per object class
MIN_DEPTH_DIFF = 0.5  # m, relative depth
MIN_OCR_HEIGHT = 6  # px: a word box lower than this cannot be read at any input size


def _origin(im: SourceImage, *anns: Instance) -> dict:
    return {"file": im.file_name, "image_id": im.id, "annotations": [a.id for a in anns]}


def _meta(ctx: Context, im: SourceImage, *anns: Instance, **extra: object) -> dict:
    return {"source": ctx.source_name, "origin": _origin(im, *anns), **extra}


def _area(a: Instance, im: SourceImage) -> float:
    return a.bbox[2] * a.bbox[3] / (im.width * im.height)


def usable_instances(im: SourceImage) -> list[Instance]:
    """An image's instances that can be asked about: not crowd regions, not zero-area boxes."""
    return [a for a in im.instances if a.bbox[2] > 0 and a.bbox[3] > 0 and not a.iscrowd]


def instances_by_class(im: SourceImage) -> dict[str, list[Instance]]:
    """An image's instances (crowd regions too) by class."""
    groups: dict[str, list[Instance]] = defaultdict(list)
    for a in im.instances:
        groups[a.category].append(a)
    return groups


def images_with_objects(ctx: Context, ava: str) -> list[tuple[SourceImage, list[Instance]]]:
    """Images with their usable instances; crowd regions and zero-area boxes are dropped and counted here."""
    out = []
    for im in ctx.coco.images.values():  # type: ignore[union-attr]
        for a in im.instances:
            if a.bbox[2] <= 0 or a.bbox[3] <= 0 or a.iscrowd:
                ctx.summary.consider(ava)
            if a.bbox[2] <= 0 or a.bbox[3] <= 0:
                ctx.summary.drop(ava, "box of zero area", f"annotation {a.id}")
            elif a.iscrowd:
                ctx.summary.drop(ava, "crowd region (iscrowd=1): not one object", f"annotation {a.id}")
        out.append((im, usable_instances(im)))
    return out


# -- from instances -------------------------------------------------------------------------------------------------


def build_localization(ctx: Context) -> list[Question]:
    out = []
    for im, anns in images_with_objects(ctx, "localization"):
        names = [a.category for a in im.instances]  # a crowd region of the class makes the name ambiguous too
        for a in anns:
            ctx.summary.consider("localization")
            if not AREA_RANGE[0] < _area(a, im) < AREA_RANGE[1]:
                ctx.summary.drop("localization", "box area outside (0.002, 0.5) of the image", f"annotation {a.id}")
                continue
            if names.count(a.category) > 1:  # the question names the class: with two, either box would be right
                ctx.summary.drop("localization", "class not unique in its image", f"annotation {a.id}")
                continue
            box = padded_box(im, a)
            area_bin = _area_bin((box[2] - box[0]) * (box[3] - box[1]))
            out.append(
                Question(
                    "localization",
                    f"{im.id}-{a.id}",
                    ask("localization", object=f"the {a.category}"),
                    fmt_box(box),
                    {"box": box},
                    None,
                    _meta(ctx, im, a, **{"class": a.category}),
                    padded(im.path),
                    f"{a.category}|{area_bin}",
                    area_bin,
                )
            )
    return out


def padded_box(im: SourceImage, a: Instance) -> list[float]:
    """``a``'s box (x1, y1, x2, y2) normalized in its image padded to a square (what localization answers and
    recognition shows)."""
    side = max(im.width, im.height)
    ox, oy = (side - im.width) // 2, (side - im.height) // 2
    x1, y1, x2, y2 = a.xyxy
    return [
        round((x1 + ox) / side, 4),
        round((y1 + oy) / side, 4),
        round((x2 + ox) / side, 4),
        round((y2 + oy) / side, 4),
    ]


def _area_bin(area: float) -> str:
    return next(
        label
        for upper, label in ((0.1, "0-0.1"), (0.2, "0.1-0.2"), (0.3, "0.2-0.3"), (0.5, "0.3-0.5"), (9.0, ">0.5"))
        if area <= upper
    )


def boxed(
    im: SourceImage,
    red: Instance | None = None,
    blue: Instance | None = None,
    pad: bool = False,
    edit: Change | None = None,
) -> Callable[[], Image.Image]:
    """The source image (``edit``-ed, padded where asked) with a red box around ``red``, a blue one around
    ``blue``."""
    marks = [box_mark(a.xyxy, c) for a, c in ((red, RED), (blue, BLUE)) if a is not None]
    return marked(im.path, marks, pad, edit)


def _crop(im: SourceImage, a: Instance) -> Callable[[], Image.Image]:
    """The object's box cut from its image (what a --miner ranks the classes for)."""
    return lambda: cached_image(im.path).crop(tuple(round(v) for v in a.xyxy))  # crop() copies


def build_recognition(ctx: Context) -> list[Question]:
    classes = ctx.coco.class_names  # type: ignore[union-attr]
    out = []
    for im, anns in images_with_objects(ctx, "recognition"):
        for a in anns:
            ctx.summary.consider("recognition")
            if not AREA_RANGE[0] < _area(a, im) < AREA_RANGE[1]:
                ctx.summary.drop("recognition", "box area outside (0.002, 0.5) of the image", f"annotation {a.id}")
                continue
            options = ctx.options_for(
                "recognition", a.category, classes, a.id, image=(f"{im.file_name}#{a.id}", _crop(im, a))
            )
            # box: where the object is in the question's image, so a miner reads the object, not the photo;
            # image_classes: the photo's other objects, which ava data options reports a distractor share of
            meta = _meta(
                ctx,
                im,
                a,
                **{
                    "class": a.category,
                    "box": padded_box(im, a),
                    "image_classes": sorted({o.category for o in im.instances}),
                },
            )
            out.append(
                Question(
                    "recognition",
                    f"{im.id}-{a.id}",
                    ask("recognition", options),
                    a.category,
                    option_truth(options, a.category),
                    options,
                    meta,
                    boxed(im, a, pad=True),
                    a.category,
                    a.category,
                )
            )
    return out


def build_counting(ctx: Context) -> list[Question]:
    per_class: dict[str, list[Question]] = defaultdict(list)
    for im in ctx.coco.images.values():  # type: ignore[union-attr]
        for cls, anns in sorted(instances_by_class(im).items()):
            ctx.summary.consider("counting")
            n = sum(not a.iscrowd for a in anns)
            if any(a.iscrowd for a in anns):
                ctx.summary.drop("counting", "a crowd region of the class: count unknown", f"image {im.id} {cls}")
            elif not 1 <= n <= MAX_COUNT:
                ctx.summary.drop("counting", "count outside 1..40", f"image {im.id} {cls}")
            else:
                per_class[cls].append(
                    Question(
                        "counting",
                        f"{im.id}-{cls}",
                        ask("counting", object=plural(cls)),
                        str(n),
                        {"value": n},
                        None,
                        _meta(ctx, im, *anns, **{"class": cls, "count": n}),
                        plain(im.path),
                        f"{cls}|{n}",
                        str(n),
                    )
                )
    out = []
    for _cls, qs in sorted(per_class.items()):
        freq = defaultdict(int)
        for q in qs:
            freq[q.truth["value"]] += 1
        chosen = set(sorted(freq, key=lambda c: (-freq[c], c))[:COUNTS_PER_CLASS])
        for q in qs:
            if q.truth["value"] not in chosen:
                ctx.summary.drop("counting", f"count not among its class's {COUNTS_PER_CLASS} most frequent", q.id)
        out += [q for q in qs if q.truth["value"] in chosen]
    return balance(
        out, lambda q: q.truth["value"], ctx.summary, "count balance per class", groups=lambda q: q.meta["class"]
    )


Judge = Callable[[Instance, Instance], Any]  # a pair's verdict, or a Drop naming the rule it breaks


def judged_pairs(
    ctx: Context, ava: str, im: SourceImage, anns: list[Instance], judge: Judge
) -> list[tuple[Instance, Instance, Any]]:
    """Every unordered pair of an image's instances judged by ``judge(a, b)``; of the pairs that pass every rule,
    at most ``ctx.max_pairs`` (a seeded choice among them, so a crowded image does not dominate the ability), with
    their verdicts. The rest are counted: by the rule a pair broke, or as capped. Filters first, the cap after:
    a cap drawn before the rules would spend itself on pairs they drop."""
    passed = []
    for a, b in itertools.combinations(anns, 2):
        ctx.summary.consider(ava)
        verdict = judge(a, b)
        if isinstance(verdict, Drop):
            ctx.summary.drop(ava, verdict, f"annotations {a.id},{b.id}")
        else:
            passed.append((a, b, verdict))
    order = ctx.rng(ava, "pairs", im.id).permutation(len(passed))
    for i in order[ctx.max_pairs :]:
        a, b, _ = passed[i]
        ctx.summary.cap(ava, f"over --max-pairs {ctx.max_pairs} pairs per image", f"annotations {a.id},{b.id}")
    return [passed[i] for i in sorted(order[: ctx.max_pairs])]


def _spatial_answer(r: Instance, b: Instance) -> str | None:
    rx1, ry1, rx2, ry2 = r.xyxy
    bx1, by1, bx2, by2 = b.xyxy
    horiz = "Left" if rx2 <= bx1 else "Right" if bx2 <= rx1 else None
    vert = "above" if ry2 <= by1 else "below" if by2 <= ry1 else None
    return f"{horiz} {vert}" if horiz and vert else None


def build_spatial(ctx: Context) -> list[Question]:
    """Pairs that do not overlap horizontally or vertically; which is red is chosen so the 4 answers stay level,
    then each answer is cut to the rarest one's count. ``ctx.boxes`` False: the paper's variant without boxes
    (Figure 8a), which needs both classes unique in the image."""
    counts = dict.fromkeys(SPATIAL_ANSWERS, 0)
    out = []
    for im, anns in images_with_objects(ctx, "spatial"):
        names = [a.category for a in im.instances]  # a crowd region of the class makes the name ambiguous too

        def judge(a: Instance, b: Instance, im: SourceImage = im, names: list[str] = names) -> Drop | None:
            if min(_area(a, im), _area(b, im)) <= AREA_RANGE[0]:
                return Drop("a box under 0.002 of the image")
            if _spatial_answer(a, b) is None:
                return Drop("boxes overlap horizontally or vertically")
            if not ctx.boxes and (
                a.category == b.category or names.count(a.category) > 1 or names.count(b.category) > 1
            ):
                return Drop("no boxes drawn: a class not unique in its image")
            return None

        for a, b, _ in judged_pairs(ctx, "spatial", im, anns, judge):
            flip = counts[_spatial_answer(b, a)] < counts[_spatial_answer(a, b)]  # type: ignore[index]
            red, blue = (b, a) if flip else (a, b)
            answer = _spatial_answer(red, blue)
            counts[answer] += 1  # type: ignore[index]
            out.append(_spatial_question(ctx, im, red, blue, answer))  # type: ignore[arg-type]
    return balance(out, lambda q: q.answer, ctx.summary, "answer balance", expect=SPATIAL_ANSWERS)


def _spatial_question(ctx: Context, im: SourceImage, red: Instance, blue: Instance, answer: str) -> Question:
    options = list(SPATIAL_ANSWERS)
    text = ask("spatial", options, a=red.category, b=blue.category)
    if not ctx.boxes:
        text = text.replace(" (annotated by the red box)", "").replace(" (annotated by the blue box)", "")
    render = boxed(im, red, blue) if ctx.boxes else plain(im.path)
    return Question(
        "spatial",
        f"{im.id}-{red.id}-{blue.id}",
        text,
        answer,
        option_truth(options, answer),
        options,
        _meta(ctx, im, red, blue, **{"class": red.category, "reference": blue.category, "boxes": ctx.boxes}),
        render,
        f"{answer}|{red.category}-{blue.category}",
        answer,
    )


# -- from depth -----------------------------------------------------------------------------------------------------


def instance_depths(ctx: Context, im: SourceImage, anns: list[Instance]) -> dict[int, tuple[float, float]] | None:
    """Per instance (closest point, median) depth in metres within its mask (absent: no valid depth there);
    None when the image has no depth map. The mask loses its edge pixels first (when anything is left): there a
    touching neighbour's depth may stand, and the closest point would be the neighbour's."""
    from scipy.ndimage import binary_erosion

    depth = ctx.depth.load(im)  # type: ignore[union-attr]
    if depth is None:
        return None
    out = {}
    for a in anns:
        mask = a.mask
        inner = binary_erosion(mask)
        values = depth[inner if inner.any() else mask]
        values = values[np.isfinite(values)]
        if values.size:
            out[a.id] = (float(values.min()), float(np.median(values)))
    return out


def build_abs_depth(ctx: Context) -> list[Question]:
    if not ctx.depth.metric:  # type: ignore[union-attr]
        return []  # a relative-depth model's map has no metres
    out = []
    for im, anns in images_with_objects(ctx, "abs_depth"):
        if not anns:
            continue
        depths = instance_depths(ctx, im, anns)
        for a in anns:
            ctx.summary.consider("abs_depth")
            if depths is None:
                ctx.summary.drop("abs_depth", "no depth map for the image", im.file_name)
                continue
            if a.id not in depths:
                ctx.summary.drop("abs_depth", "no valid depth inside the mask", f"annotation {a.id}")
                continue
            if _area(a, im) <= AREA_RANGE[0]:
                ctx.summary.drop("abs_depth", "a box under 0.002 of the image", f"annotation {a.id}")
                continue
            closest = depths[a.id][0]
            bins = INDOOR_DEPTH_BINS if closest < INDOOR_MAX_DEPTH else OUTDOOR_DEPTH_BINS
            label = next((b for b in bins if float(b.split("-")[0]) <= closest < float(b.split("-")[1])), None)
            if label is None:
                ctx.summary.drop("abs_depth", "closest point outside the bins (1-7 m, 8-31 m)", f"annotation {a.id}")
                continue
            options = list(bins)
            lo, hi = (float(v) for v in label.split("-"))
            scene = "indoor" if bins is INDOOR_DEPTH_BINS else "outdoor"
            out.append(
                Question(
                    "abs_depth",
                    f"{im.id}-{a.id}",
                    ask("abs_depth", options, object=a.category),
                    label,
                    {"index": options.index(label), "bin": [lo, hi]},
                    options,
                    _meta(ctx, im, a, **{"class": a.category, "scene_type": scene, "depth_m": round(closest, 3)}),
                    boxed(im, a),
                    f"{a.category}|{label}",
                    label,
                )
            )
    return balance(out, lambda q: q.answer, ctx.summary, "depth-bin balance")


def _min_diff(ctx: Context, za: float, zb: float) -> float:
    """0.5 m on metric maps; 10% of the nearer depth on a relative-depth model's map (it has no metres)."""
    return MIN_DEPTH_DIFF if ctx.depth.metric else 0.1 * min(za, zb)  # type: ignore[union-attr]


def build_rel_depth(ctx: Context) -> list[Question]:
    """Pairs whose median depths differ by >= 0.5 m; pairs are taken only while they keep every class as often
    nearer as farther (within one), and red/blue is chosen so each red class answers "red" as often as "blue"."""
    pairs = []
    for im, anns in images_with_objects(ctx, "rel_depth"):
        if len(anns) < 2:
            continue
        depths = instance_depths(ctx, im, anns)

        def judge(a: Instance, b: Instance, depths: dict | None = depths, im: SourceImage = im) -> Drop | None:
            if depths is None:
                return Drop("no depth map for the image")
            if a.id not in depths or b.id not in depths:
                return Drop("an object without depth")
            if abs(depths[a.id][1] - depths[b.id][1]) < _min_diff(ctx, depths[a.id][1], depths[b.id][1]):
                return Drop(
                    "depths differ by less than 0.5 m"
                    if ctx.depth.metric  # type: ignore[union-attr]
                    else "relative depths differ by less than 10%"
                )
            return None

        for a, b, _ in judged_pairs(ctx, "rel_depth", im, anns, judge):
            near, far = (a, b) if depths[a.id][1] < depths[b.id][1] else (b, a)  # type: ignore[index]
            pairs.append((im, near, far, depths[near.id][1], depths[far.id][1]))  # type: ignore[index]
    unit = "_m" if ctx.depth.metric else "_relative"  # type: ignore[union-attr]
    side = defaultdict(int)  # class -> (#nearer - #farther)
    answers = defaultdict(int)  # red class -> (#red - #blue)
    out = []
    for im, near, far, zn, zf in pairs:
        if near.category != far.category and (side[near.category] > 0 or side[far.category] < 0):
            ctx.summary.drop(
                "rel_depth",
                "class balance: would make a class nearer more often than farther",
                f"annotations {near.id},{far.id}",
            )
            continue
        if near.category != far.category:
            side[near.category] += 1
            side[far.category] -= 1
        red_near = (
            answers[near.category] <= -answers[far.category]
            if near.category != far.category
            else (answers[near.category] <= 0)
        )
        red, blue, answer = (near, far, "red") if red_near else (far, near, "blue")
        answers[red.category] += 1 if answer == "red" else -1
        options = ["red", "blue"]
        out.append(
            Question(
                "rel_depth",
                f"{im.id}-{red.id}-{blue.id}",
                ask("rel_depth", options, a=red.category, b=blue.category),
                answer,
                option_truth(options, answer),
                options,
                _meta(
                    ctx,
                    im,
                    red,
                    blue,
                    **{
                        "class": red.category,
                        f"depth_red{unit}": round(zn if red is near else zf, 3),
                        f"depth_blue{unit}": round(zf if red is near else zn, 3),
                    },
                ),
                boxed(im, red, blue),
                f"{red.category}|{answer}",
                answer,
            )
        )
    return balance(out, lambda q: q.answer, ctx.summary, "answer balance", expect=("red", "blue"))


# -- from text ------------------------------------------------------------------------------------------------------


def build_ocr(ctx: Context) -> list[Question]:
    out = []
    for w in ctx.words or []:
        ctx.summary.consider("ocr")
        x, y, bw, bh = w.bbox
        if bw <= 0 or bh <= 0:
            ctx.summary.drop("ocr", "box of zero area", f"word {w.id}")
        elif not w.legible:
            ctx.summary.drop("ocr", "illegible or without transcription", f"word {w.id}")
        elif bh < MIN_OCR_HEIGHT:
            ctx.summary.drop("ocr", f"word box lower than {MIN_OCR_HEIGHT} px", f"word {w.id}")
        else:
            n = len(w.text)
            length = "1-5" if n <= 5 else "6-10" if n <= 10 else "11-20" if n <= 20 else ">20"

            x, y, bw, bh = w.bbox
            render = marked(w.image.path, [box_mark((x, y, x + bw, y + bh), RED)])
            out.append(
                Question(
                    "ocr",
                    f"{w.image.id}-{w.id}",
                    ask("ocr"),
                    w.text,
                    {"text": w.text},
                    None,
                    {
                        "source": "text",
                        "origin": {"file": w.image.file_name, "image_id": w.image.id, "annotations": [w.id]},
                    },
                    render,
                    f"len {length}",
                    f"len {length}",
                )
            )
    return out


# -- colour ---------------------------------------------------------------------------------------------------------

SLIC_SIDE = 64  # superpixels are found on a copy this wide (speed); their mean colour is read at full size
SLIC_SEGMENTS = 48
SLIC_ITERATIONS = 5  # k-means steps (skimage's default is 10; the large flat regions this rule keeps settle in fewer)
MAX_COLOR_STD = 12.0  # per-channel standard deviation (0..255) inside a superpixel: above it, no one colour
MIN_FILL = 0.6  # the superpixel covers at least this share of its box, so the box shows mostly that colour
MIN_REGION = 0.004  # of the image


def color_regions(image: Image.Image) -> list[tuple[tuple[int, int, int, int], np.ndarray, float, float, float, int]]:
    """SLIC superpixels of ``image``, found on a copy SLIC_SIDE wide: (box in full-size px, mean RGB, largest
    channel std, box fill, area share, label) for each, all measured on that copy."""
    from scipy.ndimage import find_objects
    from skimage.segmentation import slic

    w, h = image.size
    scale = min(1.0, SLIC_SIDE / max(w, h))
    # reducing_gap 1: averaged by whole factors first (as a box filter), then resampled: a quarter of a bilinear
    # resize's time at these sizes
    small = (
        image.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BILINEAR, reducing_gap=1.0)
        if scale < 1
        else image
    )
    labels = slic(
        np.asarray(small), n_segments=SLIC_SEGMENTS, compactness=10, start_label=1, max_num_iter=SLIC_ITERATIONS
    )
    flat = labels.ravel()
    pixels = np.asarray(small, dtype=np.float64).reshape(-1, 3)
    n = np.bincount(flat)
    sums = np.stack([np.bincount(flat, pixels[:, c], minlength=len(n)) for c in range(3)], 1)
    squares = np.stack([np.bincount(flat, pixels[:, c] ** 2, minlength=len(n)) for c in range(3)], 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # labels SLIC did not use (n = 0) are skipped below
        means = sums / n[:, None]
        stds = np.sqrt(np.maximum(squares / n[:, None] - means**2, 0.0)).max(1)
    sx, sy = w / small.width, h / small.height
    out = []
    for label, sl in enumerate(find_objects(labels), 1):
        if sl is None:
            continue
        box = (
            int(sl[1].start * sx),
            int(sl[0].start * sy),
            int(math.ceil(sl[1].stop * sx)),
            int(math.ceil(sl[0].stop * sy)),
        )
        fill = n[label] / ((sl[1].stop - sl[1].start) * (sl[0].stop - sl[0].start))
        out.append((box, means[label], float(stds[label]), float(fill), float(n[label] / flat.size), label))
    _LABELS[0] = labels
    return out


_LABELS: list[np.ndarray] = [np.zeros((1, 1), int)]  # the superpixels of the last color_regions call


def region_colour(image: Image.Image, label: int) -> tuple[np.ndarray, float] | None:
    """Mean colour and largest channel std of one superpixel of the last :func:`color_regions` call, over the
    full-size pixels inside it (its labels scaled up, then shrunk by the scale factor so the pixels at its edge,
    where the small copy blended two colours, do not count); None when nothing is left inside."""
    from scipy.ndimage import binary_erosion

    labels = _LABELS[0]
    w, h = image.size
    rows = (np.arange(h) * labels.shape[0]) // h
    cols = (np.arange(w) * labels.shape[1]) // w
    # Only the full-size rows and columns the superpixel reaches: outside them the mask is empty, and erosion
    # (border 0) gives the same pixels on that window as on the whole image.
    ys, xs = np.nonzero(labels == label)
    r = np.nonzero((rows >= ys.min()) & (rows <= ys.max()))[0]
    c = np.nonzero((cols >= xs.min()) & (cols <= xs.max()))[0]
    y0, y1, x0, x1 = int(r[0]), int(r[-1]) + 1, int(c[0]), int(c[-1]) + 1
    mask = labels[rows[y0:y1]][:, cols[x0:x1]] == label
    shrink = math.ceil(max(w / labels.shape[1], h / labels.shape[0]))
    inside = binary_erosion(mask, iterations=shrink) if shrink > 1 else mask
    if not inside.any():
        return None
    values = np.asarray(image.crop((x0, y0, x1, y1)), dtype=np.float64)[inside]
    return values.mean(0), float(values.std(0).max())


def colour_of(path: Path) -> tuple[str, Any, Any]:
    """The colour question of one image: ("ok", box, mean RGB) or ("drop", reason, None)."""
    image = cached_image(path)  # read only here: no copy
    regions = color_regions(image)
    ok = [r for r in regions if r[2] <= MAX_COLOR_STD and r[3] >= MIN_FILL and r[4] >= MIN_REGION]
    if not ok:
        reason = (
            "no superpixel of one colour"
            if all(r[2] > MAX_COLOR_STD for r in regions)
            else "no one-colour superpixel filling its box and large enough"
        )
        return "drop", reason, None
    for box, *_, label in sorted(ok, key=lambda r: (-r[4], r[0])):  # the largest first
        measured = region_colour(image, label)
        if measured is not None and measured[1] <= MAX_COLOR_STD:
            return "ok", box, measured[0]
    return "drop", "no superpixel of one colour at full size", None


def build_color(ctx: Context) -> list[Question]:
    """One superpixel per image: the largest one of a single colour (low spread) that fills most of its box."""
    out = []
    images = list(ctx.coco.images.values()) if ctx.coco else []
    for im in images:
        status, box, mean = ctx.pixels["color"][im.id]
        ctx.summary.consider("color")
        if status == "drop":
            ctx.summary.drop("color", box, im.file_name)
            continue
        rgb = [int(round(v)) for v in mean]
        cell = "rgb " + "".join(str(min(c, 255) * 3 // 256) for c in rgb)

        render = marked(im.path, [box_mark(box, RED)])
        meta = {
            "source": ctx.coco.path.stem,
            "origin": {"file": im.file_name, "image_id": im.id, "annotations": []},  # type: ignore[union-attr]
            "region_box": list(box),
        }
        out.append(
            Question("color", f"{im.id}", ask("color"), fmt_rgb(rgb), {"rgb": rgb}, None, meta, render, cell, cell)
        )
    return out


# -- class folders --------------------------------------------------------------------------------------------------

FIXED_CLASSES = {"emotion": EMOTIONS, "orientation": ORIENTATION_VIEWS}


def build_from_folders(ctx: Context, ava: str) -> list[Question]:
    folders = ctx.classes[ava]
    classes = sorted(folders.classes)
    fixed = FIXED_CLASSES.get(ava)
    if fixed:
        unknown = [c for c in classes if c not in fixed]
        if unknown:
            raise SourceError(f"{folders.root}: class folder(s) {unknown} are not {ava} classes ({', '.join(fixed)})")
    out = []
    for cls in classes:
        for path in folders.classes[cls]:
            ctx.summary.consider(ava)
            rel = str(path.relative_to(folders.root))
            if fixed:
                options = list(fixed)
            elif ava == "texture":
                options = classes  # the paper lists every texture class, in order
            else:
                options = ctx.options_for(ava, cls, classes, rel, image=(rel, plain(path)))
            fields = {"object": "object", "family": ctx.family}
            text = ask(ava, options, **fields)
            render = _framed(path) if ava == "emotion" else plain(path)
            out.append(
                Question(
                    ava,
                    rel.replace("/", "_"),
                    text,
                    cls,
                    option_truth(options, cls),
                    options,
                    {"source": folders.root.name, "class": cls, "origin": {"file": rel, "annotations": []}},
                    render,
                    cls,
                    cls,
                )
            )
    return out


def _framed(path) -> Callable[[], Image.Image]:
    """Emotion asks about "the person in the red box": a class folder holds face crops, so the box frames the
    whole image."""
    return marked(path, [("frame", (), RED)])


# ability -> (the images it reads, per-image work): run by ava.curate.pixels before the builders
PIXEL_RULES: dict[str, tuple[Any, Callable[[Context, SourceImage], Any]]] = {
    "color": (None, lambda ctx, im: colour_of(im.path)),
}

FOLDER_ABILITIES = ("fine_grained", "action", "texture", "scene", "emotion", "orientation")
# ability -> (sources it needs, builder)
BUILDERS: dict[str, tuple[tuple[str, ...], Callable[[Context], list[Question]]]] = {
    "localization": (("coco",), build_localization),
    "counting": (("coco",), build_counting),
    "abs_depth": (("coco", "depth"), build_abs_depth),
    "rel_depth": (("coco", "depth"), build_rel_depth),
    "ocr": (("text",), build_ocr),
    "recognition": (("coco",), build_recognition),
    "spatial": (("coco",), build_spatial),
    "color": (("coco",), build_color),
    **{a: ((f"classes:{a}",), lambda ctx, a=a: build_from_folders(ctx, a)) for a in FOLDER_ABILITIES},
}
