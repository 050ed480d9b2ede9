"""Metric golden tests: CIEDE2000 (Sharma, Wu & Dalal 2005), GIoU, ANLS and MAE/GT by hand, worst values."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from ava.abilities import ABILITIES, INDOOR_DEPTH_BINS, get_ability
from ava.abilities.parsers import truth_value
from ava.metrics import METRICS
from ava.metrics.anls import nls
from ava.metrics.ciede2000 import SRGB_CORNERS, ciede2000, delta_e_lab, srgb_to_lab, worst_ciede2000
from ava.metrics.giou import giou
from ava.metrics.mae_gt import mae_gt, worst_mae_gt
from tests.helpers import make_sample

DATA = Path(__file__).parent / "data"


def _sharma_pairs() -> list[dict[str, float]]:
    with (DATA / "ciede2000_sharma2005.csv").open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def test_sharma_table_is_complete() -> None:
    pairs = _sharma_pairs()
    assert [int(p["pair"]) for p in pairs] == list(range(1, 35))


@pytest.mark.parametrize("pair", _sharma_pairs(), ids=lambda p: f"pair{int(p['pair'])}")
def test_ciede2000_sharma2005(pair: dict[str, float]) -> None:
    """All 34 pairs of Sharma, Wu & Dalal (2005), Table 1, to 1e-4 (values as printed, 4 decimals)."""
    lab1 = [pair["L1"], pair["a1"], pair["b1"]]
    lab2 = [pair["L2"], pair["a2"], pair["b2"]]
    assert float(delta_e_lab(lab1, lab2)) == pytest.approx(pair["delta_e"], abs=1e-4)
    assert float(delta_e_lab(lab2, lab1)) == pytest.approx(pair["delta_e"], abs=1e-4)  # symmetric


def test_srgb_to_lab_reference_colours() -> None:
    """sRGB -> Lab (D65) of well-known colours (Lindbloom's calculator, to 0.05)."""
    lab = srgb_to_lab([[255, 0, 0], [255, 255, 255], [0, 0, 0], [0, 255, 0], [0, 0, 255]])
    expected = [
        [53.24, 80.09, 67.20],
        [100.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [87.73, -86.18, 83.18],
        [32.30, 79.19, -107.86],
    ]
    np.testing.assert_allclose(lab, expected, atol=0.05)


def test_ciede2000_srgb_path() -> None:
    assert ciede2000((12, 200, 3), (12, 200, 3)) == pytest.approx(0.0, abs=1e-9)
    assert ciede2000((0, 0, 0), (255, 255, 255)) == pytest.approx(100.0, abs=1e-4)  # pure lightness difference
    d = ciede2000((255, 0, 0), (250, 5, 5))
    assert 0.5 < d < 5 and d == pytest.approx(ciede2000((250, 5, 5), (255, 0, 0)))
    assert ciede2000((255, 0, 0), (0, 0, 255)) > ciede2000((255, 0, 0), (255, 128, 0))


def test_ciede2000_worst_is_farthest_corner() -> None:
    truth = (12, 200, 3)
    by_corner = [ciede2000(c, truth) for c in SRGB_CORNERS]
    assert worst_ciede2000(truth) == pytest.approx(max(by_corner))
    assert worst_ciede2000((0, 0, 0)) >= 100.0 - 1e-6


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0.1, 0.1, 0.5, 0.5), (0.1, 0.1, 0.5, 0.5), 1.0),  # identical
        ((0.5, 0.5, 0.1, 0.1), (0.1, 0.1, 0.5, 0.5), 1.0),  # both corners swapped
        ((0.5, 0.1, 0.1, 0.5), (0.1, 0.1, 0.5, 0.5), 1.0),  # x swapped only
        ((0.0, 0.0, 1.0, 1.0), (0.25, 0.25, 0.75, 0.75), 0.25),  # nested: IoU 0.25, hull = union
        ((0.0, 0.0, 0.5, 0.5), (0.5, 0.0, 1.0, 0.5), 0.0),  # touching: IoU 0, hull = union
        ((0.0, 0.0, 0.2, 0.2), (0.4, 0.0, 0.6, 0.2), -1 / 3),  # disjoint: union .08, hull .12
        ((0.0, 0.0, 0.1, 0.1), (0.9, 0.9, 1.0, 1.0), -0.98),  # far apart: union .02, hull 1
        ((0.0, 0.0, 0.4, 0.4), (0.2, 0.2, 0.6, 0.6), 1 / 7 - 0.08 / 0.36),  # overlap: .04/.28, hull .36
    ],
)
def test_giou_hand_computed(a: tuple, b: tuple, expected: float) -> None:
    assert giou(a, b) == pytest.approx(expected, abs=1e-12)
    assert giou(b, a) == pytest.approx(expected, abs=1e-12)


def test_giou_degenerate_boxes() -> None:
    assert giou((0.2, 0.2, 0.2, 0.2), (0.2, 0.2, 0.2, 0.2)) == 1.0
    assert giou((0.2, 0.2, 0.2, 0.2), (0.5, 0.5, 0.5, 0.5)) == -1.0
    assert -1.0 <= giou((0.2, 0.2, 0.2, 0.2), (0.0, 0.0, 1.0, 1.0)) <= 0.0


@pytest.mark.parametrize(
    ("pred", "truth", "expected"),
    [
        ("Hello", "hello", 1.0),
        ("  Hello   World ", "hello world", 1.0),
        ("abcd", "abce", 0.75),
        ("abcd", "abxy", 0.0),  # a distance of exactly 0.5 is not < tau: 0 (Biten et al. 2019, the release)
        ("abcdefg", "abcdxyz", 4 / 7),
        ("abcde", "abxyz", 0.0),  # 0.4 < 0.5 -> 0
        ("abc", "abcdef", 0.0),
        ("ab", "abcdef", 0.0),
        ("V.", "V", 0.0),
        ("abc", "abcd", 0.75),
        ("", "", 1.0),
        ("", "abc", 0.0),
        ("EXIT 12", "exit12", 6 / 7),
    ],
)
def test_anls_threshold(pred: str, truth: str, expected: float) -> None:
    assert nls(pred, truth) == pytest.approx(expected)


def test_mae_gt_counts_and_depth_midpoints() -> None:
    assert mae_gt(6, 4) == pytest.approx(0.5)
    assert mae_gt(2.5, 4.5) == pytest.approx(2 / 4.5)  # bin "2-3" against "4-5"
    assert mae_gt(7, 7) == 0.0
    counting = get_ability("counting")
    assert worst_mae_gt(10, counting, make_sample("counting")) == pytest.approx(3.0)  # 40 is 30 away
    assert worst_mae_gt(30, counting, make_sample("counting")) == pytest.approx(29 / 30)  # 1 is 29 away
    depth = get_ability("abs_depth")
    sample = make_sample("abs_depth")
    sample.options = ["1-2", "2-3", "3-4"]
    assert worst_mae_gt(1.5, depth, sample) == pytest.approx(2 / 1.5)  # farthest midpoint 3.5
    sample.options = list(INDOOR_DEPTH_BINS)
    assert worst_mae_gt(3.5, depth, sample) == pytest.approx(3 / 3.5)  # 6.5 is 3 away


@pytest.mark.parametrize("key", ABILITIES.names())
def test_every_ability_metric_is_registered_with_its_direction(key: str) -> None:
    ability = get_ability(key)
    metric = METRICS.get(ability.metric)
    assert metric.higher_is_better == ability.higher_is_better
    assert metric.worst_rule


@pytest.mark.parametrize("name", METRICS.names())
def test_worst_value_is_no_better_than_best(name: str) -> None:
    metric = METRICS.get(name)
    key = next(k for k in ABILITIES.names() if get_ability(k).metric == name)
    ability, sample = get_ability(key), make_sample(key)
    worst = metric.worst(truth_value(ability, sample), ability, sample)
    assert (worst < metric.best) if metric.higher_is_better else (worst > metric.best)


def test_score_samples_vectorized_colour_equals_one_by_one() -> None:
    """CIEDE2000 scored in one vectorized call (``compute_many``) gives each reply the value ``score_sample`` does,
    an unparsed reply its worst value, and keeps the order."""
    from ava.metrics.scoring import score_sample, score_samples

    ability = get_ability("color")
    samples = [make_sample("color", v % 2) for v in range(5)]
    replies = ["(12, 200, 3)", "no colour here", "rgb(250, 5, 5)", None, "(0, 0, 0)"]
    batch = score_samples(ability, samples, replies)
    single = [score_sample(ability, s, r) for s, r in zip(samples, replies, strict=True)]
    assert [b.ok for b in batch] == [s.ok for s in single] == [True, False, True, False, True]
    for b, s in zip(batch, single, strict=True):
        assert b.value == pytest.approx(s.value, abs=1e-9) and b.parsed == s.parsed
    assert batch[0].value == pytest.approx(ciede2000(batch[0].parsed, truth_value(ability, samples[0])), abs=1e-9)
