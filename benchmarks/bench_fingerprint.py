"""The cheap heads on every ability: wall time per head and ability, and token reads per ability.

Two ways to get the same three run directories, side by side in one process on one dataset and feature source:

- ``heads``: ``probe-linear``, ``probe-attn`` and ``knn`` trained one after another (three ``ava head train``);
- ``fingerprint``: ``ava fingerprint`` (each ability's features read once, shared by the three heads).

Features are random (speed depends on shapes, not values): a stand-in for the feature cache returns, for every
image, ``T x D`` Gaussian fp16 tokens (one of 64 random matrices, picked by the image's sha256) plus a small class
signal, so the heads have something to fit, and the pooled views an extraction stores. ``reads`` counts calls of the
cache's ``read`` (one call reads one batch of rows of one layer). The dataset is a hand-made one with the 14
abilities' answer kinds (``handmade`` in ``tests/helpers.py``).

    python benchmarks/bench_fingerprint.py                                # 14 abilities x 150 samples, 196 x 768
    python benchmarks/bench_fingerprint.py --tokens 729 --dim 1152 --samples 1000   # SigLIP-so400m shapes
    python benchmarks/bench_fingerprint.py --device cuda --modes fingerprint --tokens 729 --dim 1152 \
        --samples 15600 --abilities localization,counting,...    # the GPU's real size, in halves
    python benchmarks/bench_fingerprint.py --modes fingerprint --json out.json

``--vfm pixels`` times the real thing instead: the synthetic suite (14 abilities x ``--samples``, ``--size`` px), the
extractor's cache (pooled views stored), then ``ava fingerprint`` in this process, timed (wall and CPU seconds),
with the token reads per ability (1 when a head needs tokens, 0 when every head reads stored views only)::

    python benchmarks/bench_fingerprint.py --vfm pixels                         # 14 x 150, 160 px, three heads
    python benchmarks/bench_fingerprint.py --vfm pixels --heads probe-linear,knn   # no token reads
    python benchmarks/bench_fingerprint.py --vfm pixels --jobs 1,auto              # one head at a time vs at once

``--heads`` and ``--max-memory-gb`` apply to the fingerprint (both modes): the latter sets the probes'
``max_memory_gb``, above which train tokens are gathered batch by batch from the held features instead of held whole
in float32 (the path every ability takes at real sizes)::

    python benchmarks/bench_fingerprint.py --modes fingerprint --heads probe-attn --tokens 729 --dim 1152 \
        --samples 60 --abilities spatial,counting,scene --max-memory-gb 0.01    # SigLIP shapes, per-batch gathers

``--placement-reads N`` first writes a real fp16 cache of N stand-in rows (``--tokens`` x ``--dim``, through the
extraction's writers) and reads it as a fingerprint reads an ability's tokens, at each placement the device offers
(on the GPU; host memory for a GPU's heads, batches staged; host memory): straight where the rows are held, and the
way before (into host memory, then copied to the GPU or pinned whole), with GB/s, the peak host memory and, the new
way, the time of a 32-row training batch's gather (``benchmarks/gpu.sh``'s fingerprint stage)::

    python benchmarks/bench_fingerprint.py --device cuda --modes fingerprint --tokens 729 --dim 1152 \
        --placement-reads 512 --abilities color --samples 20

``fit_s_per_head`` sums each head's fit times; with heads fitted at once (``jobs`` 2) they overlap, so the sum
exceeds the wall time.

Run it with ``PYTHONPATH`` pointing at an older checkout to count that code's reads (``fingerprint`` is skipped
where it does not exist).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.helpers
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402
from budget import Budget  # noqa: E402


class RandomCache:
    """The ``FeatureCache`` interface over random tokens, quick to read at real sizes (14 x ~15.6K images of 729 x 1152
    on a GPU box): the row of an image is one of ``BANK`` random N(0, 1) token matrices (picked by its sha256) plus the
    hand-made dataset's answer signal on its first features (so probes and kNN fit something), in fp16 as an fp16
    cache holds them. Like a cache made by ``ava cache extract``, it stores pooled views (``mean``, ``grid2``,
    ``grid4``): read as stored, from the bank's views plus the signal. Counts token reads and rows read."""

    BANK = 64

    def __init__(self, signals: dict[str, np.ndarray], tokens: int, dim: int) -> None:
        from ava.cache.pooling import STORED_VIEWS, pool_candidates, pool_tokens, token_grid

        self.signals, self.num_tokens, self.dim = signals, tokens, dim
        self.layers, self.key, self.random_weights, self.grid = (-1,), "bench0001", True, ()
        self.identity, self.spec = {"key": "random"}, {"codec": "fp16"}
        self.reads, self.rows_read, self.read_s = 0, 0, 0.0
        self.by_ability: dict[str, int] = defaultdict(int)
        self.ability_of: dict[str, str] = {}
        rng = np.random.default_rng(0)
        self.bank = rng.standard_normal((self.BANK, tokens, dim), dtype=np.float32).astype(np.float16)
        self.slot = {sha: int(hashlib.sha256(sha.encode()).hexdigest()[:8], 16) % self.BANK for sha in signals}
        self.views = tuple(pool_candidates(self, STORED_VIEWS))
        bank = self.bank.astype(np.float32)
        self.bank_views = {v: pool_tokens(bank, v, token_grid(self)) for v in self.views}

    def has(self, sha: str) -> bool:
        return sha in self.signals

    def _rows(self, shas: list[str]) -> tuple[np.ndarray, np.ndarray]:
        index = np.fromiter((self.slot[s] for s in shas), dtype=np.int64, count=len(shas))
        signal = np.stack([self.signals[s] for s in shas]) if shas else np.zeros((0, 1), np.float32)
        return index, signal

    def read(self, shas: list[str], layer: int | None = None) -> np.ndarray:
        t0 = time.perf_counter()
        index, signal = self._rows(shas)
        out = self.bank[index]
        out[:, :, : signal.shape[1]] += signal[:, None, :].astype(np.float16)
        self.reads += 1
        self.rows_read += len(shas)
        for ava in {self.ability_of.get(s, "?") for s in shas}:
            self.by_ability[ava] += 1
        self.read_s += time.perf_counter() - t0
        return out

    def read_view(self, shas: list[str], layer: int | None, view: str) -> np.ndarray:
        index, signal = self._rows(shas)
        out = self.bank_views[view][index]
        cells = out.reshape(len(shas), -1, self.dim)  # the mean, then the cells: each a mean of tokens + the signal
        cells[:, :, : signal.shape[1]] += signal[:, None, :]
        return out

    def read_pooled(self, shas: list[str], layer: int | None = None) -> np.ndarray:
        return self.read_view(shas, layer, "mean")


def zarr_copy(
    cache: RandomCache, shas: list[str], root: Path, threads: int = 8, deadline: float = float("inf")
) -> tuple[Any, dict]:
    """The stand-in's rows of ``shas`` (and their pooled views) written into a real fp16 Zarr cache by the
    extraction's own shard writer (``write_shard``, shards on ``threads`` threads), opened as ``ava fingerprint``
    opens a cache: a fingerprint then reads it as a user's (``ResidentFeatures``, the next ability read while the
    heads fit). Returns the cache and ``{"rows", "gb", "write_s"}``; the page cache is warm after the write. A write
    still going at ``deadline`` (``time.monotonic()``) stops starting shards and raises :class:`OutOfTime`."""
    from concurrent.futures import ThreadPoolExecutor

    from ava.cache import ExtractConfig
    from ava.cache.extraction import build_spec, write_shard
    from ava.cache.pooling import pool_tokens, token_grid
    from ava.cache.reader import open_cache  # (not ava.cache's name: run_random points that at the stand-in)
    from ava.cache.store import add_rows, create_group

    class Spec:  # what build_spec reads of a VFM
        num_tokens, dim, layers, grid, random_weights = cache.num_tokens, cache.dim, (-1,), (), True

        @staticmethod
        def identity() -> dict[str, Any]:
            return {"vfm": "bench-random", "preprocess": "none", "layers": [-1], "standin": True}

    side = int(round(cache.num_tokens**0.5))
    Spec.grid = (side, side) if side * side == cache.num_tokens else (1, cache.num_tokens)
    t0 = time.perf_counter()
    counters = cache.reads, cache.rows_read, cache.read_s, dict(cache.by_ability)  # (the copy is not the fingerprint's)
    spec = build_spec(
        Spec,
        "bench-random",
        ExtractConfig(vfm="bench-random", data="", cache=str(root), dtype="fp16", views=cache.views),
    )
    group = create_group(root, spec, shard_size=64)
    add_rows(group, shas)
    grid = token_grid(group)

    def shard(k: int) -> None:
        if time.monotonic() >= deadline:
            raise OutOfTime(f"the cache's write, at shard {k} of {group.num_shards()}")
        rows = list(group.shard_rows(k))
        values = cache.read([group.rows()[r] for r in rows])
        pooled = {v: pool_tokens(values.astype(np.float32), v, grid) for v in group.views}
        write_shard(group, k, {r: [(values[i], None, {v: pooled[v][i] for v in pooled})] for i, r in enumerate(rows)})

    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(shard, range(group.num_shards())))
    finally:
        cache.reads, cache.rows_read, cache.read_s, by_ability = counters
        cache.by_ability.clear()
        cache.by_ability.update(by_ability)
    seconds = time.perf_counter() - t0
    nbytes = sum(f.stat().st_size for f in Path(root).rglob("*") if f.is_file())
    return open_cache(str(root), "bench-random"), {
        "rows": len(shas),
        "gb": round(nbytes / 1e9, 2),
        "write_s": round(seconds, 2),
    }


# Samples per ability in the real benchmark (train + test, the paper's Table 2; ~226.7K in all)
REAL_SIZES = {
    "localization": 34_800,
    "counting": 13_600,
    "fine_grained": 9_000,
    "abs_depth": 8_600,
    "rel_depth": 11_600,
    "ocr": 11_000,
    "orientation": 8_500,
    "recognition": 44_900,
    "action": 15_000,
    "texture": 13_300,
    "spatial": 11_500,
    "scene": 13_900,
    "emotion": 17_000,
    "color": 14_000,
}


def build(
    root: Path, samples: int | dict[str, int], tokens: int, dim: int, abilities: tuple[str, ...]
) -> tuple[Path, RandomCache]:
    from ava.data.format import Dataset
    from tests.helpers import handmade

    data, fake = handmade(root / "data", abilities=abilities, n=samples, tokens=4, dim=16)
    cache = RandomCache({sha: rows[0, 0] for sha, rows in fake.rows.items()}, tokens, dim)
    for s in Dataset(data).samples():
        cache.ability_of[s.image_sha256] = s.ava
    return data, cache


def run_heads(data: Path, out: Path, timings: dict, device: str) -> None:
    from ava.heads.knn.config import KNNConfig
    from ava.heads.knn.train import train as knn_train
    from ava.heads.probe.config import AttnProbeConfig, ProbeConfig
    from ava.heads.probe.train import train as probe_train

    common = dict(vfm="random", data=str(data), cache="x", progress=False, device=device)
    for head, fn, cfg in (
        ("probe-linear", probe_train, ProbeConfig),
        ("probe-attn", probe_train, AttnProbeConfig),
        ("knn", knn_train, KNNConfig),
    ):
        t0 = time.perf_counter()
        fn(cfg(out=str(out / head), **common))
        timings[head] = time.perf_counter() - t0


@contextlib.contextmanager
def max_memory(gb: float | None) -> Iterator[None]:
    """While inside, the probes of a fingerprint hold train tokens whole in float32 only up to ``gb`` (their
    ``max_memory_gb``; larger sets are gathered batch by batch). ``None``: the probes' default."""
    from ava.heads import fingerprint as fp

    real = fp.head_config

    def limited(*a, **k):  # noqa: ANN002, ANN003, ANN202
        config = real(*a, **k)
        if gb is not None and hasattr(config, "max_memory_gb"):
            config.max_memory_gb = gb
        return config

    fp.head_config = limited
    try:
        yield
    finally:
        fp.head_config = real


class OutOfTime(Exception):
    """The part's share of the stage's time is spent: the abilities done so far are reported."""


@contextlib.contextmanager
def timed_fits(per: dict, deadline: float = float("inf")) -> Iterator[None]:
    """While inside, each ``AbilityRun.fit`` of a fingerprint records its wall seconds in ``per[(head, ability)]``, and
    each ability its wall seconds (``per["ability_s"]``) and where its features were held (``per["placement"]``).
    An ability that would start after ``deadline`` (``time.monotonic()``) raises :class:`OutOfTime` instead."""
    from ava.heads import ability_runs
    from ava.heads import fingerprint as fp

    real, real_ability = fp.AbilityRun.fit, ability_runs._train_ability

    def timed(self, ava, features, on_step=None):  # noqa: ANN001, ANN202
        t0 = time.perf_counter()
        real(self, ava, features, on_step)
        per[(self.head, ava)] = time.perf_counter() - t0
        per.setdefault("placement", {})[ava] = getattr(features, "placement", None)

    def ability(todo, cache, ava, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if time.monotonic() >= deadline:
            raise OutOfTime(ava)
        t0 = time.perf_counter()
        seen = len(waited)
        reads = real_ability(todo, cache, ava, *a, **k)
        per.setdefault("ability_s", {})[ava] = time.perf_counter() - t0  # placement, reads and every head's fit
        heads = {h: round(v, 2) for (h, a), v in ((k, v) for k, v in per.items() if isinstance(k, tuple)) if a == ava}
        token_reads = _token_reads(waited[seen:])
        if token_reads:
            per.setdefault("token_reads", {})[ava] = token_reads
        print(
            json.dumps(
                {
                    "ability": ava,
                    "seconds": round(per["ability_s"][ava], 2),
                    "heads": heads,
                    "placement": per.get("placement", {}).get(ava),
                    "token_reads": token_reads,
                },
                default=str,
            ),
            flush=True,
        )
        return reads

    fp.AbilityRun.fit, ability_runs._train_ability = timed, ability
    try:
        with token_waits() as waited:
            yield
    finally:
        fp.AbilityRun.fit, ability_runs._train_ability = real, real_ability


@contextlib.contextmanager
def token_waits() -> Iterator[list[dict]]:
    """While inside, each token read from a Zarr cache (``ResidentFeatures``) appends to the list yielded, at its first
    ``wait()``: how long that wait blocked, how long the read took, its GB, where the rows are held, and the reader
    threads' seconds by phase (``ResidentFeatures.phases``)."""
    from ava.cache.reader import ResidentFeatures

    real_wait = ResidentFeatures.wait
    waited: list[dict] = []

    def wait(self):  # noqa: ANN001, ANN202
        if getattr(self, "_bench_waited", False):
            return real_wait(self)
        t0 = time.perf_counter()
        values = real_wait(self)
        self._bench_waited = True
        waited.append(
            {
                "blocked_s": time.perf_counter() - t0,
                "read_s": self.seconds or 0.0,
                "gb": self.nbytes / 1e9,
                "where": str(self.where),
                "phases": dict(self.phases),
            }
        )
        return values

    ResidentFeatures.wait = wait
    try:
        yield waited
    finally:
        ResidentFeatures.wait = real_wait


def _token_reads(waits: list[dict]) -> dict | None:
    """An ability's token reads from a Zarr cache (``ResidentFeatures``), summed: GB, the read's seconds and GB/s,
    the seconds the fingerprint blocked waiting for it (after a read ahead: what the fits before did not hide), and
    the reader threads' seconds by phase (reading and decoding on the host, the NaN/inf check, the copy to a GPU)."""
    if not waits:
        return None
    gb, read_s = sum(w["gb"] for w in waits), sum(w["read_s"] for w in waits)
    return {
        "gb": round(gb, 3),
        "read_s": round(read_s, 3),
        "gb_s": round(gb / read_s, 2) if read_s > 0 else None,
        "blocked_s": round(sum(w["blocked_s"] for w in waits), 3),
        "held_on": sorted({w["where"] for w in waits}),
        "thread_s": {k: round(sum(w["phases"].get(k, 0.0) for w in waits), 3) for k in ("read", "check", "copy")},
    }


def run_fingerprint(
    data: Path,
    out: Path,
    per: dict,
    heads: list[str],
    gb: float | None,
    device: str,
    deadline: float = float("inf"),
    abilities: list[str] | None = None,
    jobs: int | None = None,
) -> bool:
    """The fingerprint, timed; False when it was cut at ``deadline`` (``per`` holds the abilities done)."""
    from ava.heads import fingerprint as fp

    with timed_fits(per, deadline), max_memory(gb):
        try:
            fp.fingerprint(
                fp.FingerprintConfig(
                    vfm="random",
                    data=str(data),
                    cache="x",
                    out=str(out),
                    device=device,
                    progress=False,
                    heads=heads,
                    ava=abilities,
                    jobs=jobs,
                )
            )
        except OutOfTime as e:
            print(json.dumps({"cut_by_budget_before": str(e)}), flush=True)
            return False
    return True


def run_real(args: argparse.Namespace, tmp: Path) -> list[dict]:
    """Synthetic suite -> ``ava cache extract`` -> ``ava fingerprint`` (timed), all in this process; one fingerprint
    per ``--jobs`` value, one after another on the same cache (a side-by-side comparison)."""
    from ava.cache import ExtractConfig, extract
    from ava.heads import fingerprint as fp
    from ava.synth import SynthConfig, generate

    data, cache = tmp / "data", tmp / "cache"
    t0 = time.perf_counter()
    generate(SynthConfig(out=str(data), per_ava=args.samples, size=args.size, seed=0), progress=False)
    extract(ExtractConfig(vfm=args.vfm, data=str(data), cache=str(cache), device=args.device, progress=False))
    prepare = time.perf_counter() - t0
    rows = []
    for jobs in args.jobs.split(","):
        per: dict = {}
        n = None if jobs == "auto" else int(jobs)
        config = fp.FingerprintConfig(
            vfm=args.vfm,
            data=str(data),
            cache=str(cache),
            out=str(tmp / f"runs-{jobs}"),
            heads=args.heads.split(","),
            device=args.device,
            progress=False,
            jobs=n,
        )
        with timed_fits(per), max_memory(args.max_memory_gb):
            t0, c0 = time.perf_counter(), time.process_time()
            result = fp.fingerprint(config)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        reads = sorted(result.reads.values())
        heads = _per_head(per)
        rows.append(
            {
                "mode": f"fingerprint {args.vfm}",
                "jobs": n or fp.default_jobs(args.device, len(config.heads)),
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "reads_per_ability": reads[len(reads) // 2] if reads else 0,
                "token_reads": sum(reads),
                "fit_s_per_head": heads,
                "prepare_s": round(prepare, 2),
                "detail": _detail(per),
            }
        )
    return rows


def _detail(per: dict) -> dict[str, float]:
    return {_name(k): round(v, 3) for k, v in per.items() if not isinstance(v, dict)}


def _scaled(per: dict, counts: dict[str, int], args: argparse.Namespace) -> dict:
    """The per-ability wall times, the placements, and the fingerprint's time scaled to the real benchmark: each
    ability's wall time (placing and reading its features, every head's fit) x its real sample count / the count
    run, summed (every head's cost grows linearly with the samples at fixed epochs; kNN's search, quadratic, is a
    small share on a GPU). Where an ability at its real size would be held elsewhere than at the size run (e.g.
    host memory instead of the GPU), the rule does not capture it: ``placement_at_real_size`` says where
    ``ava.cache.placement.place`` puts it on this machine now."""
    from ava.cache.placement import place

    walls = per.get("ability_s", {})
    scaled = {a: walls[a] * REAL_SIZES[a] / counts[a] for a in walls if a in REAL_SIZES}
    by_steps = {a: _scaled_by_steps(per, a, walls[a], counts[a], REAL_SIZES[a]) for a in walls if a in REAL_SIZES}
    at_real = {
        a: place(args.device, REAL_SIZES[a] * args.tokens * args.dim * 2).kind for a in counts if a in REAL_SIZES
    }
    return {
        "ability_s": {a: round(v, 2) for a, v in walls.items()},
        "samples": counts,
        "placement": per.get("placement", {}),
        "scaled_to_real_s": round(sum(scaled.values()), 1),
        "scaled_by_steps_s": round(sum(by_steps.values()), 1),
        "by_steps_ability_s": {a: round(v, 2) for a, v in by_steps.items()},
        "real_samples": sum(REAL_SIZES[a] for a in scaled),
        "placement_at_real_size": at_real,
    }


def _probe_steps(n_fit: int, tokens: bool) -> int:
    """The optimizer steps a probe takes on ``n_fit`` rows with its default epochs and batch size (epochs shrink as
    the rows grow: ~500 steps until the epoch floor, see ``ava.heads.probe.train._defaults``)."""
    from ava.heads.probe.config import ProbeConfig
    from ava.heads.probe.train import _defaults

    epochs, batch = _defaults(ProbeConfig(), n_fit, tokens)
    return epochs * -(-n_fit // batch)


def _scaled_by_steps(per: dict, ava: str, wall: float, count: int, real: int) -> float:
    """One ability's time at its real size, estimated part by part: each probe's fit time x the ratio of its
    optimizer steps at the real and the run size (its steps do not grow with the rows: the default epochs shrink),
    knn's and everything else's (reading and placing features, evaluation) x real / run count. The fit rows are
    72% of an ability's samples (80% train, less the 10% held out). An estimate, not a measurement."""
    fits = {h: t for (h, a), t in ((k, v) for k, v in per.items() if isinstance(k, tuple)) if a == ava}
    ratio = real / count
    fit = lambda n: max(1, round(0.72 * n))  # noqa: E731
    total = max(0.0, wall - sum(fits.values())) * ratio
    for head, t in fits.items():
        if head in ("probe-linear", "probe-attn"):
            tokens = head == "probe-attn"
            total += t * _probe_steps(fit(real), tokens) / _probe_steps(fit(count), tokens)
        else:
            total += t * ratio
    return total


def _name(key: str | tuple[str, str]) -> str:
    return " ".join(key) if isinstance(key, tuple) else key


def _per_head(per: dict) -> dict[str, float]:
    """Fit seconds summed per head from ``{(head, ability): s}`` (or ``{head: s}``)."""
    out: dict[str, float] = defaultdict(float)
    for key, v in per.items():
        if isinstance(v, dict):  # per-ability placements and wall times
            continue
        out[key[0] if isinstance(key, tuple) else key] += v
    return {h: round(v, 2) for h, v in out.items()}


def run_random(
    args: argparse.Namespace,
    tmp: Path,
    counts: dict[str, int],
    abilities: tuple[str, ...],
    scale: float | None,
    deadline: float,
    zarr: list[str] | None = None,
) -> list[dict]:
    """The ``--modes`` on random features of ``counts`` samples per ability; a mode that reaches ``deadline`` reports
    the abilities it finished (``cut_by_budget``). ``zarr``: then the fingerprint of these abilities again, from a
    real fp16 Zarr cache of the same rows (:func:`zarr_check`)."""
    import ava.cache

    data, cache = build(tmp, counts, args.tokens, args.dim, abilities)
    ava.cache.open_cache = lambda *a, **k: cache  # every head opens this stand-in
    rows = []
    modes = args.modes.split(",")
    # each mode's share of the time by its work: the Zarr check's abilities' rows, written, then fitted twice (x 2.5)
    weights = [1.0] * len(modes) + ([2.5 * sum(counts[a] for a in zarr) / sum(counts.values())] if zarr else [])
    for j, mode in enumerate(modes):
        end = time.monotonic() + (deadline - time.monotonic()) * weights[j] / sum(weights[j:])
        cache.reads, cache.rows_read, cache.read_s = 0, 0, 0.0
        cache.by_ability.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        detail: dict = {}
        whole = True
        if mode == "heads":
            run_heads(data, tmp / mode, detail, args.device)
        elif mode == "fingerprint":
            try:
                import ava.heads.fingerprint  # noqa: F401
            except ImportError:
                print("fingerprint: not in this checkout, skipped")
                continue
            # one head at a time: the estimate by steps adds the heads' fit times (zarr_check runs two at once too)
            whole = run_fingerprint(
                data, tmp / mode, detail, args.heads.split(","), args.max_memory_gb, args.device, end, jobs=1
            )
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        reads = sorted(cache.by_ability.values())
        row = {
            "mode": mode,
            "scale": scale,
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "reads": cache.reads,
            "reads_per_ability": reads[len(reads) // 2] if reads else 0,
            "cut_by_budget": not whole,
            "rows_read": cache.rows_read,
            "read_s": round(cache.read_s, 2),
            "fit_s_per_head": _per_head(detail),
            "detail": _detail(detail),
        }
        if mode == "fingerprint":
            row.update(_scaled(detail, counts, args))
            row["abilities_done"] = sorted(detail.get("ability_s", {}))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "detail"}), flush=True)
    stand_in = next((r for r in rows if r["mode"] == "fingerprint"), None)
    if zarr and stand_in is not None:
        rows.append(zarr_check(args, tmp, data, cache, zarr, stand_in, deadline))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _outside(ability_s: dict[str, float], detail: dict[str, float], ava: str) -> float:
    """An ability's wall time outside its heads' fits (reading and placing its features, starting the next read)."""
    return ability_s[ava] - sum(v for k, v in detail.items() if k.endswith(f" {ava}"))


def zarr_check(
    args: argparse.Namespace,
    tmp: Path,
    data: Path,
    cache: RandomCache,
    abilities: list[str],
    stand_in: dict,
    deadline: float,
) -> dict:
    """The fingerprint of ``abilities`` again, from a real fp16 Zarr cache of the same rows (:func:`zarr_copy`),
    read as a user's cache is read: each ability's time outside its heads' fits beside the stand-in's (which reads
    every ability on the fingerprint's own thread, placing it as it reads: no read ahead). The first ability's
    read has nothing to overlap with; the others are read while the one before fits.

    It runs one head at a time, as the stand-in's scaled runs do (their estimate adds the heads' fit times), then
    once more with two at once (``two_jobs``, the default on a GPU and a multi-core CPU: on a GPU the probes' small
    steps wait on the host's launches, which two fits on threads overlap), and scales the estimate by the two walls'
    ratio (``scaled_by_steps_s_two_jobs``: the ratio at this size taken to hold at the real size, an estimate).
    ``token_reads``: per ability, its token read's GB/s, the seconds it blocked the fingerprint (after a read ahead:
    what the fits before did not hide) and its reader threads' seconds by phase."""
    import ava.cache
    from ava.data.format import Dataset

    done = [a for a in abilities if a in stand_in.get("ability_s", {})]
    row: dict[str, Any] = {"mode": "fingerprint (zarr)", "scale": stand_in.get("scale"), "abilities": done}
    if not done:
        return {**row, "skipped": "the stand-in run did not finish these abilities"}
    if time.monotonic() >= deadline:
        return {**row, "skipped": "the part's time ran out"}
    shas = list(dict.fromkeys(s.image_sha256 for s in Dataset(data).samples() if s.ava in done))
    try:
        real, made = zarr_copy(cache, shas, tmp / "zarr-cache", deadline=deadline)
    except OutOfTime as e:
        return {**row, "skipped": f"the part's time ran out during {e}"}
    except Exception as e:  # noqa: BLE001 - said in the row
        return {**row, "error": f"{type(e).__name__}: {e}"[:300]}
    from ava.cache.reader import FeatureCache

    if not isinstance(real, FeatureCache):  # (opened through the patched open_cache, it would be the stand-in again)
        return {**row, "error": f"the copy opened as {type(real).__name__}, not a Zarr FeatureCache"}
    row.update(made)
    ava.cache.open_cache = lambda *a, **k: real
    per: dict = {}
    t0 = time.perf_counter()
    whole = run_fingerprint(
        data,
        tmp / "fingerprint-zarr",
        per,
        args.heads.split(","),
        args.max_memory_gb,
        args.device,
        deadline,
        abilities=done,
        jobs=1,
    )
    ability_s = per.get("ability_s", {})
    detail = _detail({k: v for k, v in per.items() if isinstance(k, tuple)})
    row.update(
        {
            "wall_s": round(time.perf_counter() - t0, 2),
            "cut_by_budget": not whole,
            "ability_s": {a: round(v, 2) for a, v in ability_s.items()},
            "placement": per.get("placement", {}),
            "outside_fits_s": {a: round(_outside(ability_s, detail, a), 2) for a in ability_s},
            "stand_in_outside_fits_s": {
                a: round(_outside(stand_in["ability_s"], stand_in["detail"], a), 2) for a in ability_s
            },
            "token_reads": per.get("token_reads", {}),
            "detail": detail,
        }
    )
    row.update(zarr_estimate(stand_in, ability_s, detail, done[0]))
    row["jobs"] = 1
    if whole:
        per, one_wall = {}, row["wall_s"]
        t0 = time.perf_counter()
        whole = run_fingerprint(
            data,
            tmp / "fingerprint-zarr-jobs",
            per,
            args.heads.split(","),
            args.max_memory_gb,
            args.device,
            deadline,
            abilities=done,
            jobs=2,
        )
        wall = time.perf_counter() - t0
        row["two_jobs"] = {
            "jobs": 2,
            "wall_s": round(wall, 2),
            "cut_by_budget": not whole,
            "ability_s": {a: round(v, 2) for a, v in per.get("ability_s", {}).items()},
            "token_reads": per.get("token_reads", {}),
        }
        if whole and row.get("scaled_by_steps_s_with_zarr_reads") is not None:
            row["two_jobs"]["over_one"] = round(wall / one_wall, 3)
            row["scaled_by_steps_s_two_jobs"] = round(row["scaled_by_steps_s_with_zarr_reads"] * wall / one_wall, 1)
    ava.cache.open_cache = lambda *a, **k: cache
    return row


def zarr_estimate(stand_in: dict, ability_s: dict[str, float], detail: dict[str, float], first: str) -> dict:
    """Over the abilities read ahead (all but ``first``): the real cache's time outside the fits over the stand-in's
    (``outside_ratio``), and the stand-in's estimate by optimizer steps with every ability's outside part (scaled to
    its real size) times that ratio. Nothing where the stand-in's outside time is not positive (heads fitted at once on
    a CPU: their fit times overlap, and the outside time is not a wall time any more)."""
    ahead = [a for a in ability_s if a != first]
    theirs = sum(max(0.0, _outside(stand_in["ability_s"], stand_in["detail"], a)) for a in ahead)
    if not ahead or theirs <= 0 or stand_in.get("scaled_by_steps_s") is None:
        return {}
    ratio = sum(max(0.0, _outside(ability_s, detail, a)) for a in ahead) / theirs
    outside_real = sum(
        max(0.0, _outside(stand_in["ability_s"], stand_in["detail"], a)) * REAL_SIZES[a] / stand_in["samples"][a]
        for a in stand_in["ability_s"]
        if a in REAL_SIZES
    )
    return {
        "outside_ratio": round(ratio, 3),
        "scaled_by_steps_s_with_zarr_reads": round(stand_in["scaled_by_steps_s"] - (1 - ratio) * outside_real, 1),
    }


BEFORE_WAY = "host, then moved whole (before)"  # placement_reads' ways of holding rows read into host memory elsewhere
CHUNKS_WAY = "host, then moved whole (pinned chunks)"


def reads_estimate(stand_in: dict, zarr_row: dict, placement: list[dict], free_gb: float, row_gb: float) -> dict:
    """The fingerprint at real size with its token reads, ability by ability in the fingerprint's order, from what
    this run measured: each ability's heads' fits by optimizer steps (the stand-in's estimate less its time outside
    the fits, which the Zarr check showed is the stand-in's own read), and each read at the rate the Zarr check's
    reads ran at. The first ability's read blocks whole (at the first read's rate); each later one is read while the
    one before fits and blocks for what the fits do not hide: read ahead onto the GPU when it fits in
    ``AHEAD_SHARE`` of the free memory left beside the rows held (the Zarr check's slowest read-ahead rate), else
    read into host memory (the placement part's host rate) and then copied whole to the GPU (its whole-copy rate),
    where the placement puts it (``SHARE`` of the free memory), else held in host memory (host-staged: the heads'
    slower batches are not in the estimate). ``free_gb``: the GPU's free memory with nothing held. Also with two heads
    at once (``two_jobs``: the fits times the Zarr check's wall ratio, and the reads hidden behind those shorter
    fits). An estimate, not a measurement; {} where no read ran ahead (a CPU run) or a rate is missing."""
    from ava.cache.placement import SHARE
    from ava.heads.features import AHEAD_SHARE

    reads, done = zarr_row.get("token_reads") or {}, zarr_row.get("abilities") or []
    ahead = [a for a in done[1:] if (reads.get(a) or {}).get("gb_s")]
    held = {w for a in ahead for w in reads[a].get("held_on", [])}
    if not ahead or not done or not (reads.get(done[0]) or {}).get("gb_s") or not any("cuda" in w for w in held):
        return {}
    rate_ahead, rate_first = min(reads[a]["gb_s"] for a in ahead), reads[done[0]]["gb_s"]
    by_way = {(r.get("placement"), r.get("way")): r for r in placement if "seconds" in r}
    host = by_way.get(("host", "read where held"))
    # the whole copy as placing rows read ahead into host memory makes it (ava.cache.placement.to_device), where the
    # run measured it, else the plain copy it replaced
    copy_way = next((w for w in (CHUNKS_WAY, BEFORE_WAY) if ("on-device", w) in by_way), BEFORE_WAY)
    whole = by_way.get(("on-device", copy_way))
    if host is None or whole is None or whole["seconds"] <= host["seconds"]:
        return {}
    rate_host, rate_copy = host["gb_s"], whole["gb"] / (whole["seconds"] - host["seconds"])
    order = [a for a in stand_in["ability_s"] if a in REAL_SIZES]
    fits = {
        a: stand_in["by_steps_ability_s"][a]
        - max(0.0, _outside(stand_in["ability_s"], stand_in["detail"], a)) * REAL_SIZES[a] / stand_in["samples"][a]
        for a in order
    }

    def run(factor: float) -> tuple[float, dict]:
        gb = {a: REAL_SIZES[a] * row_gb for a in order}
        blocked = gb[order[0]] / rate_first
        ways = {order[0]: ["read first, nothing to hide it", round(blocked, 1)]}
        for prev, a in itertools.pairwise(order):
            hidden = factor * fits[prev]
            if gb[a] <= AHEAD_SHARE * (free_gb - gb[prev]):
                way, b = "read ahead onto the GPU", max(0.0, gb[a] / rate_ahead - hidden)
            elif gb[a] <= SHARE * free_gb:
                way, b = (
                    "read ahead into host memory, copied whole",
                    max(0.0, gb[a] / rate_host - hidden) + gb[a] / rate_copy,
                )
            else:
                way, b = "read ahead into host memory, host-staged", max(0.0, gb[a] / rate_host - hidden)
            ways[a] = [way, round(b, 1)]
            blocked += b
        return factor * sum(fits.values()) + blocked, ways

    one, ways = run(1.0)
    out = {
        "mode": "estimate with reads at real size",
        "fits_s": round(sum(fits.values()), 1),
        "scaled_s": round(one, 1),
        "reads_blocked_s": round(one - sum(fits.values()), 1),
        "rates_gb_s": {
            "first read": rate_first,
            "read ahead": rate_ahead,
            "host read": rate_host,
            "whole copy": round(rate_copy, 2),
        },
        "whole_copy_way": copy_way,
        "free_gb": round(free_gb, 1),
        "by_ability": ways,
    }
    ratio = (zarr_row.get("two_jobs") or {}).get("over_one")
    if ratio:
        out["scaled_s_two_jobs"] = round(run(ratio)[0], 1)
    return out


def scale_share(scales: list[float | None], fixed: float, left: float) -> float:
    """The first of ``scales``' share of the ``left`` seconds, each scale's time taken as a fixed part (``fixed``: the
    untimed warm-up's wall time, 20 samples an ability, is mostly that) plus a part in proportion to its scale, the
    two fitted to the time left. Shares by scale alone gave 2% a third of the time next to 4%, and the H200's 2% run
    was cut before its last ability (the fixed part is a large share of a small scale's time)."""
    sizes = [x or 1.0 for x in scales]
    if not 0 < left < float("inf"):  # no limit (the share is not used), or no time left
        return 1 / len(sizes)
    per_scale = (left - fixed * len(sizes)) / sum(sizes)
    if per_scale <= 0:  # the fixed parts alone would use the time: equal shares
        return 1 / len(sizes)
    return (fixed + per_scale * sizes[0]) / left


def scaling_check(rows: list[dict], tolerance: float = 0.25) -> dict | None:
    """Whether scaling each ability's time linearly to its real size holds: the estimate from the two smallest scales
    run, over the abilities both finished, per ability and summed; the rule is trusted where the larger scale's
    estimate is within ``tolerance`` of the smaller's (None with fewer than two scales)."""
    runs = [r for r in rows if r["mode"] == "fingerprint" and r.get("scale")]
    if len(runs) < 2:
        return None
    a, b = sorted(runs, key=lambda r: r["scale"])[:2]
    both = sorted(set(a["abilities_done"]) & set(b["abilities_done"]))
    per = {}
    for ava in both:
        est = [r["ability_s"][ava] * REAL_SIZES[ava] / r["samples"][ava] for r in (a, b)]
        per[ava] = {"scaled_s": [round(x, 1) for x in est], "ratio": round(est[1] / max(est[0], 1e-9), 2)}
    total = [sum(r["ability_s"][v] * REAL_SIZES[v] / r["samples"][v] for v in both) for r in (a, b)]
    ratio = total[1] / max(total[0], 1e-9)
    # the rule by optimizer steps (the probes' steps do not grow with the rows; the rest linear): over the abilities
    # both scales finished, from each ability's estimate (rows from before those were kept: whole runs only)
    by_steps = None
    if all("by_steps_ability_s" in r for r in (a, b)) and both:
        steps = [round(sum(r["by_steps_ability_s"][v] for v in both), 1) for r in (a, b)]
    elif set(a["abilities_done"]) == set(b["abilities_done"]):
        steps = [r.get("scaled_by_steps_s") for r in (a, b)]
    else:
        steps = [None, None]
    if all(x is not None for x in steps):
        r_steps = steps[1] / max(steps[0], 1e-9)
        by_steps = {"scaled_total_s": steps, "ratio": round(r_steps, 2), "holds": abs(r_steps - 1) <= tolerance}
    return {
        "scales": [a["scale"], b["scale"]],
        "abilities": both,
        "scaled_total_s": [round(x, 1) for x in total],
        "ratio": round(ratio, 2),
        "holds": bool(both) and abs(ratio - 1) <= tolerance,
        "per_ability": per,
        "by_steps": by_steps,
    }


def write_json(args: argparse.Namespace, rows: list[dict], check: dict | None) -> None:
    """The rows so far into ``--json FILE`` (after each part: a stage cut off later keeps them)."""
    if (path := results.json_file(args.json)) is None:
        return
    from bench_cache import environment

    path.write_text(
        json.dumps(
            {"args": vars(args), "environment": environment(args.device), "rows": rows, "scaling_check": check},
            indent=2,
            default=str,
        )
    )


FINGERPRINT_TARGET = "<= 300 s"  # 14 abilities at their real sizes on one GPU, extraction excluded
PIXELS_TARGET = "<= 40 s"  # `ava fingerprint` of 14 x 150 `pixels` samples on 2 CPU cores


def figures(args: argparse.Namespace, rows: list[dict]) -> list[dict]:
    """The headline figures of a run's rows: the fingerprint's time (at real size, by each estimate, where scaled),
    and each placement's token read rate."""
    gpu = args.device.startswith("cuda")
    out = []
    for r in rows:
        mode = r.get("mode", "")
        if args.vfm and mode == f"fingerprint {args.vfm}":  # the real thing
            held = PIXELS_TARGET if (args.vfm, args.samples, gpu) == ("pixels", 150, False) else None
            out.append(
                results.figure(
                    f"`ava fingerprint`, 14 x {args.samples} {args.vfm} at {args.size} px, jobs {r['jobs']}",
                    r["wall_s"],
                    "s",
                    target=held,
                    note=f"{r['cpu_s']} s CPU, {r['reads_per_ability']} token reads an ability",
                )
            )
        elif mode == "fingerprint" and r.get("scale"):
            out.append(results.figure(f"fingerprint at {100 * r['scale']:g}% of the real size", r["wall_s"], "s"))
        elif mode == "fingerprint":
            out.append(
                results.figure(
                    f"fingerprint, {args.samples} samples an ability, {args.tokens} x {args.dim}",
                    r["wall_s"],
                    "s",
                    note=f"{r['reads_per_ability']} token reads an ability",
                )
            )
    scaled = [r for r in rows if r.get("mode") == "fingerprint" and r.get("scale") and r.get("scaled_by_steps_s")]
    if scaled:
        r = max(scaled, key=lambda x: x["scale"])
        out.append(
            results.figure(
                "14-ability fingerprint at real size, by optimizer steps, stand-in cache",
                r["scaled_by_steps_s"],
                "s",
                target=FINGERPRINT_TARGET if gpu else None,
                note=f"an estimate from {100 * r['scale']:g}% of the real size; {r['scaled_to_real_s']} s linearly",
            )
        )
    estimates = {  # row mode -> (figure, its one-head value, its two-heads value)
        "fingerprint (zarr)": (
            "from a real fp16 Zarr cache",
            "scaled_by_steps_s_with_zarr_reads",
            "scaled_by_steps_s_two_jobs",
        ),
        "estimate with reads at real size": ("every read at its measured rate", "scaled_s", "scaled_s_two_jobs"),
    }
    for r in rows:
        if (named := estimates.get(r.get("mode", ""))) and r.get(named[1]) is not None:
            two = r.get(named[2])
            out.append(
                results.figure(
                    f"14-ability fingerprint at real size, {named[0]}",
                    r[named[1]],
                    "s",
                    target=FINGERPRINT_TARGET if gpu else None,
                    note=f"an estimate; one head at a time{f', {two} s two at once' if two else ''}",
                )
            )
        if r.get("mode") == "placement reads" and isinstance(r.get("rows"), list):
            out += [
                results.figure(f"token read, {p['placement']}, {p['way']}", p["gb_s"], "GB/s", note=f"{p['rows']} rows")
                for p in r["rows"]
                if p.get("gb_s") is not None
            ]
    return out


class PeakRSS:
    """The process's peak resident memory above its level at the start (``/proc/self/status``'s VmRSS, sampled every
    5 ms on a thread; pinned host memory is resident too)."""

    def __enter__(self) -> PeakRSS:
        import threading

        self.start = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def gb(self) -> float:
        return round((self.peak - self.start) / 1e9, 2)


def placement_reads(images: int, tokens: int, dim: int, device: str, work: Path, deadline: float) -> list[dict]:
    """A fingerprint's token read from a real fp16 Zarr cache (``images`` stand-in rows of ``tokens x dim``, written
    by the extraction's own writers) at each placement ``device`` offers: the rows read where they are held (and a
    32-row batch gathered from them for the heads, ``gather_ms``), and the ways through host memory (read there,
    then moved to the GPU as before, or in pinned chunks as placing rows read ahead there does now, or pinned whole);
    seconds, GB/s and the peak host memory above the start (the rows' bytes apart). The data path a fingerprint runs
    outside the heads' fits, per row: ``at_real_size_s`` scales it to the benchmark's 226.7K images (a warm page
    cache: the disk's own speed is not in it)."""
    import gc

    import bench_cache
    import torch

    from ava.cache import open_cache
    from ava.cache.placement import HOST, ON_DEVICE, STAGED, Placement, to_device
    from ava.cache.reader import ResidentFeatures
    from ava.data.format import Dataset
    from ava.heads import features

    data = bench_cache.make_images(work / "images", images)
    bench_cache.standin_once(data, work, images, 32, 64, f"{tokens}x{dim}", views=False)
    cache = open_cache(str(work / "standin-cache"), f"standin-{tokens}x{dim}")
    samples = list(Dataset(data).samples())
    shas = [s.image_sha256 for s in samples]
    nbytes = len(shas) * tokens * dim * 2
    kinds = [HOST] + ([ON_DEVICE, STAGED] if device.startswith("cuda") and torch.cuda.is_available() else [])
    rows = []
    for kind in kinds:
        where = Placement(kind, device if kind == ON_DEVICE else "cpu")
        ways = {"read where held": None}
        if kind == ON_DEVICE:  # a process's first read onto a GPU pins its staging buffers; later reads reuse them
            ways["read where held, again"] = None
        if kind != HOST:
            ways[BEFORE_WAY] = where
        if kind == ON_DEVICE:  # what placing rows read ahead into host memory does now (ava.cache.placement.to_device)
            ways[CHUNKS_WAY] = where
        for way, before in ways.items():
            if time.monotonic() > deadline:
                rows.append({"placement": kind, "way": way, "error": "the part's time ran out"})
                continue
            gc.collect()
            if device.startswith("cuda") and torch.cuda.is_available():
                torch.cuda.synchronize()
            try:
                with PeakRSS() as rss, token_waits() as waited:
                    t0 = time.perf_counter()
                    made = None
                    if before is None:
                        orig = features.AbilityFeatures.__dict__["_placement"]  # (the staticmethod itself)
                        features.AbilityFeatures._placement = staticmethod(lambda d, n, w=where: w)
                        try:
                            made = features.AbilityFeatures(cache, samples, [None], device=device)
                            held = made.tokens()
                        finally:
                            features.AbilityFeatures._placement = orig
                    else:  # read into host memory, then moved to the GPU (in pinned chunks, or as before) or pinned
                        values = ResidentFeatures(cache, shas, device="cpu").wait()
                        if way == CHUNKS_WAY:
                            held = to_device(values, device)
                        else:  # the code before
                            held = values.pin_memory() if kind == STAGED else values.to(device)
                        del values
                    if held.device.type == "cuda":
                        torch.cuda.synchronize()
                    seconds = time.perf_counter() - t0
                gather_ms = None
                if made is not None:  # a training batch of 32 rows, gathered for heads on ``device`` (median of 9)
                    batches = made.held_rows(samples, [None], device)
                    order = np.random.default_rng(0).permutation(len(samples))
                    times = []
                    for i in range(9):
                        t1 = time.perf_counter()
                        x = batches[order[(i * 32) % len(samples) :][:32]]
                        if x.device.type == "cuda":
                            torch.cuda.synchronize()
                        times.append(time.perf_counter() - t1)
                    gather_ms = round(1e3 * float(np.median(times)), 2)
                    del batches, made
            except Exception as e:  # noqa: BLE001 - said in the row; the stage's other parts still run
                rows.append({"placement": kind, "way": way, "error": f"{type(e).__name__}: {e}"[:300]})
                print(json.dumps(rows[-1]), flush=True)
                continue
            rows.append(
                {
                    "placement": kind,
                    "way": way,
                    "rows": len(shas),
                    "gb": round(nbytes / 1e9, 2),
                    "seconds": round(seconds, 2),
                    "gb_s": round(nbytes / 1e9 / seconds, 2),
                    "at_real_size_s": round(sum(REAL_SIZES.values()) * seconds / len(shas), 1),
                    "peak_host_gb_above_start": rss.gb,
                    "held_on": str(held.device),
                    "gather_ms": gather_ms,
                    "pinned": bool(held.is_pinned()) if held.device.type == "cpu" else False,
                    "thread_s": (_token_reads(waited) or {}).get("thread_s"),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            del held
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=150, help="samples per ability (80%% train)")
    ap.add_argument("--tokens", type=int, default=196)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--modes", default="heads,fingerprint")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="the heads' (and, with --vfm, the extraction's) device, e.g. cuda")
    results.json_option(ap)
    ap.add_argument("--vfm", default=None, help="time `ava fingerprint` on this extractor's real cache (e.g. pixels)")
    ap.add_argument("--size", type=int, default=160, help="--vfm: synthetic image side (the demo's)")
    ap.add_argument("--heads", default="probe-linear,probe-attn,knn", help="the fingerprint's heads")
    ap.add_argument("--abilities", default=None, help="random features: comma-separated abilities (default: all 14)")
    ap.add_argument(
        "--scale-to-real",
        default=None,
        help="random features: each ability at this share of its real sample count (--samples ignored); "
        "the JSON adds the time scaled to the real benchmark (see _scaled); two shares, comma-separated "
        "(0.025,0.05), also check that the scaling holds (scaling_check)",
    )
    ap.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="--scale-to-real: no untimed warm-up run first (20 samples an ability), whose one-time costs "
        "(imports, the device's libraries, first calls) would otherwise land in the first scale's "
        "abilities and be multiplied by the scaling",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole run: each scale and mode its share, abilities not started by then "
        "left out (the rows say which were done)",
    )
    ap.add_argument(
        "--max-memory-gb",
        type=float,
        default=None,
        help="the probes' max_memory_gb: train tokens above it are gathered batch by batch",
    )
    ap.add_argument(
        "--placement-reads",
        type=int,
        default=0,
        metavar="IMAGES",
        help="first, a real fp16 cache of this many stand-in rows (--tokens x --dim) read as a fingerprint "
        "reads an ability, at each placement the device offers (on-device, pinned, host), the way now and "
        "the way before; its share of --budget: a tenth",
    )
    ap.add_argument(
        "--zarr-check",
        default=None,
        metavar="ABILITIES",
        help="after the last scale, these abilities' fingerprint again from a real fp16 Zarr cache of the "
        "same rows, written by the extraction's shard writer and read as a user's cache (the next "
        "ability read while the heads fit): each ability's time outside the fits beside the stand-in's "
        "(comma-separated, e.g. counting,recognition,scene)",
    )
    ap.add_argument(
        "--jobs",
        default="auto",
        help="--vfm: heads fitted at once, comma-separated values are run one "
        "after another on the same cache (e.g. 1,auto); auto = ava's default",
    )
    args = ap.parse_args()
    import torch
    from bench_cache import device_name  # the same device line as the cache benchmark

    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="bench-fp-"))
    rows = []
    try:
        if args.vfm:
            rows = run_real(args, tmp)
            for row in rows:
                print(json.dumps({k: v for k, v in row.items() if k != "detail"}))
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            print(
                f"\ndevice: {device_name(args.device)}, torch {torch.__version__}, load average "
                f"{load:.2f} at the end; {args.samples} samples x 14 abilities, {args.size} px, {args.vfm}; "
                f"{dt.date.today()}"
            )
            payload = {"args": vars(args), "rows": rows}
            results.write(args.json, "bench_fingerprint", figures(args, rows), rows, payload, device=args.device)
            return
        from ava.abilities import ABILITY_KEYS

        abilities = tuple(args.abilities.split(",")) if args.abilities else tuple(ABILITY_KEYS)
        if unknown := [a for a in abilities if a not in ABILITY_KEYS]:
            ap.error(f"--abilities: unknown {', '.join(map(repr, unknown))}; known: {', '.join(ABILITY_KEYS)}")
        scales = [float(x) for x in args.scale_to_real.split(",")] if args.scale_to_real else [None]
        budget = Budget(args.budget)
        if args.placement_reads:
            try:
                placed: Any = placement_reads(
                    args.placement_reads, args.tokens, args.dim, args.device, tmp / "placement", budget.deadline(0.1)
                )
            except Exception as e:  # noqa: BLE001 - the fingerprint's scales still run
                placed = {"error": f"{type(e).__name__}: {e}"[:300]}
                print(json.dumps(placed), flush=True)
            rows.append({"mode": "placement reads", "rows": placed})
            write_json(args, rows, None)
            shutil.rmtree(tmp / "placement", ignore_errors=True)  # (its cache: disk for the scales' work)
        if args.scale_to_real and args.warmup:  # one-time costs (imports, the device's libraries, first calls) paid
            t0 = time.monotonic()  # here, not in the first timed ability, where the scaling multiplies them
            from ava.metrics.ciede2000 import ciede2000_many

            # colour's metric imports colour-science (~1.7 s) on its first call: paid in a timed scale, its linear
            # estimate would multiply that import by the scaling
            ciede2000_many([[0.5, 0.5, 0.5]], [[0.4, 0.5, 0.6]])
            warm = run_random(args, tmp / "warm-up", {a: 20 for a in abilities}, abilities, None, budget.deadline(0.1))
            rows.append(
                {
                    "mode": "warm-up (untimed)",
                    "wall_s": round(time.monotonic() - t0, 2),
                    "abilities_done": sorted({a for r in warm for a in r.get("abilities_done", [])}),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            write_json(args, rows, None)
            shutil.rmtree(tmp / "warm-up", ignore_errors=True)
        fixed = next((r["wall_s"] for r in rows if r["mode"] == "warm-up (untimed)"), 0.0)
        for i, scale in enumerate(scales):  # each scale a share of the time left, by its expected time
            deadline = budget.deadline(scale_share(scales[i:], fixed, budget.left()))
            counts = {a: args.samples for a in abilities}
            if scale:  # each ability at this share of its real size
                counts = {a: max(20, round(scale * REAL_SIZES[a])) for a in abilities}
            zarr = (
                [a for a in args.zarr_check.split(",") if a in abilities]
                if args.zarr_check and i == len(scales) - 1
                else None
            )
            rows += run_random(args, tmp / f"scale-{i}", counts, abilities, scale, deadline, zarr)
            write_json(args, rows, scaling_check(rows))
        zarr_row = next((r for r in rows if r["mode"] == "fingerprint (zarr)" and "token_reads" in r), None)
        placed_rows = next((r["rows"] for r in rows if r["mode"] == "placement reads"), [])
        if zarr_row is not None and args.device.startswith("cuda") and torch.cuda.is_available():
            from ava.cache.placement import device_free_bytes

            stand_in = [r for r in rows if r["mode"] == "fingerprint" and r.get("scale") == zarr_row.get("scale")]
            if stand_in and (
                est := reads_estimate(
                    stand_in[-1],
                    zarr_row,
                    placed_rows,
                    device_free_bytes(args.device) / 1e9,
                    args.tokens * args.dim * 2 / 1e9,
                )
            ):
                rows.append(est)
                print(json.dumps(est), flush=True)
                write_json(args, rows, scaling_check(rows))
        if any(r["mode"] == "fingerprint" for r in rows):
            per = next(r for r in rows if r["mode"] == "fingerprint")["detail"]
            heads = sorted({k.split(" ")[0] for k in per})
            names = sorted({k.split(" ")[1] for k in per})
            print("\n| ability | " + " | ".join(f"{h} s" for h in heads) + " |")
            print("|---|" + "---:|" * len(heads))
            for a in names:
                print(f"| {a} | " + " | ".join(f"{per.get(f'{h} {a}', float('nan')):.2f}" for h in heads) + " |")
        if check := scaling_check(rows):
            print(f"\nscaling rule at two scales: {json.dumps(check)}")
        print(
            f"\ndevice: {device_name(args.device)}, torch {torch.__version__}, abilities {len(abilities)}, "
            f"tokens {args.tokens} x {args.dim}, random features; {dt.date.today()}"
        )
        if results.json_file(args.json) is None:
            results.write(args.json, "bench_fingerprint", figures(args, rows), rows, None, device=args.device)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
