"""Build and evaluate the kNN head from the feature cache.

For each ability: train samples are answered by their neighbours among the other train samples, every candidate
(pooled view, k) is scored on those answers with the ability's metric, and the best is kept (the earlier view and
the smaller k on ties). Which train samples answer (``KNNConfig.selection``; "auto" by default):

- ``loo`` (leave-one-out), up to ``loo_max_rows`` train rows: every train sample, N x N similarities a view;
- ``subsample``, above: ``heldout_rows`` train samples, drawn deterministically and stratified by answer class or
  bin as the train/test split is (:func:`ava.heads.targets.stratified_rows`), each answered by all the other train
  samples (the same neighbours leave-one-out gives that sample), ``heldout_rows`` x N similarities a view;
- ``heldout`` (only when asked): a deterministic 10% of train answered by the other 90% only.

Views: the mean over patch tokens, and ``gridN`` = the mean plus the means of N x N cells of the token grid (coarse
position, which the mean loses; see ``ava.heads.features.pool_tokens``). The saved index then holds all train
samples. Evaluation reports the chosen k's predictions and, in the results' ``extra`` field, the held-out and test
metric of every candidate k.

Run directory (besides config.json, run.json, results_<split>.json, predictions_<split>.jsonl)::

    knn.json               # per ability: candidate and chosen k, held-out scores, how they were picked
                           # (selection, selection_rule, n_heldout), layer, row labels / ids
    knn.safetensors        # per ability: regression targets of the index rows, key "<ability>.targets"
    knn/<ability>.faiss    # the faiss index (CPU form; moved to GPUs at load when asked)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ava.abilities import Ability, get_ability
from ava.data.format import Dataset, Sample
from ava.errors import AvaError
from ava.heads.ability_runs import AbilityRun, save_tensors, train_abilities
from ava.heads.features import pool_candidates, read_pooled_views, resolve_device
from ava.heads.knn.config import KNNConfig
from ava.heads.knn.model import Memory, build_index, make_index, normalized, on_device, search
from ava.heads.rundir import open_saved_run, owns_run_dir, score_and_write, write_file, write_json
from ava.heads.targets import holdout_split, is_better, mean_score, select_abilities, stratified_rows

META_FILE = "knn.json"
TARGETS_FILE = "knn.safetensors"
INDEX_DIR = "knn"


def candidate_ks(k: list[int] | int | None) -> list[int]:
    """The k values to try, sorted, validated."""
    ks = [1, 5, 20] if k is None else [k] if isinstance(k, int) else list(k)
    if not ks or any(int(v) < 1 for v in ks):
        raise AvaError(f"k must be positive integers, got {k!r}")
    return sorted({int(v) for v in ks})


RULE_TEXT = {
    "loo": "every train row answered by all the other train rows",
    "subsample": "heldout_rows train rows, stratified by answer class or bin as the train/test split is, in "
    "sha256(seed, ability, id) order inside each, each answered by all the other train rows",
    "heldout": "a heldout_frac slice of train in sha256(seed, ability, id) order, answered by the other rows",
}


def selection_rule(config: KNNConfig, method: str) -> dict[str, Any]:
    """What knn.json records of how (view, k) was picked: the selection asked for, the rule the ability got, the
    threshold and subsample size behind ``auto``, the seed of the deterministic draws."""
    return {
        "asked": config.selection,
        "method": method,
        "rule": RULE_TEXT[method],
        "loo_max_rows": config.loo_max_rows,
        "heldout_rows": config.heldout_rows,
        "heldout_frac": config.heldout_frac,
        "seed": config.seed,
    }


def check_selection(config: KNNConfig) -> None:
    """The selection fields checked by their rules (:mod:`ava.validate`), for a config built without
    :func:`ava.config.load_config` (the Python API's dataclass): an AvaError naming the field."""
    from ava.validate import check

    for name in ("selection", "loo_max_rows", "heldout_rows"):
        value = getattr(config, name)
        try:
            if value is None:
                raise ValueError("must be given, not None")
            check(name, value)
        except ValueError as e:
            raise AvaError(f"knn {name}: {e}") from None


def _search_depth(memory: Memory, ks: Sequence[int], n_rows: int) -> int:
    return max(1, min(n_rows, max(max(ks), memory.search_k)))


def _pooled(cache: Any, samples: Sequence[Sample], layer: int | None, pool: str = "mean") -> np.ndarray:
    return read_pooled_views(cache, samples, [layer], [pool])[pool]


def select_pool(
    ability: Ability,
    fit: list[Sample],
    held: list[Sample] | None,
    views_fit: dict[str, np.ndarray],
    views_held: dict[str, np.ndarray] | None,
    ks: Sequence[int],
    device: str,
    queries: np.ndarray | None = None,
) -> tuple[str, int, dict[str, dict[int, float]], Any]:
    """The (pooled view, k) with the best held-out metric (earlier view, then smaller k, on ties), every
    candidate's score per view (``held`` None: leave-one-out over ``fit``, or over its rows ``queries``, see
    :func:`select_k`), and the index of the chosen view's ``fit`` rows. The views' rows are
    :func:`~ava.heads.knn.model.normalized` already."""
    scores: dict[str, dict[int, float]] = {}
    best: tuple[str, int] | None = None
    chosen = None  # the best view's index so far (the others are dropped as soon as they lose)
    memo: dict[Any, float] = {}  # (sample, reply) -> score, shared by every candidate
    for pool in views_fit:
        x_held = None if views_held is None else views_held[pool]
        index = make_index(views_fit[pool], device)
        k, scores[pool] = select_k(
            ability, fit, held, views_fit[pool], x_held, ks, device, memo, index=index, queries=queries
        )
        if best is None or is_better(ability, scores[pool][k], scores[best[0]][best[1]]):
            best, chosen = (pool, k), index
        del index
    assert best is not None
    return best[0], best[1], scores, chosen


def _without_self(
    sims: np.ndarray, ids: np.ndarray, depth: int, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour lists of the index's own rows (``rows``, default all of them in order) with each row's own entry
    dropped (else the last), ``depth`` wide."""
    own = ids == (np.arange(len(ids)) if rows is None else rows)[:, None]
    own[~own.any(1), -1] = True  # the row itself was not returned (ties): drop the farthest instead
    keep = ~own
    return sims[keep].reshape(len(ids), -1)[:, :depth], ids[keep].reshape(len(ids), -1)[:, :depth]


def select_k(
    ability: Ability,
    fit: list[Sample],
    held: list[Sample] | None,
    x_fit: np.ndarray,
    x_held: np.ndarray | None,
    ks: Sequence[int],
    device: str,
    memo: dict[Any, float] | None = None,
    *,
    index: Any = None,
    queries: np.ndarray | None = None,
) -> tuple[int, dict[int, float]]:
    """The k with the best held-out metric (the smaller k on ties) and every candidate's score.

    ``held`` None: leave-one-out, every train row is answered by its neighbours among the others (every train
    sample is a held-out sample once, so the pick rests on all of train, not a 10% slice); with ``queries`` (row
    indices of ``fit``) only those rows are answered, each by all the others: the same neighbours as leave-one-out
    for those rows, at len(queries) x len(fit) similarities instead of len(fit) squared. ``x_fit`` and ``x_held``
    are :func:`~ava.heads.knn.model.normalized` rows; ``index``: the index of ``x_fit`` made already (else made)."""
    memory = Memory.build(ability, fit)
    index = make_index(x_fit, device) if index is None else index
    if held is None:
        depth = _search_depth(memory, ks, len(fit) - 1)
        x_query = x_fit if queries is None else x_fit[queries]
        sims, ids = _without_self(*search(index, x_query, depth + 1, unit=True), depth, queries)
        held = fit if queries is None else [fit[i] for i in queries]
    else:
        sims, ids = search(index, x_held, _search_depth(memory, ks, len(fit)), unit=True)
    scores = {k: mean_score(ability, held, memory.replies(held, sims, ids, k), memo) for k in ks}
    best: int | None = None
    for k in ks:
        if best is None or is_better(ability, scores[k], scores[best]):
            best = k
    assert best is not None
    return best, scores


def _unit_views(
    features: Any, samples: Sequence[Sample], layer: int | None, pools: Sequence[str]
) -> dict[str, np.ndarray]:
    """Every pooled view of ``samples``, its rows normalized once (for the index and as queries)."""
    return {p: normalized(v) for p, v in read_pooled_views(features, samples, [layer], pools).items()}


def _write_index(run_dir: Path, ava: str, x: np.ndarray, *, unit: bool = False, index: Any = None) -> None:
    """The ability's index, serialized in memory (a copy of its vectors) and written atomically by ``write_file``:
    faiss's own writer reports a full disk as a bare RuntimeError and leaves a partial file. ``unit``: ``x`` is
    normalized already; ``index``: the search index of ``x``, written as it is when it is a CPU faiss index."""
    import faiss

    if not isinstance(index, faiss.IndexFlatIP):
        index = build_index(x, unit=unit)
    write_file(run_dir / INDEX_DIR / f"{ava}.faiss", memoryview(faiss.serialize_index(index)))


def _predict_split(
    index: Any, memory: Memory, meta: dict[str, Any], samples: Sequence[Sample], cache: Any, split: str
) -> tuple[list[str], dict[str, Any]]:
    """Replies of the chosen k for ``samples`` and the results' extra (the split's metric for every candidate k)."""
    by_k: dict[str, float] = {}
    chosen: list[str] = []
    memo: dict[Any, float] = {}
    if samples:
        sims, ids = search(
            index,
            _pooled(cache, samples, meta["layer"], meta.get("pool", "mean")),
            _search_depth(memory, meta["ks"], meta["n_train"]),
        )
        for k in meta["ks"]:
            replies = memory.replies(samples, sims, ids, k)
            by_k[str(k)] = mean_score(memory.ability, samples, replies, memo)
            if k == meta["k"]:
                chosen = replies
    extra = {
        "k": meta["k"],
        "pool": meta.get("pool", "mean"),
        "heldout": meta["heldout"],
        "heldout_by_pool": meta.get("heldout_by_pool"),
        f"{split}_by_k": by_k,
    }
    return chosen, extra


class KNNRun(AbilityRun):
    """A kNN run trained ability by ability, resumable per ability."""

    head = "knn"

    def __init__(self, config: KNNConfig, dataset: Dataset, cache: Any, abilities: list[str], device: str) -> None:
        self.ks = candidate_ks(config.k)
        self.pools = pool_candidates(cache, config.pools)
        check_selection(config)
        super().__init__(config, dataset, cache, abilities, device)

    def layers(self) -> list[int | None]:
        return [self.config.layer]

    def needs(self, ava: str) -> tuple[list[str], bool]:
        return list(self.pools), False

    def fit_ability(
        self,
        ava: str,
        features: Any,
        on_step: Callable[[], None] | None,
    ) -> tuple[dict[str, Any], dict[str, Any], list[str], dict]:
        config, ability = self.config, get_ability(ava)
        samples = self.train_samples(ava)
        method = config.selection_method(len(samples))
        fit, held = holdout_split(samples, config.heldout_frac, config.seed) if method == "heldout" else (samples, None)
        queries = stratified_rows(samples, config.heldout_rows, config.seed) if method == "subsample" else None
        views_fit = _unit_views(features, fit, config.layer, self.pools)
        views_held = None if held is None else _unit_views(features, held, config.layer, self.pools)
        pool, k, by_pool, index = select_pool(ability, fit, held, views_fit, views_held, self.ks, self.device, queries)
        rows = fit + (held or [])
        x = views_fit[pool] if views_held is None else np.concatenate([views_fit[pool], views_held[pool]])
        del views_fit, views_held
        if held is not None:  # the saved index holds every train row (the selection's, the fit rows only)
            index = make_index(x, self.device)
        _write_index(self.run_dir, ava, x, unit=True, index=index)
        memory = Memory.build(ability, rows)
        meta = {
            "k": k,
            "ks": self.ks,
            "pool": pool,
            "heldout": {str(c): v for c, v in by_pool[pool].items()},
            "heldout_by_pool": {p: {str(c): v for c, v in sc.items()} for p, sc in by_pool.items()},
            "layer": config.layer,
            "selection": method,
            "selection_rule": selection_rule(config, method),
            "n_train": len(rows),
            "n_fit": len(fit),
            "n_heldout": len(held) if held is not None else len(fit) if queries is None else len(queries),
            "labels": memory.labels,
            "ids": [s.id for s in rows],
        }
        if on_step is not None:
            on_step()
        replies, extra = _predict_split(index, memory, meta, self.eval_samples(ava), features, config.split)
        tensors = {"targets": memory.targets} if memory.targets is not None else {}
        return meta, tensors, replies, extra

    def write_head_files(self) -> None:
        targets = {f"{ava}.{k}": v for ava in self.abilities for k, v in self.record_tensors(ava).items()}
        save_tensors(self.run_dir / TARGETS_FILE, targets)
        write_json(self.run_dir / META_FILE, {ava: self.records[ava]["meta"] for ava in self.abilities})


@owns_run_dir("knn")
def train(config: KNNConfig) -> Path:
    """Build one index per ability, pick (view, k) on held-out, write the run dir (evaluates when eval_after).

    Each ability is recorded as soon as it is built: re-running an interrupted run with the same config builds
    only the abilities not recorded yet (see :mod:`ava.heads.ability_runs`)."""
    from ava.cache import open_cache

    dataset = Dataset(config.data)
    abilities = select_abilities(dataset, config.ava)
    cache = open_cache(config.cache, config.vfm)
    device = resolve_device(config.device)
    run = KNNRun(config, dataset, cache, abilities, device)
    train_abilities([run], cache, abilities, device=device, progress=config.progress, label=f"knn {config.vfm}")
    run.finish()
    return run.run_dir


def _load(
    run_dir: Path, ava: str, meta: dict[str, Any], targets: dict[str, np.ndarray], device: str
) -> tuple[Any, Memory]:
    import faiss

    path = run_dir / INDEX_DIR / f"{ava}.faiss"
    if not path.is_file():
        raise AvaError(f"{run_dir} is not a complete kNN run: {path} is missing")
    index = faiss.read_index(str(path))
    if index.ntotal != meta["n_train"]:
        raise AvaError(f"{path}: {index.ntotal} rows, but {META_FILE} lists {meta['n_train']}")
    memory = Memory(get_ability(ava), labels=meta.get("labels"), targets=targets.get(f"{ava}.targets"))
    return on_device(index, device), memory


def evaluate(
    run_dir: str | os.PathLike[str],
    split: str = "test",
    *,
    data: str | None = None,
    cache: str | None = None,
    device: str | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Reload the saved indexes, predict ``split`` with each ability's chosen k, write results_<split>.json."""
    from safetensors.numpy import load_file

    saved = open_saved_run(run_dir, META_FILE, data=data, cache=cache, device=device, split=split)
    run_dir, config, run, metas = saved.path, saved.config, saved.run, saved.metas
    dataset, feature_cache, dev = saved.dataset, saved.cache, saved.device
    targets = load_file(str(run_dir / TARGETS_FILE)) if (run_dir / TARGETS_FILE).is_file() else {}
    predictions: dict[tuple[str, str], str] = {}
    extra: dict[str, dict] = {}
    for ava, meta in metas.items():
        index, memory = _load(run_dir, ava, meta, targets, dev)
        samples = dataset.samples(ava, split=split)
        replies, extra[ava] = _predict_split(index, memory, meta, samples, feature_cache, split)
        predictions.update({s.key: r for s, r in zip(samples, replies, strict=True)})
    return score_and_write(dataset, predictions, list(metas), split, run, config, run_dir, extra)
