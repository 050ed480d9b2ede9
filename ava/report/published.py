"""A report's runs beside published results (``ava report --paper``, ``--published DIR``): the paper's Table 5 or a
results folder, read as a :class:`ava.published.Source`.

For each head of the report whose head (its registry name: ``llm``, ``knn`` ...) the source also has, one comparison:

- **one ranking.** The user's VFMs and the source's VFMs are ranked together per ability, from values, with the
  report's tie rule (tied values share their average rank), and on average over the abilities every ranked row has;
  a user's run of a VFM the source has (matched by registry key, never by a free-form name; a VFM ava does not know
  only by the exact name a results folder has) takes that VFM's place
  in the ranking, and the published row is shown unranked beside it. The source's printed ranks are shown beside the
  recomputed ones, and the printed average rank beside three recomputed ones (the mean of the printed ranks, the
  source's VFMs alone, and with the user's), so every difference has its cause in view.
- **flagged cells** (a value the source itself contradicts) are shown as published, marked, and left out of every
  recomputed rank; an ability where a row then has no value drops out of the average, named with the reason.
- **ours - published** for every user VFM the source has: per ability the difference and whether the published
  value lies in our 95% bootstrap interval (widened by half the published value's last printed digit, since a value
  printed to two decimals stands for everything that rounds to it).
- **comparability**: the paper's test split is not public, so every run says why its numbers are not the paper's
  (synthetic data, a build, an ``ava data split`` of the release); against a results folder, the data identity and
  the head decide, and a difference is a banner. Settings that differ (LLM, LoRA rank, epochs, batch, decode, dtype,
  stages, caps) are listed in one line.

A head the source does not have (a probe or kNN head against the paper's LLM head) is not ranked with it: the report
says so under that head, and shows the source's own table apart.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError
from ava.report.ranks import average_ranks, rank_values

if TYPE_CHECKING:
    from ava.published import Entry, Source
    from ava.report.load import RunResult
    from ava.report.tables import HeadTable

OURS, PUBLISHED = "ours", "published"
SETTING_NAMES = {
    "llm": "LLM",
    "lora_r": "LoRA rank",
    "lora_alpha": "LoRA alpha",
    "lr": "learning rate",
    "epochs": "epochs",
    "batch_size": "global batch",
    "decode": "decoding",
    "dtype": "dtype",
    "stages": "stages 1-2",
    "max_train": "train samples per ability",
    "max_eval": "test samples per ability",
}
SETTINGS = tuple(SETTING_NAMES)
SHORTCUT = "none: stage 3 starts from the LLM as released (the shortcut; the paper aligns and instruction-tunes first)"


def vfm_key(name: str) -> str | None:
    """The registry key of a VFM name (``siglip-2`` -> ``siglip2``), or None for a variant (``NAME#size=224``,
    ``NAME@rev``), a ``hf:`` name, or a VFM ava does not know: those are never matched to a published row.

    A ``tiny-<key>`` test model (the registry's 2-layer random model of ``<key>``'s class) gives ``<key>``: it
    stands for that VFM in pipeline checks (``ava reproduce`` on a CPU), and its random weights label every number."""
    if any(c in name for c in "#@:"):
        return None
    from ava.vfm import VFMS

    try:
        key = VFMS.canonical(name)
    except AvaError:
        return None
    base = key.removeprefix("tiny-")
    if base != key and base in VFMS and VFMS.get(key).random_weights:
        return base
    return key


def _ident(name: str) -> str:
    """What identifies a VFM across sources: its registry key, else its name as given."""
    return vfm_key(name) or name


# -- settings ------------------------------------------------------------------------------------------------------
def _llm_name(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        return value
    from ava.heads.llm.llms import LLMS

    try:
        return LLMS.canonical(value)
    except AvaError:
        return value


def run_settings(run: dict[str, Any], config: dict[str, Any], decode: str | None) -> dict[str, Any]:
    """The settings of an LLM-head run that the paper's protocol fixes, each as the run used it (defaults filled)."""
    r = config.get("lora_r") or 128
    init = run.get("init") or config.get("init")
    return {
        "llm": _llm_name(
            run.get("llm_base") or (run.get("llm") if isinstance(run.get("llm"), str) else config.get("llm"))
        ),
        "lora_r": r,
        "lora_alpha": config.get("lora_alpha") or 2 * r,
        "lr": config.get("lr") or 1e-4,
        "epochs": config.get("epochs") or "10 (20 for localization)",
        "batch_size": config.get("batch_size") or 16,
        "decode": decode,
        "dtype": run.get("dtype") or config.get("dtype"),
        "stages": f"from {init}" if init else SHORTCUT,
        "max_train": config.get("max_train"),
        "max_eval": config.get("max_eval"),
    }


def _fmt_setting(key: str, value: Any) -> str:
    if value is None:
        return {"dtype": "not stated", "max_train": "all", "max_eval": "all"}.get(key, "?")
    return str(value)


def settings_differ(ours: dict[str, dict[str, Any]], theirs: dict[str, Any]) -> list[str]:
    """One line per setting where a user run differs from the published one: ``epochs: 1 here (siglip2), 10 (20 for
    localization) published``. ``ours``: VFM -> settings."""
    lines = []
    for key in SETTINGS:
        if key not in theirs:
            continue
        values: dict[str, list[str]] = {}
        for vfm, s in ours.items():
            if s.get(key) != theirs[key]:
                values.setdefault(_fmt_setting(key, s.get(key)), []).append(vfm)
        if values:
            every = len(values) == 1 and len(next(iter(values.values()))) == len(ours)
            here = "; ".join(f"{v} here" + ("" if every else f" ({', '.join(vs)})") for v, vs in values.items())
            lines.append(f"{SETTING_NAMES[key]}: {here}; {_fmt_setting(key, theirs[key])} published")
    return lines


# -- comparability ------------------------------------------------------------------------------------------------
def not_the_paper(run: RunResult) -> str:
    """Why a run's numbers are not the paper's: what data it was scored on (the paper's test split is not public)."""
    split = run.split or {}
    made_by = split.get("made_by")
    if run.synthetic or made_by == "synthetic":
        return (
            "scored on synthetic data (ava's built-in suite), not on AVA-Bench's images: not comparable with the "
            "published values; only relative behaviour carries over"
        )
    if made_by == "ava data build":
        return "scored on a benchmark built from your own annotations (`ava data build`): other images and questions"
    if made_by == "ava":
        seed = f", seed {split['seed']}" if "seed" in split else ""
        frac = f", test fraction {split['test_frac']}" if "test_frac" in split else ""
        return (
            f"scored on an 80/20 split that `ava data split` made of the release's train data{seed}{frac}: the paper's "
            "test split is not public, so these are other test samples (and fewer training samples); differences "
            "beyond the interval are expected"
        )
    if made_by == "official":
        return (
            "scored on a split the imported data marks official: ava cannot check it is the paper's test split "
            "(which is not public)"
        )
    return f"scored on a split of unknown origin ({split.get('name', '?')}, made by {made_by or 'nobody recorded'})"


def _paper_banners(runs: list[RunResult]) -> list[str]:
    grouped: dict[str, list[str]] = {}
    for r in runs:
        grouped.setdefault(not_the_paper(r), []).append(r.vfm)
        if r.vfm_random_weights or r.llm_random_weights:
            what = " and ".join(w for w, f in (("VFM", r.vfm_random_weights), ("LLM", r.llm_random_weights)) if f)
            grouped.setdefault(f"random weights ({what}): a pipeline check, not a measurement", []).append(r.vfm)
    return [f"{', '.join(vs)}: {why}" for why, vs in grouped.items()]


def _identity(run: RunResult) -> dict[str, str]:
    ident = run.run.get("data_identity")
    per = ident.get("per_ability") if isinstance(ident, dict) else None
    return {str(k): str(v) for k, v in per.items()} if isinstance(per, dict) else {}


def _folder_banners(runs: list[RunResult], entries: list[Entry], head_id: str) -> list[str]:
    lines = []
    for r in runs:
        ours = _identity(r)
        for e in entries:
            shared = [a for a in r.abilities if a in e.cells]
            by_identity = [a for a in shared if ours.get(a) and e.data_identity.get(a)]
            differ = [a for a in by_identity if ours[a] != e.data_identity[a]]
            by_samples = [
                a for a in shared if a not in by_identity and r.abilities[a].sample_set and e.cells[a].sample_set
            ]
            differ += [a for a in by_samples if r.abilities[a].sample_set != e.cells[a].sample_set]
            unknown = [a for a in shared if a not in by_identity and a not in by_samples]
            if differ:
                lines.append(
                    f"{r.vfm} vs {e.vfm} (published): other data on {', '.join(differ)} (the data identity differs): "
                    "not comparable as such"
                )
            if unknown:
                lines.append(f"{r.vfm} vs {e.vfm} (published): cannot check the data of {', '.join(unknown)}")
    if any(e.head_id != head_id for e in entries):
        lines.append(f"published head {entries[0].head_id}, this head {head_id}: another measurement")
    rand = [e.vfm for e in entries if e.random_weights]
    if rand:
        lines.append(f"published with random weights: {', '.join(rand)} (a pipeline check, not a measurement)")
    return list(dict.fromkeys(lines))


# -- ranking ------------------------------------------------------------------------------------------------------
def _rank(
    rows: dict[str, dict[str, float | None]], hib: dict[str, bool], abilities: list[str]
) -> tuple[dict[str, dict[str, float]], dict[str, float], list[str]]:
    """Per-ability ranks of ``rows`` (row -> ability -> value, None: no value), the average rank over the abilities
    every row has, and those abilities."""
    ranks = {ab: rank_values({r: v[ab] for r, v in rows.items() if v.get(ab) is not None}, hib[ab]) for ab in abilities}
    complete = [ab for ab in abilities if rows and len(ranks[ab]) == len(rows)]
    return ranks, average_ranks(ranks, complete), complete


def half_digit(source: Source, ability: str) -> float:
    """Half the last digit the source prints in an ability's column, in ava's units: a published 97.38 stands for
    anything in [97.375, 97.385). The column's most precise value sets the digit (a value whose trailing zeros were
    dropped, 97 for 97.00, is no coarser than its column). 0 for a source published at full precision."""
    if source.kind != "paper":
        return 0.0
    col = source.columns[ability]
    exps = [
        exp
        for e in source.entries
        if ability in e.cells
        and e.cells[ability].printed is not None
        and isinstance(exp := Decimal(repr(e.cells[ability].printed)).as_tuple().exponent, int)
    ]
    return float(Decimal(5).scaleb(min(exps) - 1) / col.scale) if exps else 0.0


def _published_values(source: Source, entries: list[Entry], abilities: list[str]) -> dict[str, dict[str, float | None]]:
    """Entry -> ability -> value, with every flagged-out value as None."""
    return {
        e.vfm: {
            ab: (None if source.excluded(e.vfm, ab) or ab not in e.cells else e.cells[ab].value) for ab in abilities
        }
        for e in entries
    }


def source_table(source: Source) -> list[dict[str, Any]]:
    """The source's own table per head: every value and printed rank as published, the flags, and the ranks
    recomputed from the values among the source's VFMs alone (flagged values left out)."""
    from ava.published.paper import mean_printed_rank

    out = []
    hib = {ab: c.higher_is_better for ab, c in source.columns.items()}
    for head_id in source.heads():
        entries = [e for e in source.entries if e.head_id == head_id]
        abilities = [ab for ab in source.columns if any(ab in e.cells for e in entries)]
        ranks, avg, over = _rank(_published_values(source, entries, abilities), hib, abilities)
        rows = []
        for e in entries:
            mean = mean_printed_rank(e)
            rows.append(
                {
                    "vfm": e.vfm,
                    "name": e.name,
                    "cells": {
                        ab: {
                            "value": e.cells[ab].value,
                            "printed": e.cells[ab].printed,
                            "printed_rank": e.cells[ab].rank,
                            "rank": ranks[ab].get(e.vfm),
                            "n": e.cells[ab].n,
                            "interval": list(e.cells[ab].interval) if e.cells[ab].interval else None,
                            "flag": (f := source.flag(e.vfm, ab)) and f.id,
                            "excluded": source.excluded(e.vfm, ab) is not None,
                        }
                        for ab in abilities
                        if ab in e.cells
                    },
                    "printed_average_rank": e.average_rank,
                    "mean_printed_ranks": None if mean is None else float(mean),
                    "average_rank": avg.get(e.vfm),
                    "average_rank_flag": (f := source.flag(e.vfm, "average_rank")) and f.id,
                    "random_weights": e.random_weights,
                    "synthetic": e.synthetic,
                    "split": e.details.get("split_label") or "",
                }
            )
        out.append(
            {
                "head_id": head_id,
                "head": entries[0].head_label,
                "abilities": abilities,
                "average_over": over,
                "left_out": _left_out(source, entries, abilities, over, {}),
                "rows": rows,
            }
        )
    return out


def _left_out(
    source: Source, entries: list[Entry], abilities: list[str], over: list[str], ours: dict[str, dict[str, Any]]
) -> dict[str, str]:
    """Why the abilities not in ``over`` are out of the average rank: reason -> abilities (grouped, so that a run of
    one ability does not list the other thirteen one by one)."""
    why: dict[str, list[str]] = {}
    for ab in abilities:
        if ab in over:
            continue
        flagged = [e.name for e in entries if source.excluded(e.vfm, ab)]
        missing = [v for v, cells in ours.items() if cells.get(ab) is None]
        parts = []
        if flagged:
            parts.append(f"the published value of {', '.join(flagged)} is flagged")
        if missing:
            parts.append(f"no score in your run of {', '.join(missing)}")
        unpublished = [e.name for e in entries if ab not in e.cells]
        if unpublished:
            parts.append(f"not published for {', '.join(unpublished)}")
        why.setdefault("; ".join(parts) or "not every row has it", []).append(ab)
    return {", ".join(abs_): reason for reason, abs_ in why.items()}


# -- one comparison ------------------------------------------------------------------------------------------------
def _diff(
    source: Source, entry: Entry, table: HeadTable, vfm: str, run: RunResult, abilities: list[str]
) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for ab in abilities:
        ours = table.values.get(ab, {}).get(vfm)
        cell = entry.cells.get(ab)
        if ours is None or cell is None or cell.value is None:
            continue
        col = source.columns[ab]
        interval = (table.intervals.get(ab) or {}).get(vfm)
        flag = source.excluded(entry.vfm, ab)
        half = half_digit(source, ab)
        if flag is not None:
            inside, verdict = None, f"not judged: the published value is flagged ({flag.id})"
        elif not interval:
            inside, verdict = None, "no interval (the run has no per-sample scores)"
        else:
            inside = interval[0] - half <= cell.value <= interval[1] + half
            verdict = "inside" if inside else "outside"
        cells[ab] = {
            "ours": ours,
            "published": cell.value,
            "difference": ours - cell.value,
            "interval": interval,
            "published_half_digit": half,
            "inside": inside,
            "verdict": verdict,
            "shown": {
                "ours": col.to_printed(ours),
                "published": cell.printed if cell.printed is not None else col.to_printed(cell.value),
                "difference": col.to_printed(ours - cell.value),
                "interval": [col.to_printed(x) for x in interval] if interval else None,
            },
        }
    judged = [c for c in cells.values() if c["inside"] is not None]
    return {
        "vfm": vfm,
        "run": str(run.path),
        "published": entry.vfm,
        "published_name": entry.name,
        "abilities": cells,
        "inside": sum(bool(c["inside"]) for c in judged),
        "judged": len(judged),
    }


def _average_notes(source: Source, rows: list[dict[str, Any]], over: list[str], alone_over: list[str]) -> list[str]:
    notes = []
    pub = [r for r in rows if r["kind"] == PUBLISHED and r["printed_average_rank"] is not None]
    off = [r for r in pub if r["average_rank_flag"]]
    if off:
        notes.append(
            "printed average ranks that are not the mean of the printed ranks (flagged): "
            + ", ".join(f"{r['name']} {r['printed_average_rank']:g} vs {r['mean_printed_ranks']:.2f}" for r in off)
        )
    if pub and set(alone_over) != set(source.columns):
        out = [ab for ab in source.columns if ab not in alone_over]
        notes.append(
            f"recomputed over {len(alone_over)} abilities, not {len(source.columns)}: {', '.join(out)} left out "
            "(a flagged value leaves an ability without a value for every VFM)"
        )
    if pub and any(r["tie"] for r in rows):
        notes.append("tied values share their average rank, where the source printed different ranks")
    n_ours = sum(r["kind"] == OURS for r in rows)
    if n_ours:
        notes.append(
            f"with your {n_ours} VFM(s) the ranks are among {len([r for r in rows if r['ranked']])} rows, over the "
            f"{len(over)} abilities every one of them has ({', '.join(over) or 'none'})"
        )
    return notes


def compare_head(
    source: Source, table: HeadTable, runs: list[RunResult], entries: list[Entry], alone: dict[str, Any]
) -> dict[str, Any]:
    """The comparison of one report head with one published head (see the module docstring)."""
    by_vfm = {r.vfm: r for r in runs}
    abilities = [ab for ab in source.columns if any(ab in e.cells for e in entries)]
    hib = {ab: c.higher_is_better for ab, c in source.columns.items()}
    published = {e.vfm: e for e in entries}
    by_ident = {_ident(e.vfm): e.vfm for e in entries}
    # a run of a published VFM: the same registry key (a variant or an unknown VFM: the same name, as a folder has it)
    matches = {v: by_ident[_ident(v)] for v in table.vfms if _ident(v) in by_ident}
    ours_values = {v: {ab: table.values.get(ab, {}).get(v) for ab in abilities} for v in table.vfms}
    pub_values = _published_values(source, entries, abilities)
    ranked = {f"{OURS}:{v}": vals for v, vals in ours_values.items()}
    ranked |= {f"{PUBLISHED}:{k}": vals for k, vals in pub_values.items() if k not in matches.values()}
    ranks, avg, over = _rank(ranked, hib, abilities)
    alone_rows = {r["vfm"]: r for r in alone["rows"]}
    rows = []
    for v in table.vfms:
        rid = f"{OURS}:{v}"
        cells = {}
        for ab in abilities:
            x = ours_values[v][ab]
            ci = (table.intervals.get(ab) or {}).get(v)
            col = source.columns[ab]
            cells[ab] = {
                "value": x,
                "shown": None if x is None else col.to_printed(x),
                "interval": ci,
                "shown_interval": [col.to_printed(c) for c in ci] if ci else None,
                "rank": ranks[ab].get(rid),
            }
        rows.append(
            {
                "id": rid,
                "kind": OURS,
                "vfm": v,
                "name": v,
                "run": str(by_vfm[v].path) if v in by_vfm else None,
                "random_weights": bool(table.random_weights.get(v)),
                "matches": matches.get(v),
                "ranked": True,
                "cells": cells,
                "average_rank": avg.get(rid),
                "printed_average_rank": None,
                "mean_printed_ranks": None,
                "average_rank_alone": None,
                "average_rank_flag": None,
                "tie": False,
            }
        )
    for e in entries:
        rid = f"{PUBLISHED}:{e.vfm}"
        mine = alone_rows[e.vfm]
        flags = {ab: source.flag(e.vfm, ab) for ab in abilities}
        replaced = next((v for v, k in matches.items() if k == e.vfm), None)
        cells = {}
        for ab in abilities:
            if ab not in e.cells:
                continue
            c, flag = e.cells[ab], flags[ab]
            cells[ab] = {
                "value": c.value,
                "shown": c.printed,
                "interval": list(c.interval) if c.interval else None,
                "shown_interval": list(c.interval) if c.interval and source.columns[ab].scale == 1 else None,
                "rank": ranks[ab].get(rid),
                "printed_rank": c.rank,
                "flag": flag.id if flag else None,
                "excluded": source.excluded(e.vfm, ab) is not None,
            }
        rows.append(
            {
                "id": rid,
                "kind": PUBLISHED,
                "vfm": e.vfm,
                "name": e.name,
                "run": None,
                "random_weights": e.random_weights,
                "replaced_by": replaced,
                "ranked": replaced is None,
                "cells": cells,
                "average_rank": avg.get(rid),
                "printed_average_rank": e.average_rank,
                "mean_printed_ranks": mine["mean_printed_ranks"],
                "average_rank_alone": mine["average_rank"],
                "average_rank_flag": mine["average_rank_flag"],
                "tie": any(f is not None and f.kind == "tie_ranked_apart" for f in flags.values()),
            }
        )
    rows.sort(key=lambda r: (r["average_rank"] is None, r["average_rank"] or math.inf, r["kind"] != OURS))
    our_settings = {
        v: run_settings(r.run, r.config, r.decode) for v, r in by_vfm.items() if str(r.run.get("head")) == "llm"
    }
    theirs = _published_settings(source, entries)
    ranked_rows = [r for r in rows if r["ranked"]]
    return {
        "head_id": table.id,
        "head": table.head,
        "published_head_id": entries[0].head_id,
        "published_head": entries[0].head_label,
        "same_head": entries[0].head_id == table.id,
        "banners": _paper_banners(runs) if source.kind == "paper" else _folder_banners(runs, entries, table.id),
        "settings_differ": settings_differ(our_settings, theirs) if our_settings and theirs else [],
        "abilities": abilities,
        "not_published": [ab for ab in table.abilities if ab not in abilities],
        "units": {ab: {"scale": c.scale, "printed_as": c.printed_as} for ab in abilities if (c := source.columns[ab])},
        "rows": rows,
        "n_ranked": len(ranked_rows),
        "average_over": over,
        "average_over_alone": alone["average_over"],
        "left_out": _left_out(source, entries, abilities, over, {v: ours_values[v] for v in table.vfms}),
        "average_rank_notes": _average_notes(source, rows, over, alone["average_over"]),
        "diff": [_diff(source, published[k], table, v, by_vfm[v], abilities) for v, k in matches.items()],
    }


def _published_settings(source: Source, entries: list[Entry]) -> dict[str, Any]:
    """The published head's settings: the paper's as its protocol states them; a folder's from its entries' run
    records when they all agree (else none are compared)."""
    if source.kind == "paper":
        return dict(source.provenance.get("settings") or {})
    found = [
        run_settings(e.details["run"].get("run") or {}, e.details["run"].get("config") or {}, e.details.get("decode"))
        for e in entries
        if e.head == "llm"
    ]
    return found[0] if found and all(f == found[0] for f in found) else {}


def compare(source: Source, tables: dict[str, HeadTable], runs: list[RunResult]) -> dict[str, Any]:
    """report.json's ``published[]`` block for one source: the source, its own table, one comparison per report head
    the source has, and the report heads it has not (``apart``, with the reason)."""
    alone = {t["head_id"]: t for t in source_table(source)}
    comparisons, apart = [], []
    for hid, t in tables.items():
        kind = hid.split(":")[0]
        head_runs = [r for r in runs if (r.head_id or r.head) == hid]
        if t.refused:
            apart.append({"head_id": hid, "head": t.head, "reason": "its table is refused (see above)"})
            continue
        same_kind = [h for h in source.heads() if h.split(":")[0] == kind]
        chosen = [hid] if hid in same_kind else same_kind
        if not chosen:
            heads = ", ".join(sorted({e.head_label for e in source.entries}))
            apart.append(
                {
                    "head_id": hid,
                    "head": t.head,
                    "reason": f"the published results are of another head ({heads}): not ranked together; "
                    "the published table is shown on its own",
                }
            )
            continue
        for ph in chosen:
            entries = [e for e in source.entries if e.head_id == ph]
            comparisons.append(compare_head(source, t, head_runs, entries, alone[ph]))
    return {
        "source": source.to_dict(),
        "table": list(alone.values()),
        "comparisons": comparisons,
        "apart": apart,
    }


def load_sources(paper: bool, published: list[str] | None) -> list[Source]:
    """The sources a report compares with: the paper's table (``paper``) and each results folder, all read and
    checked before anything is written."""
    from ava.published import paper_table, read_folder

    sources = [paper_table()] if paper else []
    return sources + [read_folder(p) for p in published or []]
