"""What every synthetic generator shares: the config, the difficulty knobs, the per-sample context and result.

A generator is a function ``render(ctx: Ctx) -> Rendered`` in ``ava/synth/abilities/<key>.py``. It draws one
image from ``ctx.rng`` only, so a sample depends on ``(seed, ability, index)`` and nothing else: the output is
byte-identical whatever the number of worker processes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from PIL import Image

from ava.errors import AvaError

Difficulty = Literal["easy", "medium", "hard"]
RED = (255, 0, 0)  # target box
BLUE = (0, 0, 255)  # reference box
PAD = (124, 120, 111)  # square padding of localization / recognition images (the paper's padding)


@dataclass
class SynthConfig:
    """Settings of ``ava data synth``; saved as ``synth_config`` in dataset.json."""

    out: str = "data/synth"
    per_ava: int = 100
    ava: list[str] | None = None  # None: all 14 abilities
    seed: int = 0
    size: int = 384
    difficulty: Difficulty = "easy"
    test_frac: float = 0.2
    workers: int | None = None  # None: min(2, cpu_count); never changes the output
    overwrite: bool = False  # replace a non-empty ``out`` (only once the new dataset is complete)


@dataclass(frozen=True)
class Knobs:
    """What a difficulty level changes, the same way in every generator.

    noise: std of additive Gaussian luminance grain (0..255 scale, one value per 2x2 px), applied before boxes
        are drawn so the box colours stay exact.
    clutter: multiplier on the number of distractors (other objects, faces, strings, patches).
    scale: multiplier on the size of the object of interest (smaller is harder).
    jitter: multiplier on pose / angle jitter (orientation yaw, action joint angles).
    """

    noise: float
    clutter: float
    scale: float
    jitter: float


KNOBS: dict[str, Knobs] = {
    "easy": Knobs(noise=0.0, clutter=1.0, scale=1.0, jitter=1.0),
    "medium": Knobs(noise=8.0, clutter=2.0, scale=0.75, jitter=1.5),
    "hard": Knobs(noise=16.0, clutter=3.0, scale=0.55, jitter=2.0),
}


def stable_code(text: str) -> int:
    """A process-independent integer for a string (Python's ``hash`` is salted per process)."""
    return zlib.crc32(text.encode("utf-8"))


@dataclass
class Ctx:
    """Everything one sample may depend on."""

    ava: str
    index: int
    seed: int
    size: int
    difficulty: str
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng([self.seed, stable_code(self.ava), self.index])

    @property
    def knobs(self) -> Knobs:
        return KNOBS[self.difficulty]

    def balanced(self, *ks: int, salt: str = "") -> tuple[int, ...]:
        """Indices into factors of sizes ``ks``, balanced over their joint values.

        Samples are taken in rounds of ``prod(ks)`` consecutive indices; each round is a seeded permutation
        of every joint value, so any prefix of a dataset is balanced to within one round and a class never
        depends on how samples are split among workers.
        """
        total = int(np.prod(ks))
        rnd, pos = divmod(self.index, total)
        perm = np.random.default_rng([self.seed, stable_code(self.ava + salt), rnd, 7]).permutation(total)
        flat = int(perm[pos])
        out = []
        for k in reversed(ks):
            flat, r = divmod(flat, k)
            out.append(r)
        return tuple(reversed(out))

    def uniform(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))

    def randint(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` inclusive."""
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, seq: Any) -> Any:
        return seq[int(self.rng.integers(len(seq)))]

    def n_clutter(self, lo: int, hi: int) -> int:
        """A distractor count in ``[lo, hi]`` scaled by the difficulty's clutter multiplier."""
        return int(round(self.randint(lo, hi) * self.knobs.clutter))


@dataclass
class Rendered:
    """One generated sample before it is stored: image and the parts of a Sample a generator decides."""

    image: Image.Image
    question: str
    answer: str
    truth: dict[str, Any]
    options: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


MIN_SIZE, MAX_SIZE = 64, 4096


def check_config(config: SynthConfig) -> None:
    """Reject settings that cannot produce a valid dataset, naming the option at fault."""
    if config.difficulty not in KNOBS:
        raise AvaError(f"--difficulty {config.difficulty!r}: choose one of {', '.join(KNOBS)}")
    if not MIN_SIZE <= config.size <= MAX_SIZE:
        raise AvaError(
            f"--size {config.size}: must be between {MIN_SIZE} px (for the drawings to be legible) "
            f"and {MAX_SIZE} px (larger only costs memory: one {MAX_SIZE} px image is 48 MiB)"
        )
    if config.per_ava < 1:
        raise AvaError(f"--per-ava {config.per_ava}: must be at least 1")
    if not 0.0 < config.test_frac < 1.0:
        raise AvaError(f"--test-frac {config.test_frac}: must be strictly between 0 and 1")
    if config.workers is not None and config.workers < 1:
        raise AvaError(f"--workers {config.workers}: must be at least 1")
