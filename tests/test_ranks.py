"""Ranks and rank agreement against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from ava.report.ranks import average_ranks, normalized_scores, rank_agreement, rank_values


def test_ranks_higher_is_better_with_ties():
    # 0.9 is best; 0.7 twice shares places 2 and 3 -> 2.5 each; 0.1 is 4th
    ranks = rank_values({"a": 0.7, "b": 0.9, "c": 0.1, "d": 0.7}, higher_is_better=True)
    assert ranks == {"b": 1.0, "a": 2.5, "d": 2.5, "c": 4.0}


def test_ranks_lower_is_better():
    # CIEDE2000 / MAE: the smallest value is rank 1
    ranks = rank_values({"a": 12.0, "b": 3.0, "c": 40.0}, higher_is_better=False)
    assert ranks == {"b": 1.0, "a": 2.0, "c": 3.0}


def test_ranks_all_tied_and_empty():
    assert rank_values({"a": 1.0, "b": 1.0, "c": 1.0}, True) == {"a": 2.0, "b": 2.0, "c": 2.0}
    assert rank_values({}, True) == {}


def test_average_ranks():
    ranks = {"x": {"a": 1.0, "b": 2.0}, "y": {"a": 2.0, "b": 1.0}, "z": {"a": 1.0, "b": 2.0}}
    assert average_ranks(ranks, ["x", "y", "z"]) == pytest.approx({"a": 4 / 3, "b": 5 / 3})


def test_agreement_no_ties_by_hand():
    # x = 1,2,3,4 ; y = 1,3,2,4. Pairs: 6; only (2,3) is discordant -> tau = (5 - 1) / 6.
    # Spearman: d = 0,1,1,0 -> sum d^2 = 2 -> rho = 1 - 6*2 / (4*(16-1)) = 0.8
    a = rank_agreement({"p": 1, "q": 2, "r": 3, "s": 4}, {"p": 1, "q": 3, "r": 2, "s": 4})
    assert a.n == 4 and a.reason is None
    assert a.kendall_tau == pytest.approx(4 / 6)
    assert a.spearman_rho == pytest.approx(0.8)


def test_agreement_with_ties_by_hand():
    # x = 1,2,3,4 ; y = 1,2.5,2.5,4 (a tie in y). 5 concordant, 0 discordant, 1 pair tied in y only.
    # tau-b = (5 - 0) / sqrt((6 - 0) * (6 - 1)) = 5 / sqrt(30)
    # rho = Pearson of ranks: dx = -1.5,-.5,.5,1.5 ; dy = -1.5,0,0,1.5 -> 4.5 / sqrt(5 * 4.5) = sqrt(0.9)
    a = rank_agreement({"p": 1, "q": 2, "r": 3, "s": 4}, {"p": 1, "q": 2.5, "r": 2.5, "s": 4})
    assert a.kendall_tau == pytest.approx(5 / math.sqrt(30))
    assert a.spearman_rho == pytest.approx(math.sqrt(0.9))


def test_agreement_reversed_and_only_common_keys():
    # "extra" is ranked by one side only and must be ignored
    a = rank_agreement({"p": 1, "q": 2, "r": 3, "extra": 4}, {"p": 3, "q": 2, "r": 1})
    assert a.n == 3
    assert a.kendall_tau == pytest.approx(-1.0)
    assert a.spearman_rho == pytest.approx(-1.0)


def test_agreement_undefined_cases_have_reasons():
    one = rank_agreement({"p": 1}, {"p": 1, "q": 2})
    assert one.kendall_tau is None and one.spearman_rho is None and "needs >= 3 VFMs" in one.reason
    two = rank_agreement({"p": 1, "q": 2}, {"p": 1, "q": 2})
    assert two.kendall_tau is None and two.reason == "n/a: needs >= 3 VFMs in common (has 2)"
    const = rank_agreement({"p": 1.5, "q": 1.5, "r": 1.5}, {"p": 1, "q": 2, "r": 3}, names=("knn", "llm"))
    assert const.kendall_tau is None and "knn" in const.reason and "constant" in const.reason


def test_normalized_scores_between_baseline_and_best():
    # accuracy: chance 0.25 -> 0, perfect 1.0 -> 1, below chance negative
    assert normalized_scores({"a": 0.25, "b": 1.0, "c": 0.625, "d": 0.0}, 0.25, 1.0) == pytest.approx(
        {"a": 0.0, "b": 1.0, "c": 0.5, "d": -1 / 3}
    )
    # lower is better (delta E): baseline 30, best 0; 29.10 vs 29.23 stay close, not 0 vs 1
    out = normalized_scores({"a": 29.10, "b": 29.23}, 30.0, 0.0)
    assert out["a"] - out["b"] == pytest.approx(0.13 / 30)
