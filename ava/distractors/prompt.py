"""Question texts for rewritten options: the option list replaced in place (the question keeps its wording), or
FOCI's prompt form.

FOCI asks (Geigle et al. 2024; docs/benchmark.md)::

    Which of these <domain> is shown in the image?
    Choices:
    A. <choice 1>
    ...
    Answer with the letter from the given choices directly.

and a reply is right when it begins with the right letter: questions written in this form carry
``meta["reply_rule"] = "foci"`` and ``ava score`` reads their replies with
:func:`ava.abilities.parsers.parse_foci_letter` (``"B"``, ``"(B)"``, ``"B. <text>"``, ``"B is the answer"``: option
B), not with the general option parser.
"""

from __future__ import annotations

import re

from ava.abilities.base import OptionStyle, format_options, option_label
from ava.data.choices import OptionsError

TEMPLATES = ("keep", "foci")
FOCI_INSTRUCTION = "Answer with the letter from the given choices directly."


def foci_question(options: list[str], domain: str = "choices") -> str:
    """FOCI's prompt: the domain question, ``A.``-``D.`` choices one per line, the letter instruction."""
    lines = [f"{option_label(i, 'letter')}. {o}" for i, o in enumerate(options)]
    return "\n".join([f"Which of these {domain} is shown in the image?", "Choices:", *lines, FOCI_INSTRUCTION])


def replace_option_list(question: str, old: list[str], new: list[str], style: OptionStyle) -> str:
    """``question`` with its listed options ``old`` replaced by ``new`` (same label style).

    The list is found as ava and the release write it (``"1. a, 2. b"``); else as the run of labels the parsers
    read (:func:`ava.abilities.parsers.extract_options`), from the first label to the end of the last option."""
    written = format_options(old, style)
    if written in question:
        return question.replace(written, format_options(new, style), 1)
    start = _first_label(question, style)
    last = re.escape(old[-1])
    end = re.search(
        rf"{re.escape(option_label(len(old) - 1, style))}[.)]\s+{last}", question[start:] if start is not None else ""
    )
    if start is None or end is None:
        raise OptionsError(f"cannot find the option list {written[:60]!r}... in the question {question[:80]!r}")
    return question[:start] + format_options(new, style) + question[start + end.end() :]


def _first_label(question: str, style: OptionStyle) -> int | None:
    m = re.search(rf"(?:(?<=[\s:(\[])|^){re.escape(option_label(0, style))}[.)]\s+", question)
    return m.start() if m else None


def rewritten_answer(old_answer: str, truth_text: str, index: int, style: OptionStyle, template: str) -> str:
    """The reference answer for the new options: FOCI's is the letter; otherwise the answer keeps its form (the
    option text, or a label with or without the text, relabelled)."""
    if template == "foci":
        return option_label(index, "letter")
    text = old_answer.strip()
    label = option_label(index, style)
    if re.fullmatch(r"\(?([A-Za-z]|\d{1,3})\)?", text):
        return label
    if re.match(r"^\(?([A-Za-z]|\d{1,3})[.):]\s+", text):
        return f"{label}. {truth_text}"
    return truth_text
