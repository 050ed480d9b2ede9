"""The AVA-Bench paper's Table 5, shipped with ava as data (``paper_table5.json`` beside this module).

The file holds every value and rank exactly as the paper prints them (9 VFMs x 14 abilities, LLM head: Qwen2-0.5B
with LoRA, the paper's own test split, which is not public), each VFM's printed average rank, the paper's units per
column, and a flag per cell that is not self-consistent as printed. :func:`paper_table` reads it and checks, on every
load, that the flags are exactly the contradictions the values and ranks themselves show (:func:`contradictions`), so
an edit that breaks one or the other cannot pass unnoticed.
"""

from __future__ import annotations

import functools
import json
import math
from fractions import Fraction
from typing import Any

from ava.published.model import (
    AVERAGE_RANK,
    EXCLUDES,
    Cell,
    Column,
    Entry,
    Flag,
    PublishedError,
    Source,
    check_value,
)

DATA_FILE = "paper_table5.json"
FORMAT = "ava-published-table"
FORMAT_VERSION = 1


def _read() -> dict[str, Any]:
    from importlib.resources import files

    text = files("ava.published").joinpath(DATA_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
        raise PublishedError(f"ava/published/{DATA_FILE}: not a {FORMAT} file of version {FORMAT_VERSION}")
    return data


def _columns(data: dict[str, Any]) -> dict[str, Column]:
    from ava.abilities import ABILITIES

    out = {}
    for key, c in data["abilities"].items():
        ability = ABILITIES.get(key)
        if ability.metric != c["metric"] or ability.higher_is_better != c["higher_is_better"]:
            raise PublishedError(f"{DATA_FILE}: column {key} is {c['metric']}, ava scores it with {ability.metric}")
        out[key] = Column(key, c["metric"], c["higher_is_better"], int(c["scale"]), c["printed_as"], c["column"])
    return out


def _entry(v: dict[str, Any], columns: dict[str, Column], head: dict[str, str]) -> Entry:
    if set(v["cells"]) != set(columns):
        raise PublishedError(f"{DATA_FILE}: {v['key']} has cells {sorted(v['cells'])}, not the table's columns")
    cells = {}
    for ab, col in columns.items():
        printed = v["cells"][ab]["value"]
        value = check_value(f"{DATA_FILE}: {v['key']}.{ab}", col.metric, col.to_ava(printed))
        cells[ab] = Cell(value=value, printed=printed, rank=v["cells"][ab]["rank"])
    return Entry(
        vfm=v["key"],
        name=v["name"],
        head=head["head_key"],
        head_id=head["head_id"],
        head_label=head["head"],
        cells=cells,
        average_rank=v["average_rank"],
        split={"name": "test", "made_by": "the paper (not public)"},
        details={"checkpoint": v["checkpoint"]},
    )


@functools.cache
def _load() -> Source:
    data = _read()
    columns = _columns(data)
    src = data["source"]
    entries = [_entry(v, columns, src) for v in data["vfms"]]
    flags = []
    for f in data["flags"]:
        if f["excludes"] not in EXCLUDES:
            raise PublishedError(f"{DATA_FILE}: flag {f['id']}: excludes must be one of {EXCLUDES}")
        cells = tuple((c["vfm"], c["ability"]) for c in f["cells"])
        flags.append(Flag(f["id"], f["kind"], f["excludes"], cells, f["reason"]))
    source = Source(
        kind="paper",
        location="built-in",
        title=f"AVA-Bench paper (arXiv {src['arxiv']}), {src['table']}",
        provenance={k: v for k, v in src.items() if k not in ("head_key", "head_id")},
        columns=columns,
        entries=entries,
        flags=flags,
        remarks=list(data.get("remarks") or []),
        split_public=bool(src["split_public"]),
        split_text=src["split"],
    )
    found = {(kind, cells) for kind, cells in contradictions(source)}
    flagged = {(f.kind, frozenset(f.cells)) for f in flags}
    if found != flagged:
        raise PublishedError(
            f"{DATA_FILE}: its flags do not match the contradictions its values show "
            f"(unflagged: {sorted(map(str, found - flagged))}; "
            f"flagged without cause: {sorted(map(str, flagged - found))})"
        )
    return source


def paper_table() -> Source:
    """The AVA-Bench paper's Table 5 (supplementary C.1) as published: 9 VFMs x 14 abilities, LLM head
    (Qwen2-0.5B + LoRA), with provenance, units, printed ranks and average ranks, and a flag on every cell that is
    not self-consistent as printed. Values are in ava's units (``Cell.value``) and as printed (``Cell.printed``)."""
    import copy

    return copy.deepcopy(_load())


def mean_printed_rank(entry: Entry) -> Fraction | None:
    """The exact mean of an entry's printed ranks (None when a cell has no printed rank)."""
    ranks = [c.rank for c in entry.cells.values()]
    if not ranks or any(r is None for r in ranks):
        return None
    return Fraction(sum(Fraction(r) for r in ranks), len(ranks))  # type: ignore[arg-type]


def _one_decimal(mean: Fraction) -> set[Fraction]:
    """What a mean may be printed as with one decimal: rounded or truncated."""
    tenth = mean * 10
    return {Fraction(math.floor(tenth), 10), Fraction(math.floor(tenth + Fraction(1, 2)), 10)}


def _in_order(cells: list[tuple[str, Cell]], printed: dict[str, Fraction], higher_is_better: bool) -> bool:
    """Whether the values of ``cells`` taken in printed-rank order never get better (ties allowed)."""
    seq = [printed[v] for v, c in sorted(cells, key=lambda x: float(x[1].rank or 0))]
    return all((a >= b) if higher_is_better else (a <= b) for a, b in zip(seq, seq[1:], strict=False))


def contradictions(source: Source) -> list[tuple[str, frozenset[tuple[str, str]]]]:
    """The cells of a source with printed ranks that contradict themselves, by kind, computed from the values:

    - ``value_contradicts_rank``: within an ability, a value out of order with the printed ranks, named by the one
      cell whose removal puts the rest in order;
    - ``tie_ranked_apart``: equal printed values given different printed ranks;
    - ``average_rank_not_mean``: a printed average rank that is neither the rounded nor the truncated mean of that
      VFM's printed ranks (one decimal).
    """
    found: list[tuple[str, frozenset[tuple[str, str]]]] = []
    for ab, col in source.columns.items():
        cells = [(e.vfm, e.cells[ab]) for e in source.entries if ab in e.cells and e.cells[ab].rank is not None]
        if not cells:
            continue
        printed = {v: Fraction(repr(c.printed)) for v, c in cells}
        by_value: dict[Fraction, list[str]] = {}
        for v, _ in cells:
            by_value.setdefault(printed[v], []).append(v)
        for group in by_value.values():
            if len(group) > 1 and len({dict(cells)[v].rank for v in group}) > 1:
                found.append(("tie_ranked_apart", frozenset((v, ab) for v in group)))

        if not _in_order(cells, printed, col.higher_is_better):
            culprits = [
                v for v, _ in cells if _in_order([x for x in cells if x[0] != v], printed, col.higher_is_better)
            ]
            found.append(("value_contradicts_rank", frozenset((v, ab) for v in culprits)))
    for e in source.entries:
        mean = mean_printed_rank(e)
        if mean is not None and e.average_rank is not None and Fraction(repr(e.average_rank)) not in _one_decimal(mean):
            found.append(("average_rank_not_mean", frozenset({(e.vfm, AVERAGE_RANK)})))
    return found
