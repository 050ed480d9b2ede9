"""The report's tables as plain data: one Table-5-style table per head, rank agreement between heads, subgroups.

Table 5 of the paper is ability x VFM with each VFM's metric value and its rank among the VFMs per ability,
then the average rank. Here there is one such table per head, because the head is part of the measurement:
whether a cheap head (kNN, probe) ranks VFMs like the LLM head is what the agreement tables answer.

The average rank of a head is taken over the abilities that every VFM of that head was scored on, so no VFM
gains from a missing ability; abilities left out are listed in the table's notes.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

from ava.errors import AvaError
from ava.report.load import RunResult
from ava.report.ranks import average_ranks, rank_agreement, rank_values


@dataclass
class HeadTable:
    """Ability x VFM for one head. ``vfms`` is ordered best average rank first."""

    head: str
    vfms: list[str]
    abilities: list[str]
    metrics: dict[str, str]  # ability -> metric name
    higher_is_better: dict[str, bool]
    values: dict[str, dict[str, float | None]]  # ability -> vfm -> value (None: not scored)
    n: dict[str, dict[str, int]]
    n_unparsed: dict[str, dict[str, int]]
    ranks: dict[str, dict[str, float]]  # ability -> vfm -> rank among the VFMs that have a value
    average_rank: dict[str, float]
    average_over: list[str]  # abilities the average rank is taken over
    random_weights: dict[str, bool]  # vfm -> the VFM's weights were random (a control, not a trained model)
    head_random_weights: bool  # the head itself started from random weights (an LLM head with a random LLM)
    splits: list[str]  # distinct split labels of its runs ("test (split of the synthetic suite)")
    synthetic: bool  # any of its runs was scored on synthetic data
    runs: dict[str, str]  # vfm -> run directory
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ability_order(keys: set[str]) -> list[str]:
    """Abilities in the registry's (the paper's) order; unknown keys after them, sorted."""
    from ava.abilities import ABILITIES

    known = [k for k in ABILITIES if k in keys]
    return known + sorted(keys - set(known))


def _check_metric(table_runs: list[RunResult], ability: str) -> tuple[str, bool]:
    seen: dict[tuple[str, bool], RunResult] = {}
    for r in table_runs:
        if ability in r.abilities:
            a = r.abilities[ability]
            seen.setdefault((a.metric, a.higher_is_better), r)
    if len(seen) > 1:
        detail = "; ".join(f"{r.path}: {m} ({'higher' if h else 'lower'} is better)" for (m, h), r in seen.items())
        raise AvaError(f"ability {ability!r} is scored with different metrics across runs: {detail}")
    return next(iter(seen))


def head_table(head: str, runs: list[RunResult]) -> HeadTable:
    """The Table-5-style table of one head's runs (one run per VFM)."""
    abilities = ability_order({a for r in runs for a in r.abilities})
    by_vfm = {r.vfm: r for r in runs}
    metrics, hib, values, n, unparsed, ranks = {}, {}, {}, {}, {}, {}
    for ab in abilities:
        metrics[ab], hib[ab] = _check_metric(runs, ab)
        values[ab] = {v: (r.abilities[ab].value if ab in r.abilities else None) for v, r in by_vfm.items()}
        n[ab] = {v: r.abilities[ab].n for v, r in by_vfm.items() if ab in r.abilities}
        unparsed[ab] = {v: r.abilities[ab].n_unparsed for v, r in by_vfm.items() if ab in r.abilities}
        scored = {v: x for v, x in values[ab].items() if x is not None}
        ranks[ab] = rank_values(scored, hib[ab])
    complete = [ab for ab in abilities if len(ranks[ab]) == len(by_vfm)]
    avg = average_ranks(ranks, complete)
    notes = []
    if left_out := [ab for ab in abilities if ab not in complete]:
        notes.append(f"average rank over {len(complete)} abilities scored for every VFM; left out: {left_out}")
    vfms = sorted(by_vfm, key=lambda v: (avg.get(v, float("inf")), v))
    return HeadTable(
        head=head,
        vfms=vfms,
        abilities=abilities,
        metrics=metrics,
        higher_is_better=hib,
        values=values,
        n=n,
        n_unparsed=unparsed,
        ranks=ranks,
        average_rank=avg,
        average_over=complete,
        random_weights={v: r.vfm_random_weights for v, r in by_vfm.items()},
        head_random_weights=any(r.llm_random_weights for r in runs),
        splits=sorted({r.split_label for r in runs}),
        synthetic=any(r.synthetic for r in runs),
        runs={v: str(r.path) for v, r in by_vfm.items()},
        notes=notes,
    )


def head_tables(runs: list[RunResult]) -> dict[str, HeadTable]:
    """One table per head, heads in the order their first run was given."""
    heads: dict[str, list[RunResult]] = {}
    for r in runs:
        heads.setdefault(r.head, []).append(r)
    return {h: head_table(h, rs) for h, rs in heads.items()}


def agreement_between(a: HeadTable, b: HeadTable) -> dict[str, Any]:
    """Kendall tau and Spearman rho between two heads' rankings, per shared ability and on the average rank.

    The average rank is recomputed over the abilities both heads scored for every shared VFM, so that a head
    run on three abilities is compared with the other head's ranking on those same three.
    """
    names = (a.head, b.head)
    shared = [ab for ab in a.abilities if ab in b.abilities]
    per_ability = {ab: rank_agreement(a.ranks[ab], b.ranks[ab], names).to_dict() for ab in shared}
    vfms = set(a.vfms) & set(b.vfms)
    over = [ab for ab in shared if vfms <= set(a.ranks[ab]) and vfms <= set(b.ranks[ab])]
    if over:
        # rank within the shared VFMs only, so VFMs that one head alone ran do not shift the ranks
        sub_a = {ab: rank_values({v: a.ranks[ab][v] for v in vfms}, False) for ab in over}
        sub_b = {ab: rank_values({v: b.ranks[ab][v] for v in vfms}, False) for ab in over}
        avg = rank_agreement(average_ranks(sub_a, over), average_ranks(sub_b, over), names).to_dict()
    else:
        avg = {"n": len(vfms), "kendall_tau": None, "spearman_rho": None, "kendall_p": None, "spearman_p": None,
               "reason": "no ability was scored for every shared VFM under both heads"}  # fmt: skip
    return {"heads": list(names), "vfms": sorted(vfms), "abilities": per_ability, "average_rank": avg,
            "average_over": over}  # fmt: skip


def agreements(tables: dict[str, HeadTable]) -> list[dict[str, Any]]:
    """Agreement for every pair of heads."""
    return [agreement_between(tables[x], tables[y]) for x, y in itertools.combinations(tables, 2)]


def subgroup_tables(runs: list[RunResult], tables: dict[str, HeadTable]) -> dict[str, Any]:
    """``head -> ability -> group -> {"bins": [...], "values": {bin: {vfm: {"value", "n"}}}}`` from results."""
    out: dict[str, Any] = {}
    for head, table in tables.items():
        head_runs = {r.vfm: r for r in runs if r.head == head}
        per_ability: dict[str, Any] = {}
        for ab in table.abilities:
            groups: dict[str, Any] = {}
            for vfm in table.vfms:
                res = head_runs[vfm].abilities.get(ab)
                for group, bins in (res.subgroups if res else {}).items():
                    g = groups.setdefault(group, {"bins": [], "values": {}})
                    for b, cell in bins.items():
                        if b not in g["values"]:
                            g["bins"].append(b)
                            g["values"][b] = {}
                        if isinstance(cell, dict):
                            g["values"][b][vfm] = {"value": cell.get("value"), "n": cell.get("n")}
            if groups:
                per_ability[ab] = groups
        if per_ability:
            out[head] = per_ability
    return out
