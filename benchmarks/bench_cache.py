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
     and the largest of these as the bottleneck;
  3. per codec (fp16, bf16, int8, int4): bytes on disk per stored value, of the tokens with their scales
     (``token_bytes_per_value``: what the codec stores) and of the whole group (``bytes_per_value``: pooled views and
     index included), read MB/s (float32 MB delivered by ``FeatureCache.read`` in random batches of 32, decoded on the
     host; ``read_device_mb_s``: the stored codes read and decoded with ``decode_device`` on ``--device``, as the
     heads' read path does) and the error against the fp32 forward (relative RMS; max |error| / token max).

Models: any registry key; ``<key>:random`` builds that real architecture at full size with random weights
(speed depends on shapes, not weights), e.g. ``siglip:random`` (SigLIP-so400m, 729 x 1152) and
``dinov2:random`` (DINOv2-L at 384, 729 x 1024).

    python benchmarks/bench_cache.py                                   # CPU, small models
    python benchmarks/bench_cache.py --models random-vit,siglip:random --codecs fp16 --images 256,16 \
        --batch-size 8,4 --shard-size 64,16 --repeats 3,1 --threads 1 --error-images 1   # #12's 2-core CPU target
    python benchmarks/bench_cache.py --device cuda --dtype bf16 --images 512 --batch-size 64 \\
        --models siglip:random,dinov2:random --num-workers 8
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ava.cache import ExtractConfig, extract, open_cache
from ava.cache.inspect import group_summary
from ava.data.format import Dataset, DatasetWriter, Sample

CPU_MODELS = "pixels,random-vit,tiny-siglip,tiny-dinov2"
GPU_MODELS = "siglip:random,dinov2:random"


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


def phase(what: str, **values: Any) -> None:
    """One progress line (seconds since the start): a run cut off by a time limit still says how far it got."""
    print(json.dumps({"phase": what, "at_s": round(time.perf_counter() - _T0, 1), **values}), flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


FORWARD_POOL = 512  # distinct preprocessed images the forward-only loop cycles through (it times shapes, not pixels)
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
    if not first:
        return ips, {}
    ref_vfm = vfm if dtype == "fp32" else load_vfm(name, device=str(device), dtype=torch.float32)
    k = min(args.error_images, len(samples))
    pixels = torch.stack([vfm.preprocess(ds.load_image(s)) for s in samples[:k]])
    ref = _forward(ref_vfm, pixels, device)[:, 0].float().cpu().numpy()
    del ref_vfm
    return ips, {s.image_sha256: ref[i] for i, s in enumerate(samples[:k])}


_PREPROCESS: dict[str, tuple[Any, Any]] = {}  # model -> (the workers' raw preprocessing, the float32 one)


def loader_only(name: str, data: Path, args: argparse.Namespace, raw: bool = True) -> float:
    """Images/s of decode + preprocess alone, through the same DataLoader setup extraction uses (``raw``: uint8
    pixels, as the extraction's workers send them; else float32 normalized in the workers, as before)."""
    from ava.cache.extraction import _collate, _Image, _ImageSet, _worker_preprocess, default_workers
    from ava.vfm import load_vfm

    if name not in _PREPROCESS:
        vfm = load_vfm(name, device="meta" if ":random" in name else "cpu")
        _PREPROCESS[name] = (_worker_preprocess(vfm), vfm.preprocess_fn())
    ds = Dataset(data)
    items = [(i, _Image(s.image, [s.id])) for i, s in enumerate(ds.samples())]
    loader = torch.utils.data.DataLoader(
        _ImageSet(ds, items, _PREPROCESS[name][0 if raw else 1]),
        batch_size=args.batch_size,
        num_workers=args.num_workers if args.num_workers is not None else default_workers(torch.device(args.device)),
        collate_fn=_collate,
    )
    start = time.perf_counter()
    for _ in loader:
        pass
    return len(items) / (time.perf_counter() - start)


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
    from ava.cache.reader import as_tensor

    cache = open_cache(cache_dir, name)
    codec = cache.group.codec
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))  # fmt: skip
    order = np.random.default_rng(0).permutation(len(shas))[:most]
    start, nbytes = time.perf_counter(), 0
    for i in range(0, len(order), 32):
        values, scale = cache.read_stored([shas[j] for j in order[i : i + 32]])
        x = codec.decode_device(as_tensor(values, dev), None if scale is None else as_tensor(scale, dev))
        nbytes += x.numel() * 4
    _sync(dev)
    return nbytes / 1e6 / (time.perf_counter() - start)


def token_bytes_per_value(cache_dir: Path, name: str) -> float:
    """Bytes on disk of the token arrays (values and the codec's scales) per stored value."""
    from ava.cache.location import total_bytes

    group = open_cache(cache_dir, name).group
    values = int(group.done_mask().sum()) * len(group.layers) * group.num_tokens * group.dim
    return (total_bytes(group.path / "features") + total_bytes(group.path / "scales")) / max(1, values)


def codec_error(cache_dir: Path, name: str, ref: dict[str, np.ndarray]) -> tuple[float, float]:
    shas = sorted(ref)
    x = np.stack([ref[s] for s in shas])
    got = open_cache(cache_dir, name).read(shas)
    rel_rms = float(np.linalg.norm(got - x) / max(np.linalg.norm(x), 1e-30))
    token_max = np.abs(x).max(axis=-1, keepdims=True)
    max_rel = float((np.abs(got - x) / np.maximum(token_max, 1e-30)).max())
    return rel_rms, max_rel


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def extract_once(name: str, codec: str, data: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One ``ava.cache.extract`` of every image with ``codec`` into a fresh cache; its summary."""
    cache_dir = work / f"{name}-{codec}"
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
        )
    )


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
    load_ips = loader_only(name, data, args)
    phase("decode + preprocess only", model=model, images_per_s=round(load_ips, 1))
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in args.codecs.split(",")}
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
        parts = {"decode (loader wait)": timing.get("loader_wait_s", 0.0),
                 "forward+encode": timing.get("compute_s", 0.0),
                 "writer backlog": timing.get("writer_backlog_wait_s", 0.0)}  # fmt: skip
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
                "extract_img_s": summary["images_per_s"],
                "extract_over_forward": round(per_run[mid][0], 3),
                "extract_over_forward_runs": [round(r[0], 3) for r in per_run],
                "steady_extract_img_s": summary.get("steady_images_per_s") or summary["images_per_s"],
                "steady_over_forward": round(per_run[mid][1], 3),
                "busy_pct": round(100 * parts["forward+encode"] / max(summary["seconds"], 1e-9), 1),
                "loader_wait_s": parts["decode (loader wait)"],
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
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


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
    return {"device": device_name(device), "date": str(datetime.date.today()), "versions": versions, "cuda": cuda,
            "python": platform.python_version()}  # fmt: skip


COLUMNS = "model tokens_x_dim images batch codec load forward_img_s forward_drift decode_preprocess_img_s extract_img_s"
COLUMNS += " extract_over_forward extract_over_forward_runs"
COLUMNS += (
    " steady_extract_img_s steady_over_forward busy_pct loader_wait_s writer_backlog_s workers writers bottleneck"
)
COLUMNS += " token_bytes_per_value bytes_per_value read_mb_s read_device_mb_s rel_rms_error max_error_over_token_max"


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
    p.add_argument("--json", type=Path, default=None, help="write rows + metadata here")
    p.add_argument("--loader-ab", action="store_true",
                   help="only decode + preprocess, the workers sending uint8 (as extraction does) vs float32 "
                   "(as before), alternated --repeats times per model")  # fmt: skip
    p.add_argument("--workdir", type=Path, default=None, help="where the dataset and caches go (default: a tmp dir)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = (args.models or (GPU_MODELS if args.device.startswith("cuda") else CPU_MODELS)).split(",")
    per_model = {k: per_model_ints(p, getattr(args, k), k, models) for k in PER_MODEL}
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ava-bench-cache-"))
    load = load_average()
    rows, datasets = [], {}
    for i, model in enumerate(models):
        margs = argparse.Namespace(**{**vars(args), **{k: v[i] for k, v in per_model.items()}})
        if margs.images not in datasets:
            datasets[margs.images] = make_images(work / f"data-{margs.images}", margs.images)
            phase("images written", images=margs.images)
        if args.loader_ab:
            for _ in range(int(margs.repeats)):
                for raw in (True, False):
                    ips = loader_only(model, datasets[margs.images], margs, raw=raw)
                    rows.append({"model": model, "workers_send": "uint8" if raw else "float32",
                                 "decode_preprocess_img_s": round(ips, 1), "load": load_average()})  # fmt: skip
                    print(json.dumps(rows[-1]), flush=True)
            continue
        rows += bench_model(model, datasets[margs.images], work, margs)
    if args.loader_ab:
        return
    meta = {
        "device": device_name(args.device),
        "date": dt.date.today().isoformat(),
        "dtype": args.dtype,
        "num_workers": args.num_workers,
        **{k: ",".join(str(n) for n in v) for k, v in per_model.items()},
        "load": load,
        "load_end": load_average(),
        "torch": torch.__version__,
        "environment": environment(args.device),
    }
    print(markdown(rows, meta))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
