"""`ava data build` from the synthetic sources: every kept question reproduces the generator's truth, answers are
balanced, the split keeps its strata, and the same seed builds the same bytes."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ava.abilities import ABILITIES, ABILITY_KEYS, TASK_KEYS
from ava.abilities.parsers import parse_reply
from ava.curate import BuildConfig, build_dataset
from ava.curate.synthetic import write_sources
from ava.curate.tasks import TILE
from ava.data.format import Dataset, Sample

N_IMAGES = 24


def _config(src: Path, out: Path, **kw: object) -> BuildConfig:
    return BuildConfig(
        out=out,
        coco=src / "instances.json",
        images=src / "images",
        depth=src / "depth",
        classes=[str(src / "classes")],
        text=src / "text.json",
        attributes=src / "raters.csv",
        **kw,
    )  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Dataset, dict]:
    root = tmp_path_factory.mktemp("build")
    truth = write_sources(root / "src", n_images=N_IMAGES, seed=0)
    result = build_dataset(_config(root / "src", root / "out"))
    assert not result.skipped
    return root, Dataset(root / "out"), truth


def _inst(truth: dict, s: Sample, k: int = 0) -> dict:
    return truth["instances"][str(s.meta["origin"]["annotations"][k])]


def _centre(box: list[float]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def _poly_area(src: Path, ann_id: int) -> float:
    """The shoelace area of the annotation's polygon as written to instances.json."""
    coco = json.loads((src / "instances.json").read_text())
    poly = np.asarray(next(a for a in coco["annotations"] if a["id"] == ann_id)["segmentation"][0]).reshape(-1, 2)
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))


def _red_blue(s: Sample, truth: dict) -> tuple[dict, dict]:
    """The truth of the red and the blue object: the sample's annotations in the order red, blue."""
    return _inst(truth, s, 0), _inst(truth, s, 1)


def _padded_box(box: list, w: int, h: int) -> list[float]:
    """A box of a w x h picture in the padded square's normalized coordinates (the picture centred)."""
    side = max(w, h)
    ox, oy = (side - w) // 2, (side - h) // 2
    return [(box[0] + ox) / side, (box[1] + oy) / side, (box[2] + ox) / side, (box[3] + oy) / side]


def _check(s: Sample, truth: dict, src: Path) -> bool:
    """Whether one kept sample agrees with what the generator drew (per ability, from truth.json or the pixels)."""
    ava, a = s.ava, s.answer
    image_id = str(s.meta["origin"].get("image_id"))
    if ava == "localization":
        t = _inst(truth, s)
        want = _padded_box(t["box"], *_size(truth, src, image_id))
        return np.allclose(s.truth["box"], want, atol=1e-3) and s.meta["class"] == t["class"]
    if ava == "recognition":  # meta.box: where the object is in the padded picture, what a miner pools under
        t = _inst(truth, s)
        want = _padded_box(t["box"], *_size(truth, src, image_id))
        shown = {v["class"] for v in truth["instances"].values() if str(v["image_id"]) == image_id}
        return (
            a == t["class"]
            and s.options[s.truth["index"]] == a
            and np.allclose(s.meta["box"], want, atol=1e-3)
            and set(s.meta["image_classes"]) == shown
        )
    if ava in ("counting", "ta_count"):
        return s.truth["value"] == truth["counts"][image_id][s.meta["class"]]
    if ava == "spatial":
        r, b = _red_blue(s, truth)
        horiz = "Left" if r["box"][2] <= b["box"][0] else "Right"
        vert = "above" if r["box"][3] <= b["box"][1] else "below"
        return a == f"{horiz} {vert}"
    if ava == "abs_depth":
        lo, hi = s.truth["bin"]
        return lo <= _inst(truth, s)["depth_m"] < hi
    if ava in ("rel_depth", "ta_nearer_object"):
        r, b = _red_blue(s, truth)
        return a == ("red" if r["depth_m"] < b["depth_m"] else "blue")
    if ava == "ocr":
        return a == truth["words"][str(s.meta["origin"]["annotations"][0])]
    if ava == "color":
        return _color_ok(s, truth, src)
    if ava in ("fine_grained", "action", "texture", "scene", "emotion", "orientation"):
        return truth["classes"][ava][s.meta["origin"]["file"]] == a
    return _check_task(s, truth, src)


def _size(truth: dict, src: Path, image_id: str) -> tuple[int, int]:
    return Image.open(src / "images" / truth["images"][image_id]["file"]).size


def _color_ok(s: Sample, truth: dict, src: Path) -> bool:
    """The colour is the one drawn under most of the red box (background or a shape), within 3 per channel."""
    image = np.asarray(Image.open(src / "images" / truth["images"][str(s.meta["origin"]["image_id"])]["file"]))
    x1, y1, x2, y2 = s.meta["region_box"]
    values, counts = np.unique(image[y1:y2, x1:x2].reshape(-1, 3), axis=0, return_counts=True)
    return bool(np.abs(values[counts.argmax()] - np.asarray(s.truth["rgb"])).max() <= 3)


def _check_task(s: Sample, truth: dict, src: Path) -> bool:
    ava, a = s.ava, s.answer
    image_id = str(s.meta["origin"].get("image_id"))
    counts = truth["counts"].get(image_id, {})
    if ava == "ta_presence":
        return a == ("yes" if s.meta["class"] in counts else "no")
    if ava == "ta_more_than_one":
        return a == ("yes" if counts[s.meta["class"]] > 1 else "no")
    if ava == "ta_truncated":
        return a == ("yes" if _inst(truth, s)["truncated"] else "no")
    if ava == "ta_touching":
        pair = sorted(s.meta["origin"]["annotations"])
        return a == ("yes" if pair in truth["touching"] else "no")
    if ava == "ta_larger":
        red, blue = s.meta["origin"]["annotations"]
        return a == ("red" if _poly_area(src, red) > _poly_area(src, blue) else "blue")
    if ava == "ta_further_left":
        r, b = _red_blue(s, truth)
        return a == ("red" if _centre(r["box"])[0] < _centre(b["box"])[0] else "blue")
    if ava == "ta_further_down":
        r, b = _red_blue(s, truth)
        return a == ("red" if _centre(r["box"])[1] > _centre(b["box"])[1] else "blue")
    if ava in ("ta_another_left", "ta_another_below"):
        t = _inst(truth, s)
        others = [o for o in truth["instances"].values() if o["image_id"] == t["image_id"] and o is not t]
        if ava == "ta_another_left":
            beyond = any(o["box"][2] <= t["box"][0] for o in others)
        else:
            beyond = any(o["box"][1] >= t["box"][3] for o in others)
        return a == ("yes" if beyond else "no")
    if ava in ("ta_occluded", "ta_facing_camera"):
        attr = ava[3:]
        fact = truth["attributes"][str(s.meta["origin"]["annotations"][0])][attr]
        return a == fact["majority"] and abs(s.meta["ambiguity"] - fact["ambiguity"]) < 1e-3
    if ava in ("ta_blurred_object", "ta_noisy_object"):
        return _corrupted_ok(s, truth, src)
    if ava in ("ta_brighter_point", "ta_nearer_point"):
        return _points_ok(s, truth, src)
    return _variant_ok(s, truth, src)


def _source(truth: dict, src: Path, s: Sample, folder: str = "images") -> Image.Image:
    return Image.open(src / folder / truth["images"][str(s.meta["origin"]["image_id"])]["file"])


def _stored(built_root: Path, s: Sample) -> np.ndarray:
    return np.asarray(Image.open(built_root / "out" / "images" / s.image).convert("RGB"), np.float32)


def _corrupted_ok(s: Sample, truth: dict, src: Path) -> bool:
    """Inside the object's box, the stored image differs from the source exactly when the answer is "yes"."""
    t = _inst(truth, s)
    x1, y1, x2, y2 = (round(v) for v in t["box"])
    stored = _STORE[0] / "out" / "images" / s.image
    a = np.asarray(Image.open(stored).convert("RGB"), np.float32)[y1:y2, x1:x2]
    b = np.asarray(_source(truth, src, s).convert("RGB"), np.float32)[y1:y2, x1:x2]
    changed = float(np.abs(a - b).mean()) >= 1.0
    return changed == (s.answer == "yes")


def _points_ok(s: Sample, truth: dict, src: Path) -> bool:
    """The answer is the brighter (nearer) point's colour; ``meta.values`` are red's then blue's value, as every
    pair task gives them: luminance, or depth in metres."""
    red, blue = s.meta["points"]["red"], s.meta["points"]["blue"]
    v_red, v_blue = s.meta["values"]
    if s.ava == "ta_brighter_point":
        lum = np.asarray(_source(truth, src, s).convert("L"), np.float32)
        return (
            s.answer == ("red" if lum[red[1], red[0]] > lum[blue[1], blue[0]] else "blue")
            and abs(v_red - lum[red[1], red[0]]) <= 10
            and abs(v_blue - lum[blue[1], blue[0]]) <= 10
            and s.meta["values_of"] == "luminance"
        )
    depth = np.asarray(_source(truth, src, s, "depth"), np.float32) / 1000
    return (
        s.answer == ("red" if depth[red[1], red[0]] < depth[blue[1], blue[0]] else "blue")
        and abs(v_red - depth[red[1], red[0]]) <= 0.05
        and abs(v_blue - depth[blue[1], blue[0]]) <= 0.05
        and s.meta["values_of"] == "depth_m"
    )


def _tiles(stored: np.ndarray) -> list[np.ndarray]:
    off = stored.shape[1] - (2 * TILE + 4)
    return [
        stored[
            (i // 2) * (TILE + 4) : (i // 2) * (TILE + 4) + TILE,
            off + (i % 2) * (TILE + 4) + 14 : off + (i % 2) * (TILE + 4) + TILE,
        ]
        for i in range(4)
    ]


def _variant_ok(s: Sample, truth: dict, src: Path) -> bool:
    """The 2x2 grids: the tile at the answer's position is the unchanged one (or, for second brightest, the one
    with the second largest mean); measured on the stored image's pixels."""
    tiles = _tiles(_stored(_STORE[0], s))
    pos = s.truth["index"]
    if s.ava == "ta_second_brightest":
        means = [t.mean() for t in tiles]
        return int(np.argsort(means)[-2]) == pos
    if s.ava in ("ta_least_blurred",):
        sharp = [float((np.diff(t.mean(-1), axis=1) ** 2).mean()) for t in tiles]
        return int(np.argmax(sharp)) == pos
    if s.ava == "ta_not_noisy":
        rough = [float(np.abs(np.diff(t.mean(-1), axis=1)).mean()) for t in tiles]
        return int(np.argmin(rough)) == pos
    base = np.asarray(_source(truth, src, s).convert("RGB"))
    h, w = base.shape[:2]
    side = min(w, h)
    x0, y0 = (w - side) // 2, (h - side) // 2
    square = Image.fromarray(base).crop((x0, y0, x0 + side, y0 + side))
    square = square.resize((2 * TILE, 2 * TILE), Image.Resampling.BOX)
    if s.ava in ("ta_unrotated", "ta_not_colour_corrupted"):
        ref = np.asarray(square.resize((TILE, TILE)), np.float32)[:, 14:]
        diffs = [float(np.abs(t - ref).mean()) for t in tiles]
        return int(np.argmin(diffs)) == pos
    # jigsaw, rotated jigsaw, colour tile: the right tile is the piece of the source under the cut-out
    from ava.curate.tasks import CUT

    x, y = s.meta["cut"]
    ref = np.asarray(square.crop((x, y, x + CUT, y + CUT)).resize((TILE, TILE)), np.float32)[:, 14:]
    diffs = [float(np.abs(t - ref).mean()) for t in tiles]
    return int(np.argmin(diffs)) == pos and diffs[pos] < 1.0


_STORE: list[Path] = []


def test_every_kept_question_reproduces_the_generators_truth(built: tuple[Path, Dataset, dict]) -> None:
    root, ds, truth = built
    _STORE[:] = [root]
    wrong, n = [], Counter()
    for s in ds.samples():
        n[s.ava] += 1
        if not _check(s, truth, root / "src"):
            wrong.append(f"{s.ava} {s.id}: answer {s.answer!r}")
    assert not wrong, f"{len(wrong)} of {sum(n.values())} disagree with the truth: {wrong[:8]}"
    assert set(n) == set(ABILITY_KEYS) | set(TASK_KEYS), set(ABILITY_KEYS) | set(TASK_KEYS) - set(n)
    assert all(v >= 2 for v in n.values()), n


@pytest.mark.parametrize("key", [*ABILITY_KEYS, *TASK_KEYS])
def test_each_ability_and_task_reads_back_its_own_answer(built: tuple[Path, Dataset, dict], key: str) -> None:
    """Every question is filled in, and its reference answer parses back to its truth by the ability's parser."""
    _, ds, _ = built
    ability = ABILITIES.get(key)
    samples = ds.samples(key)
    assert samples
    for s in samples:
        assert "{" not in s.question and s.question.strip()
        value = parse_reply(ability, s.answer, options=s.options, image_size=(s.width, s.height))
        if ability.answer_kind == "option":
            assert value == s.truth["index"] and s.options[value] == s.answer  # type: ignore[index]
        elif ability.answer_kind == "integer":
            assert value == s.truth["value"]
        elif ability.answer_kind == "rgb":
            assert list(value) == s.truth["rgb"]
        elif ability.answer_kind == "text":
            assert value == s.truth["text"]


BALANCED = ["spatial", "rel_depth", "abs_depth"] + [k for k in TASK_KEYS if ABILITIES.get(k).answer_kind == "option"]


@pytest.mark.parametrize("key", BALANCED)
def test_answers_are_balanced(built: tuple[Path, Dataset, dict], key: str) -> None:
    _, ds, _ = built
    answers = Counter(s.answer for s in ds.samples(key))
    assert len(set(answers.values())) == 1, answers
    options = ds.samples(key)[0].options
    if key != "abs_depth":  # every option answered equally often (depth: every bin present)
        assert set(answers) == set(options), (answers, options)  # type: ignore[arg-type]


def test_counting_keeps_at_most_five_counts_per_class_balanced(built: tuple[Path, Dataset, dict]) -> None:
    _, ds, _ = built
    per: dict[str, Counter] = defaultdict(Counter)
    for s in ds.samples("counting"):
        per[s.meta["class"]][s.truth["value"]] += 1
        assert 1 <= s.truth["value"] <= 40
    for cls, counts in per.items():
        assert len(counts) <= 5 and len(set(counts.values())) == 1, (cls, counts)


def test_localization_and_recognition_keep_box_areas_in_range_and_pad_to_square(built) -> None:
    root, ds, truth = built
    for s in ds.samples(["localization", "recognition"]):
        assert s.width == s.height  # padded to a square
        t = _inst(truth, s)
        w, h = _size(truth, root / "src", str(s.meta["origin"]["image_id"]))
        area = (t["box"][2] - t["box"][0]) * (t["box"][3] - t["box"][1]) / (w * h)
        assert 0.002 < area < 0.5


def test_provenance_in_dataset_json_and_every_sample(built: tuple[Path, Dataset, dict]) -> None:
    root, ds, _ = built
    info = json.loads((root / "out" / "dataset.json").read_text())
    build = info["build"]
    assert build["rule_version"] >= 1 and build["seed"] == 0
    for name in ("coco", "depth", "text", "attributes", "images", "classes:texture"):
        assert len(build["sources"][name]["sha256"]) == 64, name
    import hashlib

    assert build["sources"]["coco"]["sha256"] == hashlib.sha256((root / "src/instances.json").read_bytes()).hexdigest()
    assert info["synthetic"] is True and info["split"]["made_by"] == "ava data build"
    # every class each choice ability draws options from, for `ava data options`
    assert build["classes"]["recognition"] == sorted(["disk", "square", "triangle", "diamond", "hexagon"])
    assert build["classes"]["scene"] == ["beach", "forest", "kitchen"]
    for s in ds.samples():
        origin = s.meta["origin"]
        assert origin["file"] and isinstance(origin["annotations"], list), (s.ava, s.id)
    for s in ds.samples(["counting", "spatial", "rel_depth"]):
        assert s.meta["origin"]["annotations"], s.id
    for row in build["summary"]:  # every question considered is kept, dropped by a named rule, or capped
        assert row["considered"] == row["kept"] + row["dropped"] + row["capped"], row
        assert row["capped"] == sum(r["n"] for r in row["reasons"] if r["kind"] == "cap"), row
        assert row["kept"] == len(ds.samples(row["ability"]))


def test_split_is_per_stratum_and_says_where_it_fell_back(built: tuple[Path, Dataset, dict]) -> None:
    _, ds, _ = built
    info = ds.split_info
    assert info and info["made_by"] == "ava data build"
    for key in ds.abilities():
        samples = ds.samples(key)
        test = [s for s in samples if s.split == "test"]
        assert all(s.split in ("train", "test") for s in samples)
        assert abs(len(test) - 0.2 * len(samples)) <= max(2, 0.1 * len(samples)), (key, len(test), len(samples))
    # recognition's classes are strata with >= 5 members: every test class is also in train
    rec = ds.samples("recognition")
    train = {s.answer for s in rec if s.split == "train"}
    assert {s.answer for s in rec if s.split == "test"} <= train
    assert "fell_back_to_coarse" in info["strata"]["counting"]


def test_same_seed_same_bytes_other_seed_other_choices(built: tuple[Path, Dataset, dict], tmp_path: Path) -> None:
    root, _, _ = built
    again = build_dataset(_config(root / "src", tmp_path / "again", ava=["recognition", "spatial"], tasks=[]))
    other = build_dataset(_config(root / "src", tmp_path / "other", ava=["recognition", "spatial"], tasks=[], seed=1))
    assert again.counts and other.counts
    for key in ("recognition", "spatial"):
        first = {s.id: s for s in Dataset(root / "out").samples(key)}
        second = Dataset(tmp_path / "again").samples(key)
        assert [s.to_json() for s in second] == [first[s.id].to_json() for s in second]
    a = [s.options for s in Dataset(tmp_path / "again").samples("recognition")]
    b = [s.options for s in Dataset(tmp_path / "other").samples("recognition")]
    assert a != b  # the seed draws the options


@pytest.mark.slow
def test_workers_do_not_change_a_byte(tmp_path: Path) -> None:
    """Every ability and task, with the pixel pass and the drawing in two forked workers (more images and
    questions than one chunk of either), is the dataset one process builds: the same samples, the same files."""
    write_sources(tmp_path / "src", n_images=40, seed=5)
    one = build_dataset(_config(tmp_path / "src", tmp_path / "one", workers=1))
    two = build_dataset(_config(tmp_path / "src", tmp_path / "two", workers=2))
    assert one.counts == two.counts and len(one.counts) > 30
    for d in ("samples", "images"):
        files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one" / d).rglob("*") if p.is_file())
        assert files == sorted(
            p.relative_to(tmp_path / "two") for p in (tmp_path / "two" / d).rglob("*") if p.is_file()
        )
        assert all((tmp_path / "one" / f).read_bytes() == (tmp_path / "two" / f).read_bytes() for f in files)


@pytest.mark.parametrize("size", [(64, 48), (50, 80), (40, 40)])
def test_marks_drawn_in_place_are_taken_off_exactly(tmp_path: Path, size: tuple[int, int]) -> None:
    """The writer draws boxes and rings on the cached picture itself and puts back what was under them: what it
    encodes is what drawing on a copy gives, and the cached picture is unchanged afterwards, for marks at the
    edges, overlapping, smaller than the outline, and on a padded picture."""
    from ava.curate.core import BLUE, RED, box_mark, cached_image, cached_padded, draw_box, draw_point, marked

    rng = np.random.default_rng(0)
    path = tmp_path / "a.png"
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    w, h = size
    boxes = [(0, 0, w - 1, h - 1), (3, 4, 5, 6), (-5, -5, 10, 12), (w - 8, h - 9, w + 3, h + 3), (10, 5, 30, 40)]
    cases = [[box_mark(b, RED)] for b in boxes] + [
        [box_mark(boxes[4], RED), box_mark(boxes[1], BLUE)],
        [("point", (2.0, 3.0), RED), ("point", (w / 2, h / 2), BLUE)],
        [("frame", (), RED)],
    ]
    for pad in (False, True):
        for marks in cases:
            cached_image.cache_clear()
            cached_padded.cache_clear()
            before = np.asarray(cached_padded(path)[0] if pad else cached_image(path)).copy()
            expected, (ox, oy) = cached_padded(path) if pad else (cached_image(path), (0, 0))
            expected = expected.copy()
            for kind, geometry, color in marks:
                if kind == "point":
                    draw_point(expected, geometry, color)
                else:
                    box = geometry if kind == "box" else (0, 0, w - 1, h - 1)
                    draw_box(expected, box, color, (ox, oy, w, h) if pad else None)
            render = marked(path, marks, pad)
            image, undo, changed = render.drawn()  # type: ignore[attr-defined]
            assert np.array_equal(np.asarray(image), np.asarray(expected)), (pad, marks)
            outside = np.ones(before.shape[:2], bool)  # the writer re-encodes only the rows these boxes reach
            for x0, y0, x1, y1 in changed:
                outside[y0:y1, x0:x1] = False
            assert np.array_equal(np.asarray(image)[outside], before[outside]), (pad, marks)
            undo()
            assert np.array_equal(np.asarray(image), before), (pad, marks)
            assert np.array_equal(np.asarray(render()), np.asarray(expected))
            assert np.array_equal(np.asarray(cached_padded(path)[0] if pad else cached_image(path)), before)


def test_no_boxes_variant_names_objects_unique_in_their_image(tmp_path: Path) -> None:
    truth = write_sources(tmp_path / "src", n_images=80, seed=3)  # unique-class pairs are rarer: more scenes
    build_dataset(_config(tmp_path / "src", tmp_path / "nb", ava=["spatial"], tasks=[], boxes=False))
    samples = Dataset(tmp_path / "nb").samples("spatial")
    assert samples and all("box" not in s.question and not s.meta["boxes"] for s in samples)
    for s in samples:
        counts = truth["counts"][str(s.meta["origin"]["image_id"])]
        assert counts[s.meta["class"]] == 1 and counts[s.meta["reference"]] == 1
        assert _check(s, truth, tmp_path / "src")
    stored = np.asarray(Image.open(tmp_path / "nb" / "images" / samples[0].image))
    source = np.asarray(_source(truth, tmp_path / "src", samples[0]).convert("RGB"))
    assert np.array_equal(stored, source)  # nothing drawn
    info = json.loads((tmp_path / "nb" / "dataset.json").read_text())
    assert info["build"]["options"]["boxes"] is False


def test_options_are_sampled_as_the_paper_does(built: tuple[Path, Dataset, dict], tmp_path: Path) -> None:
    root, ds, _ = built
    rec = ds.samples("recognition")
    assert all(len(s.options) == 5 for s in rec)  # min(70, the 5 classes)  # type: ignore[arg-type]
    assert len({tuple(s.options) for s in rec}) > 1  # type: ignore[arg-type]  # shuffled per question
    build_dataset(_config(root / "src", tmp_path / "k", ava=["recognition"], tasks=[], options=3))
    assert all(len(s.options) == 3 and s.answer in s.options for s in Dataset(tmp_path / "k").samples("recognition"))  # type: ignore[arg-type]
    tex = ds.samples("texture")
    assert all(s.options == sorted(s.options) for s in tex)  # type: ignore[type-var]  # every class, in order


@pytest.mark.parametrize("value", [0, 1, 127, 128, 254, 255])
def test_noise_on_the_smallest_box_is_never_invisible(value: int) -> None:
    """Why noisy-object does not measure its change as blurred-object does: on the smallest box it asks about
    (24 x 24 px), on a flat picture at either end of 0..255 (where clipping takes half of it) or in the middle,
    noise of sigma 40 moves the values by 16 (the ends) to 32 on average, far above MIN_CHANGE, whatever the
    seed."""
    from ava.curate.tasks import CHECKED, CORRUPTIONS, MIN_CHANGE, _diff

    assert "noisy_object" not in CHECKED
    image = Image.new("RGB", (64, 64), (value, value, value))
    changes = []
    for seed in range(200):
        b, region = CORRUPTIONS["noisy_object"](image, (10.0, 10.0, 34.0, 34.0), seed)
        changes.append(_diff(image.crop(b), region))
    assert min(changes) > 10 * MIN_CHANGE and np.mean(changes) > 15


def test_noise_is_gaussian_of_its_sigma() -> None:
    """The noise tasks' noise, drawn through a table of the normal's quantiles: mean 0 (less the half a level that
    truncating to uint8 takes off), standard deviation sigma, 68.3% within one sigma and 95.4% within two, and
    other draws from other generators."""
    from ava.curate.tasks import _add_noise

    flat = np.full((300, 300, 3), 128, np.uint8)
    noise = _add_noise(flat, 20.0, np.random.default_rng(0)).astype(np.float64) - 128
    assert abs(noise.mean() + 0.5) < 0.2 and abs(noise.std() - 20.0) < 0.2
    assert abs(np.mean(np.abs(noise + 0.5) <= 20) - 0.683) < 0.01
    assert abs(np.mean(np.abs(noise + 0.5) <= 40) - 0.954) < 0.01
    assert not np.array_equal(noise, _add_noise(flat, 20.0, np.random.default_rng(1)).astype(np.float64) - 128)
