"""Feature reading and pooling for the heads trained on cached features: the device rule, joining samples to
cache rows (each image read once), the pooled views (the global mean, and ``gridN`` = the mean plus N x N cell
means of the token grid), and the layer choices a head's grid tries.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ava.cache.placement import HOST, ON_DEVICE, STAGED, STREAMED, Placement, place
from ava.cache.pooling import pool_candidates, pool_cells, pool_dim, pool_tokens, token_grid
from ava.errors import AvaError

__all__ = [
    "AbilityFeatures",
    "CacheRows",
    "HeldRows",
    "TokenRows",
    "check_finite",
    "layer_sets",
    "pool_candidates",
    "pool_cells",
    "pool_dim",
    "pool_tokens",
    "read_layers",
    "read_pooled_views",
    "read_rows",
    "require_cached",
    "resolve_device",
    "token_grid",
]

if TYPE_CHECKING:
    import torch

    from ava.data.format import Sample


def resolve_device(device: str) -> str:
    """``"auto"`` becomes ``"cuda"`` when torch sees a GPU, else ``"cpu"``; a CUDA device asked for where there is
    none is a user error (the VFM loader's rule, shared)."""
    from ava.vfm.model import resolve_device as _resolve

    return str(_resolve(device))


# -- features -------------------------------------------------------------------------------------------
def require_cached(
    cache: Any, samples: Sequence[Sample], hint: str = "run `ava cache extract` for this dataset and VFM first"
) -> None:
    """AvaError naming the first of ``samples`` whose image has no features in ``cache``, and what to run.

    ``hint`` ends the message; ``{avas}`` in it becomes the abilities of the missing samples (comma-separated),
    so a caller can spell out the exact ``ava cache extract`` command.
    """
    missing = [s for s in samples if not cache.has(s.image_sha256)]
    if missing:
        s = missing[0]
        avas = ",".join(sorted({m.ava for m in missing}))
        raise AvaError(
            f"feature cache {cache.key} has no features for {len(missing)} sample(s), e.g. {s.ava}/{s.id} "
            f"(image {s.image}); {hint.replace('{avas}', avas)}"
        )


def read_rows(cache: Any, samples: Sequence[Sample], layer: int | None, pooled: bool) -> np.ndarray:
    """Features of ``samples`` in order ([N, D] pooled or [N, T, D]); each image is read once."""
    shas = [s.image_sha256 for s in samples]
    require_cached(cache, samples)
    unique = list(dict.fromkeys(shas))
    rows = cache.read_pooled(unique, layer=layer) if pooled else cache.read(unique, layer=layer)
    if not getattr(cache, "finite_checked", False):
        first = {s.image_sha256: s for s in reversed(samples)}  # each image's first sample, found in one pass
        check_finite(rows, [first[sha] for sha in unique], cache, layer)
    if len(unique) == len(shas):  # every image once, in order: no copy
        return np.ascontiguousarray(rows, dtype=np.float32)
    where = {sha: i for i, sha in enumerate(unique)}
    index = np.fromiter((where[sha] for sha in shas), dtype=np.int64, count=len(shas))
    return np.ascontiguousarray(rows[index], dtype=np.float32)


def check_finite(rows: np.ndarray | torch.Tensor, samples: Sequence[Sample], cache: Any, layer: int | None) -> None:
    """AvaError naming the samples whose feature rows (``rows[i]`` belongs to ``samples[i]``; numpy, or a torch
    tensor on any device) hold NaN or inf: a head trained on them learns nothing and says nothing (the loss goes NaN,
    every reply is the same)."""
    from ava.vfm.feature_check import finite_rows

    if not isinstance(rows, np.ndarray):  # a tensor: reduced where it is, one bool per row comes back
        finite = finite_rows(rows).cpu().numpy() if len(rows) else np.ones(0, bool)
    elif len(rows) and (view := _as_torch(rows)) is not None:  # the same two reductions on the array's memory
        finite = finite_rows(view).numpy()  # (np.isfinite on fp16 rows: 1.6 ms a SigLIP-sized row; this, 0.36)
    else:
        finite = np.isfinite(rows.reshape(len(rows), -1)).all(axis=1) if len(rows) else np.ones(0, bool)
    if finite.all():
        return
    bad = [samples[i] for i in np.flatnonzero(~finite)]
    names = ", ".join(f"{s.ava}/{s.id} (image {s.image})" for s in bad[:5])
    raise AvaError(
        f"feature cache {getattr(cache, 'key', '?')}: the features of {len(bad)} sample(s) hold NaN or inf "
        f"(layer {layer if layer is not None else 'default'}): {names}{' ...' if len(bad) > 5 else ''}; "
        "no head is trained on them. Check the VFM's dtype/weights, then extract these images again "
        "(`ava cache extract`, after removing or repairing the cache group)"
    )


def _as_torch(rows: np.ndarray) -> Any:
    """A float array as a torch tensor on the same memory (read-only arrays too: it is only read), or None."""
    import warnings

    import torch

    if rows.dtype.kind != "f":
        return None
    with warnings.catch_warnings():  # a read-only array (a buffer from the store): torch warns, and only reads here
        warnings.simplefilter("ignore", UserWarning)
        try:
            return torch.from_numpy(rows)
        except (TypeError, ValueError):  # a dtype torch lacks, negative strides
            return None


def read_layers(cache: Any, samples: Sequence[Sample], layers: Sequence[int | None], pooled: bool) -> np.ndarray:
    """Features of several cached layers, concatenated along the feature axis."""
    parts = [read_rows(cache, samples, layer, pooled) for layer in layers]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


# -- pooled views: the global mean, optionally with coarse cells of the token grid (ava.cache.pooling) ------------
def read_pooled_views(
    cache: Any, samples: Sequence[Sample], layers: Sequence[int | None], pools: Sequence[str], chunk: int = 256
) -> dict[str, np.ndarray]:
    """Every pooled view in ``pools`` of ``samples`` ([N, D'] each, layers concatenated per view).

    Tokens are read once per chunk of samples and pooled into every view, so memory stays at one chunk of
    tokens plus the pooled views. A ``["mean"]`` request reads the cache's pooled rows directly."""
    pools = list(dict.fromkeys(pools))
    if samples and all(p in stored_views(cache) for p in pools):  # stored beside the tokens at extraction
        require_cached(cache, samples)
        return {p: read_stored_view(cache, samples, layers, p) for p in pools}
    if isinstance(cache, AbilityFeatures):  # held in memory: every view is pooled once per ability, then indexed
        require_cached(cache, samples)
        shas = [s.image_sha256 for s in samples]
        views = {p: [cache.pooled(shas, la, p) for la in layers] for p in pools}  # each a new array (rows indexed)
        return {p: np.ascontiguousarray(v[0] if len(v) == 1 else np.concatenate(v, axis=1)) for p, v in views.items()}
    if pools == ["mean"]:
        return {"mean": read_layers(cache, samples, layers, pooled=True)}
    grid = token_grid(cache)
    parts: dict[str, list[np.ndarray]] = {p: [] for p in pools}
    for start in range(0, len(samples), chunk):
        tokens = [read_rows(cache, samples[start : start + chunk], layer, pooled=False) for layer in layers]
        for pool in pools:
            views = [pool_tokens(t, pool, grid) for t in tokens]
            parts[pool].append(views[0] if len(views) == 1 else np.concatenate(views, axis=1))
    if not samples:
        return {p: np.zeros((0, pool_dim(cache.dim, p) * len(layers)), np.float32) for p in pools}
    return {p: np.ascontiguousarray(np.concatenate(v)) for p, v in parts.items()}


def stored_views(cache: Any) -> tuple[str, ...]:
    """The pooled views ``cache`` stores beside its tokens (``FeatureCache.views``; none for other readers)."""
    views = getattr(cache, "views", None)
    return tuple(views) if isinstance(views, tuple | list) and hasattr(cache, "read_view") else ()


def read_stored_view(cache: Any, samples: Sequence[Sample], layers: Sequence[int | None], view: str) -> np.ndarray:
    """A stored pooled view of ``samples`` in order ([N, D'], layers concatenated); each image read once,
    non-finite rows refused naming the samples."""
    shas = [s.image_sha256 for s in samples]
    unique = list(dict.fromkeys(shas))
    first = {s.image_sha256: s for s in reversed(samples)}
    where = {sha: i for i, sha in enumerate(unique)}
    index = np.fromiter((where[sha] for sha in shas), dtype=np.int64, count=len(shas))
    parts = []
    for layer in layers:
        rows = cache.read_view(unique, layer, view)
        check_finite(rows, [first[sha] for sha in unique], cache, layer)
        parts.append(rows if len(unique) == len(shas) else rows[index])  # (each image once, in order: no copy)
    return np.ascontiguousarray(parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1), dtype=np.float32)


def layer_sets(cache: Any, layer: int | None) -> list[tuple[int | None, ...]]:
    """The layer choices a grid tries: the requested layer; else the last cached layer, and all of them
    concatenated when the cache holds several (dinov2's linear eval tries 1 vs 4 last blocks the same way)."""
    if layer is not None:
        return [(layer,)]
    layers = tuple(getattr(cache, "layers", ()) or ())
    if len(layers) <= 1:
        return [(None,)]
    same_sign = all(v < 0 for v in layers) or all(v >= 0 for v in layers)
    deepest = max(layers) if same_sign else layers[-1]
    return [(deepest,), layers]


# -- one ability's features, read once and shared by every head ------------------------------------------------
_MEMORY_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}  # codecs whose values these hold exactly (others: fp32)


def _resident(cache: Any, codec: str | None) -> bool:
    """Whether ``cache`` is a Zarr feature cache whose values :class:`~ava.cache.reader.ResidentFeatures` holds
    exactly (fp16 and bf16 codecs: it keeps them as stored)."""
    from ava.cache.reader import FeatureCache

    return isinstance(cache, FeatureCache) and codec in _MEMORY_DTYPES


def _scaled_codec(cache: Any) -> Any:
    """The codec of a Zarr feature cache that stores scaled codes (int8, int4), else None."""
    from ava.cache.reader import FeatureCache

    if not isinstance(cache, FeatureCache):
        return None
    codec = cache.group.codec
    return codec if codec.has_scale else None


def _code_bytes(cache: Any, codec: Any, rows: int, layers: int) -> int:
    """Bytes of ``rows`` rows of an int8/int4 cache's stored codes and scales, ``layers`` layers of them."""
    return rows * sum(codec.row_bytes(int(cache.num_tokens), int(cache.dim))) * layers


def _stored(
    cache: Any, shas: list[str], layer: int | None, start: int, end: int, codes: AheadCodes | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The stored codes (values, scales) of rows ``start:end`` of ``shas``: read from the cache, or taken from
    ``codes`` (:func:`read_ahead`'s read of them, in the same order)."""
    if codes is not None:
        values, scales = codes.wait()
        return values[start:end], None if scales is None else scales[start:end]
    return cache.read_stored(shas[start:end], layer)


def _decoded(codec: Any, values: np.ndarray, scale: np.ndarray | None, device: Any) -> torch.Tensor:
    """Float32 tokens decoded on ``device`` from stored codes (the host copies the codes: a quarter (int8) or an
    eighth (int4) of the float32 bytes)."""
    from ava.cache.reader import as_tensor

    return codec.decode_device(as_tensor(values, device), None if scale is None else as_tensor(scale, device))


def _read_scaled(
    cache: Any,
    codec: Any,
    shas: list[str],
    samples: list[Sample],
    layer: int | None,
    tokens: torch.Tensor,
    chunk: int,
    codes: AheadCodes | None = None,
) -> None:
    """Every row of ``shas`` read from an int8/int4 cache, decoded where ``tokens`` is held and written into it, a
    chunk per task on the reader threads (:func:`ava.cache.reader.read_threads`): the host's part, reading and
    decompressing the codes, was one thread's (0.6-1.9 ms per SigLIP-sized int4 row here). The first chunk is read
    on this thread (it lists the cache's files, which the threads then share). Non-finite rows are refused,
    naming the samples of the first chunk that has one. ``codes``: the codes read ahead (decoded here, not read)."""

    def load(start: int) -> None:
        part = _decoded(codec, *_stored(cache, shas, layer, start, start + chunk, codes), tokens.device)
        check_finite(part, samples[start : start + chunk], cache, layer)
        tokens[start : start + len(part)].copy_(part)

    _by_chunks(len(shas), chunk, load)


def _by_chunks(n: int, chunk: int, load: Callable[[int], None]) -> None:
    """``load(start)`` for every chunk of ``n`` rows: the first on this thread (it lists the cache's files, which the
    threads then share), the rest on the reader threads (:func:`ava.cache.reader.read_threads`), in order: the first
    failing chunk's error is the one raised."""
    from concurrent.futures import ThreadPoolExecutor

    from ava.cache.reader import read_threads

    starts = list(range(0, n, chunk))
    if starts:
        load(starts[0])
    with ThreadPoolExecutor(read_threads()) as pool:
        for _ in pool.map(load, starts[1:]):
            pass


def _read_codes(
    cache: Any,
    codec: Any,
    shas: list[str],
    samples: list[Sample],
    layer: int | None,
    where: Placement,
    device: str,
    chunk: int,
    codes: AheadCodes | None = None,
) -> CodedTokens:
    """Every row of ``shas`` read from an int8/int4 cache and held as stored (codes and scales) where ``where`` says,
    a chunk per task on the reader threads; each chunk is decoded once on the heads' ``device`` to refuse non-finite
    rows (naming the samples of the first chunk that has one), as :func:`_read_scaled` does. ``codes``: the codes
    read ahead (taken, not read)."""
    import torch

    n, num_tokens, dim = len(shas), int(cache.num_tokens), int(cache.dim)
    values = _empty((n, *codec.value_shape(num_tokens, dim)), getattr(torch, codec.storage_dtype), where)
    scales = _empty((n, *codec.scale_shape(num_tokens, dim)), getattr(torch, codec.scale_dtype), where)

    def load(start: int) -> None:
        v, sc = _stored(cache, shas, layer, start, start + chunk, codes)
        end = start + len(v)
        values[start:end].copy_(torch.from_numpy(v))
        scales[start:end].copy_(torch.from_numpy(sc))
        decoded = codec.decode_device(values[start:end].to(device), scales[start:end].to(device))  # (host: a copy)
        check_finite(decoded, samples[start:end], cache, layer)

    _by_chunks(n, chunk, load)
    return CodedTokens(codec, values, scales, dim)


@dataclasses.dataclass(frozen=True, eq=False)
class CodedTokens:
    """An ability's rows from an int8 or int4 cache held as the cache stores them: ``values`` (the codes) and their
    ``scales``, decoded to float32 (``codec.decode_device``) a batch at a time, where they are held: the same float32
    numbers as decoding them once, in a quarter (int8) or about a seventh (int4) of float32's memory. An ability's
    rows are held so where their float32 would not fit where the heads compute (on a GPU: not on it)."""

    codec: Any
    values: torch.Tensor  # [N, *codec.value_shape(T, D)]
    scales: torch.Tensor  # [N, *codec.scale_shape(T, D)]
    dim: int

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def shape(self) -> tuple[int, int, int]:
        return (int(self.values.shape[0]), int(self.values.shape[1]), self.dim)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """Float32 rows ``index`` (a long tensor on :attr:`device`), decoded there."""
        return self.codec.decode_device(self.values.index_select(0, index), self.scales.index_select(0, index))

    def span(self, start: int, end: int) -> torch.Tensor:
        """Float32 rows ``start:end``, decoded where they are held."""
        return self.codec.decode_device(self.values[start:end], self.scales[start:end])


def _float_rows(tokens: Any, index: torch.Tensor) -> torch.Tensor:
    """Float32 rows ``index`` (on the held rows' device) of held tokens: a tensor, or :class:`CodedTokens`."""
    return tokens.rows(index) if isinstance(tokens, CodedTokens) else tokens[index].float()


def _float_span(tokens: Any, start: int, end: int) -> torch.Tensor:
    """Float32 rows ``start:end`` of held tokens."""
    return tokens.span(start, end) if isinstance(tokens, CodedTokens) else tokens[start:end].float()


def reader_place(where: Placement, device: str) -> dict[str, str]:
    """The :class:`~ava.cache.reader.ResidentFeatures` arguments (compute ``device``, ``held``) that read rows
    straight to where ``where`` holds them for heads computing on ``device``."""
    if where.kind == ON_DEVICE:
        return {"device": device, "held": ON_DEVICE}
    return {"device": "cpu", "held": HOST}  # (host rows for a GPU too: its batches are staged, not the whole set)


def _hold(tokens: torch.Tensor, where: Placement) -> torch.Tensor:
    """``tokens`` (host memory) moved to where ``where`` holds them (the same tensor when it is held there already;
    to a GPU through pinned chunks: :func:`ava.cache.placement.to_device`)."""
    from ava.cache.placement import to_device

    return to_device(tokens, where.device)


def _empty(shape: tuple[int, ...], dtype: torch.dtype, where: Placement) -> torch.Tensor:
    """An uninitialized tensor held where ``where`` says (:func:`ava.cache.placement.held_empty`)."""
    from ava.cache.placement import held_empty

    return held_empty(shape, dtype, where.device)


@dataclasses.dataclass
class AheadReads:
    """Reads of one ability started ahead of time (:func:`read_ahead`), running on other threads while the caller does
    other work: the tokens (one :class:`~ava.cache.reader.ResidentFeatures` per layer) and the stored pooled views
    the heads need (``views[(layer, view)]``: the images' order it is read in, and its future)."""

    shas: list[str]
    reads: dict[int | None, Any]
    views: dict[tuple[int | None, str], tuple[list[str], Any]] = dataclasses.field(default_factory=dict)

    def take(self, shas: Sequence[str]) -> dict[int | None, Any]:
        """The reads, when they are of exactly these images in this order (else none: the caller reads itself)."""
        return self.reads if list(shas) == self.shas else {}

    def take_views(self, shas: Sequence[str]) -> dict[tuple[int | None, str], tuple[list[str], Any]]:
        """The views' reads, on the same terms as :meth:`take`."""
        return self.views if list(shas) == self.shas else {}


class AheadCodes:
    """An int8/int4 cache's stored codes (values and scales) of some images, in their order, read into host memory
    on a thread of their own (which runs the chunks on the reader threads, as :func:`_read_scaled` does): codes are
    a quarter (int8) or an eighth (int4) of float32's bytes, and are decoded where the rows are held when the ability
    is placed. :meth:`wait` returns them, or raises the read's error."""

    def __init__(self, cache: Any, shas: list[str], layer: int | None, chunk: int = 256) -> None:
        codec = cache.group.codec
        n, num_tokens, dim = len(shas), int(cache.num_tokens), int(cache.dim)
        self._values = np.empty((n, *codec.value_shape(num_tokens, dim)), dtype=codec.storage_dtype)
        shape = codec.scale_shape(num_tokens, dim)
        self._scales = None if shape is None else np.empty((n, *shape), dtype=codec.scale_dtype)
        self._error: BaseException | None = None

        def load(start: int) -> None:
            values, scales = cache.read_stored(shas[start : start + chunk], layer)
            self._values[start : start + len(values)] = values
            if self._scales is not None and scales is not None:
                self._scales[start : start + len(scales)] = scales

        def run() -> None:
            try:
                _by_chunks(n, chunk, load)
            except BaseException as e:  # re-raised in the caller's thread by wait()
                self._error = e

        self._thread = threading.Thread(target=run, name="ava-codes-ahead", daemon=True)
        self._thread.start()

    def wait(self) -> tuple[np.ndarray, np.ndarray | None]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._values, self._scales


def _views_ahead(
    cache: Any, first: dict[str, Sample], order: list[str], layers: Sequence[int | None], views: Sequence[str]
) -> dict[tuple[int | None, str], tuple[list[str], Any]]:
    """Start reading the stored ``views`` of the images ``order`` (rows in that order, as
    :meth:`AbilityFeatures._read_stored` reads them) on a thread of their own, one after another."""
    if not views:
        return {}
    from concurrent.futures import ThreadPoolExecutor

    samples = [first[sha] for sha in order]
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ava-views-ahead")
    try:
        return {
            (la, v): (order, pool.submit(read_stored_view, cache, samples, [la], v)) for la in layers for v in views
        }
    finally:
        pool.shutdown(wait=False)  # (its thread ends after the last read)


AHEAD_SHARE = 0.35  # of the GPU's free memory, rows read ahead onto it may take while the heads fit beside them


def read_ahead(
    cache: Any,
    samples: Sequence[Sample],
    layers: Sequence[int | None],
    device: str = "cpu",
    views: Sequence[str] = (),
    tokens: bool = True,
) -> AheadReads | None:
    """Start reading what :class:`AbilityFeatures` will hold for ``samples``, on other threads, and return at once;
    None where nothing would be gained or it would not fit: a cache that is not a Zarr feature cache (and stores no
    view the heads need alone), or rows that do not fit in the host memory left now (the features being fitted hold
    theirs until released).

    - fp16 and bf16 caches: the token rows, as stored (:class:`~ava.cache.reader.ResidentFeatures`). For heads on a
      GPU, rows that fit in :data:`AHEAD_SHARE` of its free memory now (the current ability's rows held already;
      half of what a placement may take, the rest left to the fits running meanwhile) are read straight onto it:
      nothing is copied when they are placed. Others are read into host memory and placed (on the GPU when they fit)
      only when :class:`AbilityFeatures` is made, after the previous ability's are released.
    - int8 and int4 caches: the stored codes, into host memory (:class:`AheadCodes`), decoded where the rows are held
      when the ability is placed.
    - The stored pooled views the heads need, on a thread of their own (alone when no head needs the tokens)."""
    from ava.cache.placement import SHARE, device_free_bytes, host_free_bytes

    spec = getattr(cache, "spec", None)
    codec = spec.get("codec") if isinstance(spec, dict) else None
    stored = [v for v in dict.fromkeys(views) if v in stored_views(cache)]
    views_only = not tokens and bool(views) and len(stored) == len(set(views))
    scaled = _scaled_codec(cache)
    if not views_only and not _resident(cache, codec) and scaled is None:
        return None
    first: dict[str, Sample] = {}
    for s in samples:
        first.setdefault(s.image_sha256, s)
    shas = list(first)
    default = tuple(getattr(cache, "layers", ()) or ())
    wanted = list(dict.fromkeys(default[0] if la is None and default else la for la in layers))  # as _layer() maps
    if not shas:
        return None
    if views_only:  # (held in the order of the images, as AbilityFeatures holds views read alone)
        return AheadReads(shas, {}, _views_ahead(cache, first, shas, wanted, stored))
    if scaled is not None:  # int8, int4: the codes into host memory, decoded where the rows are held when placed
        nbytes = _code_bytes(cache, scaled, len(shas), max(1, len(wanted)))
        if nbytes > SHARE * host_free_bytes():
            return None
        # (held in the order of the images, as AbilityFeatures holds an int8/int4 cache's rows)
        return AheadReads(
            shas, {la: AheadCodes(cache, shas, la) for la in wanted}, _views_ahead(cache, first, shas, wanted, stored)
        )
    nbytes = len(shas) * int(cache.num_tokens) * int(cache.dim) * 2 * max(1, len(wanted))
    if nbytes > SHARE * host_free_bytes() or place(device, nbytes).kind == STREAMED:
        return None  # (rows that would be streamed: nothing is held)
    from ava.cache.reader import ResidentFeatures

    names = [f"{first[sha].ava}/{first[sha].id} (image {first[sha].image})" for sha in shas]
    import torch

    gpu = device.startswith("cuda") and torch.cuda.is_available() and nbytes <= AHEAD_SHARE * device_free_bytes(device)
    where = {"device": device, "held": ON_DEVICE} if gpu else {"device": "cpu", "held": HOST}
    reads = {la: ResidentFeatures(cache, shas, la, names=names, **where) for la in wanted}
    # the rows' order where they are held (the cache's row order: ResidentFeatures.rows), which the views follow
    slots = next(iter(reads.values())).rows.tolist()
    order = [sha for _, sha in sorted(zip(slots, shas, strict=True))]
    return AheadReads(shas, reads, _views_ahead(cache, first, order, wanted, stored))


class AbilityFeatures:
    """The features of one ability's samples, read from the cache once and held in memory for every head.

    It answers the ``FeatureCache`` calls the heads make (``has``, ``read``, ``read_pooled`` and the cache's
    metadata), so probes and kNN run unchanged on it, and it keeps every pooled view it computed: a fingerprint
    reads each ability's tokens once (``reads`` counts cache reads per layer) instead of once per head and view.

    ``views`` and ``tokens`` say what the heads need: when every view asked for is stored in the cache (pooled at
    extraction) and no head needs tokens, only those views are read (``reads`` stays 0: no token reads);
    otherwise the tokens of each layer are read once and the views pooled from them.

    Values are held in the cache's own storage precision (fp16 for the fp16 codec, bf16 for bf16: exact, half
    the memory of float32; float32 for int8, int4 and other caches) and handed out as float32, so a head sees the
    same numbers as from the cache. The int8 and int4 codes are decoded where the rows are held (on the GPU when
    they are held there: the host copies the codes, not float32); where their float32 would not fit where the heads
    compute (on a GPU: not on it) but the codes do, the codes themselves are held and decoded batch by batch
    (:class:`CodedTokens`, a quarter or about a seventh of the memory); :attr:`held_as` says which.
    ``device="cuda"`` puts them on the GPU when they fit in its free memory, else in host memory, each batch staged
    to the GPU through a pinned buffer (the set is not pinned whole: see :mod:`ava.cache.placement`); where they fit
    in no memory, nothing is held and heads read token rows from the cache batch by batch, the next batch read ahead
    (:class:`CacheRows`). :attr:`placement` says which (:mod:`ava.cache.placement`). Non-finite rows are
    refused at load, naming the samples.
    """

    def __init__(
        self,
        cache: Any,
        samples: Sequence[Sample],
        layers: Sequence[int | None],
        device: str = "cpu",
        chunk: int = 256,
        views: Sequence[str] = (),
        tokens: bool = True,
        reads: AheadReads | None = None,
    ) -> None:
        """``reads``: this ability's token reads, started earlier by :func:`read_ahead` (while the previous
        ability's heads fitted) for the same samples and layers; they are waited for here instead of started."""
        import torch

        self.cache = cache
        require_cached(cache, samples)
        first: dict[str, Sample] = {}
        for s in samples:
            first.setdefault(s.image_sha256, s)
        shas = list(first)
        self._row = {sha: i for i, sha in enumerate(shas)}
        spec = getattr(cache, "spec", None)
        codec = spec.get("codec") if isinstance(spec, dict) else None
        dtype = getattr(torch, _MEMORY_DTYPES.get(str(codec), "float32"))
        self.reads = 0  # token reads (one per layer)
        self.view_reads = 0  # stored pooled views read (one per layer and view)
        self.shared: dict[Any, Any] = {}  # what one head computed that another would compute the same (the OCR reader)
        self.shared_lock = threading.Lock()  # held while computing an entry of ``shared`` (heads may fit at once)
        self._tokens: dict[int | None, Any] = {}
        self._pooled: dict[tuple[int | None, str], np.ndarray] = {}
        self._first = first
        self._views_ahead = reads.take_views(shas) if reads is not None else {}  # (read_ahead's stored views)
        wanted = list(dict.fromkeys(self._layer(la) for la in layers))
        stored = stored_views(cache)
        if not tokens and views and all(v in stored for v in views):
            self.device, self.placement = "cpu", HOST
            for layer in wanted:
                for view in dict.fromkeys(views):
                    self._read_stored(layer, view)
            return
        nbytes = len(shas) * int(cache.num_tokens) * int(cache.dim) * len(wanted) * torch.finfo(dtype).bits // 8
        started = reads.take(shas) if reads is not None else {}
        ahead_codes = {la: r for la, r in started.items() if isinstance(r, AheadCodes)}  # (int8, int4)
        started = {la: r for la, r in started.items() if not isinstance(r, AheadCodes)}
        # rows read ahead onto the GPU already (read_ahead): held there (a placement now would count their own bytes
        # as taken); else placed as any rows
        where = (
            Placement(ON_DEVICE, device)
            if started and all(r.where.type == "cuda" for r in started.values())
            else self._placement(device, nbytes)
        )
        scaled = _scaled_codec(cache)
        coded = False
        if scaled is not None and where.kind in (STAGED, STREAMED):  # float32 would not fit where the heads compute
            code_bytes = _code_bytes(cache, scaled, len(shas), len(wanted))
            held = self._placement(device, code_bytes)
            if held.kind != STREAMED:  # the codes do: held as stored, decoded batch by batch (CodedTokens)
                where, coded = held, True
        self.held_as = "codes" if coded else str(dtype).removeprefix("torch.")  # what a held row is kept as
        if started and where.kind == STREAMED:  # read ahead into host memory already: held there, not read again
            where = Placement(HOST, "cpu")
        self.placement = where.kind
        self.device = where.device or "streamed"
        if where.kind == STREAMED:  # larger than host memory: heads read token rows from the cache batch by batch
            self.reads = len(wanted)
            return
        if _resident(cache, codec):  # a Zarr cache of 16-bit values: read as stored, on threads, no float32 trip
            from ava.cache.reader import ResidentFeatures

            names = [f"{first[sha].ava}/{first[sha].id} (image {first[sha].image})" for sha in shas]
            for layer in wanted:
                # read straight where the rows are held (rows for the GPU were staged whole in host memory; host rows
                # for a GPU were then pinned whole: twice the rows at the peak, and PyTorch's pinned blocks are
                # powers of two, so recognition's 75 GB asked for 128 GiB more)
                resident = started.get(layer) or ResidentFeatures(
                    cache, shas, layer, names=names, **reader_place(where, device)
                )
                tokens = resident.wait()  # [U, T, D], rows in the cache's row order
                self._row = {sha: int(slot) for sha, slot in zip(shas, resident.rows.tolist(), strict=True)}
                self.reads += 1
                self._tokens[layer] = _hold(tokens, where)
            return
        for layer in wanted:  # each chunk straight into the held tensor, where it is held (no whole copy on the host)
            if coded:
                self._tokens[layer] = _read_codes(
                    cache,
                    scaled,
                    shas,
                    [first[sha] for sha in shas],
                    layer,
                    where,
                    device,
                    chunk,
                    ahead_codes.get(layer),
                )
                self.reads += 1
                continue
            shape = (len(shas), int(cache.num_tokens), int(cache.dim))
            tokens = _empty(shape, dtype, where)
            if scaled is not None:  # int8, int4: the stored codes go where the rows are held, decoded there
                _read_scaled(
                    cache, scaled, shas, [first[sha] for sha in shas], layer, tokens, chunk, ahead_codes.get(layer)
                )
                self.reads += 1
                self._tokens[layer] = tokens
                continue
            for start in range(0, len(shas), chunk):
                block = cache.read(shas[start : start + chunk], layer=layer)
                check_finite(block, [first[sha] for sha in shas[start : start + chunk]], cache, layer)
                # fp16 rows held as read; others through float32, as a cache hands them out (rounded once)
                as_read = block.dtype == np.float16 and dtype == torch.float16
                part = torch.from_numpy(np.ascontiguousarray(block, None if as_read else np.float32)).to(dtype)
                tokens[start : start + len(part)].copy_(part)
            self.reads += 1
            self._tokens[layer] = tokens

    def released(self) -> Callable[[], bool]:
        """A check that stays valid after this object is dropped: whether it and every array it holds (tokens, codes,
        pooled views) have been freed. Reference counting frees them the moment the last holder lets go; only a
        reference cycle among their holders keeps them until the garbage collector runs (a full collection,
        0.1 s and more, is then needed; see :func:`ava.heads.ability_runs.train_abilities`)."""
        refs = []
        for held in (self, *self._tokens.values(), *self._pooled.values()):
            try:
                refs.append(weakref.ref(held))
            except TypeError:  # (not weakly referenceable: nothing to wait for)
                continue
        return lambda: all(r() is None for r in refs)

    @staticmethod
    def _placement(device: str, nbytes: int) -> Placement:
        """Where ``nbytes`` of held tokens go (:func:`ava.cache.placement.place`)."""
        return place(device, nbytes)

    views: tuple[str, ...] = ()  # views are answered from memory (:meth:`pooled`), never re-read from the cache
    finite_checked = True  # non-finite rows were refused at load: readers need not scan again

    def __getattr__(self, name: str) -> Any:  # the cache's metadata: num_tokens, dim, layers, grid, key, spec...
        if name.startswith("_") or name == "cache":
            raise AttributeError(name)
        return getattr(self.cache, name)

    def _layer(self, layer: int | None) -> int | None:
        layers = tuple(getattr(self.cache, "layers", ()) or ())
        return layers[0] if layer is None and layers else layer

    def has(self, sha256: str) -> bool:
        return sha256 in self._row

    def _index(self, sha256s: Sequence[str]) -> np.ndarray:
        try:
            return np.fromiter((self._row[s] for s in sha256s), dtype=np.int64, count=len(sha256s))
        except KeyError as e:
            raise AvaError(f"image {e.args[0]} was not loaded with this ability's features") from None

    def tokens(self, layer: int | None = None) -> Any:
        """The held tokens [N, T, D] of ``layer`` (rows in load order): a tensor in storage precision, or the codes
        and scales of an int8/int4 cache (:class:`CodedTokens`)."""
        layer = self._layer(layer)
        if self.placement == STREAMED:
            raise AvaError(
                f"the tokens of layer {layer} are streamed from the cache, not held (they do not fit in "
                "memory): read them with held_rows() or read()"
            )
        if layer not in self._tokens:
            loaded = (
                f"pooled views {sorted({v for _, v in self._pooled})} only"
                if not self._tokens
                else f"layers {list(self._tokens)}"
            )
            raise AvaError(f"the tokens of layer {layer} were not loaded with this ability's features ({loaded})")
        return self._tokens[layer]

    def held_rows(self, samples: Sequence[Sample], layers: Sequence[int | None], device: str) -> HeldRows:
        """The held token rows of ``samples`` (layers concatenated), gathered batch by batch onto ``device``."""
        import torch

        require_cached(self, samples)
        held = [self._layer(layer) for layer in layers]
        if self.placement == STREAMED:
            return CacheRows(tuple(samples), held, device, cache=self.cache)  # type: ignore[return-value]
        source = self.tokens(held[0]).device
        slots = torch.from_numpy(self._index([s.image_sha256 for s in samples])).to(source)
        return HeldRows(tuple(samples), tuple(held), device, features=self, slots=slots)

    def read(self, sha256s: Sequence[str], layer: int | None = None) -> np.ndarray:
        """Tokens ``[B, T, D]`` float32 of the given images, in the order given (as ``FeatureCache.read``)."""
        import torch

        if self.placement == STREAMED:
            return read_rows(self.cache, [self._first[s] for s in sha256s], self._layer(layer), pooled=False)
        index = torch.from_numpy(self._index(sha256s))
        tokens = self.tokens(layer)
        return _float_rows(tokens, index.to(tokens.device)).cpu().numpy()

    def pooled(self, sha256s: Sequence[str], layer: int | None, pool: str, chunk: int = 256) -> np.ndarray:
        """A pooled view ``[B, D']`` (see :func:`pool_tokens`) for every held row, once (read when the cache stores it
        beside the tokens, else pooled from the held tokens), then indexed."""
        layer = self._layer(layer)
        if (layer, pool) not in self._pooled and pool in stored_views(self.cache):  # cheaper than pooling the tokens
            self._read_stored(layer, pool)
        if (layer, pool) not in self._pooled and self.placement == STREAMED:  # pooled chunk by chunk from the cache
            by_slot = sorted(self._row, key=self._row.__getitem__)
            samples = [self._first[s] for s in by_slot]
            self._pooled[(layer, pool)] = read_pooled_views(self.cache, samples, [layer], [pool], chunk)[pool]
        if (layer, pool) not in self._pooled:
            grid, tokens = token_grid(self.cache), self.tokens(layer)
            views = [
                pool_tokens(_float_span(tokens, i, i + chunk).cpu().numpy(), pool, grid)
                for i in range(0, len(tokens), chunk)
            ]
            dim = pool_dim(int(self.cache.dim), pool)
            self._pooled[(layer, pool)] = np.concatenate(views) if views else np.zeros((0, dim), np.float32)
        return self._pooled[(layer, pool)][self._index(sha256s)]

    def _read_stored(self, layer: int | None, view: str) -> None:
        """Read the cache's stored ``view`` of every held image, rows in the held order (:attr:`_row`); taken from
        :func:`read_ahead`'s read of it when that was of these rows in this order (its error, if it failed, raised
        here as the read's own would be)."""
        by_slot = sorted(self._row, key=self._row.__getitem__)
        order, ahead = self._views_ahead.pop((layer, view), (None, None))
        if ahead is not None and order == by_slot:
            self._pooled[(layer, view)] = ahead.result()
        else:
            self._pooled[(layer, view)] = read_stored_view(self.cache, [self._first[s] for s in by_slot], [layer], view)
        self.view_reads += 1

    def read_pooled(self, sha256s: Sequence[str], layer: int | None = None) -> np.ndarray:
        """Mean over tokens ``[B, D]`` float32 (as ``FeatureCache.read_pooled``)."""
        return self.pooled(sha256s, layer, "mean")


# -- token rows gathered batch by batch ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class TokenRows(abc.ABC):
    """Token rows ``[N, T, D * L]`` (layers concatenated) of some samples, gathered batch by batch as float32 tensors on
    ``device``, each batch passed through ``transform`` (e.g. a head's fixed standardization), for sets a head does not
    hold whole in float32. ``rows[index]`` takes an integer array of row positions; subclasses say where rows come
    from (:class:`HeldRows`: an ability's held features, :class:`CacheRows`: the feature cache)."""

    samples: tuple[Sample, ...]
    layers: tuple[int | None, ...]
    device: str
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: np.ndarray) -> torch.Tensor:
        x = self.gather(np.asarray(index, dtype=np.int64))
        return x if self.transform is None else self.transform(x)

    @abc.abstractmethod
    def gather(self, index: np.ndarray) -> torch.Tensor:
        """Float32 rows ``index`` on ``device``, before ``transform``."""

    def prefetch(self, index: np.ndarray) -> None:  # noqa: B027 - a hint; rows held in memory need none
        """Say that rows ``index`` are asked for next (a reader may start reading them now)."""

    def mapped(self, transform: Callable[[torch.Tensor], torch.Tensor]) -> TokenRows:
        """These rows with ``transform`` applied to every batch (after the current one); it may work in place."""
        first = self.transform
        then = transform if first is None else (lambda x: transform(first(x)))
        return dataclasses.replace(self, transform=then)

    def materialize(self, chunk: int = 256) -> torch.Tensor:
        """Every row at once ``[N, T, D * L]`` float32 on ``device``, filled chunk by chunk (peak: the result and one
        chunk)."""
        from ava.cache.placement import held_empty

        n = len(self)
        first = self[np.arange(min(chunk, n))]
        out = held_empty((n, *first.shape[1:]), first.dtype, first.device)
        out[: len(first)] = first
        for start in range(len(first), n, chunk):
            if start + chunk < n:
                self.prefetch(np.arange(start + chunk, min(start + 2 * chunk, n)))
            out[start : start + chunk] = self[np.arange(start, min(start + chunk, n))]
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class HeldRows(TokenRows):
    """Rows of an :class:`AbilityFeatures`' held tokens, gathered where they are held (on the GPU or in host memory)
    in their storage precision, then moved to ``device`` and cast to float32: the same numbers as
    :meth:`AbilityFeatures.read`, without its float32 copy on the host (a GPU-held set never leaves the GPU; host rows
    for a GPU are gathered into a pinned buffer and copied asynchronously)."""

    features: Any = None
    slots: Any = None  # long tensor: the held row of each sample, on the held tensors' device

    def gather(self, index: np.ndarray) -> torch.Tensor:
        import torch

        held = [self.features.tokens(layer) for layer in self.layers]
        positions = torch.from_numpy(index)  # (int64: TokenRows.__getitem__)
        if self.slots.device.type == "cuda":  # from pinned memory, not waiting: a plain copy to a GPU waits for the
            positions = positions.pin_memory()  # work queued there (every probe step's, rows gathered batch by batch)
        where = self.slots.index_select(0, positions.to(self.slots.device, non_blocking=True))
        to_gpu = str(self.device).startswith("cuda")  # host -> GPU copies may overlap; copies to the host may not

        def take(t: torch.Tensor) -> torch.Tensor:
            if to_gpu and t.device.type == "cpu":  # gathered into pinned memory: an async copy
                rows = torch.empty((len(where), *t.shape[1:]), dtype=t.dtype, pin_memory=True)
                rows = torch.index_select(t, 0, where, out=rows)
            else:
                rows = t.index_select(0, where)
            return rows.to(self.device, non_blocking=to_gpu)

        parts = []
        for t in held:  # (held codes: the codes move, and are decoded on ``device``)
            parts.append(
                t.codec.decode_device(take(t.values), take(t.scales)) if isinstance(t, CodedTokens) else take(t).float()
            )
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)


@dataclasses.dataclass(frozen=True, eq=False)
class CacheRows(TokenRows):
    """Rows read from a feature cache batch by batch (a cache that is not an :class:`AbilityFeatures`, or an ability
    streamed because it fits in no memory). :meth:`prefetch` reads the next batch on a background thread while the
    caller computes on this one."""

    cache: Any = None
    _ahead: dict[bytes, Any] = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def _read(self, index: np.ndarray) -> torch.Tensor:
        import torch

        rows = read_layers(self.cache, [self.samples[i] for i in index], self.layers, False)
        return torch.from_numpy(rows)

    def gather(self, index: np.ndarray) -> torch.Tensor:
        pending = self._ahead.pop(index.tobytes(), None)
        rows = pending.result() if pending is not None else self._read(index)
        return rows.to(self.device)

    def prefetch(self, index: np.ndarray) -> None:
        index = np.asarray(index, dtype=np.int64)
        for key in [k for k in self._ahead if k != index.tobytes()]:  # at most one batch read ahead
            self._ahead.pop(key).cancel()
        if index.tobytes() not in self._ahead:
            self._ahead[index.tobytes()] = _read_ahead().submit(self._read, index)


_POOL: list[Any] = []


def _read_ahead() -> Any:
    """The one background thread that reads batches ahead (made on first use)."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="ava-read-ahead"))
    return _POOL[0]
