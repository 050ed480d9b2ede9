"""Reply parsers: the forms real models write, per answer kind, and the release's parsing bugs."""

from __future__ import annotations

import pytest

from ava.abilities import ABILITY_KEYS, DTD_TEXTURES, INDOOR_DEPTH_BINS, format_options, get_ability
from ava.abilities.parsers import (
    extract_options,
    format_reply,
    numbers,
    parse_box,
    parse_reply,
    truth_value,
    words_to_digits,
)
from ava.errors import AvaError
from tests.helpers import HEIGHT, WIDTH, make_sample

ORIENT, SPATIAL, COUNT, DEPTH = (get_ability(k) for k in ("orientation", "spatial", "counting", "abs_depth"))
BOX, COLOR, OCR, REC = (get_ability(k) for k in ("localization", "color", "ocr", "recognition"))


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("2", 1),
        ("front right", 1),
        ("Front Right", 1),
        ("front-right", 1),
        ("2. front right", 1),
        ("(2)", 1),
        ("Option 2", 1),
        ("option 2.", 1),
        ("The answer is 2", 1),
        ("Answer: 2. front right", 1),
        ("**front right**", 1),
        ('"front right"', 1),
        ("It is facing front right.", 1),
        ("the answer is (b)", 1),
        ("B. front right", 1),
        ("2) front right", 1),
        ("front", 0),
        ("top", 8),
        ("9", 8),
        ("The car faces back left.", 5),
        ("left", 6),
        ("10", None),
        ("0", None),
        ("2. left", None),  # out of range; label and text disagree
        ("It could be front or back", None),
        ("upright", None),
        ("I don't know", None),
        ("", None),
        ("The answer is a dog", None),
    ],
)
def test_orientation_replies(reply: str, expected: int | None) -> None:
    assert parse_reply(ORIENT, reply) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("C", 2),
        ("c", 2),
        ("(C)", 2),
        ("C.", 2),
        ("C. Right above", 2),
        ("Right above", 2),
        ("right above", 2),
        ("3", 2),
        ("3. Right above", 2),
        ("The answer is C.", 2),
        ("the answer is (c)", 2),
        ("Option C", 2),
        ("A. Left above", 0),
        ("Left below", 1),
        ("B", 1),
        ("D. Right below", 3),
        ("Right below.", 3),
        ("The cup is left below the plate.", 1),
        ("A. Left below", None),  # label and text disagree
        ("left", None),
        ("above", None),
        ("Left above or left below", None),
        ("E", None),
        ("below left", None),
    ],
)
def test_spatial_replies(reply: str, expected: int | None) -> None:
    assert parse_reply(SPATIAL, reply) == expected


@pytest.mark.parametrize("truth", range(4))
@pytest.mark.parametrize("wrong", range(4))
def test_spatial_never_confuses_answers(truth: int, wrong: int) -> None:
    """The release's substring scorer marked "Left below" right for "Left above"; every pair is distinct here."""
    reply = SPATIAL.fixed_options[wrong]
    assert (parse_reply(SPATIAL, reply) == truth) == (truth == wrong)


def test_option_texts_from_question_options() -> None:
    options = ["running", "jumping rope", "jumping"]
    action = get_ability("action")
    assert parse_reply(action, "jumping rope", options=options) == 1
    assert parse_reply(action, "The person is jumping.", options=options) == 2
    assert parse_reply(action, "They are jumping rope in a park", options=options) == 1  # longest option wins
    assert parse_reply(action, "3", options=options) == 2
    texture = get_ability("texture")
    assert parse_reply(texture, "polka dotted", options=list(DTD_TEXTURES)) == DTD_TEXTURES.index("polka-dotted")
    with pytest.raises(AvaError, match="options"):
        parse_reply(REC, "cat")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("7", 7),
        ("seven", 7),
        ("Seven.", 7),
        ("There are 7 birds.", 7),
        ("twenty-one", 21),
        ("twenty one", 21),
        ("forty", 40),
        ("eighteen", 18),
        ("thirty-nine", 39),
        ("The answer is 12.", 12),
        ("12 (twelve)", 12),
        ("2.5", 2.5),
        ("about 2.5 birds", 2.5),
        ("I see 3 dogs and 2 cats", None),
        ("There are 3 cats and 2 dogs, so the total is 5", 5),
        ("none", 0),
        ("many", None),
        ("", None),
        ("-3", None),
        ("3-4", None),
    ],
)
def test_counting_replies(reply: str, expected: int | float | None) -> None:
    got = parse_reply(COUNT, reply)
    assert got == expected and type(got) is type(expected)


def test_decimal_is_one_number() -> None:
    """The release split "2.5" into the integers 2 and 5."""
    assert parse_reply(COUNT, "2.5") == 2.5
    assert words_to_digits("twenty-one birds and seven cats") == "21 birds and 7 cats"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("2-3", 2.5),
        ("2 - 3 m", 2.5),
        ("2 to 3 meters", 2.5),
        ("between 2 and 3 metres", 2.5),
        ("B", 2.5),
        ("(b)", 2.5),
        ("B. 2-3", 2.5),
        ("The answer is B", 2.5),
        ("about 2.5 m", 2.5),
        ("2.5 meters", 2.5),
        ("2.7", 2.7),
        ("3", 3.0),
        ("three meters", 3.0),
        ("250 cm", 2.5),
        ("F. 6-7", 6.5),
        ("6 - 7", 6.5),
        ("B. 3-4", None),
        ("3-4 m, so the answer is B", None),
        ("3-4 m, the answer is C", 3.5),
        ("Z", None),
        ("far away", None),
        ("2 or 3 meters, maybe 4", None),
    ],
)
def test_depth_replies(reply: str, expected: float | None) -> None:
    assert parse_reply(DEPTH, reply, options=list(INDOOR_DEPTH_BINS)) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("[0.1, 0.2, 0.5, 0.6]", (0.1, 0.2, 0.5, 0.6)),
        ("(0.1,0.2,0.5,0.6)", (0.1, 0.2, 0.5, 0.6)),
        ("0.1 0.2 0.5 0.6", (0.1, 0.2, 0.5, 0.6)),
        ("[0.5, 0.6, 0.1, 0.2]", (0.1, 0.2, 0.5, 0.6)),
        ("[0.5, 0.2, 0.1, 0.6]", (0.1, 0.2, 0.5, 0.6)),
        ("x1=0.1, y1=0.2, x2=0.5, y2=0.6", (0.1, 0.2, 0.5, 0.6)),
        ("xmin: 0.1, ymin: 0.2, xmax: 0.5, ymax: 0.6", (0.1, 0.2, 0.5, 0.6)),
        ("[2, 2, 10, 6]", (0.1, 0.2, 0.5, 0.6)),
        ("(10, 6, 2, 2)", (0.1, 0.2, 0.5, 0.6)),
        ("[0, 0.2, 10, 1]", (0.0, 0.02, 0.5, 0.1)),  # one value > 1: the whole box is in pixels
        ("The box is [0.1, 0.2, 0.5, 0.6].", (0.1, 0.2, 0.5, 0.6)),
        ("[0.1, 0.2, 0.5]", None),
        ("[0.1, 0.2, 0.5, 0.6, 0.7]", None),
        ("top left", None),
    ],
)
def test_box_replies(reply: str, expected: tuple[float, ...] | None) -> None:
    got = parse_reply(BOX, reply, image_size=(WIDTH, HEIGHT))
    assert got == (pytest.approx(expected) if expected else None)


def _labelled_box_as_before(reply: str) -> list[float] | None:
    """The labelled-box reader as it was: 12 searches a reply (the reference for the faster one)."""
    import re

    from ava.abilities.parsers import _BOX_KEYS, _SIGNED

    for keys in _BOX_KEYS:
        got = {}
        for key in keys:
            m = re.search(rf"\b{key}\s*[=:]\s*({_SIGNED})", reply, re.I)
            if m:
                got[key] = float(m.group(1).replace("\u2212", "-"))
        if len(got) == 4:
            return [got[k] for k in keys]
    return None


def test_labelled_boxes_read_as_before() -> None:
    """Every reply reads the same box as with the reader before: labels in any case and order, ``=`` or ``:``,
    Unicode minus, a group cut short, two groups, and unlabelled lists (which now skip the search)."""
    import random

    from ava.abilities.parsers import _labelled_box

    rng = random.Random(0)
    families = [["x1", "y1", "x2", "y2"], ["xmin", "ymin", "xmax", "ymax"], ["left", "top", "right", "bottom"]]
    others = ["X1", "TOP", "ax1", "x1_", "width", "Xmax"]
    replies = [
        "[0.1, 0.2, 0.5, 0.6]",
        "x1=0.1, y1=0.2, x2=0.5, y2=0.6",
        "Left: 3, Top: 4, Right: 9, Bottom: 8",
        "xmin=1 ymin=2 xmax=3",
        "x1 = \u22120.5, y1: 2, x2=3, y2 =4",
        "ratio 1:2",
        "",
        "=",
        ":",
    ]
    for _ in range(3000):
        keys = [*rng.choice(families)]
        rng.shuffle(keys)
        if rng.random() < 0.3:  # a label missing, misspelt or in capitals
            keys[rng.randrange(4)] = rng.choice(["", *others])
        keys += rng.sample([*others, *rng.choice(families)], rng.randint(0, 2))
        parts = []
        for key in keys:
            value = rng.choice(["0.25", "-1", "\u22122.5", "7", "12.5", "x", ".5", "3."])
            sep = rng.choice(["=", ":", " = ", ": ", " ", "=="])
            parts.append(f"{key}{sep}{value}")
        replies.append(rng.choice([", ", " ", "; "]).join(parts))
    read = [r for r in replies if _labelled_box_as_before(r) is not None]
    assert len(read) > 100  # the corpus reaches the labelled forms, not only misses
    for reply in replies:
        assert _labelled_box(reply) == _labelled_box_as_before(reply), reply


def _rgb_as_before(reply: str) -> tuple[int, int, int] | None:
    """The colour reader as it was: its patterns compiled on each call (the reference for the faster one)."""
    import math
    import re

    from ava.abilities.parsers import _SIGNED, numbers

    hexes = set(re.findall(r"(?:#|\b0x)([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b", reply))
    if len(hexes) == 1:
        h = hexes.pop()
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))
    if hexes:
        return None
    labelled = [
        re.search(rf"\b(?:{c}|{name})\s*[=:]\s*({_SIGNED})", reply, re.I)
        for c, name in (("r", "red"), ("g", "green"), ("b", "blue"))
    ]
    found = [m.group(1) for m in labelled if m] if all(labelled) else numbers(reply, signed=True)
    if len(found) != 3:
        return None
    values = [float(v.replace("\u2212", "-")) for v in found]
    if all(v <= 1.0 for v in values) and any("." in v for v in found):
        values = [v * 255.0 for v in values]
    if any(not 0.0 <= v <= 255.0 for v in values):
        return None
    return tuple(int(math.floor(v + 0.5)) for v in values)  # type: ignore[return-value]


def test_colour_replies_read_as_before() -> None:
    """Every colour reply reads the same as with the reader before: hex codes, labels (r/g/b, red/green/blue, any
    case, ``=`` or ``:``), a label missing, unlabelled triples, fractions, out-of-range values."""
    import random

    from ava.abilities.parsers import _parse_rgb

    rng = random.Random(1)
    replies = [
        "(12, 34, 56)",
        "#1a2b3c",
        "0xFFF and #000",
        "R=10, G: 20, b = 30",
        "red: 0.5, green: 0.25, blue: 1.0",
        "rgb(300, 1, 2)",
        "",
        ":",
        "ratio 1:2:3",
    ]
    for _ in range(3000):
        parts = []
        for label in rng.sample(["r", "g", "b", "Red", "GREEN", "blue", "x", ""], rng.randint(0, 4)):
            sep = rng.choice(["=", ":", " = ", " ", ", "])
            value = rng.choice(["12", "0.5", "255", "-3", "\u22121", "256", "1.0"])
            parts.append(f"{label}{sep}{value}")
        if rng.random() < 0.1:
            parts.append(rng.choice(["#abc", "#a1b2c3", "0x123456"]))
        replies.append(rng.choice([", ", " ", "; "]).join(parts))
    assert sum(_rgb_as_before(r) is not None for r in replies) > 300  # the corpus reaches readable colours
    for reply in replies:
        assert _parse_rgb(reply) == _rgb_as_before(reply), reply


def test_pixel_box_needs_image_size() -> None:
    assert parse_reply(BOX, "[2, 2, 10, 6]") is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("(12, 200, 3)", (12, 200, 3)),
        ("[12,200,3]", (12, 200, 3)),
        ("12 200 3", (12, 200, 3)),
        ("#0cc803", (12, 200, 3)),
        ("#0CC803", (12, 200, 3)),
        ("rgb(12,200,3)", (12, 200, 3)),
        ("RGB: (12, 200, 3)", (12, 200, 3)),
        ("R: 12, G: 200, B: 3", (12, 200, 3)),
        ("red=12 green=200 blue=3", (12, 200, 3)),
        ("The colour is (12, 200, 3).", (12, 200, 3)),
        ("#fff", (255, 255, 255)),
        ("(0.0, 0.5, 1.0)", (0, 128, 255)),
        ("(300, 2, 3)", None),
        ("(12, 200)", None),
        ("green", None),
    ],
)
def test_color_replies(reply: str, expected: tuple[int, int, int] | None) -> None:
    assert parse_reply(COLOR, reply) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("EXIT", "EXIT"),
        ("  EXIT 12 ", "EXIT 12"),
        ('"EXIT"', "EXIT"),
        ("\u201cEXIT\u201d", "EXIT"),
        ("", None),
        ("   ", None),
    ],
)
def test_ocr_replies(reply: str, expected: str | None) -> None:
    assert parse_reply(OCR, reply) == expected


@pytest.mark.parametrize("key", ABILITY_KEYS)
@pytest.mark.parametrize("variant", [0, 1])
def test_format_reply_round_trips_the_truth(key: str, variant: int) -> None:
    ability = get_ability(key)
    sample = make_sample(key, variant)
    value = truth_value(ability, sample)
    reply = format_reply(ability, value, options=sample.options)
    assert parse_reply(ability, reply, options=sample.options, image_size=(sample.width, sample.height)) == value


@pytest.mark.parametrize(
    ("key", "value", "reply", "parsed"),
    [
        ("counting", 12, "12", 12),
        ("counting", 2.5, "2.5", 2.5),
        ("localization", (0.12, 0.3, 0.55, 0.8), "[0.120, 0.300, 0.550, 0.800]", (0.12, 0.3, 0.55, 0.8)),
        ("color", (12, 200, 3), "(12, 200, 3)", (12, 200, 3)),
        ("abs_depth", 1, "2-3", 2.5),
        ("abs_depth", 2.5, "2-3", 2.5),
        ("abs_depth", 2.7, "2.7 m", 2.7),
        ("orientation", 1, "front right", 1),
        ("ocr", "EXIT", "EXIT", "EXIT"),
    ],
)
def test_format_reply_canonical_forms(key: str, value: object, reply: str, parsed: object) -> None:
    ability = get_ability(key)
    options = list(INDOOR_DEPTH_BINS) if key == "abs_depth" else None
    assert format_reply(ability, value, options=options) == reply
    assert parse_reply(ability, reply, options=options) == parsed


def test_format_reply_accepts_numpy_values() -> None:
    import numpy as np

    bins = list(INDOOR_DEPTH_BINS)
    assert format_reply(DEPTH, np.int64(1), options=bins) == "2-3"  # a bin index, not 1 metre
    assert format_reply(DEPTH, np.float32(2.5), options=bins) == "2-3"
    assert format_reply(COUNT, np.float64(7.0)) == "7"
    assert format_reply(COLOR, np.array([12.2, 199.6, 3.0])) == "(12, 200, 3)"
    assert format_reply(ORIENT, np.int64(8)) == "top"


def test_extract_options() -> None:
    views = ["front", "front right", "right", "back right", "back", "back left", "left", "front left", "top"]
    q = ORIENT.question_templates[0].format(object="car", options=format_options(views))
    assert extract_options(q) == (views, "number")
    q = DEPTH.question_templates[0].format(object="chair", options=format_options(["1-2", "2-3", "3-4"], "letter"))
    assert extract_options(q) == (["1-2", "2-3", "3-4"], "letter")
    q = "Step 1. look. Which? Choose one: 1. red, 2. blue."
    assert extract_options(q) == (["red", "blue"], "number")
    assert extract_options("How many dogs are there in the image?") is None


def test_truth_value_rejects_bad_truth() -> None:
    sample = make_sample("counting")
    sample.truth = {"text": "x"}
    with pytest.raises(AvaError, match="counting-0"):
        truth_value(COUNT, sample)


def test_pronoun_i_is_not_option_i():
    orientation = get_ability("orientation")
    views = list(orientation.fixed_options)
    assert parse_reply(orientation, "The answer I would give is left", options=views) == views.index("left")
    spatial = get_ability("spatial")
    answers = list(spatial.fixed_options)
    assert parse_reply(spatial, "The answer I would give is Left above", options=answers) == 0
    assert parse_reply(spatial, "The answer is I", options=answers) is None  # a letter out of range names nothing


def test_a_slightly_overshooting_normalized_box_is_not_read_as_pixels():
    loc = get_ability("localization")
    assert parse_reply(loc, "[0.1, 0.2, 0.5, 1.02]") == pytest.approx((0.1, 0.2, 0.5, 1.02))
    assert parse_reply(loc, "[10, 20, 50, 100]", image_size=(100, 200)) == pytest.approx((0.1, 0.1, 0.5, 0.5))


# -- goldens for faults once found in the parsers (each failed on the code before its fix) ----------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("[-0.05, 0.2, 0.5, 0.6]", (-0.05, 0.2, 0.5, 0.6)),
        ("[0.1,-0.05,0.5,0.6]", (0.1, -0.05, 0.5, 0.6)),
        ("x1=-0.05, y1=0.2, x2=0.5, y2=0.6", (-0.05, 0.2, 0.5, 0.6)),
        ("[0.1, 0.2, 0.5, \u22120.05]", (0.1, -0.05, 0.5, 0.2)),  # the Unicode minus, corners reordered
        ("[-2, 2, 10, 6]", (-0.1, 0.2, 0.5, 0.6)),  # pixels: -2 px is -0.1 of a 20 px wide image
        ("[-100, 2, 10, 6]", None),  # -5 image widths: outside BOX_RANGE, unparsed
    ],
)
def test_negative_box_coordinates_stay_negative(reply: str, expected: tuple[float, ...] | None) -> None:
    got = parse_reply(BOX, reply, image_size=(WIDTH, HEIGHT))
    assert got == (pytest.approx(expected) if expected else None)


def test_a_range_dash_is_no_minus_sign() -> None:
    assert numbers("2-3 and 2 - 3", signed=True) == ["2", "3", "2", "3"]
    assert numbers("[0.1,-0.05] x-5 (-7)", signed=True) == ["0.1", "-0.05", "5", "-7"]


@pytest.mark.parametrize("reply", ["(-251, 10, 10)", "R: -12, G: 200, B: 3", "-12 200 3", "(-0.5, 0.2, 0.3)"])
def test_negative_colour_values_are_out_of_range(reply: str) -> None:
    assert parse_reply(COLOR, reply) is None


@pytest.mark.parametrize("reply", ["-5 m", "-5", "about -2.5 meters", "\u22123 m"])
def test_negative_depth_is_out_of_range(reply: str) -> None:
    assert parse_reply(DEPTH, reply, options=list(INDOOR_DEPTH_BINS)) is None


def test_depth_bins_still_read_with_dashes() -> None:
    assert parse_reply(DEPTH, "2-3", options=list(INDOOR_DEPTH_BINS)) == 2.5
    assert parse_reply(DEPTH, "5 m", options=list(INDOOR_DEPTH_BINS)) == 5.0


@pytest.mark.parametrize(
    ("key", "reply"),
    [
        ("rel_depth", "not red"),
        ("rel_depth", "It is not the red one."),
        ("rel_depth", "Not red"),
        ("orientation", "it is not the left one"),
        ("orientation", "It isn't facing left"),
        ("orientation", "never left"),
        ("spatial", "The answer is not B"),
        ("spatial", "Not left above"),
        ("emotion", "neither happy nor sad"),
        ("counting", "not 5"),
        ("abs_depth", "not 2-3"),
        ("abs_depth", "It is not B"),
    ],
)
def test_negated_answers_are_unparsed(key: str, reply: str) -> None:
    ability = get_ability(key)
    options = list(INDOOR_DEPTH_BINS) if key == "abs_depth" else None
    assert parse_reply(ability, reply, options=options) is None


def test_a_negation_inside_an_option_text_does_not_count() -> None:
    options = ["not a bird", "sparrow", "crow"]
    fine = get_ability("fine_grained")
    assert parse_reply(fine, "not a bird", options=options) == 0
    assert parse_reply(fine, "It is not a bird.", options=options) == 0
    assert parse_reply(fine, "sparrow", options=options) == 1
    assert parse_reply(fine, "not sparrow", options=options) is None


@pytest.mark.parametrize(
    ("fmt", "reply", "size", "expected"),
    [
        ("1000", "<box>[193,315,630,576]</box>", (640, 480), (0.193, 0.315, 0.630, 0.576)),
        ("1000", "<box>(193,315),(630,576)</box>", None, (0.193, 0.315, 0.630, 0.576)),
        ("pixels", "[193,315,630,576]", (1000, 1000), (0.193, 0.315, 0.630, 0.576)),
        ("pixels", "[1, 1, 2, 2]", (10, 10), (0.1, 0.1, 0.2, 0.2)),  # auto would read these as normalized
        ("normalized", "[0.1, 0.2, 0.5, 0.6]", None, (0.1, 0.2, 0.5, 0.6)),
        ("normalized", "[193,315,630,576]", (640, 480), None),  # not 0..1: outside BOX_RANGE, unparsed
        ("auto", "[193,315,630,576]", (640, 480), (193 / 640, 315 / 480, 630 / 640, 576 / 480)),
    ],
)
def test_box_formats(fmt: str, reply: str, size: tuple[int, int] | None, expected: tuple | None) -> None:
    got = parse_reply(BOX, reply, image_size=size, box_format=fmt)
    assert got == (pytest.approx(expected) if expected else None)


def test_box_rule_is_reported_and_bad_format_refused() -> None:
    assert parse_box("[0.1, 0.2, 0.5, 0.6]")[1] == "normalized"
    assert parse_box("[10, 20, 50, 60]", (100, 100))[1] == "pixels"
    with pytest.raises(AvaError, match="box format"):
        parse_box("[0.1, 0.2, 0.5, 0.6]", box_format="percent")
