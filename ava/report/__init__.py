"""Reports over run directories: the paper's Table 5 per head, rank agreement between heads, subgroup tables,
plots (PNG + SVG), written as report.md, report.json and report.tex.

``make_report`` is the library call behind ``ava report``; ``print_report`` shows its tables in the terminal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ava.report.render import print_report

SCHEMA_VERSION = 1

__all__ = ["make_report", "print_report", "build_report", "SCHEMA_VERSION"]


def build_report(run_dirs: list[str | Path], split: str = "test") -> dict[str, Any]:
    """The report as a JSON-able dict (no files written, no plots yet)."""
    from ava.provenance import provenance
    from ava.report.load import load_runs
    from ava.report.tables import agreements, head_tables, subgroup_tables

    runs = load_runs(list(run_dirs), split)
    tables = head_tables(runs)
    return {
        "schema_version": SCHEMA_VERSION,
        "split": split,
        "runs": [
            {
                "path": str(r.path),
                "head": r.head,
                "vfm": r.vfm,
                "random_weights": r.random_weights,
                "vfm_random_weights": r.vfm_random_weights,
                "llm_random_weights": r.llm_random_weights,
                "synthetic": r.synthetic,
                "split": r.split,
                "split_label": r.split_label,
                "run": r.run,
            }  # fmt: skip
            for r in runs
        ],
        "heads": {h: t.to_dict() for h, t in tables.items()},
        "agreement": agreements(tables),
        "subgroups": subgroup_tables(runs, tables),
        "plots": {},
        "provenance": provenance(),
    }


def make_report(run_dirs: list[str | Path], out: str | Path, split: str = "test",
                opening: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Read the runs' ``results_<split>.json`` and write, under ``out``: report.md, report.json, report.tex and
    ``plots/`` (PNG and SVG per head). Returns the report dict (as in report.json). Each file is written whole
    through a temporary file, so an interrupted report never leaves a half-written one. ``opening``: sentences
    the report opens with (``ava demo`` says there what each extractor's fingerprint shows)."""
    from ava.data.format import atomic_write_text
    from ava.report.plots import write_plots
    from ava.report.render import latex, markdown
    from ava.report.tables import HeadTable

    report = build_report(run_dirs, split)
    report["opening"] = list(opening or [])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for head, t in report["heads"].items():
        files = write_plots(HeadTable(**t), out / "plots")
        report["plots"][head] = {kind: [f"plots/{f}" for f in names] for kind, names in files.items()}
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out / "report.md", markdown(report, base=out))
    atomic_write_text(out / "report.tex", latex(report))
    return report
