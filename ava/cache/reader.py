"""Reading the feature cache: ``open_cache`` -> ``FeatureCache`` (rows by image sha256) and a torch
``FeatureDataset`` that joins samples with cache rows.

Reads touch only the requested rows: with one image per chunk, Zarr fetches each row's byte range from
its shard file. Nothing opens a whole array. Zarr handles are opened lazily in each process, so a
``FeatureDataset`` decodes in DataLoader workers.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from ava.cache.chunks import array_files, read_rows
from ava.cache.location import CachePath, cache_path, is_remote, outages_named, probe
from ava.cache.store import CacheError, CacheGroup, lost_groups_note, open_groups
from ava.errors import AvaError


@outages_named(lambda group, *_, **__: group.path)
def _read_rows(group: CacheGroup, name: str, rows: np.ndarray) -> np.ndarray:
    """Rows (sorted, unique) of array ``name``, one slice per run of consecutive rows, each checked to be on disk
    (:func:`ava.cache.chunks.read_rows`). Zarr 3.1's integer-array (orthogonal) selection is ~6x slower than slices on
    sharded arrays, so it is not used."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if not len(breaks):
        return read_rows(group, name, int(rows[0]), int(rows[-1]) + 1)
    arr = group.array(name)
    out = np.empty((len(rows), *arr.shape[1:]), dtype=arr.dtype)  # each run read into its place: no joining copy
    for run, at in zip(np.split(rows, breaks), [0, *breaks.tolist()], strict=True):
        read_rows(group, name, int(run[0]), int(run[-1]) + 1, out=out[at : at + len(run)])
    return out


def as_tensor(array: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
    """A stored array as a torch tensor on ``device`` (bf16's raw ``uint16`` bits as ``int16``: the same bits, in a
    type every torch operation takes), for :meth:`ava.cache.codecs.Codec.decode_device`."""
    if array.dtype == np.uint16:
        array = array.view(np.int16)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=False)


class FeatureCache:
    """The features of one cache group (one VFM under one spec), addressed by image sha256."""

    def __init__(self, group: CacheGroup) -> None:
        self.group = group
        self.key = group.key
        spec = group.spec
        self.identity: dict[str, Any] = spec["identity"]
        self.spec = spec
        self.vfm: str = spec["vfm"]
        self.random_weights: bool = bool(spec.get("random_weights", False))
        self.num_tokens: int = group.num_tokens
        self.dim: int = group.dim
        self.layers: tuple[int, ...] = group.layers
        self.grid: tuple[int, int] = tuple(spec.get("grid") or (0, 0))  # type: ignore[assignment]
        self._done: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"FeatureCache({self.group.path}, vfm={self.vfm!r}, key={self.key!r}, codec={self.spec['codec']!r})"

    @property
    def done(self) -> np.ndarray:
        if self._done is None:
            self._done = self.group.done_mask()
        return self._done

    def has(self, sha256: str) -> bool:
        row = self.group.index().get(sha256)
        return row is not None and bool(self.done[row])

    def missing(self, sha256s: list[str]) -> list[str]:
        return [s for s in sha256s if not self.has(s)]

    def _layer(self, layer: int | None) -> int:
        if layer is None:
            return self.layers[0]
        if layer not in self.layers:
            raise AvaError(
                f"layer {layer} is not in cache {self.key} (layers {list(self.layers)}); "
                f"extract it with `ava cache extract --vfm {self.vfm} --layers {layer} ...`"
            )
        return layer

    def _rows(self, sha256s: list[str]) -> np.ndarray:
        index = self.group.index()
        rows = []
        for sha in sha256s:
            row = index.get(sha)
            if row is None or not self.done[row]:
                raise CacheError(
                    f"image {sha} is not in cache {self.group.path} (vfm {self.vfm}); "
                    f"run `ava cache extract --vfm {self.vfm} --data DIR --cache {self.group.path.parent}`"
                )
            rows.append(row)
        return np.asarray(rows, dtype=np.int64)

    def read(self, sha256s: list[str], layer: int | None = None) -> np.ndarray:
        """Features ``[B, T, D]`` float32 of the given images, in the order given."""
        if not len(sha256s):
            self._layer(layer)
            return np.zeros((0, self.num_tokens, self.dim), dtype=np.float32)
        values, scale = self.read_stored(sha256s, layer)
        return self.group.codec.decode(values, scale)

    def read_stored(self, sha256s: list[str], layer: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored arrays of the given images, in the order given: (values, scales or None), as the codec keeps
        them (``codec.decode`` or ``codec.decode_device`` makes float32 features of them, on the host or where the
        caller holds them)."""
        layer = self._layer(layer)
        rows = self._rows(list(sha256s))
        codec = self.group.codec
        if len(rows) == 0:
            values = np.zeros((0, *codec.value_shape(self.num_tokens, self.dim)), dtype=codec.storage_dtype)
            shape = codec.scale_shape(self.num_tokens, self.dim)
            return values, None if shape is None else np.zeros((0, *shape), dtype=codec.scale_dtype)
        uniq, inverse = np.unique(rows, return_inverse=True)
        ordered = np.array_equal(uniq, rows)  # in row order already (a fingerprint's usual case): no reordering copy
        values = _read_rows(self.group, f"features/{layer}", uniq)
        scale = _read_rows(self.group, f"scales/{layer}", uniq) if codec.has_scale else None
        if ordered:
            return values, scale
        return values[inverse], None if scale is None else scale[inverse]

    def read_pooled(self, sha256s: list[str], layer: int | None = None) -> np.ndarray:
        """Mean over tokens ``[B, D]`` float32 (the stored ``mean`` view when the group has it)."""
        if "mean" in self.views:
            return self.read_view(sha256s, layer, "mean")
        return self.read(sha256s, layer).mean(axis=1)

    @property
    def views(self) -> tuple[str, ...]:
        """Pooled views stored beside the tokens (``ava.cache.pooling``; none in groups made before them)."""
        return self.group.views

    def read_view(self, sha256s: list[str], layer: int | None, view: str) -> np.ndarray:
        """A stored pooled view ``[B, D']`` float32 of the given images, in the order given."""
        if view not in self.views:
            raise AvaError(f"cache {self.key} stores no pooled view {view!r} (stored: {list(self.views) or 'none'})")
        layer = self._layer(layer)
        rows = self._rows(list(sha256s))
        if len(rows) == 0:
            return np.zeros((0, self.group.pooled(layer, view).shape[1]), dtype=np.float32)
        uniq, inverse = np.unique(rows, return_inverse=True)
        values = np.asarray(_read_rows(self.group, f"pooled/{layer}/{view}", uniq), dtype=np.float32)
        return values if np.array_equal(uniq, rows) else values[inverse]  # (in row order already: no copy)


def _describe(group: CacheGroup) -> str:
    s = group.spec
    return f"{group.key} (vfm {s['vfm']}, codec {s['codec']}, dtype {s['dtype']}, layers {s['layers']})"


def _matches(group: CacheGroup, vfm: str) -> bool:
    names = set(group.names())
    if vfm in names:
        return True
    try:
        from ava.vfm import VFMS

        return VFMS.canonical(vfm) in names
    except (AvaError, ImportError, AttributeError):
        return False


@outages_named(lambda cache_dir, *_, **__: cache_dir)
def open_cache(cache_dir: str | os.PathLike[str] | CachePath, vfm: str, *, key: str | None = None) -> FeatureCache:
    """The cache group of ``vfm`` in ``cache_dir``; ``key`` picks one when several specs are stored."""
    cache_dir = cache_path(cache_dir)
    hint = f"`ava cache extract --vfm {vfm} --data DIR --cache {cache_dir}`"
    if not (cache_dir / "zarr.json").is_file():
        probe(cache_dir, write=False)  # an unreachable store or refused credentials: said as such
        raise CacheError(f"{cache_dir} holds no feature cache; make it with {hint}")
    groups = open_groups(cache_dir)
    if key is not None:
        chosen = [g for g in groups if g.key == key]
        if not chosen:
            raise CacheError(f"{cache_dir}: no cache group {key!r}; groups: {', '.join(map(_describe, groups))}")
        if not _matches(chosen[0], vfm):
            raise CacheError(f"{cache_dir}: group {key!r} holds vfm {chosen[0].spec['vfm']!r}, not {vfm!r}")
        return FeatureCache(chosen[0])
    chosen = [g for g in groups if _matches(g, vfm)]
    if not chosen:
        known = ", ".join(map(_describe, groups)) or "none"
        raise CacheError(
            f"{cache_dir}: no features of vfm {vfm!r} (groups: {known}){lost_groups_note(cache_dir)}; run {hint}"
        )
    if len(chosen) > 1:
        raise CacheError(
            f"{cache_dir}: several cache groups hold vfm {vfm!r}: "
            f"{'; '.join(map(_describe, chosen))}. Keep one spec per --cache directory, "
            "or open it with open_cache(..., key=KEY)"
        )
    return FeatureCache(chosen[0])


class FeatureDataset(torch.utils.data.Dataset):
    """Samples joined with their cache rows; item ``{"features": Tensor[T, D] float32, "index": i}``.

    ``index`` is the position in ``samples``, so a training loop gets the sample's fields from there.
    Every sample must be in the cache: missing ones are refused up front, naming them.
    """

    def __init__(self, cache: FeatureCache, samples: list[Any], layer: int | None = None) -> None:
        self.cache, self.samples, self.layer = cache, list(samples), cache._layer(layer)
        self.sha256s = [s.image_sha256 for s in self.samples]
        missing = [s for s, sha in zip(self.samples, self.sha256s, strict=True) if not cache.has(sha)]
        if missing:
            ids = ", ".join(f"{s.ava}/{s.id}" for s in missing[:5])
            raise CacheError(
                f"{len(missing)} of {len(self.samples)} samples have no features in cache "
                f"{cache.key} (vfm {cache.vfm}), e.g. {ids}; run `ava cache extract --vfm {cache.vfm} "
                f"--data DIR --cache {cache.group.path.parent}`"
            )

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        feats = self.cache.read([self.sha256s[i]], self.layer)[0]
        return {"features": torch.from_numpy(feats), "index": i}

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """A whole batch in one read (the DataLoader calls this when it exists): ~9x faster than row by row."""
        feats = self.cache.read([self.sha256s[i] for i in indices], self.layer)
        return [{"features": torch.from_numpy(f), "index": i} for f, i in zip(feats, indices, strict=True)]


# -- the whole of a run's rows, resident in memory ----------------------------------------------------------------
def _half_dtype(cache: FeatureCache) -> torch.dtype:
    """bf16 for bf16-coded caches (fp16 could overflow them), fp16 otherwise (exact for fp16, finer than int8)."""
    return torch.bfloat16 if cache.spec.get("codec") == "bf16" else torch.float16


def _runs(rows: np.ndarray, chunk: int) -> list[tuple[int, int, int]]:
    """(first row, end row, slot of the first row) of each run of consecutive rows, cut at ``chunk`` rows."""
    out = []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    slot = 0
    for run in np.split(rows, breaks):
        for a in range(0, len(run), chunk):
            piece = run[a : a + chunk]
            out.append((int(piece[0]), int(piece[-1]) + 1, slot))
            slot += len(piece)
    return out


def read_threads() -> int:
    """Reader threads of a local token read: one per core this process may use, 2 to 8. Each thread reads, checks
    and decompresses its own rows (:func:`ava.cache.shards.decode_shard`: ~1.2 ms of CPU per SigLIP-sized row, in no
    shared thread), so the reads scale with the cores up to the disk's speed."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (macOS, Windows)
        cores = os.cpu_count() or 2
    return max(2, min(8, cores))


REMOTE_READ_THREADS = 2  # runs of rows read at once from object storage (I/O overlaps through read-ahead blocks)


def _finite_rows(values: torch.Tensor) -> np.ndarray:
    """Which rows of ``values`` hold only finite numbers, on the host (:func:`ava.vfm.feature_check.finite_rows`)."""
    from ava.vfm.feature_check import finite_rows

    return finite_rows(values).cpu().numpy()


def _print_throughput(group: CacheGroup, name: str, rows: int, nbytes: int, seconds: float) -> None:
    """One line on stderr: how fast rows came from object storage (the figure that says whether the network or the
    store is the bottleneck of a run)."""
    import sys

    rate = nbytes / 1e6 / max(seconds, 1e-9)
    from ava.cache.location import READ_AHEAD, READ_BLOCK

    print(
        f"read {rows} rows of {name} from {group.path} in {seconds:.2f} s ({rate:.1f} MB/s decoded; "
        f"{REMOTE_READ_THREADS} runs at once, {READ_BLOCK >> 20} MB range reads, {READ_AHEAD} ahead)",
        file=sys.stderr,
    )


class ResidentFeatures:
    """The cached features of a list of images, read once and kept in half precision where the compute is.

    All rows are read in one sequential pass over the group (runs of consecutive rows, each read, decompressed and
    checked by one of :func:`read_threads` background threads while the caller goes on, e.g. loading the LLM,
    straight into the held tensor where it is in host memory), checked for NaN/inf once, and stored as one tensor
    ``[U, T, D]`` (U unique images): on ``device`` when it fits in half of the free device memory, else in
    host memory (copied to the device batch by batch); on a CPU run, host memory. :meth:`gather` returns a batch's
    features by position in ``sha256s`` with no host work and no sync.

    ``held`` (:data:`~ava.cache.placement.ON_DEVICE` or :data:`~ava.cache.placement.HOST`) says where instead, for a
    caller that placed the rows itself: they are read straight there (on the device, chunk by chunk), never held
    twice. Host rows are never pinned whole (see :mod:`ava.cache.placement`): a gather for a GPU stages its batch.

    ``names`` (same length as ``sha256s``) name the samples in errors. :meth:`wait` re-raises a failed read.
    """

    ring = 2  # preallocated output buffers per batch size of ``gather(..., reuse=True)``

    def __init__(
        self,
        cache: FeatureCache,
        sha256s: list[str],
        layer: int | None = None,
        *,
        device: torch.device | str = "cpu",
        names: list[str] | None = None,
        chunk_rows: int = 64,
        threads: int | None = None,
        held: str | None = None,
    ) -> None:
        import threading

        self.cache, self.layer = cache, cache._layer(layer)
        from ava.cache.placement import HOST, ON_DEVICE, concrete_device

        if held not in (None, ON_DEVICE, HOST):
            raise ValueError(f"held={held!r}: {ON_DEVICE!r} or {HOST!r} (or None: chosen here)")
        self.device = concrete_device(device)  # "cuda" -> "cuda:0": compared with the held tensor's device below
        self.dtype = _half_dtype(cache)
        self.names = names or list(sha256s)
        rows = cache._rows(list(sha256s))  # refuses images that are not in the cache
        self.uniq, inverse = np.unique(rows, return_inverse=True)
        self.shas = list(sha256s)
        self.num_tokens, self.dim = cache.num_tokens, cache.dim
        self.nbytes = len(self.uniq) * self.num_tokens * self.dim * 2
        self.where = self._placement() if held is None else self.device if held == ON_DEVICE else torch.device("cpu")
        self.rows = torch.from_numpy(inverse.astype(np.int64).reshape(-1)).to(self.where)
        self.values: torch.Tensor | None = None
        self._error: BaseException | None = None
        self._chunk, self._threads = chunk_rows, threads or read_threads()
        self.seconds: float | None = None  # how long the read took, once done
        # seconds summed over the reader threads, by phase: reading and decoding the stored rows on the host
        # ("read"), checking them for NaN/inf ("check"), copying them to the GPU ("copy"); for benchmarks
        self.phases: dict[str, float] = {"read": 0.0, "check": 0.0, "copy": 0.0}
        self._rings: dict[int, tuple[list[list[Any]], list[int]]] = {}
        self._thread = threading.Thread(target=self._load_safely, name="ava-features", daemon=True)
        self._thread.start()

    def _placement(self) -> torch.device:
        """The device when the rows fit in half of its free memory (the caching allocator's unused bytes counted,
        :func:`ava.cache.placement.device_free_bytes`), else host memory."""
        if self.device.type != "cuda":
            return torch.device("cpu")
        from ava.cache.placement import device_free_bytes

        return self.device if self.nbytes <= device_free_bytes(str(self.device)) // 2 else torch.device("cpu")

    def _load_safely(self) -> None:
        try:
            self.values = self._load()
        except BaseException as e:  # re-raised in the caller's thread by wait()
            self._error = e

    def _load(self) -> torch.Tensor:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        from ava.cache.placement import held_empty, staging_array

        out = held_empty((len(self.uniq), self.num_tokens, self.dim), self.dtype, self.where)
        # rows for a GPU go there on a stream of their own: a read ahead (ava.heads.features.read_ahead) copies while
        # the heads' kernels run, not queued between them on the default stream; that stream waits first for the
        # default stream's work (the held tensor's memory may have been freed by work still queued there), and the
        # read waits for it at the end, so the rows are complete when wait() returns them
        stream = torch.cuda.Stream(self.where) if self.where.type == "cuda" else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(self.where))
        group = self.cache.group
        codec = group.codec
        values_name, scales_name = f"features/{self.layer}", f"scales/{self.layer}" if codec.has_scale else None
        bad: list[tuple[int, str]] = []
        spans: list[tuple[float, float, float]] = []  # each run's (read, check, copy) seconds: :attr:`phases`
        staged: dict[tuple[int, str], np.ndarray] = {}  # (reader thread, array): a run's stored rows, reused
        rows_of = {
            name: (group.array(name).shape[1:], group.array(name).dtype)
            for name in filter(None, (values_name, scales_name))
        }

        def staging(name: str, lo: int, hi: int) -> np.ndarray:
            """This thread's buffer for rows ``lo:hi`` of array ``name`` on the host, reused run after run (a
            fresh one was a fresh allocation, every 4 KB page of it faulted in by the kernel); pinned where the rows
            are held on a GPU, which copies them from it. Dropped with the read."""
            key = (threading.get_ident(), name)
            if key not in staged:
                shape, dtype = rows_of[name]
                staged[key] = staging_array((self._chunk, *shape), dtype, pinned=self.where.type == "cuda")
            return staged[key][: hi - lo]

        def piece(job: tuple[int, int, int]) -> list[tuple[int, str]]:
            """Rows ``lo:hi`` into ``out[slot:]``, checked, in a worker thread (the copy too: one thread copying
            every row was the read's ceiling, 1 ms per SigLIP-sized row); returns the rows at fault."""
            if stream is None:
                return piece_here(job)
            with torch.cuda.stream(stream):
                return piece_here(job)

        def piece_here(job: tuple[int, int, int]) -> list[tuple[int, str]]:
            lo, hi, slot = job
            target = out[slot : slot + hi - lo]
            t0 = time.perf_counter()
            if codec.storage_dtype == "float16" and self.dtype == torch.float16:  # stored as is: no round trip
                into = target.numpy() if target.device.type == "cpu" else staging(values_name, lo, hi)
                half = torch.from_numpy(read_rows(group, values_name, lo, hi, out=into))  # (held rows: in place)
                t1 = time.perf_counter()
                if half.data_ptr() != target.data_ptr():  # rows for the GPU: checked there, after the copy (two
                    target.copy_(half)  # reductions over every byte, on the host's cores, for a GPU's microseconds)
                    t2 = time.perf_counter()
                    finite = fits = _finite_rows(target)
                    t3 = time.perf_counter()
                else:
                    t2 = t1
                    finite = fits = _finite_rows(half)
                    t3 = time.perf_counter()
                spans.append((t1 - t0, t3 - t2, t2 - t1))  # (list.append: one at a time across the threads)
            else:  # decoded where the rows are held (on the GPU: the host only reads the compressed bytes)
                # refuses rows not on disk or damaged, naming them
                raw = read_rows(group, values_name, lo, hi, out=staging(values_name, lo, hi))
                scales = (
                    read_rows(group, scales_name, lo, hi, out=staging(scales_name, lo, hi)) if scales_name else None
                )
                spans.append((time.perf_counter() - t0, 0.0, 0.0))
                values = codec.decode_device(
                    as_tensor(raw, self.where), None if scales is None else as_tensor(scales, self.where)
                )
                finite = _finite_rows(values)
                half = values.to(self.dtype)
                fits = _finite_rows(half)
                if half.data_ptr() != target.data_ptr():
                    target.copy_(half)
            errs = [(slot + i, "NaN or inf") for i in np.flatnonzero(~finite)]
            errs += [(slot + i, f"values beyond the {self.dtype} range") for i in np.flatnonzero(finite & ~fits)]
            return errs

        remote = is_remote(group.path)
        t0 = time.perf_counter()
        for name in filter(None, (values_name, scales_name)):  # opened once, before the threads share them (one
            array_files(group, name)  # listing, and in object storage one store whose blocks every thread reads)
        # in object storage each run is a few ranged GETs that wait on the network: many in flight at once
        with ThreadPoolExecutor(REMOTE_READ_THREADS if remote else self._threads) as pool:
            for errs in pool.map(piece, _runs(self.uniq, self._chunk)):
                bad.extend(errs)
        if stream is not None:
            stream.synchronize()
        self.seconds = time.perf_counter() - t0
        self.phases = {name: float(sum(span[i] for span in spans)) for i, name in enumerate(("read", "check", "copy"))}
        if bad:
            self._refuse(bad)
        if remote:
            _print_throughput(group, values_name, len(self.uniq), self.nbytes, self.seconds)
        return out

    def _refuse(self, bad: list[tuple[int, str]]) -> None:
        slots = {s for s, _ in bad}
        rows = self.rows.cpu().numpy()
        named = [n for n, r in zip(self.names, rows, strict=True) if int(r) in slots]
        what = sorted({w for _, w in bad})
        raise CacheError(
            f"{len(named)} sample(s) have non-finite cached features ({', '.join(what)}) in cache "
            f"{self.cache.group.path} (vfm {self.cache.vfm}, layer {self.layer}): "
            f"{', '.join(named[:8])}{' ...' if len(named) > 8 else ''}; remove the group (`ava cache rm "
            f"{self.cache.group.path.parent} {self.cache.key}`) and extract it again, or leave them out"
        )

    @outages_named(lambda self: self.cache.group.path)
    def wait(self) -> torch.Tensor:
        """The resident tensor ``[U, T, D]``, once read (raises the reader's error, e.g. non-finite rows)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self.values is not None
        return self.values

    def gather(self, index: torch.Tensor, *, reuse: bool = False) -> torch.Tensor:
        """Features ``[B, T, D]`` (half precision, on the device) of the samples at positions ``index`` (a host
        tensor where the rows are held in host memory, else the device reads it back: a sync).

        ``reuse``: write into one of :attr:`ring` preallocated buffers per batch size, in turn, instead of a new
        tensor (no allocation, no page faults on a CPU; on CUDA with host-resident rows, the rows are gathered
        straight into a pinned buffer and copied asynchronously). The result is then overwritten ``ring`` gathers
        later: for a consumer that is done with a batch's features before then (the training loop projects them at
        once).
        """
        values = self.wait()
        if values.device == self.device:  # resident where the compute is: one index_select, on the device
            rows = self.rows.index_select(0, index.to(self.device, non_blocking=True))
            if not reuse:
                return values.index_select(0, rows)
            return torch.index_select(values, 0, rows, out=self._buffer(len(rows), self.device))
        rows = self.rows.index_select(0, index.cpu())  # host rows, CUDA compute (give a host index: no sync)
        if not reuse:
            return values.index_select(0, rows).pin_memory().to(self.device, non_blocking=True)
        slot = self._slot(len(rows))
        stage, dev, done = slot
        if done is not None:
            done.synchronize()  # (the copy out of this staging buffer, ``ring`` gathers ago: long finished)
        torch.index_select(values, 0, rows, out=stage)
        dev.copy_(stage, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        slot[2] = event
        return dev

    def _buffer(self, b: int, device: torch.device) -> torch.Tensor:
        return self._slot(b, device)[0]

    def _slot(self, b: int, device: torch.device | None = None) -> list[Any]:
        """The next of :attr:`ring` buffers for batch size ``b``: [target or pinned staging, device copy, event]."""
        if b not in self._rings:
            shape, pin = (b, self.num_tokens, self.dim), self.device.type == "cuda" and self.where.type == "cpu"
            slots = []
            for _ in range(self.ring):
                if pin:
                    slots.append(
                        [
                            torch.empty(shape, dtype=self.dtype, pin_memory=True),
                            torch.empty(shape, dtype=self.dtype, device=self.device),
                            None,
                        ]
                    )
                else:
                    slots.append([torch.empty(shape, dtype=self.dtype, device=device or self.where), None, None])
            self._rings[b] = (slots, [0])
        slots, turn = self._rings[b]
        turn[0] = (turn[0] + 1) % len(slots)
        return slots[turn[0]]
