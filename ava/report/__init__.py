"""Reports over run directories: the paper's Table 5 per head with bootstrap intervals, chance and majority
baselines, rank agreement between heads, subgroup tables, plots (PNG + SVG) and a browsable gallery of failures,
written as report.md, report.json (schema: docs/report-schema.md), report.tex and report.html.

``make_report`` is the library call behind ``ava report``; ``print_report`` shows its tables in the terminal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ava.report.load import weights_label
from ava.report.render import print_report

SCHEMA_VERSION = 2  # docs/report-schema.md

__all__ = ["make_report", "print_report", "build_report", "SCHEMA_VERSION"]


class _Sections:
    """The report's progress, one step per section (the one progress bar, on stderr), so a long report is never
    silent: ``with sections("plots: knn"): ...``."""

    def __init__(self, bar: Any, total: int) -> None:
        self.bar, self.total = bar, total
        self.task = bar.add_task("report", total=total)

    def grow(self, n: int) -> None:
        """``n`` more sections, known once the runs are read (plots: one per head)."""
        self.total += n
        self.bar.update(self.task, total=self.total)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.bar.update(self.task, description=f"report: {name}")
        yield
        self.bar.advance(self.task)


def build_report(
    run_dirs: list[str | Path],
    split: str = "test",
    *,
    allow_mixed: bool = False,
    n_boot: int | None = None,
    seed: int = 0,
    opening: list[str] | None = None,
    reference: str | None = None,
    gaps: list[tuple[str, str]] | None = None,
    paper: bool = False,
    published: list[str] | None = None,
) -> dict[str, Any]:
    """The report as a JSON-able dict (no files written, no plots yet); arguments as :func:`make_report`."""
    from ava.report.published import load_sources

    sources = load_sources(paper, published)
    report, tables, runs = _build(run_dirs, split, allow_mixed=allow_mixed, n_boot=n_boot, seed=seed, opening=opening)
    _analyses(report, tables, runs, reference, gaps, sources)
    return report


def _analyses(
    report: dict[str, Any],
    tables: dict[str, Any],
    runs: list[Any],
    reference: str | None,
    gaps: list[tuple[str, str]] | None,
    sources: list[Any] | None = None,
) -> None:
    """FOCI's and the paper's analyses: scores relative to a reference VFM (``relative``, with ``reference``), the
    alignment gap of VLM runs against zero-shot runs or named pairs (``alignment``), and the runs beside published
    results (``published``, one block per source: :mod:`ava.report.published`)."""
    from ava.report.alignment import alignment_gap, pairs
    from ava.report.published import compare
    from ava.report.reference import relative_scores

    if reference:
        report["relative"] = relative_scores(tables, reference)
    found = pairs(runs, gaps)
    if found:
        report["alignment"] = [alignment_gap(run, ref) for run, ref in found]
    if sources:
        report["published"] = [compare(source, tables, runs) for source in sources]


def _analysis_markdown(report: dict[str, Any]) -> str:
    from ava.report import alignment, reference

    md: list[str] = []
    if report.get("relative"):
        md += reference.markdown(report["relative"])
        for files in report.get("relative_plots", {}).values():
            md += [f"![relative scores]({f})" for f in files if f.endswith(".png")] + [""]
    if report.get("alignment"):
        md += alignment.markdown(report["alignment"])
    return "\n".join(md)


def _build(
    run_dirs: list[str | Path],
    split: str,
    *,
    allow_mixed: bool,
    n_boot: int | None,
    seed: int,
    opening: list[str] | None,
    sections: _Sections | None = None,
) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """The report dict, the live tables (with bootstrap replicates) and the loaded runs.

    ``opening`` is the hook for opening sentences (``ava demo`` uses it), shown at the top of report.md,
    report.html and the terminal, and kept in report.json under ``opening``. ``sections``: the progress, advanced
    by four steps (runs, intervals, agreement, subgroups).
    """
    from contextlib import nullcontext

    from ava.provenance import provenance
    from ava.report import bootstrap as bs
    from ava.report.load import load_runs
    from ava.report.tables import agreements, head_tables, subgroup_tables

    def section(name: str) -> Any:
        return sections(name) if sections is not None else nullcontext()

    with section(f"reading {len(run_dirs)} runs"):
        runs = load_runs(list(run_dirs), split)
    with section(f"{n_boot or bs.N_BOOT} bootstrap replicates per score, ranks"):
        tables = head_tables(runs, allow_mixed=allow_mixed, split=split, n_boot=n_boot or bs.N_BOOT, seed=seed)
    with section("rank agreement between heads"):
        agreement = agreements(tables)
    with section("subgroups"):
        subgroups = subgroup_tables(runs, tables)
    report = {
        "schema_version": SCHEMA_VERSION,
        "split": split,
        "allow_mixed": allow_mixed,
        "opening": list(opening or []),
        "runs": [
            {
                "path": str(r.path),
                "head": r.head,
                "head_id": r.head_id,
                "vfm": r.vfm,
                "weights": weights_label(r),
                "random_weights": r.random_weights,
                "vfm_random_weights": r.vfm_random_weights,
                "llm_random_weights": r.llm_random_weights,
                "synthetic": r.synthetic,
                "split": r.split,
                "split_label": r.split_label,
                "decode": r.decode,
                "sample_set_source": r.sample_set_source,
                "run": r.run,
            }
            for r in runs
        ],
        "heads": {h: t.to_dict() for h, t in tables.items()},
        "refused": {h: t.refused for h, t in tables.items() if t.refused},
        "agreement": agreement,
        "subgroups": subgroups,
        "plots": {},
        "provenance": provenance(),
    }
    from ava.report.augment import task_augmentation

    if (augment := task_augmentation(runs)) is not None:  # runs that scored task-augmentation questions
        report["task_augmentation"] = augment
    return report, tables, runs


def make_report(
    run_dirs: list[str | Path],
    out: str | Path,
    split: str = "test",
    *,
    allow_mixed: bool = False,
    n_boot: int | None = None,
    seed: int = 0,
    opening: list[str] | None = None,
    html: bool = True,
    reference: str | None = None,
    gaps: list[tuple[str, str]] | None = None,
    progress: bool = False,
    paper: bool = False,
    published: list[str] | None = None,
) -> dict[str, Any]:
    """Read the runs' ``results_<split>.json`` (and ``predictions_<split>.jsonl``) and write, under ``out``:
    report.md, report.json (strict JSON), report.tex, report.html (self-contained) and ``plots/`` (PNG and SVG
    per head). Returns the report dict (as in report.json). Each file is written whole through a temporary
    file, so an interrupted report never leaves a half-written one.

    A head whose runs were not scored on the same samples is refused (``report["refused"]``, shown in place of
    its table) unless ``allow_mixed``. ``n_boot`` bootstrap replicates (default 2000) drawn from ``seed``.
    ``opening``: sentences the report opens with (``ava demo`` says there what each extractor's fingerprint shows).
    ``reference``: a VFM every score is also shown relative to (:mod:`ava.report.reference`); ``gaps``: (run dir,
    reference run dir) pairs for the alignment gap (:mod:`ava.report.alignment`; default: each VLM run against
    each zero-shot run). ``progress``: one step per section on stderr.

    ``paper``: the runs beside the AVA-Bench paper's Table 5 (:func:`ava.published.paper_table`); ``published``:
    beside each results folder (a path or an fsspec URL, written by ``ava results export``). Every source is read
    and checked before anything is written.
    """
    from ava.progress import progress as progress_bar
    from ava.report.published import load_sources

    sources = load_sources(paper, published)
    with progress_bar(progress, transient=True) as bar:
        # reading, intervals, agreement, subgroups, the analyses, the files, report.html (+ plots per head, later)
        sections = _Sections(bar, 4 + 1 + 1 + int(html))
        return _make(
            run_dirs, Path(out), split, allow_mixed, n_boot, seed, opening, html, reference, gaps, sections, sources
        )


def _make(
    run_dirs: list[str | Path],
    out: Path,
    split: str,
    allow_mixed: bool,
    n_boot: int | None,
    seed: int,
    opening: list[str] | None,
    html: bool,
    reference: str | None,
    gaps: list[tuple[str, str]] | None,
    sections: _Sections,
    sources: list[Any],
) -> dict[str, Any]:
    from ava.data.format import atomic_write_text
    from ava.report.plots import write_plots
    from ava.report.render import latex, markdown, with_markdown_contents
    from ava.report.strict_json import dumps

    report, tables, runs = _build(
        run_dirs, split, allow_mixed=allow_mixed, n_boot=n_boot, seed=seed, opening=opening, sections=sections
    )
    sections.grow(sum(not t.refused for t in tables.values()))
    with sections("relative scores, alignment gaps, published results"):
        _analyses(report, tables, runs, reference, gaps, sources)
    out.mkdir(parents=True, exist_ok=True)
    for head, t in tables.items():
        if t.refused:
            continue
        with sections(f"plots of {t.head}"):
            files = write_plots(t, out / "plots")
        report["plots"][head] = {kind: [f"plots/{f}" for f in names] for kind, names in files.items()}
    if report.get("relative"):
        from ava.report.reference import write_plots as relative_plots

        report["relative_plots"] = relative_plots(report["relative"], out / "plots")
    if "task_augmentation" in report:
        from ava.report.augment import write_plot

        report["task_augmentation"]["plot"] = write_plot(report["task_augmentation"], out / "plots")
    from ava.report import published_view

    with sections("report.json, report.md, report.tex"):
        atomic_write_text(out / "report.json", dumps(report))
        md = markdown(report, base=out, after_head=published_view.head_markdown(report, base=out))
        md += "\n" + _analysis_markdown(report) + "\n".join(published_view.markdown(report))
        atomic_write_text(out / "report.md", with_markdown_contents(md))
        atomic_write_text(out / "report.tex", latex(report) + published_view.latex(report))
    if html:
        from ava.report.html import write_html

        with sections("report.html with the failure galleries"):
            after = published_view.head_html(report, base=out)
            write_html(report, tables, runs, out, after, published_view.html(report))
    return report
