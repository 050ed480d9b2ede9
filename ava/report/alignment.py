"""The alignment gap (FOCI's "CLIP wrong => VLM wrong?"): a VLM's (or any run's) accuracy split by whether a
reference run (the zero-shot head of its encoder, or a probe) got the same question right, per ability.

For each choice ability both runs scored, on the questions both scored (matched by ability and id; their truths
must agree): the reference's accuracy, the run's accuracy, the gap (reference minus run), and the run's accuracy
where the reference was right and where it was wrong. FOCI found VLMs ~25% accurate where CLIP was wrong.

Pairs: ``ava report --gap RUN=REF`` names them; without it, every ``vlm`` run is paired with every ``zero-shot``
run of the report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ava.errors import AvaError

if TYPE_CHECKING:
    from ava.report.load import RunResult


def _accuracy(rows: list[dict[str, Any]]) -> float | None:
    return float(sum(float(r["score"]) for r in rows) / len(rows)) if rows else None


def alignment_gap(run: RunResult, ref: RunResult) -> dict[str, Any]:
    """The split of ``run``'s accuracy by ``ref``'s correctness, per shared accuracy ability (module docstring)."""
    mine, theirs = run.records(), ref.records()
    if not mine or not theirs:
        which = run if not mine else ref
        raise AvaError(f"run {which.path} has no predictions_<split>.jsonl: the alignment gap needs per-sample scores")
    abilities: dict[str, Any] = {}
    for ab in sorted(set(mine) & set(theirs)):
        if run.abilities.get(ab) is None or run.abilities[ab].metric != "accuracy":
            continue
        by_id = {str(r["id"]): r for r in theirs[ab]}
        pairs = [(r, by_id[str(r["id"])]) for r in mine[ab] if str(r["id"]) in by_id]
        clash = next((a["id"] for a, b in pairs if a.get("truth") != b.get("truth")), None)
        if clash is not None:
            raise AvaError(
                f"runs {run.path} and {ref.path} give question {ab}/{clash} different truths: they were "
                "not scored on the same questions (other options?)"
            )
        right = [a for a, b in pairs if float(b["score"]) >= 1.0]
        wrong = [a for a, b in pairs if float(b["score"]) < 1.0]
        ref_acc, run_acc = _accuracy([b for _, b in pairs]), _accuracy([a for a, _ in pairs])
        abilities[ab] = {
            "n": len(pairs),
            "reference": ref_acc,
            "run": run_acc,
            "gap": None if ref_acc is None or run_acc is None else ref_acc - run_acc,
            "run_where_reference_right": _accuracy(right),
            "n_reference_right": len(right),
            "run_where_reference_wrong": _accuracy(wrong),
            "n_reference_wrong": len(wrong),
        }
    if not abilities:
        raise AvaError(f"runs {run.path} and {ref.path} share no accuracy-scored ability")
    return {
        "run": str(run.path),
        "run_head": run.head,
        "run_vfm": run.vfm,
        "reference": str(ref.path),
        "reference_head": ref.head,
        "reference_vfm": ref.vfm,
        "abilities": abilities,
    }


def pairs(runs: list[RunResult], named: list[tuple[str, str]] | None) -> list[tuple[RunResult, RunResult]]:
    """The (run, reference) pairs: ``named`` (run dir, reference dir), else every vlm run x every zero-shot run."""
    from pathlib import Path

    if named:
        by_path = {Path(r.path).resolve(): r for r in runs}
        out = []
        for a, b in named:
            found = [by_path.get(Path(p).resolve()) for p in (a, b)]
            if None in found:
                missing = [p for p, f in zip((a, b), found, strict=True) if f is None]
                raise AvaError(f"--gap {a}={b}: {', '.join(missing)} is not among the report's runs; pass it too")
            out.append((found[0], found[1]))
        return out  # type: ignore[return-value]
    vlms = [r for r in runs if str(r.run.get("head")) == "vlm"]
    refs = [r for r in runs if str(r.run.get("head")) == "zero-shot"]
    return [(v, z) for v in vlms for z in refs]


TITLE = "Alignment gap: accuracy split by whether the reference was right"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def caption(g: dict[str, Any]) -> str:
    return f"{g['run_head']} on {g['run_vfm']} vs {g['reference_head']} on {g['reference_vfm']}"


def rows(g: dict[str, Any]) -> list[list[str]]:
    """Header and rows of one pair's table (accuracies in %)."""
    out = [["ability", "n", "reference", "run", "gap", "run where ref right (n)", "run where ref wrong (n)"]]
    for ab, a in g["abilities"].items():
        out.append(
            [
                ab,
                str(a["n"]),
                _pct(a["reference"]),
                _pct(a["run"]),
                _pct(a["gap"]),
                f"{_pct(a['run_where_reference_right'])} ({a['n_reference_right']})",
                f"{_pct(a['run_where_reference_wrong'])} ({a['n_reference_wrong']})",
            ]
        )
    return out


def markdown(gaps: list[dict[str, Any]]) -> list[str]:
    """report.md's section: one table per pair."""
    md = [f"## {TITLE}", ""]
    for g in gaps:
        table = rows(g)
        md += [f"### {caption(g)}", "", "| " + " | ".join(table[0]) + " |", "|---|" + "---:|" * (len(table[0]) - 1)]
        md += ["| " + " | ".join(r) + " |" for r in table[1:]] + [""]
    return md


def html(gaps: list[dict[str, Any]]) -> list[str]:
    """report.html's section: the same tables."""
    from ava.report.markup import escape, table_html

    body = [f"<h2>{escape(TITLE)}</h2>"]
    for g in gaps:
        body += [f"<h3>{escape(caption(g))}</h3>", table_html(rows(g))]
    return body
