"""`ava cache extract`: compute frozen-VFM features of a dataset's images once, store them compressed.

The pipeline overlaps three stages: DataLoader workers decode and preprocess images (through
``FrozenVFM.preprocess_fn()``, the one preprocessing function shared with the online path), the main thread
runs the forward pass (no grad, in the model's dtype on every device), encodes with the codec and, on a GPU, pools
the stored views there, and writer threads each encode whole shards (the views of a CPU run, compression and
checksums, in the thread, as Zarr would: :mod:`ava.cache.shards`), store each file in one write and then mark their
rows done. Re-running skips done rows; a kill loses at most the shards in flight.

Under ``torchrun`` rank 0 indexes the new images (rows in dataset order, see :mod:`ava.cache.store`) and
grows the store, every rank reads that index, and rank r writes the shards ``s`` with ``s % world_size == r``:
whole shards, so no two processes ever write the same shard file, and batches never cross a shard boundary,
so the bytes are the same as those of a single-process run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ava.cache.chunks import read_rows
from ava.cache.codecs import get_codec
from ava.cache.location import cache_path, outages_named, probe
from ava.cache.pooling import STORED_VIEWS, pool_candidates, pool_tokens, pool_tokens_torch, token_grid
from ava.cache.shards import remove_partials, write_file
from ava.cache.store import (
    FORMAT_NAME,
    FORMAT_VERSION,
    CacheGroup,
    add_rows,
    create_group,
    default_shard_size,
)
from ava.data.format import SPLITS, Dataset
from ava.errors import AvaError
from ava.vfm.device_decode import JPEG_SUFFIXES, decode_padded, jpeg_decoder, raw_pad_size, read_bytes
from ava.vfm.feature_check import check_features
from ava.vfm.model import resolve_device as _resolve_device
from ava.vfm.model import resolve_dtype


@dataclass
class ExtractConfig:
    """What to extract: the VFM, the data (optionally some abilities / one split), where, and how."""

    vfm: str
    data: str
    cache: str
    ava: list[str] | None = None
    split: str | None = None
    codec: str = "fp16"
    layers: tuple[int, ...] = (-2,)
    batch_size: int = 32
    device: str = "auto"
    dtype: str = "auto"  # auto: bf16 on CUDA (tensor cores), fp32 on CPU; the spec records the resolved dtype
    num_workers: int | None = None  # None: sized to the machine (see default_workers)
    preprocess: str = "pad"
    progress: bool = True
    writers: int | None = None  # threads compressing and writing shards (None: see default_writers)
    shard_size: int | None = None  # images per shard: the unit of writing, resuming and rank ownership (None: 64 on
    # a local disk, ~64 MB of tokens in object storage, see ava.cache.store.default_shard_size)
    key: str | None = None  # a fixed group name instead of the spec hash (refused if its spec differs)
    views: tuple[str, ...] = STORED_VIEWS  # pooled views stored beside the tokens (those the token grid takes)
    trust_remote_code: bool = False  # run the checkpoint's own Python code (only when asked; see ava.vfm.remote)
    # where JPEGs are decoded: "auto" (on the VFM's GPU where torchvision can, else the workers), "workers", "device"
    decode: str = "auto"
    dry_run: bool = False  # print the plan (group, rows, bytes, free space) and write nothing (ava.cache.plan)
    force: bool = False  # write even when the plan's size exceeds the destination's free space


DECODE_CHOICES = ("auto", "workers", "device")


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def share(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.initialized_here:
            torch.distributed.destroy_process_group()


def _init_dist(cuda: bool) -> _Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    import torch.distributed as dist

    here, local_rank = False, int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)  # NCCL collectives use the current device
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
        here = True
    return _Dist(dist.get_rank(), dist.get_world_size(), local_rank, here)


def forward_dtype(dtype: str, device: torch.device) -> str:
    """``"auto"`` -> ``"bf16"`` on CUDA, ``"fp32"`` elsewhere (CPUs have no fast bf16 matmul to speak of)."""
    if dtype == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return dtype


def default_workers(device: torch.device) -> int:
    """DataLoader workers decoding images when none are asked for. On a GPU the forward needs no CPU, so every core
    but one (for the main loop) decodes, up to 8 per process; on a CPU the forward uses the cores itself, so one
    worker in four cores decodes (none on a single core: a worker would only take turns with the forward)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if device.type == "cuda":
        per_gpu = max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1
        return max(1, min(8, (cpus - 1) // per_gpu))
    return max(0, min(4, cpus // 4)) if cpus > 2 else (1 if cpus == 2 else 0)


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """:func:`ava.vfm.model.resolve_device`, with a bare ``cuda`` (or ``auto`` on a GPU machine) meaning this
    process's GPU under torchrun (``cuda:LOCAL_RANK``)."""
    dev = _resolve_device(device)
    return torch.device("cuda", local_rank) if dev.type == "cuda" and dev.index is None else dev


@dataclass
class _Image:
    path: str
    sample_ids: list[str] = field(default_factory=list)


def collect_images(data: str | os.PathLike[str], ava: list[str] | None, split: str | None) -> dict[str, _Image]:
    """The distinct images (by sha256) of the selected samples, with the ids of the samples using each."""
    if split is not None and split not in SPLITS:
        raise AvaError(f"--split {split!r}: must be one of {', '.join(SPLITS)}")
    ds = Dataset(data)
    if ava:
        from ava.abilities import ABILITIES

        # a sample file that is not an ability (``captions``, see ava/heads/llm/align.py) is taken as named
        ava = [a if a not in ABILITIES and ds.has_samples(a) else ABILITIES.canonical(a) for a in ava]
    images: dict[str, _Image] = {}
    for s in ds.samples(ava, split):
        images.setdefault(s.image_sha256, _Image(s.image)).sample_ids.append(f"{s.ava}/{s.id}")
    if not images:
        raise AvaError(f"{data}: no samples match --ava {ava or 'all'} --split {split or 'any'}")
    return images


def build_spec(vfm: Any, name: str, config: ExtractConfig) -> dict[str, Any]:
    """The resolved spec stored in the group's attrs; its key fields define the cache key."""
    ident = vfm.identity()
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "vfm": name,  # names (not part of the key): the resolved one and the one the user gave (alias, hf:...)
        "requested": config.vfm,
        "identity": ident,  # with the codec and format version: the key (``KEY_FIELDS``)
        "codec": config.codec,
        **get_codec(config.codec).spec_fields(),  # int4: its group size
        "preprocess": ident["preprocess"],  # copies of identity fields, for listings and readers
        "layers": [int(la) for la in vfm.layers],
        "dtype": config.dtype,  # resolved by extract() ("auto" never reaches the spec)
        "num_tokens": int(vfm.num_tokens),
        "dim": int(vfm.dim),
        "grid": [int(g) for g in vfm.grid],
        "random_weights": bool(vfm.random_weights),
        # pooled views stored beside the tokens (not part of the key): those the token layout takes
        "views": pool_candidates(vfm, config.views) if config.views else [],
    }


class _ImageSet(torch.utils.data.Dataset):
    """Rows to compute; an item is (row, preprocessed tensor or None, error message or None, a JPEG file's bytes or
    None). With ``jpeg_bytes`` a JPEG is not decoded here: its bytes go to the device decoder
    (:mod:`ava.vfm.device_decode`); other files are decoded as always."""

    def __init__(
        self, data: Dataset, items: list[tuple[int, _Image]], preprocess: Any, jpeg_bytes: bool = False
    ) -> None:
        self.data, self.items, self.preprocess, self.jpeg_bytes = data, items, preprocess, jpeg_bytes

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor | None, str | None, torch.Tensor | None]:
        row, img = self.items[i]
        try:
            if self.jpeg_bytes and img.path.lower().endswith(JPEG_SUFFIXES):
                return row, None, None, read_bytes(self.data.image_path(img.path))
            return row, self.preprocess(self.data.load_image(img.path)), None, None
        except (MemoryError, OSError):  # not this image's fault (memory, disk, I/O): stops the run, named there
            raise
        except Exception as e:  # any decode/preprocess failure is reported by sample, not fatal
            return row, None, _failed(img, e), None


def _failed(img: _Image, e: BaseException) -> str:
    return f"sample(s) {', '.join(img.sample_ids[:5])}: image {img.path} failed: {e}"


def _worker_preprocess(vfm: Any) -> Any:
    """What the decode workers run: uint8 pixels where the VFM normalizes on its device (``raw``), else its
    float32 preprocessing."""
    import inspect

    if "raw" in inspect.signature(vfm.preprocess_fn).parameters:
        return vfm.preprocess_fn(raw=True)
    return vfm.preprocess_fn()


def _collate(items: list[tuple[int, torch.Tensor | None, str | None, torch.Tensor | None]]) -> dict[str, Any]:
    ok = [(r, x) for r, x, _, _ in items if x is not None]
    return {
        "rows": [r for r, _ in ok],
        "pixels": torch.stack([x for _, x in ok]) if ok else None,
        "jpegs": [(r, j) for r, _, _, j in items if j is not None],  # decoded on the device (_device_pixels)
        "failed": [(r, e) for r, x, e, j in items if x is None and j is None],
    }


def _batches(rows: list[int], shard_size: int, batch_size: int) -> list[list[int]]:
    """Positions into ``rows`` (sorted) grouped in batches that never cross a shard boundary."""
    out: list[list[int]] = []
    for i, row in enumerate(rows):
        if out and len(out[-1]) < batch_size and rows[out[-1][0]] // shard_size == row // shard_size:
            out[-1].append(i)
        else:
            out.append([i])
    return out


class _Writers:
    """Threads writing finished shards in the background (values first, then the done flags of their rows).

    Shards are independent files, and the compressors release the GIL, so several threads compress and write
    side by side. ``busy_s`` (summed over threads) and ``wait_s`` (time the main loop waited for a free slot in the
    queue: the writers' backlog) say whether writing is the bottleneck."""

    def __init__(self, group: CacheGroup, threads: int, nice: int = 0) -> None:
        self.group, self.n, self.nice = group, max(1, threads), nice
        self.jobs: queue.Queue[tuple[int, dict[int, list], Any] | None] = queue.Queue(maxsize=2 * self.n)
        self.error: BaseException | None = None
        self.busy_s = self.wait_s = 0.0
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, daemon=True, name=f"ava-cache-writer-{i}") for i in range(self.n)
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        _lower_priority(self.nice)  # this thread only
        while (job := self.jobs.get()) is not None:
            if self.error is None:
                t0 = time.perf_counter()
                try:
                    write_shard(self.group, *_settled(self.group, *job))
                except BaseException as e:  # re-raised in the main thread
                    self.error = e
                with self._lock:
                    self.busy_s += time.perf_counter() - t0

    def put(self, job: tuple[int, dict[int, list], Any]) -> None:
        self.check()
        t0 = time.perf_counter()
        self.jobs.put(job)
        self.wait_s += time.perf_counter() - t0

    def close(self) -> None:
        """Finish the shards already handed over (even when interrupted), then stop."""
        for _ in self.threads:
            self.jobs.put(None)
        for t in self.threads:
            t.join()

    def check(self) -> None:
        if self.error is not None:
            raise self.error


BACKGROUND_NICE = 10  # niceness added to the decode workers and writer threads of an extraction on the CPU


def background_nice(device: torch.device) -> int:
    """How much lower than the forward pass the decode workers and writer threads run: on the CPU they share the
    cores with the forward, and at equal priority the scheduler lets them take turns with it on its core (measured
    on 2 cores: the main thread spent as long waiting for its core as decoding took);
    at ``BACKGROUND_NICE`` they run on the cores the forward leaves free and yield its core to it. A GPU forward
    needs little CPU, so nothing changes there."""
    return BACKGROUND_NICE if device.type == "cpu" else 0


def _lower_priority(nice: int) -> None:
    """Add ``nice`` to the calling thread's niceness (Linux: per thread; elsewhere the process's, or nothing)."""
    if nice > 0:
        with contextlib.suppress(AttributeError, OSError):  # no os.nice (Windows), or not permitted
            os.nice(nice)


def default_writers(device: torch.device) -> int:
    """Writer threads: compression is ~0.1-1 GB/s per thread, a GPU makes features at up to a few GB/s."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8 if device.type == "cuda" else 2, cpus))


def write_shard(group: CacheGroup, shard: int, results: dict[int, list[tuple[Any, ...]]]) -> None:
    """Write one whole shard: rows already done are kept, new rows replace the rest; then mark done.

    ``results[row]`` holds per layer ``(values, scale or None, {view: pooled row})`` as numpy arrays. Each array's
    file of the shard is encoded in this thread and stored in one write (:mod:`ava.cache.shards`), the ``done``
    chunk last: it commits the shard."""
    if not results:  # every pending image of the shard failed: nothing to write
        return
    rows = group.shard_rows(shard)
    lo, hi = rows.start, rows.stop
    done = np.asarray(read_rows(group, "done", lo, hi, need=np.zeros(hi - lo, bool)), dtype=bool)
    new = np.zeros(hi - lo, dtype=bool)
    new[[r - lo for r in results]] = True
    keep = done & ~new
    for li, layer in enumerate(group.layers):
        _store_rows(group, f"features/{layer}", shard, keep, {r: per[li][0] for r, per in results.items()})
        if group.codec.has_scale:
            _store_rows(group, f"scales/{layer}", shard, keep, {r: per[li][1] for r, per in results.items()})
        for view in group.views:
            _store_rows(
                group, f"pooled/{layer}/{view}", shard, keep, {r: per[li][2][view] for r, per in results.items()}
            )
    if new.any():
        marks = {lo + int(i): True for i in np.flatnonzero(done | new)}
        _store_rows(group, "done", shard, np.zeros(hi - lo, bool), marks)


def _store_rows(group: CacheGroup, name: str, shard: int, keep: np.ndarray, new: dict[int, Any]) -> None:
    """Store array ``name``'s file of ``shard``: the ``new`` rows, the ``keep`` rows as stored (refused, naming
    them, when one is not on disk: rewriting it would store the fill value as a done row), zeros elsewhere."""
    rows = group.shard_rows(shard)
    lo, hi = rows.start, rows.stop
    arr = group.array(name)
    kept = read_rows(group, name, lo, hi, need=keep) if keep.any() else None
    zero = np.zeros(arr.shape[1:], dtype=arr.dtype)
    values = [new[r] if r in new else kept[r - lo] if kept is not None and keep[r - lo] else zero for r in rows]
    encoder = group.encoder(name)
    if encoder is None:  # a layout ava.cache.shards does not write: through Zarr (slower, the same bytes)
        arr[lo:hi] = np.stack(values)
        return
    parts = encoder.shard_parts(values) if encoder.sharded else encoder.chunk_parts(np.stack(values))
    write_file(group.path / name / encoder.key(shard), parts)


def _forward(vfm: Any, pixels: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The VFM's features of a batch; ``FrozenVFM.forward`` casts to the model's dtype (no autocast: the same
    numerics on CPU and GPU)."""
    return vfm(pixels.to(device, non_blocking=True))


class _Rate:
    """Images per second over the whole run, for the progress bar and the summary."""

    def __init__(self) -> None:
        self.start, self.n = time.perf_counter(), 0

    def add(self, n: int) -> float:
        self.n += n
        return self.n / max(time.perf_counter() - self.start, 1e-9)


def _progress(enabled: bool, total: int, done: int) -> Any:
    """The shared progress bar with the extraction rate, and its task."""
    from rich.progress import TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ava.progress import progress

    bar = progress(enabled, TextColumn("{task.fields[rate]:.1f} img/s"), TimeElapsedColumn(), TimeRemainingColumn())
    task = bar.add_task("extract", total=total, completed=done, rate=0.0)
    return bar, task


def _lock_group(group: CacheGroup) -> Any:
    """An exclusive lock on the group for this extraction job (held by rank 0 until it ends; the kernel drops it
    if the job is killed). Two jobs writing one group would overwrite each other's row index.

    DataLoader workers forked while it is held close their copy of the descriptor at start (:func:`_init_worker`), so
    a worker orphaned by a killed job does not keep the group locked.

    In object storage (no ``flock``) the lock is a lease object (:mod:`ava.cache.lease`, which also names a local
    holder's pid)."""
    busy = (
        f"another `ava cache extract` is writing cache group {group.key} ({group.path}); "
        "wait for it to finish, then run this again (it resumes)"
    )
    from ava.cache.lease import claim_group

    return claim_group(group.path, busy)


def _init_worker(fd: int | None, nice: int, worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: lower the worker's priority by ``nice`` (:func:`background_nice`), and close
    its inherited copy of the group lock's descriptor."""
    _lower_priority(nice)
    if fd is not None:
        with contextlib.suppress(OSError):  # not inherited (a spawned worker)
            os.close(fd)


def _prepare(config: ExtractConfig, vfm: Any, name: str, shas: list[str], dist: _Dist) -> tuple[CacheGroup, Any]:
    """Rank 0 opens or creates the group, locks it and indexes new images; every rank then opens the same group.

    Returns the group and the lock (None on other ranks); the caller closes the lock when the job ends."""
    message, key, lock = None, None, None
    if dist.rank == 0:
        try:
            shard_size = config.shard_size or default_shard_size(config.cache, int(vfm.num_tokens), int(vfm.dim))
            group = create_group(config.cache, build_spec(vfm, name, config), key=config.key, shard_size=shard_size)
            lock = _lock_group(group)
            remove_partials(group.path)  # what a job killed mid-write left (this job holds the group now)
            add_rows(group, shas)
            key = group.key
        except AvaError as e:
            message = str(e)
    message, key = dist.share((message, key))
    if message is not None:
        if lock is not None:
            lock.close()
        raise AvaError(message)
    return CacheGroup.open(config.cache, key, writable=True), lock


def _vfm_name(vfm: Any, fallback: str) -> str:
    return str(getattr(vfm.spec, "key", None) or getattr(vfm.spec, "name", None) or fallback)


@outages_named(lambda config, **_: config.cache)
def extract(config: ExtractConfig, *, vfm: Any = None) -> dict[str, Any]:
    """Extract (or finish extracting) the features of the selected images; returns a summary.

    ``summary["failed"]`` lists the images that could not be read (by sample id and file); their rows
    stay not done, so a later run retries them.

    ``vfm``: an in-memory VFM (:func:`ava.vfm.module.vfm_from_module`, or a loaded ``FrozenVFM``) instead of loading
    ``config.vfm``; it runs on its own device and dtype (``config.device``/``dtype``/``layers``/``preprocess`` are
    not used), its identity keys the cache group, and its name is the group's VFM name.
    """
    from ava.vfm import load_vfm

    if vfm is not None:
        return _extract_given(config, vfm)

    if config.dtype != "auto":
        try:
            resolve_dtype(config.dtype)
        except AvaError as e:
            raise AvaError(f"--dtype: {e}") from None
    get_codec(config.codec)  # unknown codec: fail before loading anything
    if config.batch_size < 1:
        raise AvaError(f"--batch-size must be >= 1, got {config.batch_size}")
    images = collect_images(config.data, config.ava, config.split)
    # an unreachable or read-only store: said before the VFM loads (a dry run only reads)
    probe(cache_path(config.cache), write=not config.dry_run)
    want_cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    dist = _init_dist(want_cuda)
    try:
        device = resolve_device(config.device, dist.local_rank)
        config = replace(config, dtype=forward_dtype(config.dtype, device))
        if config.num_workers is None:
            config = replace(config, num_workers=default_workers(device))
        dtype = resolve_dtype(config.dtype)
        vfm = load_vfm(
            config.vfm,
            device=str(device),
            dtype=dtype,
            preprocess=config.preprocess,
            layers=tuple(config.layers),
            trust_remote_code=config.trust_remote_code,
        )
        vfm.eval()
        return _extract_with(config, vfm, images, device, dist)
    finally:
        dist.close()


def _extract_with(
    config: ExtractConfig, vfm: Any, images: dict[str, _Image], device: torch.device, dist: _Dist
) -> dict[str, Any]:
    """Say what will be written and whether it fits (refused when it does not, unless forced; a dry run stops
    there), then open (or create) the VFM's group, lock it on rank 0, and extract the pending rows of ``images``."""
    name = _vfm_name(vfm, config.vfm)
    plan = _plan(config, vfm, name, list(images), dist)
    if config.dry_run:
        return {
            "key": plan["key"],
            "cache": str(config.cache),
            "vfm": plan["vfm"],
            "codec": plan["codec"],
            "images": len(images),
            "already_done": plan["done"],
            "extracted": 0,
            "failed": [],
            "seconds": 0.0,
            "images_per_s": None,
            "dry_run": True,
            "plan": plan,
            "rank": dist.rank,
            "world_size": dist.world,
        }
    group, lock = _prepare(config, vfm, name, list(images), dist)
    with lock if lock is not None else contextlib.nullcontext():  # released as the job ended: done or failed
        summary = _run(config, vfm, group, images, device, dist, None if lock is None else lock.fileno())
        dist.barrier()
    return {**summary, "plan": plan}


def _plan(config: ExtractConfig, vfm: Any, name: str, shas: list[str], dist: _Dist) -> dict[str, Any]:
    """Rank 0's plan of this extraction (:mod:`ava.cache.plan`), printed on stderr with the progress bar's console;
    refused when it does not fit unless ``config.force``. Every rank gets the plan (or the refusal)."""
    from ava.cache.plan import check_space, plan_extract

    message, plan = None, None
    if dist.rank == 0:
        try:
            shard_size = config.shard_size or default_shard_size(config.cache, int(vfm.num_tokens), int(vfm.dim))
            found = plan_extract(
                config.cache, build_spec(vfm, name, config), shas, key=config.key, shard_size=shard_size
            )
            if config.progress and not config.dry_run:  # (a dry run's plan is its result: the caller shows it)
                from rich.console import Console

                Console(stderr=True, highlight=False, soft_wrap=True).print("\n".join(found.lines()))
            plan = found.as_dict()
            if not config.dry_run:
                check_space(found, config.force)
        except AvaError as e:
            message = str(e)
    message, plan = dist.share((message, plan))
    if message is not None:
        raise AvaError(message)
    return plan


def _extract_given(config: ExtractConfig, vfm: Any) -> dict[str, Any]:
    """:func:`extract` with a VFM object given by the caller (nothing is loaded)."""
    if not hasattr(vfm, "identity") or not hasattr(vfm, "preprocess_fn"):
        raise AvaError(
            f"extract(vfm=...): a {type(vfm).__name__} is not a VFM; make one with ava.vfm.module.vfm_from_module"
        )
    get_codec(config.codec)
    if config.batch_size < 1:
        raise AvaError(f"--batch-size must be >= 1, got {config.batch_size}")
    images = collect_images(config.data, config.ava, config.split)
    device = torch.device(vfm.device)
    dist = _init_dist(device.type == "cuda")
    try:
        dtype = str(getattr(vfm, "dtype", torch.float32)).removeprefix("torch.")
        config = replace(
            config,
            vfm=config.vfm or _vfm_name(vfm, "module"),
            dtype=dtype,
            device=str(device),
            num_workers=default_workers(device) if config.num_workers is None else config.num_workers,
        )
        return _extract_with(config, vfm, images, device, dist)
    finally:
        dist.close()


def _pending(group: CacheGroup, images: dict[str, _Image], dist: _Dist) -> tuple[list[int], int]:
    """Rows of the selected images that this rank must compute, and how many selected rows are done."""
    index, done = group.index(), group.done_mask()
    rows = sorted(index[sha] for sha in images)
    todo = [r for r in rows if not done[r] and (r // group.shard_size) % dist.world == dist.rank]
    return todo, int(done[rows].sum())


def _decoder(config: ExtractConfig, vfm: Any, device: torch.device) -> tuple[Any, int, str]:
    """(the device's JPEG decoder or None, the pad square's side, the words the run records about where JPEGs are
    decoded): on the VFM's GPU where ``--decode`` allows it, the preprocessing is the plain ``pad`` one and
    torchvision decodes there (:mod:`ava.vfm.device_decode`); else in the DataLoader workers."""
    if config.decode not in DECODE_CHOICES:
        raise AvaError(f"--decode {config.decode!r}: use one of {', '.join(DECODE_CHOICES)}")
    if config.decode == "workers":
        return None, 0, "workers (--decode workers)"
    size = raw_pad_size(_worker_preprocess(vfm))
    decode, note = (
        (None, "workers (this VFM's preprocessing is not the plain pad one)") if size is None else jpeg_decoder(device)
    )
    if decode is None and config.decode == "device":
        raise AvaError(f"--decode device: JPEGs cannot be decoded on the device here: {note}; use --decode auto")
    return decode, size or 0, note


def _device_pixels(
    batch: dict[str, Any], decode: Any, size: int, images: dict[int, _Image], device: torch.device
) -> None:
    """Decode the batch's JPEG bytes on the device and put them beside the pixels the workers made (rows after
    theirs, in the same order as ``batch["rows"]``); a file neither decoder reads joins ``batch["failed"]``."""
    if not batch["jpegs"]:
        return
    rows, data = zip(*batch["jpegs"], strict=True)
    decoded, errors = decode_padded(data, size, device, decode)
    ok = [(r, im) for r, im in zip(rows, decoded, strict=True) if im is not None]
    batch["failed"] += [(r, _failed(images[r], e)) for r, e in zip(rows, errors, strict=True) if e is not None]
    if not ok:
        return
    pixels = torch.stack([im for _, im in ok])
    if batch["pixels"] is not None:
        pixels = torch.cat([batch["pixels"].to(device, non_blocking=True), pixels])
    batch["rows"] = batch["rows"] + [r for r, _ in ok]
    batch["pixels"] = pixels


def _loader(
    config: ExtractConfig,
    vfm: Any,
    group: CacheGroup,
    images: dict[str, _Image],
    todo: list[int],
    device: torch.device,
    lock_fd: int | None = None,
    jpeg_bytes: bool = False,
) -> torch.utils.data.DataLoader:
    rows_sha = group.rows()
    items = [(r, images[rows_sha[r]]) for r in todo]
    return torch.utils.data.DataLoader(
        _ImageSet(Dataset(config.data), items, _worker_preprocess(vfm), jpeg_bytes),  # picklable: no model
        batch_sampler=_batches(todo, group.shard_size, config.batch_size),
        num_workers=config.num_workers,
        collate_fn=_collate,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if config.num_workers else None,
        worker_init_fn=functools.partial(_init_worker, lock_fd, background_nice(device)),
    )


def _run(
    config: ExtractConfig,
    vfm: Any,
    group: CacheGroup,
    images: dict[str, _Image],
    device: torch.device,
    dist: _Dist,
    lock_fd: int | None = None,
) -> dict[str, Any]:
    todo, already = _pending(group, images, dist)
    decode, size, decoder = _decoder(config, vfm, device)
    by_row = {group.index()[sha]: img for sha, img in images.items()}
    batches = iter(
        _loader(config, vfm, group, images, todo, device, lock_fd, jpeg_bytes=decode is not None)
    )  # workers fork here, before any thread starts
    remaining: dict[int, set[int]] = {}
    for r in todo:
        remaining.setdefault(r // group.shard_size, set()).add(r)
    writer = _Writers(group, config.writers or default_writers(device), background_nice(device))
    writer.start()
    rate, failed, results, checks = _Rate(), [], {}, {}
    # time the main loop waited for the workers' batches / decoded JPEGs on the device / ran the forward and encoding
    wait_s = device_decode_s = compute_s = 0.0
    steady_from: tuple[float, int] | None = None  # (time, images) once the first batches are through
    progress, task = _progress(config.progress and dist.rank == 0 and len(todo) > 0, len(todo), 0)  # no 0/0 bar
    try:
        with progress:
            t_wait = time.perf_counter()
            for i, batch in enumerate(batches):
                t_got = time.perf_counter()
                wait_s += t_got - t_wait
                if decode is not None:
                    _device_pixels(batch, decode, size, by_row, device)
                t_decoded = time.perf_counter()
                device_decode_s += t_decoded - t_got
                _compute(vfm, group, batch, device, results, checks)
                compute_s += time.perf_counter() - t_decoded
                failed.extend(e for _, e in batch["failed"])
                for r in batch["rows"] + [r for r, _ in batch["failed"]]:
                    shard = r // group.shard_size
                    remaining[shard].discard(r)
                    if not remaining[shard]:  # the shard is complete: hand it to the writers
                        writer.put(_shard_job(group, shard, results, checks))
                n = len(batch["rows"]) + len(batch["failed"])
                progress.update(task, advance=n, rate=rate.add(n))
                if i == 1:  # steady state: after the first two batches (workers started, caches warm)
                    steady_from = (time.perf_counter(), rate.n)
                t_wait = time.perf_counter()
    finally:
        writer.close()
    writer.check()
    seconds = time.perf_counter() - rate.start
    extracted = len(todo) - len(failed)
    steady = None
    if steady_from is not None and rate.n > steady_from[1]:
        steady = round((rate.n - steady_from[1]) / max(time.perf_counter() - steady_from[0], 1e-9), 2)
    timing = {
        "loader_wait_s": round(wait_s, 3),
        "device_decode_s": round(device_decode_s, 3),
        "compute_s": round(compute_s, 3),
        "writer_busy_s": round(writer.busy_s, 3),
        "writer_backlog_wait_s": round(writer.wait_s, 3),
        "writers": writer.n,
        "num_workers": config.num_workers,
        "dtype": config.dtype,
        "decoder": decoder,
    }
    return {
        "key": group.key,
        "cache": str(config.cache),
        "vfm": group.spec["vfm"],
        "codec": group.spec["codec"],
        "images": len(images),
        "already_done": already,
        "extracted": extracted,
        "failed": failed,
        "seconds": round(seconds, 3),
        "images_per_s": round(extracted / seconds, 2) if seconds > 0 else None,
        "steady_images_per_s": steady,  # after the first two batches
        "decoder": decoder,  # where JPEGs were decoded: "nvjpeg" on the GPU, else the workers and why
        "timing": timing,  # where the main loop's time went: the bottleneck is the largest of these
        "rank": dist.rank,
        "world_size": dist.world,
    }


def _to_host(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on the CPU: from a GPU, copied without blocking into pinned memory (PyTorch's caching host allocator
    reuses the pinned blocks, so this is a ring of buffers, not an allocation per batch)."""
    if device.type != "cuda":
        return t
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    return host


@dataclass
class _ShardChecks:
    """What a shard waits for before its rows are written: the copy events of its batches and, per batch, the
    codec's out-of-range flag with the largest finite value (GPU tensors, read once per shard; a CPU batch is
    checked in :func:`_compute`)."""

    events: list[Any] = field(default_factory=list)
    flags: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    # per batch: the VFM's name, its items with a non-finite feature (a GPU bool tensor) and what to call them
    nonfinite: list[tuple[str, torch.Tensor, Any]] = field(default_factory=list)

    def settle(self, codec: Any) -> None:
        """Wait for the shard's copies; raise the codec's range error if any batch overflowed, or the VFM's if any
        returned a NaN or an infinity (one sync per shard)."""
        from ava.vfm.feature_check import raise_nonfinite

        for event in self.events:
            event.synchronize()
        for name, bad, images in self.nonfinite:
            raise_nonfinite(name, bad, images)
        if self.flags:
            bad = torch.stack([b for b, _ in self.flags])
            if bool(bad.any()):
                raise codec.range_error(float(torch.stack([p for _, p in self.flags]).max()))


def _compute(
    vfm: Any,
    group: CacheGroup,
    batch: dict[str, Any],
    device: torch.device,
    results: dict[int, list],
    checks: dict[int, _ShardChecks],
) -> None:
    """Forward one batch and encode each layer on the device, without waiting for it: results[row] = [(values,
    scale) per layer] as host tensors (being copied), the copy event and range flags in ``checks[shard]`` (on a
    CPU there is nothing to wait for: the batch's range is checked at once and an overflow raises here)."""
    if batch["pixels"] is None:
        return
    out = _forward(vfm, batch["pixels"], device)  # [B, L, T, D]
    if out.ndim != 4 or out.shape[2:] != (group.num_tokens, group.dim) or out.shape[1] != len(group.layers):
        raise AvaError(
            f"VFM output {tuple(out.shape)} does not match the cache spec "
            f"[B, {len(group.layers)}, {group.num_tokens}, {group.dim}]"
        )
    check = checks.setdefault(batch["rows"][0] // group.shard_size, _ShardChecks())  # batches never cross shards
    images = functools.partial(_row_images, group, list(batch["rows"]))
    if (bad := check_features(out, group.spec.get("vfm", "?"), images)) is not None:  # complex, NaN, inf: refused
        check.nonfinite.append((group.spec.get("vfm", "?"), bad, images))
    codec = group.codec
    encoded = []
    for li in range(out.shape[1]):
        values, scale, bad = codec.encode_device(out[:, li])
        if bad is not None:
            from ava.cache.codecs import finite_peak

            if device.type == "cpu":  # nothing to wait for: check now; the peak is only needed by the error
                if bool(bad):
                    raise codec.range_error(float(finite_peak(out[:, li])))
            else:
                check.flags.append((bad, finite_peak(out[:, li]).float()))
        # the views: on a GPU pooled there; on a CPU by the writer threads (beside the next forward, not before it),
        # except where the codec pools its input (int4), which only this thread holds
        here = device.type != "cpu" or group.codec.pools_input
        views = _views(group, values, scale, device, out[:, li]) if here else None
        encoded.append(
            (
                _to_host(values, device),
                None if scale is None else _to_host(scale, device),
                None if views is None else {v: _to_host(t, device) for v, t in views.items()},
            )
        )
    if device.type == "cuda":
        event = torch.cuda.Event()
        event.record()
        check.events.append(event)
    for i, row in enumerate(batch["rows"]):
        results[row] = [
            (v[i], None if s is None else s[i], None if p is None else {k: t[i] for k, t in p.items()})
            for v, s, p in encoded
        ]


def _views(
    group: CacheGroup, values: torch.Tensor, scale: torch.Tensor | None, device: torch.device, features: torch.Tensor
) -> dict[str, Any]:
    """A batch's pooled views, pooled from its tokens as stored (decoded by the codec), so a view read from the cache
    equals the view a head pools from the tokens it reads. On a GPU they are pooled there, before the copy to the
    host (torch: equal to a reader's numpy pooling to float32 rounding); on the CPU with numpy, as readers pool,
    so the stored view equals the read-time view bit for bit. A codec that pools its input (``Codec.pools_input``:
    int4, whose 4-bit error would reach the float32 views) has them pooled from ``features``, before encoding."""
    if not group.views:
        return {}
    tokens = features.float() if group.codec.pools_input else group.codec.decode_device(values, scale)
    grid = token_grid(group)
    if device.type == "cuda":
        return {v: pool_tokens_torch(tokens, v, grid) for v in group.views}
    host = tokens.numpy()
    return {v: torch.from_numpy(pool_tokens(host, v, grid)) for v in group.views}


def _row_images(group: CacheGroup, rows: list[int], positions: list[int]) -> str:
    """The batch's items at ``positions``, as the cache knows them: row and image sha256."""
    shas = group.rows()
    return ", ".join(f"row {rows[i]}, image {shas[rows[i]][:12]}" for i in positions[:5]) + (
        " ..." if len(positions) > 5 else ""
    )


def _shard_job(group: CacheGroup, shard: int, results: dict[int, list], checks: dict[int, _ShardChecks]) -> tuple:
    """A finished shard taken out of ``results``/``checks`` on the main thread, without waiting for the device:
    (shard, its rows' host tensors, still being copied, its checks). A writer thread settles it
    (:func:`_settled`), so the main loop keeps the GPU's queue fed instead of draining it once per shard."""
    rows = [q for q in results if q // group.shard_size == shard]
    return shard, {q: results.pop(q) for q in rows}, checks.pop(shard, None)


def _settled(group: CacheGroup, shard: int, rows: dict[int, list], check: _ShardChecks | None) -> tuple:
    """The writer's job for a shard: its rows as numpy arrays, after the shard's copies and range checks."""
    codec = group.codec
    if check is not None:
        check.settle(codec)
    views = {q: [p for _, _, p in pending] for q, pending in rows.items()}
    for li in range(len(group.layers)):
        todo = [q for q, per in views.items() if per[li] is None]  # views left to this thread (a CPU run)
        for q, pooled in zip(todo, _host_views(group, [rows[q][li] for q in todo]) if todo else [], strict=True):
            views[q][li] = pooled
    return shard, {
        q: [
            (codec.host(v), None if s is None else codec.host(s), {k: np.asarray(t) for k, t in p.items()})
            for (v, s, _), p in zip(pending, views[q], strict=True)
        ]
        for q, pending in rows.items()
    }


def _host_views(group: CacheGroup, rows: list[tuple[Any, Any, Any]]) -> list[dict[str, np.ndarray]]:
    """The pooled views of some of a shard's rows (the codec's host tensors), pooled as readers pool them: numpy over
    the values as decoded (``decode_device`` on the CPU: the same bits as the codec's numpy decode, faster)."""
    if not group.views:
        return [{} for _ in rows]
    codec, grid = group.codec, token_grid(group)
    values = torch.stack([v for v, _, _ in rows])
    scale = torch.stack([s for _, s, _ in rows]) if codec.has_scale else None
    tokens = codec.decode_device(values, scale).numpy()
    pooled = {v: pool_tokens(tokens, v, grid) for v in group.views}
    return [{v: pooled[v][i] for v in group.views} for i in range(len(rows))]
