"""What an extraction will write, said before it writes: the size of a cache group and the space to hold it.

``ava cache extract`` computes an :class:`ExtractPlan` once the VFM is loaded (its token count and dim are known) and
before the group is made: rows to compute x layers x (tokens x dim x bytes per value of the codec, plus the codec's
scales), the pooled views stored beside the tokens (float32), and the index (``rows.json``, the ``done`` flags, each
chunk's shard-index entry, checksum and compressor header). The figures are *raw*, before compression: an upper
bound (compression only makes a group smaller; features of trained ViTs hardly compress, pixel and ReLU features
do), so a run that the plan says fits does fit. Next to it: the free space of the filesystem the cache is on
(``shutil.disk_usage`` of the cache directory, or of its nearest existing parent); object storage has no such figure
and gets the size alone.

When the size exceeds the free space, extraction stops before the first byte with one line that names both figures
and the codecs that would fit (:func:`check_space`); ``--force`` goes on (the raw figure may overstate what a
compressible VFM stores). ``--dry-run`` prints the plan and writes nothing. :func:`benchmark_sizes` gives the table
of ``docs/cache-size.md``: the official benchmark's cache per VFM of the paper and codec.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ava.cache.codecs import CODECS, get_codec
from ava.cache.location import CachePath, cache_path, is_remote
from ava.cache.pooling import pool_dim
from ava.cache.store import CacheGroup, spec_key
from ava.errors import AvaError

ROWS_JSON_BYTES = 67  # one row of rows.json: a sha256 in hex, its quotes, a comma and a space
CHUNK_OVERHEAD = 36  # bytes per stored chunk beyond its data: shard index entry (16), CRC-32C (4), compressor header
METADATA_BYTES = 1024  # a zarr.json (group or array metadata), rounded up
OFFICIAL_IMAGES = 218_000  # the official benchmark: ~218K image-question pairs, each with its own image (drawn boxes)
PAPER_VFMS = ("siglip2", "siglip", "aimv2", "clip", "internvit", "radio", "dinov2", "sam", "midas")


def row_bytes(codec: str, num_tokens: int, dim: int, layers: int = 1, views: tuple[str, ...] | list[str] = ()) -> dict:
    """Raw bytes one image adds to a group of these shapes: ``tokens`` (the codec's values), ``scales``, ``views``
    (the pooled views, float32) and ``index`` (rows.json, done flag, per-chunk overhead)."""
    c = get_codec(codec)
    values, scales = c.row_bytes(num_tokens, dim)
    chunks = layers * (2 if c.has_scale else 1)
    return {
        "tokens": layers * values,
        "scales": layers * scales,
        "views": layers * sum(4 * pool_dim(dim, v) for v in views),
        "index": ROWS_JSON_BYTES + 1 + chunks * CHUNK_OVERHEAD,
    }


def group_bytes(
    codec: str,
    rows: int,
    num_tokens: int,
    dim: int,
    layers: int = 1,
    views: tuple[str, ...] | list[str] = (),
    *,
    new_group: bool = True,
    shard_size: int = 64,
    block: int = 0,
) -> dict[str, int]:
    """Raw bytes ``rows`` images add (with the group's metadata when the group is new), by part, and ``total``.

    ``block``: the filesystem's allocation unit; every file (a shard of each array, a metadata file) is counted as
    taking up to one more block than its bytes (what a small filesystem fills up with; nothing at 64-image shards)."""
    parts = {k: v * rows for k, v in row_bytes(codec, num_tokens, dim, layers, views).items()}
    arrays = 1 + layers * (2 if get_codec(codec).has_scale else 1) + layers * len(views)
    files = arrays * -(-rows // max(1, shard_size)) + 1  # every array's shards, and rows.json
    if new_group:
        parts["index"] += (arrays + 1) * METADATA_BYTES
        files += arrays + 2  # the metadata files and the job's lock
    parts["index"] += files * block if rows else 0
    return {**parts, "total": sum(parts.values())}


def free_space(cache: str | os.PathLike[str] | CachePath) -> tuple[int, str] | None:
    """(bytes free, the directory measured) of the filesystem a local cache is (or will be) on; None for object
    storage (no free-space figure)."""
    path = cache_path(cache)
    if is_remote(path):
        return None
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:  # the cache directory may not exist yet
        here = here.parent
    return shutil.disk_usage(here).free, str(here)


def size(n: int | float) -> str:
    """Bytes in decimal units (``512 B``, ``1.2 GB``), as disks are sold and ``df -H`` prints."""
    from rich.filesize import decimal

    return f"{int(n)} B" if n < 1000 else decimal(int(n))


@dataclass
class ExtractPlan:
    """One extraction's plan: the group it writes, its rows, the raw bytes it adds by part, and the free space."""

    cache: str
    key: str
    vfm: str
    codec: str
    exists: bool  # the group is there already (this run resumes or extends it)
    rows: int  # rows of the selected images
    done: int  # of those, already done
    num_tokens: int
    dim: int
    layers: list[int]
    views: list[str]
    bytes: dict[str, int]  # what this run adds: tokens, scales, views, index, total
    free: int | None  # bytes free at the destination (None: object storage)
    free_at: str | None  # the directory whose filesystem was measured
    by_codec: dict[str, int] = field(default_factory=dict)  # the total under every registered codec

    @property
    def todo(self) -> int:
        return self.rows - self.done

    @property
    def fits(self) -> bool:
        return self.free is None or self.bytes["total"] <= self.free

    def fitting_codecs(self) -> list[str]:
        """Registered codecs whose total fits in the free space, smallest first (all of them without a figure)."""
        ranked = sorted(self.by_codec.items(), key=lambda kv: kv[1])
        return [c for c, n in ranked if self.free is None or n <= self.free]

    def as_dict(self) -> dict[str, Any]:
        return {
            "cache": self.cache,
            "key": self.key,
            "vfm": self.vfm,
            "codec": self.codec,
            "exists": self.exists,
            "rows": self.rows,
            "done": self.done,
            "todo": self.todo,
            "num_tokens": self.num_tokens,
            "dim": self.dim,
            "layers": self.layers,
            "views": self.views,
            "bytes": self.bytes,
            "free": self.free,
            "free_at": self.free_at,
            "fits": self.fits,
            "by_codec": self.by_codec,
            "text": self.lines(),
        }

    def lines(self) -> list[str]:
        """The plan in words: the group, its rows, the bytes by part, the free space."""
        b = self.bytes
        state = f"existing group, {self.done} of {self.rows} rows done" if self.exists else "new group"
        shape = f"{len(self.layers)} layer(s) x {self.num_tokens} tokens x {self.dim} dim"
        per_value = (b["tokens"] + b["scales"]) / max(1, self.todo * len(self.layers) * self.num_tokens * self.dim)
        out = [
            f"{self.cache}: group {self.key} ({self.vfm}, {self.codec}; {state})",
            f"  {self.todo} row(s) to write x {shape} x {per_value:.3g} byte/value = "
            f"{size(b['tokens'] + b['scales'])} (tokens {size(b['tokens'])}, scales {size(b['scales'])})",
            f"  + pooled views ({', '.join(self.views) or 'none'}) {size(b['views'])} + index {size(b['index'])} "
            f"= up to {size(b['total'])} (raw; compression only makes it smaller)",
        ]
        if self.free is None:
            out.append("  free space: not known for object storage (the size alone)")
        else:
            out.append(f"  free space at {self.free_at}: {size(self.free)} ({'fits' if self.fits else 'does NOT fit'})")
        return out

    def refusal(self) -> str:
        """One line: both figures and the codecs that would fit."""
        fit = [f"{c} ({size(self.by_codec[c])})" for c in self.fitting_codecs() if c != self.codec]
        others = f"codecs that would fit: {', '.join(fit)}" if fit else "no codec fits"
        return (
            f"{self.cache}: extracting {self.vfm} ({self.codec}, {self.todo} rows) writes up to "
            f"{size(self.bytes['total'])} but {self.free_at} has {size(self.free or 0)} free; {others}; "
            "--force writes anyway (the figure is before compression)"
        )


def plan_extract(
    cache: str | os.PathLike[str], spec: dict[str, Any], shas: list[str], key: str | None = None, shard_size: int = 64
) -> ExtractPlan:
    """The plan of extracting the images ``shas`` (sha256, as indexed) with ``spec`` (the group's resolved spec)
    into ``cache`` in shards of ``shard_size`` images: an existing group of the same key counts its done rows (and
    keeps its own shard size); nothing is written."""
    key = key or spec_key(spec)
    root = cache_path(cache)
    done_rows: set[str] = set()
    exists = False
    if (root / key / "zarr.json").is_file():
        try:
            group = CacheGroup.open(cache, key)
        except AvaError:  # a group cut off while being made, or not a group: extraction rebuilds or refuses it
            group = None
        if group is not None and group.spec.get("codec") == spec["codec"]:
            exists, shard_size = True, group.shard_size
            mask = group.done_mask()
            done_rows = {sha for sha, ok in zip(group.rows(), mask, strict=False) if ok}
    selected = list(dict.fromkeys(shas))
    done = sum(sha in done_rows for sha in selected)
    t, d, layers, views = int(spec["num_tokens"]), int(spec["dim"]), list(spec["layers"]), list(spec.get("views") or [])
    todo = len(selected) - done
    free = free_space(cache)
    block = _block_size(free[1]) if free is not None else 0

    def total(codec: str) -> dict[str, int]:
        return group_bytes(
            codec, todo, t, d, len(layers), views, new_group=not exists, shard_size=shard_size, block=block
        )

    by_codec = {}
    for name in CODECS.names():
        try:
            by_codec[name] = total(name)["total"]
        except AvaError:  # a codec these shapes cannot take (int4 and an odd dim)
            continue
    return ExtractPlan(
        cache=str(cache),
        key=key,
        vfm=str(spec.get("vfm")),
        codec=spec["codec"],
        exists=exists,
        rows=len(selected),
        done=done,
        num_tokens=t,
        dim=d,
        layers=layers,
        views=views,
        bytes=total(spec["codec"]),
        free=None if free is None else free[0],
        free_at=None if free is None else free[1],
        by_codec=by_codec,
    )


def _block_size(directory: str) -> int:
    """The allocation unit of the filesystem holding ``directory`` (0 where it cannot be read)."""
    try:
        return int(os.statvfs(directory).f_frsize)
    except (OSError, AttributeError):
        return 0


def check_space(plan: ExtractPlan, force: bool) -> None:
    """Refuse (one line, :meth:`ExtractPlan.refusal`) a plan that does not fit, unless ``force``."""
    if not plan.fits and not force:
        raise AvaError(plan.refusal())


def benchmark_sizes(
    images: int = OFFICIAL_IMAGES,
    vfms: tuple[str, ...] = PAPER_VFMS,
    views: tuple[str, ...] = ("mean", "grid2", "grid4"),
) -> list[dict[str, Any]]:
    """The cache of ``images`` images per VFM (its registered token count and dim, one layer) and codec: raw bytes
    of the tokens with their scales, and of the whole group (pooled views and index included)."""
    from ava.vfm import VFMS

    out = []
    for name in vfms:
        facts = VFMS.get(name).facts()
        t, d = int(facts["num_tokens"]), int(facts["dim"])
        row = {"vfm": name, "num_tokens": t, "dim": d}
        for codec in CODECS.names():
            parts = group_bytes(codec, images, t, d, 1, views)
            row[codec] = {"tokens": parts["tokens"] + parts["scales"], "total": parts["total"]}
        out.append(row)
    return out


def size_table(images: int = OFFICIAL_IMAGES) -> str:
    """:func:`benchmark_sizes` as the markdown table of ``docs/cache-size.md``: per VFM and codec, the tokens with
    their scales, and the whole group in parentheses (pooled views and index added); the last row sums the nine."""
    rows = benchmark_sizes(images)
    codecs = list(CODECS.names())
    per_value = {c: sum(get_codec(c).row_bytes(1, 1152)) / 1152 for c in codecs}  # at SigLIP's dim
    head = ["VFM", "tokens x dim", *(f"{c} ({per_value[c]:.3g} B/value)" for c in codecs)]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(codecs)]
    for r in rows:
        cells = [f"{size(r[c]['tokens'])} ({size(r[c]['total'])})" for c in codecs]
        lines.append(f"| `{r['vfm']}` | {r['num_tokens']} x {r['dim']} | " + " | ".join(cells) + " |")
    sums = [f"**{size(sum(r[c]['tokens'] for r in rows))}** ({size(sum(r[c]['total'] for r in rows))})" for c in codecs]
    lines.append(f"| all {len(rows)} | | " + " | ".join(sums) + " |")
    return "\n".join(lines) + "\n"
