"""What an atomic visual ability is: its question and answer forms, metric, and subgroups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AnswerKind = Literal["option", "integer", "depth_bin", "box", "rgb", "text"]
OptionStyle = Literal["number", "letter"]


@dataclass(frozen=True)
class Ability:
    key: str
    config_name: str  # the release's Hugging Face config name
    title: str
    answer_kind: AnswerKind
    metric: str  # a key of ava.metrics.METRICS
    higher_is_better: bool
    question_templates: tuple[str, ...]
    epochs: int = 10
    # Options that never change between samples (orientation views, emotions, ...). Abilities whose
    # options are sampled per question (fine-grained, action, scene, recognition) leave this empty
    # and carry the list on each sample.
    fixed_options: tuple[str, ...] = ()
    option_style: OptionStyle = "number"
    # Keys of ava.abilities.subgroups.SUBGROUPS this ability reports by (the paper's subgroups).
    subgroups: tuple[str, ...] = ()
    notes: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def is_choice(self) -> bool:
        return self.answer_kind in ("option", "depth_bin")


def option_label(index: int, style: OptionStyle) -> str:
    """The label of option ``index`` (0-based): ``"3"`` or ``"C"``."""
    if style == "letter":
        return chr(ord("A") + index)
    return str(index + 1)


def format_options(options: list[str] | tuple[str, ...], style: OptionStyle = "number") -> str:
    """Options as the paper writes them inside a question: ``"1. front, 2. front right, ..."``."""
    return ", ".join(f"{option_label(i, style)}. {opt}" for i, opt in enumerate(options))
