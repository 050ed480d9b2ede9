"""The one options interface that ``ava data build`` and the FOCI miners share."""

import numpy as np
import pytest

from ava.data.choices import OptionsError, random_options, ranked_options, table_ranking

CLASSES = [f"c{i}" for i in range(10)]


def test_random_options_hold_the_truth_and_k_distinct_classes():
    sample = random_options(4)
    for seed in range(20):
        opts = sample("c3", CLASSES, np.random.default_rng(seed))
        assert len(opts) == 4 and len(set(opts)) == 4 and "c3" in opts and set(opts) <= set(CLASSES)
    positions = {random_options(4)("c3", CLASSES, np.random.default_rng(s)).index("c3") for s in range(40)}
    assert positions == {0, 1, 2, 3}  # the truth is not always first


def test_random_options_are_deterministic_for_a_seed_and_k_none_is_every_class():
    a = random_options(5)("c1", CLASSES, np.random.default_rng(7))
    assert a == random_options(5)("c1", CLASSES, np.random.default_rng(7))
    assert sorted(random_options()("c1", CLASSES, np.random.default_rng(0))) == sorted(CLASSES)


def test_ranked_options_take_the_most_similar_wrong_classes():
    table = {"c0": ["c0", "c9", "c8", "c7", "c6"]}
    opts = ranked_options(3, table_ranking(table))("c0", CLASSES, np.random.default_rng(0))
    assert sorted(opts) == ["c0", "c8", "c9"]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: random_options(11)("c0", CLASSES, np.random.default_rng(0)), "only 10 classes"),
        (lambda: random_options(4)("dog", CLASSES, np.random.default_rng(0)), "'dog' is not in"),
        (lambda: random_options(1)("c0", CLASSES, np.random.default_rng(0)), "at least 2"),
        (lambda: ranked_options(3, table_ranking({}))("c0", CLASSES, np.random.default_rng(0)), "no row for"),
        (
            lambda: ranked_options(4, table_ranking({"c0": ["c1"]}))("c0", CLASSES, np.random.default_rng(0)),
            "ranked only 1",
        ),
    ],
)
def test_bad_requests_name_what_is_wrong(call, words):
    with pytest.raises(OptionsError, match=words):
        call()
