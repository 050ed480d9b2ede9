"""The report's tables as plain data: one Table-5-style table per head, rank agreement between heads, subgroups.

Table 5 of the paper is ability x VFM with each VFM's metric value and its rank among the VFMs per ability,
then the average rank. Here there is one such table per head, because the head is part of the measurement:
whether a cheap head (kNN, probe) ranks VFMs like the LLM head is what the agreement tables answer.

The average rank of a head is taken over the abilities that every VFM of that head was scored on, so no VFM
gains from a missing ability; abilities left out are listed in the table's notes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ava.errors import AvaError
from ava.report import bootstrap as bs
from ava.report.load import RunResult
from ava.report.ranks import average_ranks, rank_agreement, rank_values


@dataclass
class HeadTable:
    """Ability x VFM for one head. ``vfms`` is ordered best average rank first.

    Intervals are 95% bootstrap percentile intervals over test samples (see :mod:`ava.report.bootstrap`);
    ``ties`` lists groups of VFMs whose ranks the bootstrap does not separate (ties in distribution).
    A table whose runs were not scored on the same samples is ``refused`` (the reason says why) unless the
    report was made with ``allow_mixed``; then ``same_data["status"]`` says ``"mixed"`` and the table is shown.
    """

    head: str  # the display label
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
    id: str = ""  # stable key ("knn", "llm:tiny-random-qwen2:generate")
    decode: str | None = None
    same_data: dict[str, Any] = field(default_factory=dict)  # {"status": same|mixed|unverified, "problems": [...]}
    refused: str | None = None  # why the table is not shown (runs on different samples, no --allow-mixed)
    best: dict[str, float] = field(default_factory=dict)  # ability -> the metric's best possible value
    intervals: dict[str, dict[str, list[float] | None]] = field(default_factory=dict)  # ability -> vfm -> [lo, hi]
    rank_intervals: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    ties: dict[str, list[list[str]]] = field(default_factory=dict)  # ability -> groups of >= 2 tied VFMs
    p_beats: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # ability -> a -> b -> P(a beats b)
    average_rank_interval: dict[str, list[float]] = field(default_factory=dict)
    average_rank_ties: list[list[str]] = field(default_factory=list)
    average_rank_p_beats: dict[str, dict[str, float]] = field(default_factory=dict)
    uncertainty: dict[str, Any] = field(default_factory=dict)  # method, n_boot, level, seed, paired, reasons
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)  # ability -> {"chance", "majority"}
    replicates: dict[str, Any] = field(default_factory=dict, repr=False)  # ability -> [V, B]; not in to_dict

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "replicates"}
        return json.loads(json.dumps(out))  # a deep copy of plain data


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


def same_data(head: str, by_vfm: dict[str, RunResult], abilities: list[str]) -> dict[str, Any]:
    """Whether every VFM of a head was scored on the same samples (sample-set hashes of ids and truths) per ability.

    ``status``: ``same``; ``mixed`` (sample sets or n differ); ``unverified`` (a run has no sample-set hash: an old
    results file without ``predictions_<split>.jsonl``). ``problems`` names each ability at fault with n and the
    start of each sample-set hash per VFM.
    """
    problems, status, common = [], "same", {}
    for ab in abilities:
        cells = {v: r.abilities[ab] for v, r in by_vfm.items() if ab in r.abilities}
        prints = {a.sample_set for a in cells.values()}
        common[ab] = next(iter(prints)) if len(prints) == 1 else None
        ns = {a.n for a in cells.values()}
        detail = ", ".join(f"{v} n={a.n} ({(a.sample_set or 'no sample-set hash')[:10]})" for v, a in cells.items())
        if len(ns) > 1 or len(prints - {None}) > 1:
            problems.append(f"{ab}: {detail}")
            status = "mixed"
        elif None in prints and len(cells) > 1:
            problems.append(f"{ab}: cannot check ({detail})")
            status = "mixed" if status == "mixed" else "unverified"
    return {"status": status, "problems": problems, "sample_sets": common}


def refusal(head: str, check: dict[str, Any]) -> str:
    what = "were not scored on the same samples" if check["status"] == "mixed" else "cannot be checked for same samples"
    return (
        f"head {head}: its runs {what} ({'; '.join(check['problems'])}); "
        "not compared in one table: pass --allow-mixed to show it anyway"
    )


def head_table(head: str, runs: list[RunResult], *, allow_mixed: bool = False) -> HeadTable:
    """The Table-5-style table of one head's runs (one run per VFM), without uncertainty or baselines yet
    (:func:`add_uncertainty`, :func:`add_baselines`)."""
    from ava.metrics import METRICS

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
    check = same_data(head, by_vfm, abilities)
    if check["status"] != "same" and allow_mixed:
        notes.append(
            f"--allow-mixed: runs of this table were NOT all scored on the same samples "
            f"({'; '.join(check['problems'])}); compare with care"
        )
    best = {}
    for ab in abilities:
        with contextlib.suppress(AvaError):  # a metric this ava does not know: no best value, no normalized plot
            best[ab] = float(METRICS.get(metrics[ab]).best)
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
        id=runs[0].head_id or head,
        decode=runs[0].decode,
        same_data=check,
        refused=None if check["status"] == "same" or allow_mixed else refusal(head, check),
        best=best,
    )


def _scores(table: HeadTable, by_vfm: dict[str, RunResult], ab: str) -> tuple[list[str], list[np.ndarray] | str]:
    """The VFMs scored on ``ab`` and their per-sample scores ordered by sample id, or the reason there are none."""
    vfms = [v for v in table.vfms if table.values[ab].get(v) is not None]
    rows = []
    for v in vfms:
        recs = by_vfm[v].records().get(ab)
        if not recs:
            return vfms, f"{v}: no per-sample scores (predictions file missing or without {ab})"
        recs = sorted(recs, key=lambda r: str(r["id"]))
        rows.append(np.asarray([float(r["score"]) for r in recs]))
    return vfms, rows


def add_uncertainty(
    table: HeadTable, by_vfm: dict[str, RunResult], *, n_boot: int = bs.N_BOOT, seed: int = bs.SEED
) -> None:
    """Bootstrap intervals of every score and rank, "A beats B" probabilities and tie groups, in place.

    VFMs scored on the same samples share the draws (paired); otherwise (``--allow-mixed``) each VFM is drawn
    on its own. The draws are seeded by ``seed`` and the ability's sample-set hash, so two heads scored on the
    same samples get the same draws too (their agreement is then paired as well).
    """
    reasons: dict[str, str] = {}
    for ab in table.abilities:
        vfms, rows = _scores(table, by_vfm, ab)
        if isinstance(rows, str) or not vfms:
            reasons[ab] = rows if isinstance(rows, str) else "no VFM scored it"
            table.intervals[ab] = dict.fromkeys(vfms)
            continue
        prints = {by_vfm[v].abilities[ab].sample_set for v in vfms}
        paired = len(prints) == 1 and None not in prints and len({len(r) for r in rows}) == 1
        if paired:
            reps = bs.replicate_means(np.stack(rows), n_boot, bs.rng_for(f"{ab}:{prints.pop()}", seed))
        else:
            reps = np.stack(
                [
                    bs.replicate_means(r[None], n_boot, bs.rng_for(f"{ab}:{table.id}:{v}", seed))[0]
                    for v, r in zip(vfms, rows, strict=True)
                ]
            )
        _summarize(table, ab, vfms, reps)
    table.uncertainty = {
        "method": "percentile bootstrap over test samples",
        "n_boot": n_boot,
        "level": bs.LEVEL,
        "seed": seed,
        "separated_at": bs.SEPARATED,
        "paired": table.same_data.get("status") == "same",
        "missing": reasons,
    }
    _average_rank_uncertainty(table)


def _summarize(table: HeadTable, ab: str, vfms: list[str], reps: np.ndarray) -> None:
    hib = table.higher_is_better[ab]
    table.replicates[ab] = (vfms, reps)
    table.intervals[ab] = {v: [float(lo), float(hi)] for v, (lo, hi) in zip(vfms, bs.interval(reps), strict=True)}
    ranks = bs.replicate_ranks(reps, hib)
    table.rank_intervals[ab] = {v: [float(lo), float(hi)] for v, (lo, hi) in zip(vfms, bs.interval(ranks), strict=True)}
    p = bs.beats(reps, hib)
    table.p_beats[ab] = {
        a: {b: round(float(p[i, j]), 4) for j, b in enumerate(vfms) if b != a} for i, a in enumerate(vfms)
    }
    order = sorted(range(len(vfms)), key=lambda i: table.ranks[ab][vfms[i]])
    table.ties[ab] = [[vfms[i] for i in g] for g in bs.tie_groups(order, p) if len(g) > 1]


def _average_rank_uncertainty(table: HeadTable) -> None:
    over = [ab for ab in table.average_over if ab in table.replicates]
    if not over or over != table.average_over:
        return
    vfms = table.vfms
    reps = np.mean([bs.replicate_ranks(_aligned(table, ab, vfms), table.higher_is_better[ab]) for ab in over], 0)
    table.replicates["average_rank"] = (vfms, reps)
    table.average_rank_interval = {
        v: [float(lo), float(hi)] for v, (lo, hi) in zip(vfms, bs.interval(reps), strict=True)
    }
    p = bs.beats(reps, higher_is_better=False)
    table.average_rank_p_beats = {
        a: {b: round(float(p[i, j]), 4) for j, b in enumerate(vfms) if b != a} for i, a in enumerate(vfms)
    }
    order = sorted(range(len(vfms)), key=lambda i: table.average_rank[vfms[i]])
    table.average_rank_ties = [[vfms[i] for i in g] for g in bs.tie_groups(order, p) if len(g) > 1]


def _aligned(table: HeadTable, ab: str, vfms: list[str]) -> np.ndarray:
    have, reps = table.replicates[ab]
    return reps[[have.index(v) for v in vfms]]


def add_baselines(table: HeadTable, by_vfm: dict[str, RunResult], split: str, cache: dict[str, Any]) -> None:
    """Chance and majority baselines per ability over the samples the table scored (see :mod:`.baselines`)."""
    from ava.report.baselines import ability_baselines, find_dataset, open_dataset

    first = next(iter(by_vfm.values()))
    path = find_dataset(first.datasets, first.path)
    key = str(path)
    if key not in cache:
        cache[key] = open_dataset(path)
    dataset, reason = cache[key]
    for ab in table.abilities:
        if dataset is None:
            table.baselines[ab] = {
                "chance": {"value": None, "reason": reason},
                "majority": {"value": None, "reason": reason},
            }
            continue
        recs = next((r.records().get(ab) for r in by_vfm.values() if r.records().get(ab)), None)
        ids = {str(r["id"]) for r in recs} if recs else None
        try:
            wanted = split if split in ("test", "train") else None  # "all", or a decode suffix like test_score
            table.baselines[ab] = ability_baselines(dataset, ab, ids, split=wanted)
        except AvaError as e:
            msg = f"cannot compute: {e}"
            table.baselines[ab] = {"chance": {"value": None, "reason": msg}, "majority": {"value": None, "reason": msg}}


def head_tables(
    runs: list[RunResult],
    *,
    allow_mixed: bool = False,
    split: str = "test",
    n_boot: int = bs.N_BOOT,
    seed: int = bs.SEED,
) -> dict[str, HeadTable]:
    """One table per head (keyed by its stable id), heads in the order their first run was given."""
    heads: dict[str, list[RunResult]] = {}
    for r in runs:
        heads.setdefault(r.head_id or r.head, []).append(r)
    tables, cache = {}, {}
    for hid, rs in heads.items():
        t = head_table(rs[0].head, rs, allow_mixed=allow_mixed)
        if not t.refused:
            by_vfm = {r.vfm: r for r in rs}
            add_uncertainty(t, by_vfm, n_boot=n_boot, seed=seed)
            add_baselines(t, by_vfm, split, cache)
        tables[hid] = t
    return tables


def _agreement_ci(ra: np.ndarray, rb: np.ndarray) -> dict[str, Any]:
    """Bootstrap intervals of tau-b and rho from replicate rankings ``[V, B]`` of two heads."""
    tau = bs.Summary.of(bs.kendall_tau_b_rows(ra.T, rb.T))
    rho = bs.Summary.of(bs.spearman_rows(ra.T, rb.T))
    return {
        "kendall_tau_ci": None if tau.low is None else [tau.low, tau.high],
        "spearman_rho_ci": None if rho.low is None else [rho.low, rho.high],
        "ci_undefined_replicates": max(tau.undefined, rho.undefined),
    }


def _shared_rank_reps(t: HeadTable, ab: str, vfms: list[str]) -> np.ndarray | None:
    if ab not in t.replicates or not set(vfms) <= set(t.replicates[ab][0]):
        return None
    return bs.replicate_ranks(_aligned(t, ab, vfms), t.higher_is_better[ab])


def agreement_between(a: HeadTable, b: HeadTable) -> dict[str, Any]:
    """Kendall tau-b and Spearman rho between two heads' rankings, per shared ability and on the average rank,
    with bootstrap intervals; n/a below :data:`~ava.report.ranks.MIN_VFMS` VFMs in common.

    The average rank is recomputed over the abilities both heads scored for every shared VFM, so that a head
    run on three abilities is compared with the other head's ranking on those same three.
    """
    names = (a.head, b.head)
    shared = [ab for ab in a.abilities if ab in b.abilities]
    vfms = sorted(set(a.vfms) & set(b.vfms))
    per_ability = {}
    for ab in shared:
        agr = rank_agreement(a.ranks[ab], b.ranks[ab], names).to_dict()
        common = sorted(set(a.ranks[ab]) & set(b.ranks[ab]))
        ra, rb = _shared_rank_reps(a, ab, common), _shared_rank_reps(b, ab, common)
        if agr["kendall_tau"] is not None and ra is not None and rb is not None:
            agr.update(_agreement_ci(ra, rb))
        per_ability[ab] = agr
    over = [ab for ab in shared if set(vfms) <= set(a.ranks[ab]) and set(vfms) <= set(b.ranks[ab])]
    if over:
        # rank within the shared VFMs only, so VFMs that one head alone ran do not shift the ranks
        sub_a = {ab: rank_values({v: a.ranks[ab][v] for v in vfms}, False) for ab in over}
        sub_b = {ab: rank_values({v: b.ranks[ab][v] for v in vfms}, False) for ab in over}
        avg = rank_agreement(average_ranks(sub_a, over), average_ranks(sub_b, over), names).to_dict()
        reps = [[_shared_rank_reps(t, ab, vfms) for ab in over] for t in (a, b)]
        if avg["kendall_tau"] is not None and all(r is not None for side in reps for r in side):
            avg.update(_agreement_ci(np.mean(reps[0], 0), np.mean(reps[1], 0)))
    else:
        avg = {
            "n": len(vfms),
            "kendall_tau": None,
            "spearman_rho": None,
            "kendall_p": None,
            "spearman_p": None,
            "reason": "n/a: no ability was scored for every shared VFM under both heads",
        }
    same = all(_same_samples(a, b, ab) for ab in over) if over else False
    return {
        "heads": list(names),
        "head_ids": [a.id, b.id],
        "vfms": vfms,
        "abilities": per_ability,
        "average_rank": avg,
        "average_over": over,
        "same_samples": same,
    }


def _same_samples(a: HeadTable, b: HeadTable, ab: str) -> bool:
    return bool(a.uncertainty.get("paired") and b.uncertainty.get("paired")) and (
        a.same_data.get("sample_sets", {}).get(ab) == b.same_data.get("sample_sets", {}).get(ab) is not None
    )


def agreements(tables: dict[str, HeadTable]) -> list[dict[str, Any]]:
    """Agreement for every pair of heads that were not refused."""
    shown = [k for k, t in tables.items() if not t.refused]
    return [agreement_between(tables[x], tables[y]) for x, y in itertools.combinations(shown, 2)]


def subgroup_tables(runs: list[RunResult], tables: dict[str, HeadTable]) -> dict[str, Any]:
    """``head -> ability -> group -> {"bins": [...], "values": {bin: {vfm: {"value", "n"}}}}`` from results."""
    out: dict[str, Any] = {}
    for head, table in tables.items():
        if table.refused:
            continue
        head_runs = {r.vfm: r for r in runs if (r.head_id or r.head) == head}
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
