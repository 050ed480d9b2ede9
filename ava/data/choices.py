"""The options of a multiple-choice question: one interface for every way of choosing them.

An :class:`OptionSampler` takes a sample's true class, the ability's class list and a seeded generator (and, for
samplers that look at the picture, the image's key) and returns the option list, truth included, in the order the
question shows them. ``ava data build`` asks one for every choice question it writes; ``ava data options`` rewrites
a dataset's options with one. The paper's sampled lists are :func:`random_options` (recognition 70, fine-grained 50
or 100, scene 30, action 100 options); FOCI's hard negatives are samplers that rank the wrong classes by similarity
(:func:`ranked_options`, fed by a text-tower or cached-feature miner).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from ava.errors import AvaError


class OptionsError(AvaError):
    """Options cannot be chosen as asked (k larger than the class list, a truth that is not a class, ...)."""


class OptionSampler(Protocol):
    def __call__(
        self, truth: str, classes: Sequence[str], rng: np.random.Generator, *, image: str | None = None
    ) -> list[str]:
        """The options for one question: ``truth`` and some of the other ``classes``, shuffled with ``rng``."""
        ...


def _check(truth: str, classes: Sequence[str], k: int | None) -> int:
    if truth not in classes:
        raise OptionsError(f"the true class {truth!r} is not in the ability's class list ({len(classes)} classes)")
    if len(set(classes)) != len(classes):
        raise OptionsError("the class list names a class twice")
    n = len(classes) if k is None else k
    if n < 2:
        raise OptionsError(f"k = {n}: a choice question needs at least 2 options")
    if n > len(classes):
        raise OptionsError(f"k = {n} options asked, but the ability has only {len(classes)} classes")
    return n


def random_options(k: int | None = None) -> OptionSampler:
    """The truth plus ``k - 1`` wrong classes drawn uniformly, shuffled (``k`` None: every class, shuffled)."""

    def sample(truth: str, classes: Sequence[str], rng: np.random.Generator, *, image: str | None = None) -> list[str]:
        n = _check(truth, classes, k)
        wrong = [c for c in classes if c != truth]
        picked = [wrong[i] for i in rng.choice(len(wrong), size=n - 1, replace=False)] if n > 1 else []
        options = [truth, *picked]
        return [options[i] for i in rng.permutation(len(options))]

    return sample


def ranked_options(k: int, ranking: Callable[[str, Sequence[str], str | None], Sequence[str]]) -> OptionSampler:
    """The truth plus the ``k - 1`` wrong classes that ``ranking(truth, classes, image)`` puts first (most similar
    first: a miner's hard negatives), shuffled."""

    def sample(truth: str, classes: Sequence[str], rng: np.random.Generator, *, image: str | None = None) -> list[str]:
        n = _check(truth, classes, k)
        wrong = [c for c in ranking(truth, classes, image) if c != truth and c in classes][: n - 1]
        if len(wrong) < n - 1:
            raise OptionsError(f"the miner ranked only {len(wrong)} wrong classes for {truth!r}; {n - 1} are needed")
        options = [truth, *wrong]
        return [options[i] for i in rng.permutation(len(options))]

    return sample


def table_ranking(table: Mapping[str, Sequence[str]]) -> Callable[[str, Sequence[str], str | None], Sequence[str]]:
    """A ranking read from a table (class -> other classes, most similar first), for :func:`ranked_options`."""

    def ranking(truth: str, classes: Sequence[str], image: str | None = None) -> Sequence[str]:
        if truth not in table:
            raise OptionsError(f"the miner's table has no row for class {truth!r}")
        return table[truth]

    return ranking
