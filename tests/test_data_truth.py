"""Structured truth derived from the release's question and answer text."""

from __future__ import annotations

import pytest

from ava.abilities import OUTDOOR_DEPTH_BINS, SPATIAL_ANSWERS, format_options, get_ability
from ava.data.truth import TruthError, derive_truth


def _q(key: str, **fields: str) -> str:
    return get_ability(key).question_templates[0].format(**fields)


def test_rel_depth_class_is_the_red_object() -> None:
    q = _q("rel_depth", a="mug", b="lamp", options=format_options(["red", "blue"]))
    t = derive_truth(get_ability("rel_depth"), q, "2")
    assert t.truth == {"index": 1, "text": "blue"} and t.options == ["red", "blue"]
    assert t.meta == {"class": "mug"}


def test_spatial_letter_options_and_label_with_text() -> None:
    q = _q("spatial", a="cup", b="plate", options=format_options(SPATIAL_ANSWERS, "letter"))
    t = derive_truth(get_ability("spatial"), q, "C. Right above")
    assert t.truth == {"index": 2, "text": "Right above"} and t.meta["class"] == "Right above"


def test_outdoor_depth_bin_from_a_letter() -> None:
    bins = list(OUTDOOR_DEPTH_BINS[:5])
    q = _q("abs_depth", object="car", options=format_options(bins, "letter"))
    t = derive_truth(get_ability("abs_depth"), q, "D")
    assert t.truth == {"index": 3, "bin": [11.0, 12.0]}
    assert t.meta == {"class": "car", "scene_type": "outdoor"}


@pytest.mark.parametrize(
    ("key", "answer", "match"),
    [
        ("counting", "many", "cannot parse"),
        ("counting", "2.5", "whole number"),
        ("color", "reddish", "cannot parse"),
        ("ocr", "   ", "empty answer"),
        ("emotion", "bored", "names none"),
        ("localization", "[10, 20, 300, 40]", "not inside the image"),
    ],
)
def test_unusable_answers_raise(key: str, answer: str, match: str) -> None:
    q = _q(key, object="x", options=format_options(["happy", "sad"]))
    with pytest.raises(TruthError, match=match):
        derive_truth(get_ability(key), q, answer, image_size=(100, 100))


# Question strings in the forms of the supplement's templates (Appendix A) and the release's data.
@pytest.mark.parametrize(
    ("key", "question", "cls"),
    [
        (
            "abs_depth",
            "Based on the image, estimate how far the closest part of the chair (highlighted in red) is "
            "from the camera in meters. Select the best option: A. 1-2, B. 2-3, C. 3-4.",
            "chair",
        ),
        (
            "abs_depth",
            "Based on the image, estimate how far the closest point of the traffic light (highlighted by a "
            "red box) is from the camera in meters. Select the best option: A. 1-2, B. 2-3, C. 3-4.",
            "traffic light",
        ),
        (
            "rel_depth",
            "Which object is closer to the camera, the mug (highlighted in red) or the lamp (highlighted in "
            "blue)? Choose one: 1. red, 2. blue.",
            "mug",
        ),
        (
            "rel_depth",
            "Which object is closer to the camera, the dining table (red box) or the chair (blue box)? "
            "Choose one: 1. red, 2. blue.",
            "dining table",
        ),
        (
            "rel_depth",
            "Considering the distance from the camera, which is closer: the lamp (highlighted in blue) or "
            "the sofa (highlighted in red)? Choose one: 1. red, 2. blue.",
            "sofa",
        ),  # the red one, wherever it stands
        ("counting", "How many zebras are there in the image?", "zebras"),
        ("counting", "How many people are in the image?", "people"),
        ("localization", "Provide bounding box coordinate for person.", "person"),
        (
            "localization",
            "Please provide the bounding box coordinate of the region this sentence describes: a man in a hat.",
            "a man in a hat",
        ),
    ],
)
def test_class_from_the_papers_wordings(key: str, question: str, cls: str) -> None:
    ability = get_ability(key)
    answers = {"abs_depth": "B", "rel_depth": "1", "counting": "3", "localization": "[0.1, 0.2, 0.5, 0.6]"}
    t = derive_truth(ability, question, answers[key])
    assert t.meta["class"] == cls


def test_spatial_supplement_wording_reads_its_class_from_the_answer() -> None:
    q = (
        "Considering the relative positions of two objects in the image, where is the cup (highlighted in red) "
        "located with respect to the plate (highlighted in blue)? Choose from A. Left above, B. Left below, "
        "C. Right above, D. Right below."
    )
    t = derive_truth(get_ability("spatial"), q, "B")
    assert t.truth == {"index": 1, "text": "Left below"} and t.meta["class"] == "Left below"


def test_an_unreadable_class_is_kept_as_unknown() -> None:
    from ava.abilities.subgroups import UNKNOWN

    t = derive_truth(get_ability("counting"), "Tell me the total.", "4")
    assert t.meta == {"class": UNKNOWN}
    q = "How close is it? Select the best option: A. 1-2, B. 2-3."
    assert derive_truth(get_ability("abs_depth"), q, "A").meta["class"] == UNKNOWN
