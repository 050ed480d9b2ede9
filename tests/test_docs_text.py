"""The docs and the code's docstrings and comments say what the code does now: no development history (issue numbers,
"passes", dates of runs, developer sessions) and no reference to material users do not have (``shared/``, "spec
section N"). Figures belong in ``benchmarks/results/`` and ``docs/performance.md``, which is rendered from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "examples").glob("*.md"),
        *(ROOT / "benchmarks").glob("*.md"),
        *(ROOT / "tests").glob("*.md"),
    ]
)
CODE = sorted((ROOT / "ava").rglob("*.py"))
# the rendered figures page holds each figure's measurement date by design
DATED = {ROOT / "docs" / "performance.md"}

ORDINAL = r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|\d+(?:st|nd|rd|th)"
HISTORY = {
    "a file users do not have": r"\bshared/(?:docs|tools|hooks)|\.\./shared\b",
    "a spec section": r"\bspec(?:ification)? section\b",
    "an issue number": r"\bissues? #?\d+\b|\((?:see )?#\d+\)|\bof #\d+\b",
    "a development pass": rf"\b(?:{ORDINAL}) pass\b",
    "a developer session": r"\b(?:this|that|an? |earlier|previous|later|next|another|last) ?session\b",
}
DATE = r"\b20\d\d-[01]\d-[0-3]\d\b"


def _findings(text: str, name: str, dated: bool = False) -> list[str]:
    found = []
    checks = HISTORY if dated else {**HISTORY, "a date": DATE}
    for what, pattern in checks.items():
        for m in re.finditer(pattern, text, flags=re.I):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{name}:{line}: {what}: {m.group(0)!r}")
    return found


def _file_findings(path: Path) -> list[str]:
    return _findings(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), dated=path in DATED)


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_docs_tell_no_history(path: Path) -> None:
    found = _file_findings(path)
    assert not found, "\n".join(found)


def test_code_tells_no_history() -> None:
    found = [f for path in CODE for f in _file_findings(path)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "see shared/docs/ava-spec.md",
        "(spec section 2)",
        "issue 38",
        "fourth pass of #12",
        "the 11th pass",
        "measured on 2026-11-28",
        "in this session",
    ],
)
def test_the_checks_catch_history(text: str) -> None:
    assert _findings(f"A line.\n{text}\n", "probe.md")
    assert not _findings("A line about a pytest session-scoped fixture and a fifth of the rows.\n", "probe.md")
