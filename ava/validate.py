"""One place for the rules numeric settings must meet, shared by CLI options and config files.

Each rule takes a value and returns it (possibly normalised) or raises :class:`ValueError` with a message that
says what is allowed; the CLI (``ava/cli/params.py``) wraps a rule into a typer callback that names the option,
and :func:`ava.config.load_config` applies the rule of every field it knows to values read from a TOML file.
A value that would be silently replaced by a default (``--epochs 0``) or make nonsense (``--lr -1``) is refused
before any work starts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

Rule = Callable[[Any], Any]

POOL_RE = re.compile(r"^grid([1-9][0-9]*)$")
MAX_GRID = 16  # gridN views with more cells than this per side are more features than any probe can use


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_at_least(low: int) -> Rule:
    def rule(value: Any) -> int:
        if not _is_int(value) or value < low:
            raise ValueError(f"must be an integer >= {low}, not {value!r}")
        return value

    rule.__doc__ = f"an integer >= {low}"
    return rule


def finite_positive(value: Any) -> float:
    """A finite number > 0 (a learning rate, a size in GB)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a finite number > 0, not {value!r}")
    return float(value)


def finite_non_negative(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number >= 0, not {value!r}")
    return float(value)


def open_fraction(value: Any) -> float:
    """A fraction strictly between 0 and 1 (a test or held-out share)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1:
        raise ValueError(f"must be a number between 0 and 1 (exclusive), not {value!r}")
    return float(value)


def unit_fraction(value: Any) -> float:
    """A fraction in [0, 1)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 1:
        raise ValueError(f"must be a number in [0, 1), not {value!r}")
    return float(value)


def pool_name(value: Any) -> str:
    """``mean`` or ``gridN`` with 1 <= N <= MAX_GRID."""
    m = POOL_RE.match(value) if isinstance(value, str) else None
    if value != "mean" and (m is None or int(m.group(1)) > MAX_GRID):
        raise ValueError(f"must be 'mean' or 'gridN' with N from 1 to {MAX_GRID} (e.g. grid4), not {value!r}")
    return value


def one_of(*allowed: str) -> Rule:
    """One of the names ``allowed`` (a mode such as the kNN head's ``selection``)."""

    def rule(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {value!r}")
        return value

    rule.__doc__ = "one of " + ", ".join(allowed)
    return rule


def each(rule: Rule) -> Rule:
    """The rule applied to every item of a list (a single value is checked as a one-item list)."""

    def rule_each(value: Any) -> Any:
        if isinstance(value, list | tuple):
            if not value:
                raise ValueError("must not be empty")
            return type(value)(rule(v) for v in value)
        return rule(value)

    return rule_each


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)

# Field name -> rule, for every config field and CLI option with a numeric meaning. None is always allowed
# (it means "the default") and is never passed to a rule.
RULES: dict[str, Rule] = {
    "epochs": positive_int,
    "lr": finite_positive,
    "lrs": each(finite_positive),
    "ocr_lrs": each(finite_positive),
    "batch_size": positive_int,
    "eval_batch_size": positive_int,
    "max_train": positive_int,
    "max_eval": positive_int,
    "max_pairs": positive_int,
    "max_items": positive_int,
    "k": each(positive_int),
    "pools": each(pool_name),
    "num_workers": non_negative_int,
    "workers": non_negative_int,
    "threads": positive_int,
    "grad_accum": positive_int,
    "lora_r": positive_int,
    "lora_alpha": positive_int,
    "lora_dropout": unit_fraction,
    "warmup_ratio": unit_fraction,
    "weight_decay": finite_non_negative,
    "checkpoint_every": positive_int,
    "stop_after_steps": positive_int,
    "steps": positive_int,
    "cell_rank": positive_int,
    "heldout_frac": open_fraction,
    "selection": one_of("auto", "loo", "subsample", "heldout"),
    "loo_max_rows": positive_int,
    "heldout_rows": positive_int,
    "test_frac": open_fraction,
    "max_memory_gb": finite_positive,
    "per_ava": positive_int,
    "size": positive_int,
    "shard_size": positive_int,
    "n": positive_int,
}


def check(name: str, value: Any) -> Any:
    """``value`` checked by the rule of ``name`` (unchanged when there is none or it is None)."""
    rule = RULES.get(name)
    return value if rule is None or value is None else rule(value)


def check_all(values: dict[str, Any], where: str = "") -> None:
    """Check every known field of ``values``; the ValueError names the first bad field."""
    for name, value in values.items():
        try:
            check(name, value)
        except ValueError as e:
            raise ValueError(f"{where}{name}: {e}") from None
