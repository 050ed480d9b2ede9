"""Feature-cache benchmark: pipeline overhead, bytes per value, read speed and error per codec.

For each model, in one run on one device:
  1. forward-only images/s: images preprocessed in advance, timed loop of ``vfm(batch)`` (synchronized), before
     and after the extractions, and between repeats (``--repeats R``: F E F E ... F); each extraction's ratio is
     against the mean of the forward passes around it, and a row gives the median run;
  2. extraction images/s: ``ava.cache.extract`` end to end (decode + preprocess in DataLoader workers,
     forward, encode, compress, write) for the same model, batch size and device; the ratio
     extract/forward is the pipeline's efficiency (1.0 = no overhead beyond the forward pass), over the whole
     run and in the steady state (after the first two batches); then where the main loop's time went: busy %
     (forward + encode), waiting for decoded images (decode-bound), waiting for the writers (writer backlog),
     and the largest of these as the bottleneck (``--profile-batches N``: then N more batches' extraction under
     ``torch.profiler``: the device's busy share, its idle stretches and the host's CUDA calls, which say what the
     main loop waits on, e.g. a ``cudaStreamSynchronize`` per batch or a ``cudaHostAlloc`` of pinned memory);
  3. per codec (fp16, bf16, int8, int4): bytes on disk per stored value, of the tokens with their scales
     (``token_bytes_per_value``: what the codec stores) and of the whole group (``bytes_per_value``: pooled views and
     index included), read MB/s (float32 MB delivered by ``FeatureCache.read`` in random batches of 32, decoded on the
     host; ``read_device_mb_s``: the stored codes read and decoded with ``decode_device`` on ``--device``, as the
     heads' read path does) and the error against the fp32 forward (relative RMS; max |error| / token max).

``--standin`` measures the host side of extraction alone: a stand-in VFM returns precomputed features of
the shapes asked for (``--standin-shape 729x1152``: SigLIP-so400m) without decoding any image, so what the process
spends is the writing: encoding, pooled views, compression, checksums, shard assembly and the store's writes. Each
thread's CPU time is read from ``/proc/self/task`` (sampled while it runs, so a thread that ends is counted) and given
per extracted image: the main thread (the device side: codec, pooled views on the CPU) and, on the write side, the
writer threads, Zarr's I/O thread and its pools. ``--baseline DIR`` runs the same measurement with the ``ava`` of
another checkout (a ``git worktree``), alternating with this one ``--repeats`` times, for ratios in one run.

Models: any registry key; ``<key>:random`` builds that real architecture at full size with random weights
(speed depends on shapes, not weights), e.g. ``siglip:random`` (SigLIP-so400m, 729 x 1152) and
``dinov2:random`` (DINOv2-L at 384, 729 x 1024).

    python benchmarks/bench_cache.py                                   # CPU, small models
    python benchmarks/bench_cache.py --models random-vit,siglip:random --codecs fp16 --images 256,16 \
        --batch-size 8,4 --shard-size 64,16 --repeats 3,1 --threads 1 --error-images 1   # the 2-core CPU's target
    python benchmarks/bench_cache.py --device cuda --dtype bf16 --images 512 --batch-size 64 \\
        --models siglip:random,dinov2:random --num-workers 8
    git worktree add --detach /tmp/ava-base COMMIT        # host CPU per image, before / after
    python benchmarks/bench_cache.py --standin --images 512 --batch-size 32 --shard-size 64 --threads 1 \\
        --baseline /tmp/ava-base --repeats 3
    python benchmarks/bench_cache.py --standin --standin-views none --standin-reads --images 1024 --batch-size 32 \\
        --shard-size 64 --threads 1 --baseline /tmp/ava-base --repeats 2     # the reads of a fingerprint, too

``--standin-reads`` then reads the stand-in's cache back, every row, as a fingerprint reads tokens
(``ResidentFeatures`` into host memory, ``--read-threads`` threads), twice per checkout, alternating: MB/s and the
CPU ms per row of Zarr's I/O thread, its pool, the reader threads and the consumer thread (``serial_ms_per_row``:
the busiest single thread, the ceiling on any number of cores).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import kernel_profile  # benchmarks/, beside this script
import numpy as np
import results
import torch
from budget import Budget
from PIL import Image

from ava.cache import ExtractConfig, extract, open_cache
from ava.cache.inspect import group_summary
from ava.data.format import Dataset, DatasetWriter, Sample

CPU_MODELS = "pixels,random-vit,tiny-siglip,tiny-dinov2"
GPU_MODELS = "siglip:random,dinov2:random"
# extraction / forward the pipeline is held to: on a GPU the workers and writers have cores of their own; on a 2-core
# CPU they share the forward's, which a tiny model's forward cannot hide (so only these two models are held there)
TARGET_GPU, TARGET_CPU, TARGET_CPU_MODELS = ">= 0.8", ">= 0.9", ("random-vit", "siglip:random")
INT4_TARGET = "<= 0.55"  # bytes per stored value of the smallest codec: 4-bit codes and their scales


def make_images(root: Path, n: int, seed: int = 0) -> Path:
    """``n`` random photos-sized JPEG images (decode cost is part of extraction), one sample each."""
    rng = np.random.default_rng(seed)
    with DatasetWriter(root, {"source": "bench"}) as w:
        for i in range(n):
            small = rng.integers(0, 256, size=(30, 40, 3), dtype=np.uint8)  # smooth, JPEG-like content
            image = Image.fromarray(small).resize((640, 480), Image.BILINEAR)
            buf = io.BytesIO()
            image.save(buf, format="JPEG", quality=90)
            rel = w.add_image_bytes(buf.getvalue(), "jpg")
            w.add_sample(Sample(f"b{i}", "scene", rel, 640, 480, "q", "a", {"index": 0, "text": "a"}, split="test"))
    return root


_T0 = time.perf_counter()
_REPORT: dict[str, Any] = {"path": None, "meta": {}, "phases": [], "rows": []}  # what --json holds so far


def phase(what: str, **values: Any) -> None:
    """One progress line (seconds since the start), also kept in the ``--json`` file, rewritten at once: a run cut
    off by a time limit still says how far it got, on its output and in its file."""
    line = {"phase": what, "at_s": round(time.perf_counter() - _T0, 1), **values}
    print(json.dumps(line), flush=True)
    _REPORT["phases"].append(line)
    dump()


def dump(finished: bool = False) -> None:
    """(Re)write the ``--json`` file: the metadata, every phase line and every finished row so far (``partial``
    until the run ends)."""
    if _REPORT["path"] is None:
        return
    doc = {"meta": _REPORT["meta"], "rows": _REPORT["rows"], "phases": _REPORT["phases"], "partial": not finished}
    tmp = _REPORT["path"].with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(_REPORT["path"])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


FORWARD_POOL = 128  # distinct preprocessed images the forward-only loop cycles through (it times shapes, not pixels)
_FORWARD: dict[tuple[str, str], tuple[Any, list[torch.Tensor], torch.device]] = {}  # (model, data) -> vfm, batches


def forward_only(name: str, data: Path, args: argparse.Namespace) -> tuple[float, dict[str, np.ndarray]]:
    """Images/s of the bare forward pass over as many images as the extraction (batches of device-resident input,
    cycling through the first :data:`FORWARD_POOL` images, preprocessed once per run), and fp32 reference features
    of the first images (by sha256)."""
    from ava.cache.extraction import _forward, forward_dtype, resolve_device
    from ava.vfm import load_vfm

    device = resolve_device(args.device)
    dtype = forward_dtype(args.dtype, device)
    ds = Dataset(data)
    samples = ds.samples()
    key = (name, str(data))
    first = key not in _FORWARD
    if first:
        with built_once():
            vfm = load_vfm(name, device=str(device), dtype=dtype)
        pool = torch.stack([vfm.preprocess(ds.load_image(s)) for s in samples[:FORWARD_POOL]]).to(device)
        distinct = list(pool.split(args.batch_size))  # views of the pool, run in turn as often as the images need
        batches = [distinct[j % len(distinct)] for j in range(-(-len(samples) // args.batch_size))]
        _FORWARD[key] = (vfm, batches, device)
        _forward(vfm, batches[0], device)  # warm-up (kernels, allocator)
    vfm, batches, _ = _FORWARD[key]
    _sync(device)
    start = time.perf_counter()
    for b in batches:
        _forward(vfm, b, device)
    _sync(device)
    ips = sum(len(b) for b in batches) / (time.perf_counter() - start)
    k = min(args.error_images, len(samples))
    if not first or k == 0:  # (--error-images 0: no fp32 reference, whose build costs a full-size model's seconds)
        _BUILT.clear()
        return ips, {}
    with built_once():
        ref_vfm = vfm if dtype == "fp32" else load_vfm(name, device=str(device), dtype=torch.float32)
    _BUILT.clear()  # (a full-size fp32 model on the host: not kept past the reference)
    pixels = torch.stack([vfm.preprocess(ds.load_image(s)) for s in samples[:k]])
    ref = _forward(ref_vfm, pixels, device)[:, 0].float().cpu().numpy()
    del ref_vfm
    return ips, {s.image_sha256: ref[i] for i, s in enumerate(samples[:k])}


_BUILT: dict[tuple[Any, ...], torch.nn.Module] = {}  # the random CPU models built_once made, by spec


@contextlib.contextmanager
def built_once() -> Any:
    """``ava.vfm.model.build_model`` remembering the random CPU models it builds and handing out copies, so that the
    fp32 reference has the forward model's own random weights without a second initialization (torch's CPU
    generator runs on one thread whatever the cores: 9-12 s for SigLIP-so400m, the cache stage's time)."""
    import copy

    import ava.vfm.model as vfm_model

    real = vfm_model.build_model

    def build(spec: Any, device: str | torch.device = "cpu") -> torch.nn.Module:
        if str(device) != "cpu":
            return real(spec, device)
        key = (spec.key, spec.seed, vfm_model.config_digest(spec))
        if key not in _BUILT:
            _BUILT[key] = real(spec, "cpu")
        return copy.deepcopy(_BUILT[key])

    vfm_model.build_model = build
    try:
        yield
    finally:
        vfm_model.build_model = real


def _loaded_vfm(name: str) -> Any:
    """The VFM the forward part loaded for ``name`` (None before it ran): a full-size model's build costs seconds."""
    return next((v for (n, _), (v, _, _) in _FORWARD.items() if n == name), None)


_PREPROCESS: dict[str, tuple[Any, Any]] = {}  # model -> (the workers' raw preprocessing, the float32 one)


def loader_only(name: str, data: Path, args: argparse.Namespace, raw: bool = True) -> tuple[float, dict[str, float]]:
    """Images/s of decode + preprocess alone, through the same DataLoader setup extraction uses (``raw``: uint8
    pixels, as the extraction's workers send them; else float32 normalized in the workers, as before), and what the
    workers could sustain: the CPU ms per image of the workers and this process (the workers' start included), and
    ``workers x 1000 / ms``.

    The rate alone understates the workers on a short run: each takes a whole batch, so 2,048 images in batches of
    128 over 14 workers are two rounds, the second with 2 workers busy and 12 idle, after 14 processes forked from
    one holding a GPU's context (the CPU per image says what decoding costs)."""
    import resource

    from ava.cache.extraction import _collate, _Image, _ImageSet, _worker_preprocess, default_workers
    from ava.vfm import load_vfm

    if name not in _PREPROCESS:
        vfm = _loaded_vfm(name)
        if vfm is None:
            vfm = load_vfm(name, device="meta" if ":random" in name else "cpu")
        _PREPROCESS[name] = (_worker_preprocess(vfm), vfm.preprocess_fn())
    ds = Dataset(data)
    items = [(i, _Image(s.image, [s.id])) for i, s in enumerate(ds.samples())]
    workers = args.num_workers if args.num_workers is not None else default_workers(torch.device(args.device))
    loader = torch.utils.data.DataLoader(
        _ImageSet(ds, items, _PREPROCESS[name][0 if raw else 1]),
        batch_size=args.batch_size,
        num_workers=workers,
        collate_fn=_collate,
    )

    def cpu() -> float:  # this process's and its ended workers' CPU seconds
        return sum(
            getattr(resource.getrusage(who), f)
            for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
            for f in ("ru_utime", "ru_stime")
        )

    c0, start = cpu(), time.perf_counter()
    for _ in loader:
        pass
    seconds = time.perf_counter() - start
    del loader  # (its workers have ended with the iteration: their CPU is counted)
    ms = 1000 * (cpu() - c0) / max(1, len(items))
    capacity = max(1, workers) * 1000 / max(ms, 1e-9)
    return len(items) / seconds, {"decode_cpu_ms_per_img": round(ms, 2), "decode_capacity_img_s": round(capacity, 1)}


def read_speed(cache_dir: Path, name: str, shas: list[str], rounds: int = 2, most: int = 1024) -> tuple[float, float]:
    """(float32 MB/s, images/s) of ``FeatureCache.read`` in random batches of 32 over up to ``most`` random images,
    fresh handle."""
    cache = open_cache(cache_dir, name)
    order = np.random.default_rng(0).permutation(len(shas))[:most]
    start, nbytes, n = time.perf_counter(), 0, 0
    for _ in range(rounds):
        for i in range(0, len(order), 32):
            x = cache.read([shas[j] for j in order[i : i + 32]])
            nbytes, n = nbytes + x.nbytes, n + len(x)
    seconds = time.perf_counter() - start
    return nbytes / 1e6 / seconds, n / seconds


def read_device_speed(cache_dir: Path, name: str, shas: list[str], device: str, most: int = 1024) -> float:
    """Float32 MB/s of the heads' read path: the stored codes of random batches of 32 (``read_stored``) decoded with
    ``decode_device`` on ``device`` (synchronized), fresh handle."""
    from ava.cache.extraction import resolve_device

    cache = open_cache(cache_dir, name)
    dev = resolve_device(device)
    order = np.random.default_rng(0).permutation(len(shas))[:most]
    start, nbytes = time.perf_counter(), 0
    for i in range(0, len(order), 32):
        nbytes += _decoded(cache, [shas[j] for j in order[i : i + 32]], dev).numel() * 4
    _sync(dev)
    return nbytes / 1e6 / (time.perf_counter() - start)


def token_bytes_per_value(cache_dir: Path, name: str) -> float:
    """Bytes on disk of the token arrays (values and the codec's scales) per stored value."""
    from ava.cache.location import total_bytes

    group = open_cache(cache_dir, name).group
    values = int(group.done_mask().sum()) * len(group.layers) * group.num_tokens * group.dim
    return (total_bytes(group.path / "features") + total_bytes(group.path / "scales")) / max(1, values)


def codec_error(cache_dir: Path, name: str, ref: dict[str, np.ndarray]) -> tuple[float, float]:
    """The cache's features against ``ref`` (relative RMS, max |diff| / token max); NaN where there is no reference
    (``--error-images 0``)."""
    if not ref:
        return float("nan"), float("nan")
    shas = sorted(ref)
    x = torch.from_numpy(np.stack([ref[s] for s in shas]))
    row_diff, row_ref, max_rel = gaps(x, torch.from_numpy(open_cache(cache_dir, name).read(shas)))
    return float(row_diff.sum().sqrt() / row_ref.sum().sqrt().clamp_min(1e-30)), max_rel


def gaps(ref: torch.Tensor, got: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``got``'s rows [N, T, D] against ``ref``'s: each row's squared distance and ``ref``'s squared norm (float64
    sums, [N]), and the largest |got - ref| over its token's max |ref|."""
    diff = got - ref
    row_diff = diff.flatten(1).square().sum(1, dtype=torch.float64)
    row_ref = ref.flatten(1).square().sum(1, dtype=torch.float64)
    worst = float((diff.abs_() / ref.abs().amax(-1, keepdim=True).clamp_min(1e-30)).amax()) if len(ref) else 0.0
    return row_diff, row_ref, worst


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def extract_once(
    name: str, codec: str, data: Path, work: Path, args: argparse.Namespace, decode: str = "auto"
) -> dict[str, Any]:
    """One ``ava.cache.extract`` of every image with ``codec`` into a fresh cache; its summary. The VFM the forward
    part loaded is handed over (a full-size model's build costs seconds, each time); it runs as ``--device`` and
    ``--dtype`` made it."""
    cache_dir = work / f"{name}-{codec}" if decode == "auto" else work / f"{name}-{codec}-{decode}"
    shutil.rmtree(cache_dir, ignore_errors=True)
    return extract(
        ExtractConfig(
            vfm=name,
            data=str(data),
            cache=str(cache_dir),
            codec=codec,
            batch_size=args.batch_size,
            device=args.device,
            dtype=args.dtype,
            num_workers=args.num_workers,
            shard_size=args.shard_size,
            progress=False,
            decode=decode,
        ),
        vfm=_loaded_vfm(name),
    )


def decode_check(name: str, codec: str, data: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The same extraction with the JPEGs decoded by the workers: its rate, and how far the features of the default
    run (decoded on the device where it could) are from these, over every image (:func:`compare_caches`)."""
    summary = extract_once(name, codec, data, work, args, decode="workers")
    shas = sorted({s.image_sha256 for s in Dataset(data).samples()})
    t0 = time.perf_counter()
    ref, got = open_cache(work / f"{name}-{codec}-workers", name), open_cache(work / f"{name}-{codec}", name)
    found = compare_caches(ref, got, shas, args.device)
    return {"workers_extract_img_s": summary["images_per_s"], **found, "compare_s": round(time.perf_counter() - t0, 2)}


def compare_caches(ref: Any, got: Any, shas: list[str], device: str, chunk: int = 128) -> dict[str, Any]:
    """How far ``got``'s features are from ``ref``'s over the images ``shas``: relative RMS, max |diff| / the token's
    max |ref|, and the share of images whose own relative RMS is over 0.05 (``device_rows_off``: a few rows far off,
    as a race between nvJPEG's stream and the forward's once made, not a decoder's small differences spread
    over every row; the bf16 forward alone is ~1.3e-2).

    Both caches are read ``chunk`` rows at a time as stored and decoded where the heads decode them (on the GPU when
    there is one): the whole arrays in float32 on the host (2 x 6.9 GB for 2,048 SigLIP rows) and numpy's passes over
    them left the cache stage's profiled batches no time."""
    from ava.cache.extraction import resolve_device

    dev = resolve_device(device)
    diff_sq = ref_sq = 0.0
    worst, per_row = 0.0, []
    for i in range(0, len(shas), chunk):
        part = shas[i : i + chunk]
        row_diff, row_ref, part_worst = gaps(*(_decoded(c, part, dev) for c in (ref, got)))
        worst = max(worst, part_worst)
        diff_sq, ref_sq = diff_sq + float(row_diff.sum()), ref_sq + float(row_ref.sum())
        per_row.append((row_diff.sqrt() / row_ref.sqrt().clamp_min(1e-30)).cpu())
    rows = torch.cat(per_row) if per_row else torch.zeros(0, dtype=torch.float64)
    return {
        "device_vs_workers_rel_rms": f"{(diff_sq**0.5) / max(ref_sq**0.5, 1e-30):.2e}",
        "device_vs_workers_max_over_token_max": f"{worst:.2e}",
        "device_rows_off": round(float((rows > 0.05).double().mean()) if len(rows) else 0.0, 4),
    }


def _decoded(cache: Any, shas: list[str], device: torch.device) -> torch.Tensor:
    """The float32 features of ``shas`` decoded on ``device``, as the heads' read path decodes them."""
    from ava.cache.reader import as_tensor

    values, scale = cache.read_stored(shas)
    scale = None if scale is None else as_tensor(scale, device)
    return cache.group.codec.decode_device(as_tensor(values, device), scale)


def profile_extraction(name: str, codec: str, data: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--profile-batches`` batches' extraction under ``torch.profiler`` (:mod:`kernel_profile`, a batch for a
    step; the workers' start is in the window, the first gap): where the device waited and on what host call."""
    if args.budget_end is not None and args.budget_end - time.monotonic() < 15:
        return {"error": f"skipped: {args.budget_end - time.monotonic():.0f} s of the part left"}
    n = min(args.images, args.profile_batches * args.batch_size)
    where = work / f"data-profile-{name.replace(':', '_')}-{n}"  # (made once: every codec's profile reads it)
    part = where if where.exists() else subset(data, n, where)
    sub = argparse.Namespace(**{**vars(args), "images": n})

    def run() -> int:
        extract_once(name, codec, part, work / "profiled", sub)
        return -(-n // args.batch_size)

    out = kernel_profile.profile_steps(run, torch.device(args.device))
    phase(
        "extraction profiled",
        model=name,
        batches=-(-n // args.batch_size),
        **{k: out.get(k) for k in ("busy_fraction", "kernel_ms_per_step", "span_ms_per_step", "error") if k in out},
    )
    return out


def subset(data: Path, n: int, out: Path) -> Path:
    """A dataset of the first ``n`` samples of ``data`` (their images copied), for a part with less time."""
    ds = Dataset(data)
    with DatasetWriter(out, {"source": "bench"}) as w:
        for s in ds.samples()[:n]:
            rel = w.add_image_bytes(ds.image_path(s).read_bytes(), Path(s.image).suffix.lstrip("."))
            w.add_sample(Sample(s.id, s.ava, rel, s.width, s.height, s.question, s.answer, s.truth, split=s.split))
    return out


def bench_model(model: str, data: Path, work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Forward-only, then each codec's extraction, then forward-only again, ``--repeats`` times (F E F E ... F):
    each extraction's ratio is taken against the mean of the forward passes just before and after it, and a row
    reports the median over the repeats (on a shared machine the load drifts; ``forward_drift`` says by how much
    the two forward passes around an extraction differed, at most over the repeats; ``load`` is the 1-minute load
    average at the start)."""
    name = model  # "key:random" names resolve to the full-size architecture at random weights
    load = load_average()
    fwd_before, ref = forward_only(name, data, args)
    phase("forward only", model=model, images_per_s=round(fwd_before, 1))
    load_ips, load_cpu = loader_only(name, data, args)
    phase("decode + preprocess only", model=model, images_per_s=round(load_ips, 1), **load_cpu)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in args.codecs.split(",")}
    if args.budget_end is not None:  # the extractions get what is left: as many images as that time allows
        n_runs = len(runs) * args.repeats + (1 if args.decode_check else 0)
        reserve = 15 if args.profile_batches else 0  # the profiled batches, their workers' start, the parse
        seconds = (args.budget_end - time.monotonic() - reserve) / n_runs - 8  # the workers' start, the reads after
        fits = int(0.6 * max(seconds, 0) * min(fwd_before, load_ips))
        if fits < args.images:
            n = max(args.batch_size, fits)
            data = subset(data, n, work / f"data-{model.replace(':', '_')}-{n}")
            phase("extraction images cut to the time left", model=model, images=n, of=args.images)
            args = argparse.Namespace(**{**vars(args), "images": n})
    forwards = [fwd_before]
    for _ in range(args.repeats):
        for codec in runs:
            runs[codec].append(extract_once(name, codec, data, work, args))
            phase("extraction", model=model, codec=codec, images_per_s=runs[codec][-1]["images_per_s"])
        forwards.append(forward_only(name, data, args)[0])
        phase("forward only", model=model, images_per_s=round(forwards[-1], 1))
    rows = []
    for codec, summaries in runs.items():
        cache_dir = work / f"{name}-{codec}"
        cache = open_cache(cache_dir, name)
        info = group_summary(cache.group)
        shas = sorted({s.image_sha256 for s in Dataset(data).samples()})
        mbps, read_ips = read_speed(cache_dir, name, shas)
        device_mbps = read_device_speed(cache_dir, name, shas, args.device)
        rel_rms, max_rel = codec_error(cache_dir, name, ref)
        per_run = []
        for i, summary in enumerate(summaries):
            fwd = (forwards[i] + forwards[i + 1]) / 2
            steady = summary.get("steady_images_per_s") or summary["images_per_s"]
            per_run.append((summary["images_per_s"] / fwd, steady / fwd, abs(forwards[i + 1] - forwards[i]) / fwd))
        mid = sorted(range(len(per_run)), key=lambda i: per_run[i][0])[(len(per_run) - 1) // 2]  # the median run
        summary = summaries[mid]
        timing = summary.get("timing") or {}
        seconds = max(summary["seconds"], 1e-9)
        parts = {
            "decode (loader wait)": timing.get("loader_wait_s", 0.0),
            "device decode": timing.get("device_decode_s", 0.0),
            "forward+encode": timing.get("compute_s", 0.0),
            "writer backlog": timing.get("writer_backlog_wait_s", 0.0),
        }
        rows.append(
            {
                "model": model,
                "tokens_x_dim": f"{cache.num_tokens}x{cache.dim}",
                "images": args.images,
                "batch": args.batch_size,
                "codec": codec,
                "load": load,
                "forward_img_s": round((forwards[mid] + forwards[mid + 1]) / 2, 2),
                "forward_drift": round(max(r[2] for r in per_run), 3),
                "decode_preprocess_img_s": round(load_ips, 2),
                **load_cpu,
                "extract_img_s": summary["images_per_s"],
                "extract_over_forward": round(per_run[mid][0], 3),
                "extract_over_forward_runs": [round(r[0], 3) for r in per_run],
                "steady_extract_img_s": summary.get("steady_images_per_s") or summary["images_per_s"],
                "steady_over_forward": round(per_run[mid][1], 3),
                # the main loop's own time (what it was before the device decode had its own part)
                "busy_pct": round(100 * (parts["device decode"] + parts["forward+encode"]) / seconds, 1),
                "loader_wait_s": parts["decode (loader wait)"],
                "device_decode_s": parts["device decode"],
                "writer_backlog_s": parts["writer backlog"],
                "writers": timing.get("writers"),
                "workers": timing.get("num_workers", args.num_workers),
                "bottleneck": max(parts, key=parts.get),
                "token_bytes_per_value": round(token_bytes_per_value(cache_dir, name), 4),
                "bytes_per_value": info["bytes_per_value"],
                "read_mb_s": round(mbps, 1),
                "read_device_mb_s": round(device_mbps, 1),
                "read_img_s": round(read_ips, 1),
                "rel_rms_error": f"{rel_rms:.2e}",
                "max_error_over_token_max": f"{max_rel:.2e}",
                "decoder": summary.get("decoder"),
            }
        )
        _REPORT["rows"].append(rows[-1])
        dump()
        if args.decode_check:
            rows[-1].update(decode_check(name, codec, data, work, args))
            dump()
        if args.profile_batches:
            rows[-1]["profile"] = profile_extraction(name, codec, data, work, args)
            dump()
        print(json.dumps(rows[-1]), flush=True)
    return rows


# -- --standin: the host side of extraction alone ---------------------------------------------------------------
class StandIn:
    """A VFM that returns precomputed features of a real model's shapes: extraction's forward costs nothing and no
    image is decoded (the workers' preprocessing ignores the pixels), so the process's CPU is the write side."""

    def __init__(self, tokens: int, dim: int, seed: int = 0, bank: int = 16) -> None:
        side = int(round(tokens**0.5))
        self.num_tokens, self.dim, self.layers = tokens, dim, (-2,)
        self.grid = (side, side) if side * side == tokens else (1, tokens)
        self.random_weights, self.device, self.dtype = True, "cpu", torch.float32
        g = torch.Generator().manual_seed(seed)  # features of a trained ViT's scale (a few units, heavy tails)
        self.bank = torch.randn(bank, 1, tokens, dim, generator=g) * torch.rand(bank, 1, tokens, 1, generator=g) * 4
        self.calls = 0

        class _Spec:
            key = f"standin-{tokens}x{dim}"

        self.spec = _Spec()

    def identity(self) -> dict[str, Any]:
        return {"vfm": self.spec.key, "preprocess": "none", "layers": [-2], "standin": True}

    def preprocess_fn(self) -> Any:
        return _no_pixels

    def eval(self) -> StandIn:
        return self

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        idx = (torch.arange(len(pixels)) + self.calls) % len(self.bank)
        self.calls += len(pixels)
        return self.bank[idx]


def _no_pixels(image: Any) -> torch.Tensor:
    return torch.zeros(1)


def _task_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by native thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


class ThreadCPU:
    """Per-thread CPU seconds over a block, sampled every ``every`` s so that threads ending inside it are counted
    (up to ``every`` s of each such thread's last moments can be missed), grouped by the thread's name."""

    def __init__(self, every: float = 0.02) -> None:
        import threading

        self.every, self.seen, self.names = every, {}, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-sampler", daemon=True)

    def _sample(self) -> None:
        import threading

        while True:
            for t in threading.enumerate():
                if t.native_id is not None:
                    self.names.setdefault(t.native_id, t.name)
            self.seen.update(_task_cpu())
            if self._stop.wait(self.every):
                break

    def __enter__(self) -> ThreadCPU:
        self.start = _task_cpu()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.seen.update(_task_cpu())

    def by_group(self) -> dict[str, float]:
        groups: dict[str, float] = {}
        sampler = self._thread.native_id
        for tid, cpu in self.seen.items():
            if tid == sampler:
                continue
            name = self.names.get(tid, "?")
            group = (
                "main"
                if name == "MainThread"
                else "writers"
                if name.startswith("ava-cache-writer")
                else "zarr"
                if name.startswith(("zarr", "asyncio"))
                else "other"
            )
            groups[group] = groups.get(group, 0.0) + cpu - self.start.get(tid, 0.0)
        return groups


def standin_once(
    data: Path, work: Path, images: int, batch: int, shard: int, shape: str, views: bool = True
) -> dict[str, Any]:
    """One extraction of ``images`` with the stand-in, into a fresh cache; per-image CPU ms of each thread group.
    ``views=False``: no pooled views stored (what a GPU run leaves to the host, where they are pooled on the GPU)."""
    import ava
    from ava.cache import ExtractConfig, extract

    tokens, dim = (int(v) for v in shape.split("x"))
    cache = work / "standin-cache"
    shutil.rmtree(cache, ignore_errors=True)
    vfm = StandIn(tokens, dim)
    with ThreadCPU() as cpu:
        t0 = time.perf_counter()
        kw = {} if views else {"views": ()}
        summary = extract(
            ExtractConfig(
                vfm="",
                data=str(data),
                cache=str(cache),
                batch_size=batch,
                shard_size=shard,
                num_workers=0,
                progress=False,
                **kw,
            ),
            vfm=vfm,
        )
        seconds = time.perf_counter() - t0
    groups = cpu.by_group()
    n = summary["extracted"]
    per = {k: round(1000 * v / n, 2) for k, v in sorted(groups.items())}
    write = sum(v for k, v in groups.items() if k != "main")
    single = max((v for k, v in groups.items() if k in ("zarr", "other")), default=0.0)
    return {
        "code": str(Path(ava.__file__).parent.parent),
        "images": n,
        "shape": shape,
        "views": views,
        "seconds": round(seconds, 2),
        "cpu_ms_per_image": per,
        "write_side_ms_per_image": round(1000 * write / n, 2),
        "serial_ms_per_image": round(1000 * single / n, 2),
        "bytes": sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()),
    }


def standin_in(code: Path | None, data: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`standin_once` in a fresh process importing ``ava`` from ``code`` (another checkout) when given."""

    call = (
        f"b.standin_once(b.Path({str(data)!r}), b.Path({str(work)!r}), {args.images}, {args.batch_size}, "
        f"{args.shard_size}, {args.standin_shape!r}, {args.standin_views != 'none'})"
    )
    return _in_process(code, call, args.threads, "stand-in run")


def _in_process(code: Path | None, call: str, threads: int | None, what: str) -> dict[str, Any]:
    """``call`` (an expression over this module, imported as ``b``) in a fresh process importing ``ava`` from
    ``code`` (another checkout) when given; its JSON result."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(code)) if code is not None else dict(os.environ)
    threads_ = f"torch.set_num_threads({threads}); " if threads else ""
    prog = (
        f"import sys, json, torch; sys.path.insert(0, {str(Path(__file__).parent)!r}); {threads_}"
        f"import bench_cache as b; print(json.dumps({call}))"
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", prog],
        env=env,
        capture_output=True,
        text=True,
        cwd=code or Path(__file__).parent.parent,
    )
    if done.returncode:
        raise SystemExit(f"{what} of {code or 'this checkout'} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def standin_read_once(cache: Path, shape: str, threads: int) -> dict[str, Any]:
    """All rows of the stand-in's cache read as a fingerprint reads tokens (``ResidentFeatures``, ``threads`` reader
    threads, host memory), twice; the faster: MB/s and the CPU ms per row of each thread, grouped."""
    import ava
    from ava.cache.reader import ResidentFeatures

    cache_ = open_cache(str(cache), f"standin-{shape}")
    shas = list(cache_.group.index())
    best: dict[str, Any] | None = None
    for _ in range(2):
        cache_ = open_cache(str(cache), f"standin-{shape}")  # (a fresh listing and index reads each time)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        with ThreadCPU() as cpu:
            t0 = time.perf_counter()
            values = ResidentFeatures(cache_, shas, threads=threads).wait()
            seconds = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        per_thread: dict[str, float] = {}
        groups: dict[str, float] = {}
        for tid, used in cpu.seen.items():
            name = cpu.names.get(tid, "?")
            if tid == cpu._thread.native_id or used - cpu.start.get(tid, 0.0) <= 0:
                continue
            group = (
                "zarr-io"
                if name.startswith("zarr")
                else "zarr-pool"
                if name.startswith("asyncio")
                else "readers"
                if name.startswith("ThreadPoolExecutor")
                else "consumer"
                if name == "ava-features"
                else "main"
                if name == "MainThread"
                else "other"
            )
            per_thread[f"{name}#{tid}"] = used - cpu.start.get(tid, 0.0)
            groups[group] = groups.get(group, 0.0) + per_thread[f"{name}#{tid}"]
        n = len(shas)
        row = {
            "code": str(Path(ava.__file__).parent.parent),
            "rows": n,
            "threads": threads,
            "seconds": round(seconds, 2),
            "mb_s": round(values.numel() * 2 / 1e6 / seconds, 1),
            "cpu_ms_per_row": {k: round(1000 * v / n, 2) for k, v in sorted(groups.items())},
            "total_cpu_ms_per_row": round(1000 * sum(groups.values()) / n, 2),
            "serial_ms_per_row": round(1000 * max(per_thread.values(), default=0.0) / n, 2),
            # pages the kernel faulted in (the held rows' own: one per 4 KB of a row, ~410 at SigLIP's shapes)
            "page_faults_per_row": round(faults / n, 1),
        }
        if best is None or row["seconds"] < best["seconds"]:
            best = row
    assert best is not None
    return best


def standin_read_in(code: Path | None, cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`standin_read_once` in a fresh process importing ``ava`` from ``code`` when given."""
    call = f"b.standin_read_once(b.Path({str(cache)!r}), {args.standin_shape!r}, {args.read_threads})"
    return _in_process(code, call, 1, "stand-in read")


def standin_main(args: argparse.Namespace) -> None:
    """``--standin``: this checkout (and ``--baseline``), alternating, ``--repeats`` times; rows and ratios."""
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ava-bench-standin-"))
    images, batch, shard, repeats = (
        int(str(getattr(args, k)).split(",")[0]) for k in ("images", "batch_size", "shard_size", "repeats")
    )
    args = argparse.Namespace(**{**vars(args), "images": images, "batch_size": batch, "shard_size": shard})
    data = work / f"data-{images}"
    if not (data / "dataset.json").exists():
        make_images(data, images)
    rows, load = [], load_average()
    for r in range(repeats):
        for code in ([args.baseline] if args.baseline else []) + [None]:
            row = standin_in(code, data, work / ("base" if code else "this"), args)
            row.update(repeat=r, which="baseline" if code else "this", load=load_average())
            rows.append(row)
            print(json.dumps(row), flush=True)
    reads = []
    if args.standin_reads:  # the cache this checkout wrote (the baseline's bytes are the same: a test says so)
        for r in range(repeats):
            for code in ([args.baseline] if args.baseline else []) + [None]:
                row = standin_read_in(code, work / "this" / "standin-cache", args)
                row.update(repeat=r, which="baseline" if code else "this", load=load_average())
                reads.append(row)
                print(json.dumps(row), flush=True)
    best = {
        w: min((x for x in rows if x["which"] == w), key=lambda x: x["write_side_ms_per_image"])
        for w in ("baseline", "this")
        if any(x["which"] == w for x in rows)
    }
    meta = {
        "device": device_name("cpu"),
        "date": dt.date.today().isoformat(),
        "load_start": load,
        "load_end": load_average(),
        "best": best,
    }
    if "baseline" in best:
        b, t = best["baseline"], best["this"]
        meta["write_side_ratio"] = round(b["write_side_ms_per_image"] / max(t["write_side_ms_per_image"], 1e-9), 2)
    if reads:
        fast = {
            w: min((x for x in reads if x["which"] == w), key=lambda x: x["seconds"])
            for w in ("baseline", "this")
            if any(x["which"] == w for x in reads)
        }
        meta["reads_best"] = fast
        if "baseline" in fast:
            meta["read_ratio"] = round(fast["baseline"]["seconds"] / max(fast["this"]["seconds"], 1e-9), 2)
    print(json.dumps(meta, indent=1))
    payload = {"meta": meta, "rows": rows, "reads": reads}
    results.write(args.json, "bench_cache", standin_figures(meta, args), rows + reads, payload)
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


def device_name(device: str) -> str:
    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        return torch.cuda.get_device_name(torch.device("cuda" if device == "auto" else device))
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())
    return f"CPU {model} ({os.cpu_count()} cores), torch threads {torch.get_num_threads()}"


def environment(device: str) -> dict[str, Any]:
    """What every benchmark JSON records: the device in words, the date, and the versions that ran."""
    import datetime
    import importlib.metadata as md

    versions = {}
    for name in ("torch", "transformers", "peft", "zarr", "numcodecs", "faiss-cpu", "faiss-gpu", "timm"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    cuda = torch.version.cuda if torch.cuda.is_available() else None
    return {
        "device": device_name(device),
        "date": str(datetime.date.today()),
        "versions": versions,
        "cuda": cuda,
        "python": platform.python_version(),
        "transparent_hugepages": transparent_hugepages(),
    }


def transparent_hugepages() -> dict[str, str] | None:
    """The kernel's transparent huge page modes (``enabled``, ``defrag``: the bracketed choice of each), which decide
    whether host-held feature rows take huge pages (``ava.cache.placement.held_empty``); None off Linux."""
    root = Path("/sys/kernel/mm/transparent_hugepage")
    modes = {}
    for name in ("enabled", "defrag"):
        try:
            text = (root / name).read_text()
        except OSError:
            return None
        modes[name] = text[text.index("[") + 1 : text.index("]")] if "[" in text else text.strip()
    return modes


COLUMNS = "model tokens_x_dim images batch codec load forward_img_s forward_drift decode_preprocess_img_s extract_img_s"
COLUMNS += " extract_over_forward extract_over_forward_runs"
COLUMNS += " steady_extract_img_s steady_over_forward busy_pct loader_wait_s device_decode_s writer_backlog_s"
COLUMNS += " workers writers bottleneck"
COLUMNS += " token_bytes_per_value bytes_per_value read_mb_s read_device_mb_s rel_rms_error max_error_over_token_max"
COLUMNS += " decoder"


def _cell(value: Any) -> str:
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    cols = COLUMNS.split()
    head = (
        f"Device: {meta['device']}; date {meta['date']}; images (640x480 JPEG) {meta['images']}, batch "
        f"{meta['batch_size']}, shard {meta['shard_size']}, repeats {meta['repeats']} (per model); dtype "
        f"{meta['dtype']}, {meta['num_workers']} workers; load average {meta['load']} at the start, "
        f"{meta['load_end']} at the end.\n\n"
    )
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in cols) + " |" for r in rows]
    return head + "\n".join(lines) + "\n"


def figures(rows: list[dict[str, Any]], device: str) -> list[dict[str, Any]]:
    """The headline figures of a run's rows: per model the pipeline's (from its first codec's row), per codec the
    bytes per stored value and the error."""
    gpu = device.startswith("cuda")
    out, seen = [], set()
    for r in rows:
        m = r["model"]
        if m not in seen:
            seen.add(m)
            target = TARGET_GPU if gpu else TARGET_CPU if m in TARGET_CPU_MODELS else None
            how = f"{r['decoder']} decode, " if gpu and r.get("decoder") else f"load {r['load']}, "
            workers = f"{r['workers']} workers"
            out += [
                results.figure(
                    f"extraction / forward, {m}",
                    r["extract_over_forward"],
                    target=target,
                    note=f"{how}steady {r['steady_over_forward']}, {r['images']} images",
                ),
                results.figure(f"forward only, {m}", r["forward_img_s"], "images/s"),
                results.figure(f"decode + preprocess, {m}", r["decode_preprocess_img_s"], "images/s", note=workers),
            ]
            if r.get("workers_extract_img_s"):
                out.append(
                    results.figure(
                        f"extraction / forward, the workers' decode, {m}",
                        round(r["workers_extract_img_s"] / r["forward_img_s"], 3),
                        target=target,
                    )
                )
            if "device_rows_off" in r:
                out.append(
                    results.figure(
                        f"device-decoded rows far from the workers', {m}",
                        round(100 * r["device_rows_off"], 2),
                        "%",
                        target="0",
                        note=f"rel RMS {r.get('device_vs_workers_rel_rms')}",
                    )
                )
        out += [
            results.figure(
                f"{r['codec']} bytes per value, {m}",
                r["token_bytes_per_value"],
                "bytes",
                target=INT4_TARGET if r["codec"] == "int4" else None,
                note=f"{r['bytes_per_value']} with the pooled views and index",
            ),
            results.figure(f"{r['codec']} relative RMS error, {m}", float(r["rel_rms_error"])),
        ]
    return out


def standin_figures(meta: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--standin``'s figures: this checkout's best run (and read)."""
    best, shape = meta["best"]["this"], args.standin_shape
    views = "with pooled views" if args.standin_views == "stored" else "no pooled views (a GPU run's host share)"
    out = [
        results.figure(
            f"host CPU per extracted image, write side, stand-in {shape}, {args.standin_views} views",
            best["write_side_ms_per_image"],
            "ms",
            target="<= 6 ms",
            note=views,
        ),
        results.figure(
            f"of it on one thread, stand-in {shape}, {args.standin_views} views",
            best["serial_ms_per_image"],
            "ms",
            target="<= 0.5 ms",
        ),
    ]
    if meta.get("reads_best"):
        read = meta["reads_best"]["this"]
        out += [
            results.figure(
                f"token read, stand-in {shape}, {args.read_threads} reader thread{'s' * (args.read_threads != 1)}",
                read["mb_s"],
                "MB/s",
                note=f"{read['total_cpu_ms_per_row']} CPU ms a row, {read['page_faults_per_row']} page faults a row",
            )
        ]
    return out


PER_MODEL = ("images", "batch_size", "shard_size", "repeats")  # options taking one value, or one per model


def per_model_ints(parser: argparse.ArgumentParser, value: str, name: str, models: list[str]) -> list[int]:
    """``"8"`` -> the same for every model; ``"256,16"`` -> one per model (as many as ``--models``), each >= 1."""
    try:
        values = [int(v) for v in str(value).split(",")]
    except ValueError:
        parser.error(f"--{name.replace('_', '-')} {value!r}: give whole numbers, one or one per model")
    if len(values) == 1:
        values *= len(models)
    if len(values) != len(models) or min(values) < 1:
        parser.error(f"--{name.replace('_', '-')} {value!r}: give one number >= 1, or one per model ({len(models)})")
    return values


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default=None, help=f"comma-separated (default cpu: {CPU_MODELS}; cuda: {GPU_MODELS})")
    p.add_argument("--images", default="64", help="images: one number, or one per model (comma-separated)")
    p.add_argument("--batch-size", default="16", help="one number, or one per model")
    p.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"], help="auto: bf16 on CUDA")
    p.add_argument("--num-workers", type=int, default=None, help="DataLoader workers (default: extraction's)")
    p.add_argument("--shard-size", default="16", help="one number, or one per model")
    p.add_argument("--codecs", default="fp16,bf16,int8,int4")
    p.add_argument(
        "--repeats",
        default="1",
        help="extractions per codec, each between two forward-only passes (rows give the median ratio): one number, "
        "or one per model",
    )
    p.add_argument("--error-images", type=int, default=16, help="images compared with the fp32 forward")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    results.json_option(p)
    p.add_argument(
        "--loader-ab",
        action="store_true",
        help="only decode + preprocess, the workers sending uint8 (as extraction does) vs float32 "
        "(as before), alternated --repeats times per model",
    )
    p.add_argument("--workdir", type=Path, default=None, help="where the dataset and caches go (default: a tmp dir)")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the run: the extractions get the images the time left after the forward-only "
        "and decode-only parts allows (rows say how many)",
    )
    p.add_argument(
        "--decode-check",
        action="store_true",
        help="also extract with the JPEGs decoded by the workers: that rate, and the features' distance "
        "from the default run's (decoded on the GPU where it can)",
    )
    p.add_argument(
        "--profile-batches",
        type=int,
        default=0,
        help="then this many batches' extraction under torch.profiler: device busy share, idle stretches, "
        "the host's CUDA calls (a batch counts as a step)",
    )
    p.add_argument("--standin", action="store_true", help="the host side of extraction alone (see the module doc)")
    p.add_argument("--standin-shape", default="729x1152", help="tokens x dim of the stand-in's features")
    p.add_argument(
        "--standin-views",
        choices=("stored", "none"),
        default="stored",
        help="none: no pooled views (a GPU run pools them on the GPU: the host's share without them)",
    )
    p.add_argument("--baseline", type=Path, default=None, help="--standin: another checkout, measured alongside")
    p.add_argument(
        "--standin-reads",
        action="store_true",
        help="--standin: then read the cache back as a fingerprint reads tokens (ResidentFeatures)",
    )
    p.add_argument("--read-threads", type=int, default=2, help="--standin-reads: reader threads")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.standin:
        standin_main(args)
        return
    models = (args.models or (GPU_MODELS if args.device.startswith("cuda") else CPU_MODELS)).split(",")
    per_model = {k: per_model_ints(p, getattr(args, k), k, models) for k in PER_MODEL}
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ava-bench-cache-"))
    load = load_average()
    rows, datasets = [], {}
    budget = Budget(args.budget)
    meta = {
        "device": device_name(args.device),
        "date": dt.date.today().isoformat(),
        "dtype": args.dtype,
        "num_workers": args.num_workers,
        **{k: ",".join(str(n) for n in v) for k, v in per_model.items()},
        "load": load,
        "torch": torch.__version__,
        "environment": environment(args.device),
    }
    to_file = results.json_file(args.json)
    if to_file and not args.loader_ab:  # rewritten as each part ends: a run cut off keeps what it measured
        _REPORT.update(path=to_file, meta=meta)
    for i, model in enumerate(models):
        margs = argparse.Namespace(
            **{**vars(args), **{k: v[i] for k, v in per_model.items()}},
            budget_end=budget.deadline(1 / (len(models) - i)) if args.budget else None,
        )
        if margs.images not in datasets:
            datasets[margs.images] = make_images(work / f"data-{margs.images}", margs.images)
            phase("images written", images=margs.images)
        if args.loader_ab:
            for _ in range(int(margs.repeats)):
                for raw in (True, False):
                    ips, load_cpu = loader_only(model, datasets[margs.images], margs, raw=raw)
                    rows.append(
                        {
                            "model": model,
                            "workers_send": "uint8" if raw else "float32",
                            "decode_preprocess_img_s": round(ips, 1),
                            **load_cpu,
                            "load": load_average(),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
            continue
        rows += bench_model(model, datasets[margs.images], work, margs)
    if args.loader_ab:
        return
    meta["load_end"] = load_average()
    print(markdown(rows, meta))
    if to_file:
        _REPORT.update(path=to_file, meta=meta, rows=rows)
        dump(finished=True)
    else:
        results.write(args.json, "bench_cache", figures(rows, args.device), rows, None, device=args.device)
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
