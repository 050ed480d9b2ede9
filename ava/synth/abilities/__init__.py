"""One generator per ability, registered lazily so listing them imports nothing heavy.

Also the helpers every generator uses to phrase its question and answer exactly as the paper does (the
ability's own template and :func:`ava.abilities.format_options`) and as ``format_reply`` writes answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ava.abilities import get_ability
from ava.abilities.base import format_options
from ava.registry import Registry
from ava.synth.core import Ctx, Rendered

GENERATORS: Registry[Callable[[Ctx], Rendered]] = Registry("synthetic generator")
for _key, _module in (
    ("localization", "localization"),
    ("counting", "counting"),
    ("fine_grained", "fine_grained"),
    ("abs_depth", "depth"),
    ("rel_depth", "depth"),
    ("ocr", "ocr"),
    ("orientation", "orientation"),
    ("recognition", "recognition"),
    ("action", "action"),
    ("texture", "texture"),
    ("spatial", "spatial"),
    ("scene", "scene"),
    ("emotion", "emotion"),
    ("color", "color"),
):
    GENERATORS.register(_key, f"ava.synth.abilities.{_module}:render_{_key}")


def ask(ava: str, options: Sequence[str] | None = None, **fields: str) -> str:
    """The ability's (first) question template filled with ``fields`` and the formatted options."""
    ability = get_ability(ava)
    if options is not None:
        fields["options"] = format_options(list(options), ability.option_style)
    return ability.question_templates[0].format(**fields)


def option_truth(options: Sequence[str], index: int) -> dict:
    return {"index": index, "text": options[index]}


def fmt_box(box: Sequence[float]) -> str:
    """A normalized box as ``format_reply`` writes it: ``[0.120, 0.300, 0.550, 0.800]``."""
    return "[" + ", ".join(f"{v:.3f}" for v in box) + "]"


def fmt_rgb(rgb: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(v)) for v in rgb) + ")"
