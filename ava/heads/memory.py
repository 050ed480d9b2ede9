"""A fingerprint without a cache: :func:`fingerprint_in_memory` runs a VFM over a dataset's images, holds the features
in memory (the pooled views the linear probe and kNN read, and tokens only where a head needs them) and trains the
fingerprint heads on them with the same code as ``ava fingerprint`` (:func:`ava.heads.ability_runs.train_abilities`,
the probe and kNN runs), so a score here equals the score from a cache extracted with the fp16 codec.

It is what ``ava.fingerprint(...)`` calls for an in-memory VFM given without a cache, and what the training
callbacks (:mod:`ava.callbacks`) call every N steps. Under ``torch.distributed`` every rank extracts its share of the
images, rank 0 gathers them and trains the heads, and the others wait for its result (which every rank returns). A
failure on one rank (its extraction, or rank 0's heads) is told to every rank, which each raise, rather than leave
them waiting in a collective (a rank whose process dies is left to the process group's timeout and the launcher).

Speed: the heads fit whole abilities on ``jobs`` threads at once (:func:`train_heads`;
the scores are those of ``ava fingerprint``, value for value), and a :func:`~ava.vfm.module.vfm_from_module` VFM with
``dtype="bf16"`` runs its forward on a bf16 copy of the weights made once per evaluation.

Run directories go to a temporary directory removed at the end; the results come back as :class:`FingerprintScores`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ava.cache.pooling import STORED_VIEWS, pool_candidates, pool_tokens, token_grid
from ava.errors import AvaError

if TYPE_CHECKING:
    from ava.data.format import Dataset, Sample

__all__ = [
    "DEFAULT_HEADS",
    "EvalSuite",
    "FingerprintScores",
    "MemoryFeatures",
    "extract_in_memory",
    "fingerprint_in_memory",
    "train_heads",
]

DEFAULT_HEADS = ("probe-linear", "knn")
PARALLEL_MODES = ("abilities", "heads")
PARALLEL = "abilities"  # fingerprint_in_memory's default; "heads" is what `ava fingerprint` does (benchmarks compare)
CODEC = "fp16"  # tokens are rounded as the cache's default codec stores them, so scores equal the cache path's


@dataclass
class FingerprintScores:
    """The fingerprint of one VFM: ``scores[head][ability]`` is the metric's value on ``split``."""

    vfm: str
    scores: dict[str, dict[str, float]]  # head -> ability -> value
    n: dict[str, int]  # ability -> samples scored
    higher_is_better: dict[str, bool]  # ability -> the metric's direction
    metrics: dict[str, str]  # ability -> metric key
    split: str
    random_weights: bool
    synthetic: bool
    seconds: dict[str, float] = field(default_factory=dict)  # "extract", "heads", "total"
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # head -> the results file's dict

    def to_dict(self, results: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not results:
            out.pop("results")
        return out


class MemoryFeatures:
    """The ``FeatureCache`` calls the heads make (``has``, ``read``, ``read_pooled``, ``read_view`` and the cache's
    metadata), answered from features held in memory: every image's pooled views (float32) and, for the images a head
    reads tokens of, the tokens (fp16, as the fp16 codec stores them)."""

    def __init__(self, vfm: Any, views: Sequence[str]) -> None:
        name = str(getattr(vfm.spec, "key", "vfm"))
        self.vfm = name
        self.key = f"memory-{name}"
        self.identity: dict[str, Any] = {"memory": True, "vfm": name}
        self.spec: dict[str, Any] = {"codec": CODEC, "vfm": name}
        self.random_weights = bool(vfm.random_weights)
        self.num_tokens, self.dim = int(vfm.num_tokens), int(vfm.dim)
        self.grid = tuple(int(g) for g in vfm.grid)
        self.layers: tuple[int, ...] = (int(vfm.layers[0]),)
        self.views: tuple[str, ...] = tuple(pool_candidates(self, views))
        self._row: dict[str, int] = {}
        self._views: dict[str, np.ndarray] = {}
        self._token_row: dict[str, int] = {}
        self._tokens = np.zeros((0, self.num_tokens, self.dim), np.float16)

    def fill(self, shas: list[str], views: dict[str, np.ndarray], token_shas: list[str], tokens: np.ndarray) -> None:
        self._row = {sha: i for i, sha in enumerate(shas)}
        self._views = views
        self._token_row = {sha: i for i, sha in enumerate(token_shas)}
        self._tokens = tokens

    def has(self, sha256: str) -> bool:
        return sha256 in self._row

    def _check_layer(self, layer: int | None) -> None:
        if layer is not None and layer not in self.layers:
            raise AvaError(f"in-memory features of {self.vfm!r} hold layer {self.layers[0]}, not {layer}")

    def read(self, sha256s: list[str], layer: int | None = None) -> np.ndarray:
        """Tokens ``[B, T, D]`` float32 (held only for the images of abilities a head reads tokens of)."""
        self._check_layer(layer)
        missing = [s for s in sha256s if s not in self._token_row]
        if missing:
            raise AvaError(
                f"in-memory features of {self.vfm!r}: no tokens held for image {missing[0]} (only pooled "
                "views were kept for it)"
            )
        index = np.fromiter((self._token_row[s] for s in sha256s), np.int64, len(sha256s))
        return self._tokens[index].astype(np.float32)

    def read_view(self, sha256s: list[str], layer: int | None, view: str) -> np.ndarray:
        self._check_layer(layer)
        if view not in self._views:
            raise AvaError(f"in-memory features of {self.vfm!r} hold no pooled view {view!r} ({list(self._views)})")
        index = np.fromiter((self._row[s] for s in sha256s), np.int64, len(sha256s))
        return self._views[view][index]

    def read_pooled(self, sha256s: list[str], layer: int | None = None) -> np.ndarray:
        return self.read_view(sha256s, layer, "mean")


class EvalSuite:
    """A dataset with its abilities and samples fixed, for repeated fingerprints (the training callbacks).

    ``keep_pixels`` keeps every image, preprocessed up to the normalization (uint8, per input size and padding rule),
    after the first evaluation: later ones decode nothing. Normalizing the kept pixels gives the same floats as the
    VFM's own preprocessing (the same float32 operations), so features do not depend on it."""

    def __init__(
        self,
        data: str | os.PathLike[str] | Dataset,
        abilities: Sequence[str] | None = None,
        *,
        split: str = "test",
        max_train: int | None = None,
        seed: int = 0,
        keep_pixels: bool = False,
    ) -> None:
        from ava.data.format import Dataset
        from ava.heads.targets import select_abilities, train_samples

        self.dataset = data if isinstance(data, Dataset) else Dataset(data)
        self.abilities = select_abilities(self.dataset, list(abilities) if abilities else None)
        self.split, self.max_train, self.seed = split, max_train, seed
        self.samples: dict[str, list[Sample]] = {}
        for ava in self.abilities:
            train = train_samples(self.dataset, ava, max_train, seed)
            held = self.dataset.samples(ava, split=split)
            if not held:
                raise AvaError(f"dataset {self.dataset.root}: ability {ava!r} has no {split!r} samples to score")
            self.samples[ava] = [*train, *held]
        first: dict[str, Sample] = {}
        for ava in self.abilities:
            for s in self.samples[ava]:
                first.setdefault(s.image_sha256, s)
        self.images = first  # sha256 -> a sample showing it (dataset order of abilities)
        self.keep_pixels = keep_pixels
        self._pixels: dict[tuple[int, bool], torch.Tensor] = {}

    def shas(self, abilities: Iterable[str] | None = None) -> list[str]:
        if abilities is None:
            return list(self.images)
        wanted = set(abilities)
        return list(dict.fromkeys(s.image_sha256 for a in self.abilities if a in wanted for s in self.samples[a]))

    def pixels(self, vfm: Any) -> Callable[[list[str]], torch.Tensor]:
        """A function giving the normalized [B, 3, S, S] pixels of some of the suite's images (by sha256)."""
        prep = vfm.preprocess_fn()
        rule = _pixel_rule(vfm)
        if not self.keep_pixels or rule is None:
            return lambda batch: torch.stack([prep(self.dataset.load_image(self.images[s].image)) for s in batch])
        size, pad, mean, std = rule
        if (size, pad) not in self._pixels:
            self._pixels[(size, pad)] = self._bank(prep.func, size, list(self.images))
        bank, row = self._pixels[(size, pad)], {sha: i for i, sha in enumerate(self.images)}
        mean_t = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
        std_t = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)

        def normalized(batch: list[str]) -> torch.Tensor:
            u8 = bank[torch.tensor([row[s] for s in batch])]
            return (u8.float() / 255.0 - mean_t) / std_t

        return normalized

    def _bank(self, fn: Callable[..., torch.Tensor], size: int, shas: list[str]) -> torch.Tensor:
        """Every image through ``fn`` with mean 0 and std 1/255: the resized pixel values, held as uint8."""
        scale = (1 / 255.0,) * 3

        def one(sha: str) -> torch.Tensor:
            x = fn(self.dataset.load_image(self.images[sha].image), size=size, mean=(0.0, 0.0, 0.0), std=scale)
            return x.round().clamp(0, 255).to(torch.uint8)

        with ThreadPoolExecutor(max_workers=2) as pool:
            return torch.stack(list(pool.map(one, shas)))


def _pixel_rule(vfm: Any) -> tuple[int, bool, tuple, tuple] | None:
    """(size, pad, mean, std) when ``vfm``'s preprocessing is ava's pad (or stretch) pipeline, else None."""
    from ava.vfm import preprocess as pp
    from ava.vfm.module import stretch_preprocess

    prep = vfm.preprocess_fn()
    func = getattr(prep, "func", None)
    if func not in (pp.pad_preprocess, stretch_preprocess):
        return None
    kw = prep.keywords
    return int(kw["size"]), func is pp.pad_preprocess, tuple(kw["mean"]), tuple(kw["std"])


def rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def extract_in_memory(
    vfm: Any, suite: EvalSuite, features: MemoryFeatures, token_shas: set[str], *, batch_size: int = 32
) -> None:
    """Fill ``features`` with the pooled views of every image of ``suite`` (tokens of ``token_shas`` too). Under
    ``torch.distributed`` each rank computes every world-th image and rank 0 gathers them (the others keep none).
    Before the gather every rank tells whether its share succeeded (:func:`all_ranks_ok`): when one failed, every
    rank raises, none waits for features that will not come."""
    rank, world = rank_and_world()
    shas = suite.shas()
    mine = shas[rank::world]
    if world == 1:
        part = _extract_part(vfm, suite, features, token_shas, mine, batch_size)
    else:
        failure: Exception | None = None
        try:
            part = _extract_part(vfm, suite, features, token_shas, mine, batch_size)
        except Exception as e:  # told to every rank before anyone waits for this rank's features
            failure = e
        all_ranks_ok(failure, "while extracting features")
        parts: list[Any] = [None] * world if rank == 0 else []
        torch.distributed.gather_object(part, parts if rank == 0 else None, dst=0)
        if rank != 0:
            return
        part = _merge(parts, features)
    order = {sha: i for i, sha in enumerate(part[0])}
    index = np.fromiter((order[s] for s in shas), np.int64, len(shas))
    features.fill(shas, {v: np.ascontiguousarray(a[index]) for v, a in part[1].items()}, part[2], part[3])


def all_ranks_ok(failure: BaseException | None, what: str) -> None:
    """Under ``torch.distributed``, every rank says whether its part of a step succeeded (one ``all_gather_object``
    that every rank reaches, failed or not). A rank that failed raises its own error; every other rank raises one
    AvaError naming the first rank that failed and its error, so no rank is left waiting in a later collective."""
    rank, world = rank_and_world()
    if world == 1:
        if failure is not None:
            raise failure
        return
    said = None if failure is None else f"{type(failure).__name__}: {_first_line(failure)}"
    statuses: list[Any] = [None] * world
    torch.distributed.all_gather_object(statuses, said)
    if failure is not None:
        raise failure
    failed = [(r, s) for r, s in enumerate(statuses) if s is not None]
    if failed:
        r, message = failed[0]
        raise AvaError(f"the in-memory fingerprint failed on rank {r} {what}: {message}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _extract_part(
    vfm: Any, suite: EvalSuite, features: MemoryFeatures, token_shas: set[str], mine: list[str], batch_size: int
) -> tuple:
    """This rank's share of the images through the VFM: (shas, pooled views, shas with tokens, tokens)."""
    from ava.cache.codecs import get_codec

    codec, grid = get_codec(CODEC), token_grid(features)
    load = suite.pixels(vfm)
    views: dict[str, list[np.ndarray]] = {v: [] for v in features.views}
    tokens: list[np.ndarray] = []
    kept: list[str] = []
    batches = [mine[i : i + batch_size] for i in range(0, len(mine), batch_size)]
    held = getattr(vfm, "held", None)  # a ModuleVFM with dtype=: its weights cast once for every batch
    with held() if held is not None else contextlib.nullcontext(), ThreadPoolExecutor(max_workers=1) as pool:
        # the next batch's images decode while this one runs
        ahead = pool.submit(load, batches[0]) if batches else None
        for i, batch in enumerate(batches):
            pixels = ahead.result()
            ahead = pool.submit(load, batches[i + 1]) if i + 1 < len(batches) else None
            out = vfm(pixels)  # [B, L, T, D]
            _refuse_unusable(vfm, out, batch)
            values, _ = codec.encode(out[:, 0])  # rounded as the cache stores them (out-of-range values refused)
            decoded = codec.decode(values, None)
            for v in features.views:
                views[v].append(pool_tokens(decoded, v, grid))
            for j, sha in enumerate(batch):
                if sha in token_shas:
                    kept.append(sha)
                    tokens.append(values[j])
    return (
        mine,
        {v: _cat(rows, features, v) for v, rows in views.items()},
        kept,
        np.stack(tokens) if tokens else np.zeros((0, features.num_tokens, features.dim), np.float16),
    )


def _refuse_unusable(vfm: Any, out: torch.Tensor, shas: list[str]) -> None:
    """Complex, NaN or infinite features refused, naming the images (on a GPU read at once: the encoding right
    after waits for the batch anyway)."""
    from ava.vfm.feature_check import check_features, raise_nonfinite

    name = str(getattr(getattr(vfm, "spec", None), "key", None) or getattr(vfm, "name", "the VFM"))

    def images(at: Sequence[int]) -> str:
        return ", ".join(f"image {shas[i][:12]}" for i in at[:5]) + (" ..." if len(at) > 5 else "")

    if (bad := check_features(out, name, images)) is not None:
        raise_nonfinite(name, bad.cpu(), images)


def _cat(rows: list[np.ndarray], features: MemoryFeatures, view: str) -> np.ndarray:
    from ava.cache.pooling import pool_dim

    return np.concatenate(rows) if rows else np.zeros((0, pool_dim(features.dim, view)), np.float32)


def _merge(parts: list[Any], features: MemoryFeatures) -> tuple:
    shas = [s for p in parts for s in p[0]]
    views = {v: np.concatenate([p[1][v] for p in parts]) for v in features.views}
    kept = [s for p in parts for s in p[2]]
    tokens = np.concatenate([p[3] for p in parts])
    return shas, views, kept, tokens


def make_runs(
    vfm_name: str, suite: EvalSuite, features: MemoryFeatures, heads: Sequence[str], out: Path, device: str, seed: int
) -> list[Any]:
    from ava.heads.fingerprint import FingerprintConfig, head_config, make_run

    config = FingerprintConfig(
        vfm=vfm_name,
        data=str(suite.dataset.root),
        cache="",
        out=str(out),
        ava=suite.abilities,
        heads=list(heads),
        seed=seed,
        device=device,
        max_train=suite.max_train,
        split=suite.split,
        progress=False,
    )
    configs = {h: head_config(h, config, out, suite.abilities) for h in heads}
    return [make_run(h, hc, suite.dataset, features, suite.abilities, device) for h, hc in configs.items()]


def train_heads(
    runs: Sequence[Any],
    features: MemoryFeatures,
    abilities: Sequence[str],
    *,
    device: str,
    progress: bool,
    label: str,
    jobs: int,
    parallel: str = "abilities",
) -> None:
    """Fit every run on every ability, ``jobs`` fits at once.

    ``parallel="heads"`` is ``ava fingerprint``'s way (:func:`~ava.heads.ability_runs.train_abilities`): the heads
    of one ability at once, then the next ability. With a slow head beside a fast one (the linear probe's grid beside
    kNN) one thread idles for most of each ability. ``"abilities"``: ``jobs`` threads each take the next ability not
    yet taken (those reading tokens, the costliest, first) and fit all its heads. Either way every fit runs with
    ``torch.get_num_threads() // jobs`` intra-op threads and its own seeded generators, so the scores are those of
    ``ava fingerprint`` with the same ``jobs``, value for value (tests/test_fingerprint_memory.py).

    Python's cyclic garbage collector is frozen meanwhile (:func:`gc.freeze`): ``train_abilities`` collects after
    every ability, which in a training process (a large heap) cost ~0.3 s each; only objects made during the fits
    are then scanned."""
    import gc

    from ava.heads.ability_runs import train_abilities

    # a process that froze its own heap keeps it frozen: nothing to undo then (Python 3.12 also counts objects it made
    # immortal as frozen, from its start on: there the GC is left as it is, at the cost of slower collections)
    froze = gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    threads = torch.get_num_threads()  # a fitting thread's torch.set_num_threads changes the caller's count too
    try:
        if parallel == "heads" or jobs <= 1 or len(abilities) <= 1:
            train_abilities(runs, features, abilities, device=device, progress=progress, label=label, jobs=jobs)
            return
        _abilities_at_once(runs, features, abilities, device, jobs)
    finally:
        if froze:
            gc.unfreeze()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _abilities_at_once(
    runs: Sequence[Any], features: MemoryFeatures, abilities: Sequence[str], device: str, jobs: int
) -> None:
    """``jobs`` threads fitting whole abilities (see :func:`train_heads`); the first error is raised once every
    thread has stopped (none takes a new ability after an error)."""
    import threading

    from ava.heads.ability_runs import train_abilities

    tokens_first = sorted(abilities, key=lambda a: not any(r.needs(a)[1] for r in runs))
    todo = iter(tokens_first)
    lock = threading.Lock()
    errors: list[BaseException] = []
    per_thread = max(1, torch.get_num_threads() // jobs)

    def work() -> None:
        torch.set_num_threads(per_thread)  # OpenMP's count is per thread: the cores are shared, not oversubscribed
        while True:
            with lock:
                ava = None if errors else next(todo, None)
            if ava is None:
                return
            try:
                train_abilities(runs, features, [ava], device=device, progress=False, jobs=1)
            except BaseException as e:  # noqa: BLE001 (re-raised below, in the caller's thread)
                with lock:
                    errors.append(e)

    threads = [threading.Thread(target=work, name=f"ava-fit-{i}") for i in range(min(jobs, len(abilities)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def check_heads(heads: Sequence[str]) -> list[str]:
    from ava.heads import HEADS
    from ava.heads.fingerprint import FINGERPRINT_HEADS

    if isinstance(heads, str):
        heads = [heads]
    if not heads:
        raise AvaError(f"no heads given; use some of {', '.join(FINGERPRINT_HEADS)}")
    out = []
    for h in heads:
        name = HEADS.get(h).name
        if name not in FINGERPRINT_HEADS:
            raise AvaError(f"head {h!r} cannot be part of a fingerprint; use {', '.join(FINGERPRINT_HEADS)}")
        out.append(name)
    return list(dict.fromkeys(out))


def fingerprint_in_memory(
    vfm: Any,
    data: str | os.PathLike[str] | Dataset | EvalSuite,
    *,
    abilities: Sequence[str] | None = None,
    heads: Sequence[str] = DEFAULT_HEADS,
    device: str = "cpu",
    split: str = "test",
    seed: int = 0,
    max_train: int | None = None,
    progress: bool = False,
    batch_size: int = 32,
    jobs: int | None = None,
    parallel: str | None = None,
) -> FingerprintScores:
    """The fingerprint of ``vfm`` (a :func:`~ava.vfm.module.vfm_from_module` VFM, or a ``FrozenVFM``) on ``data``
    with features held in memory: no cache is read or written.

    ``data`` is a dataset directory, a ``Dataset``, or an :class:`EvalSuite` (which fixes ``abilities``, ``split``,
    ``max_train`` and ``seed`` itself). ``heads`` are among ``probe-linear``, ``knn`` and ``probe-attn`` (the
    attentive probe reads every ability's tokens: ~T times the memory and much more time). ``device`` is where the
    heads train (the VFM runs on its own device). ``jobs`` fits run at once (default: 2 on a GPU or a CPU with 2+
    cores, with 2+ heads, else 1), over abilities or over one ability's heads (``parallel``, see :func:`train_heads`).
    Returns :class:`FingerprintScores` on every rank; under ``torch.distributed`` the images are shared between ranks
    and the heads run on rank 0 (see the module doc).
    """
    from ava.heads.ability_runs import default_jobs
    from ava.heads.features import resolve_device

    started = time.perf_counter()
    heads = check_heads(heads)
    if jobs is not None and jobs < 1:
        raise AvaError(f"jobs must be >= 1, got {jobs}")
    if batch_size < 1:
        raise AvaError(f"batch_size must be >= 1, got {batch_size}")
    if parallel not in (None, *PARALLEL_MODES):
        raise AvaError(f"parallel={parallel!r}; use one of {', '.join(PARALLEL_MODES)}")
    suite = (
        data if isinstance(data, EvalSuite) else EvalSuite(data, abilities, split=split, max_train=max_train, seed=seed)
    )
    device = resolve_device(device)
    name = str(getattr(vfm.spec, "key", "vfm"))
    rank, world = rank_and_world()
    features = MemoryFeatures(vfm, STORED_VIEWS)
    with tempfile.TemporaryDirectory(prefix="ava-memory-") as tmp:
        runs = make_runs(name, suite, features, heads, Path(tmp), device, suite.seed)
        token_shas = set(suite.shas([a for a in suite.abilities if any(r.needs(a)[1] for r in runs)]))
        extract_in_memory(vfm, suite, features, token_shas, batch_size=batch_size)
        extracted = time.perf_counter()
        outcome: tuple[FingerprintScores | None, str | None] = (None, None)
        failure: BaseException | None = None
        if rank == 0:
            try:
                jobs = jobs or default_jobs(device, len(runs))
                train_heads(
                    runs,
                    features,
                    suite.abilities,
                    device=device,
                    progress=progress,
                    label=name,
                    jobs=jobs,
                    parallel=parallel or PARALLEL,
                )
                results = {run.head: run.finish() for run in runs}
                outcome = (_scores(name, suite, features, results), None)
            except Exception as e:  # told to the waiting ranks (no deadlock), then raised here
                if world == 1:
                    raise
                failure, outcome = e, (None, f"rank 0: {type(e).__name__}: {e}")
    if world > 1:  # every rank waits here for rank 0's heads, then returns the same result
        box = [outcome]
        torch.distributed.broadcast_object_list(box, src=0)
        outcome = box[0]
    if failure is not None:
        raise failure
    scores, message = outcome
    if scores is None:
        raise AvaError(f"the in-memory fingerprint failed on {message}")
    scores.seconds = {
        "extract": round(extracted - started, 3),
        "heads": round(time.perf_counter() - extracted, 3),
        "total": round(time.perf_counter() - started, 3),
    }
    return scores


def _scores(name: str, suite: EvalSuite, features: MemoryFeatures, results: dict[str, Any]) -> FingerprintScores:
    first = next(iter(results.values()))["abilities"]
    return FingerprintScores(
        vfm=name,
        scores={h: {a: float(r["abilities"][a]["value"]) for a in suite.abilities} for h, r in results.items()},
        n={a: int(first[a]["n"]) for a in suite.abilities},
        higher_is_better={a: bool(first[a]["higher_is_better"]) for a in suite.abilities},
        metrics={a: str(first[a]["metric"]) for a in suite.abilities},
        split=suite.split,
        random_weights=features.random_weights,
        synthetic=suite.dataset.is_synthetic,
        results=results,
    )
