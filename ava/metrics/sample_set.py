"""The identity of the sample set a results file was scored on: which samples (ability and id) and their truths.

Two results files with the same sample-set hash for an ability were scored on the same samples with the same
answers, so their scores can share a table and be compared sample by sample (paired bootstrap). A relative
dataset path says neither. The hash is a SHA-256 over one canonical line per sample, sorted, so the
order in which samples were scored does not matter::

    <ability> TAB <id> TAB <truth as JSON with sorted keys, no spaces>

It is written by :func:`ava.metrics.scoring.score_predictions` (the top-level ``sample_set``: one hash per
ability, and ``value``, a hash over those, so that results files merged per ability keep it exact: see
:func:`merge`) and recomputed by ``ava report`` from ``predictions_<split>.jsonl`` for results files written
before it existed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

ALGORITHM = (
    "per ability: sha256 over sorted lines 'ability\\tid\\ttruth-json'; value: sha256 over 'ability\\thash' lines"
)


def _line(ava: str, sid: str, truth: Any) -> str:
    truth_json = json.dumps(truth, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f"{ava}\t{sid}\t{truth_json}"


def sample_set_hash(samples: Iterable[tuple[str, str, Any]]) -> str:
    """SHA-256 (hex) of ``(ability, id, truth)`` triples; truths as JSON (tuples and lists alike)."""
    h = hashlib.sha256()
    for line in sorted(_line(a, str(i), t) for a, i, t in samples):
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def sample_set_block(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``{"algorithm", "value", "per_ability": {ability: hex}, "n": {ability: count}}`` of per-sample records
    (each with ``ava``, ``id`` and ``truth``), as the results file's ``sample_set`` holds it."""
    by_ability: dict[str, list[tuple[str, str, Any]]] = {}
    for r in records:
        by_ability.setdefault(str(r["ava"]), []).append((str(r["ava"]), str(r["id"]), r.get("truth")))
    per = {a: sample_set_hash(rows) for a, rows in sorted(by_ability.items())}
    return _block(per, {a: len(rows) for a, rows in sorted(by_ability.items())})


def _block(per: dict[str, str], n: dict[str, int]) -> dict[str, Any]:
    h = hashlib.sha256("".join(f"{a}\t{v}\n" for a, v in sorted(per.items())).encode("utf-8"))
    return {
        "algorithm": ALGORITHM,
        "value": h.hexdigest(),
        "per_ability": dict(sorted(per.items())),
        "n": dict(sorted(n.items())),
    }


def merge(blocks: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One ``sample_set`` block from the blocks of results files that each scored other abilities (an LLM head
    trained per ability); None when any block is missing (an old file: ``ava report`` then recomputes)."""
    per: dict[str, str] = {}
    n: dict[str, int] = {}
    dataset = None
    for b in blocks:
        if not isinstance(b, dict) or not isinstance(b.get("per_ability"), dict):
            return None
        per.update(b["per_ability"])
        n.update(b.get("n") or {})
        dataset = dataset or b.get("dataset")
    return {**_block(per, n), "dataset": dataset}


def recorded_block(results: Any) -> dict[str, Any] | None:
    """The sample-set block of a results dict: ``sample_set``, or ``data_fingerprint`` in files written before the
    key had that name; None when it has neither."""
    if not isinstance(results, dict):
        return None
    block = results.get("sample_set", results.get("data_fingerprint"))
    return block if isinstance(block, dict) else None
