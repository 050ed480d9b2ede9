"""A benchmark stage's time limit, shared among its parts, so that a stage cut off by ``timeout`` never ends with
nothing: each part runs until its share of what is left, then reports what it measured.

    budget = Budget(args.budget)           # seconds (None: no limit)
    for part in parts:
        end = budget.deadline(1 / n_left)  # this part's share of what is left
        ...                                # stop at `end`, report what was done
"""

from __future__ import annotations

import math
import time


class Budget:
    """``seconds`` from now (None or 0: unlimited), less ``reserve`` seconds kept for writing the results."""

    def __init__(self, seconds: float | None, reserve: float = 5.0) -> None:
        self.start = time.monotonic()
        self.end = self.start + max(0.0, seconds - reserve) if seconds else math.inf

    def left(self) -> float:
        """Seconds left (inf without a limit)."""
        return max(0.0, self.end - time.monotonic())

    def deadline(self, share: float = 1.0) -> float:
        """The monotonic time at which a part given ``share`` of what is left must stop."""
        left = self.left()
        return math.inf if math.isinf(left) else time.monotonic() + share * left

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def elapsed(self) -> float:
        return time.monotonic() - self.start
