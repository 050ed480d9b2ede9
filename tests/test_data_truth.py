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
