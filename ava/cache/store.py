"""The on-disk layout of the feature cache: a Zarr v3 store with one group per cache key.

::

    CACHE/                              # Zarr v3 root group, attrs {"format": "ava-feature-cache", ...}
      <key>/                            # one group per resolved spec; attrs {"spec": {...}, "key", ...}
        rows.json                       # row -> image sha256 (the index), written atomically
        done                            # [N] bool, chunk = one shard: row finished and valid
        features/<layer>                # [N, T, D] stored values ([N, T, D/2] for int4, two per byte); chunk = 1 image,
                                        # shard = S images
        scales/<layer>                  # scales: [N, T] float32 (int8), [N, T, D/64] float16 (int4)
        pooled/<layer>/<view>           # [N, D'] float32 pooled views (spec "views"; see ava.cache.pooling);
                                        # chunk = one shard (S rows)

Rows are in the order images first appear in the dataset extracted (abilities one after another), so one ability's
images are a few runs of consecutive rows, read in a few slices (Zarr costs ~0.5 ms per chunk it decodes, however
small). Token chunks hold one image (a sample read alone decodes only its own tokens); a pooled view's row is small,
so its chunk is a whole shard (decoding a shard of views costs less than the per-chunk overhead of its rows).

Pooled views (``"mean"``, ``"gridN"``: what the probes and kNN read) are stored beside the tokens by groups whose spec
lists them in ``"views"`` (groups made before them have none; readers then pool the tokens). A view is computed
from the stored tokens as decoded, so it equals the view pooled at read time; it is not part of the key.

The key is a short hash of the canonical JSON of the fields that define the features (``KEY_FIELDS``):
the VFM's identity (weights, preprocessing, layers, prefix tokens, forward dtype...), the codec and the
format version; never a name the user typed, so ``dinov2@DIR`` and ``hf:DIR`` share a group. The names a
group was extracted under are kept in its attrs (``open_cache`` finds it by any of them). Extracting the
same VFM with another codec or dtype makes a new group beside the old one. A key named by the user
(``--key``) is fixed: reusing it with a spec that differs is refused, naming the differing fields.

Writers own whole shards: a shard (S consecutive rows) is only ever written by one process at a time,
in one write, then its rows are marked done. Each file is encoded in the writer's thread with the bytes Zarr would
store (:mod:`ava.cache.shards`) and written through a temporary file and a rename, as Zarr's local store does, so a
killed writer leaves either the old or the new shard, never a torn one.
In object storage (``--cache s3://...``, :mod:`ava.cache.location`) a shard is one object written by one PUT, which
is atomic too; a shard's ``done`` chunk, one object written after the shard's data, is its commit marker, and a
reader trusts only the rows it marks. There the job's lock is a lease object (:mod:`ava.cache.lease`).
Readers check that the chunks of the done rows they read are on disk (Zarr would read a missing one as zeros) and
name the rows of a chunk that fails to decode (:mod:`ava.cache.chunks`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ava.cache.codecs import Codec, get_codec
from ava.cache.errors import CacheError
from ava.cache.location import CachePath, cache_path, is_remote, probe, total_bytes, write_text_atomic, zarr_store
from ava.cache.pooling import pool_dim
from ava.cache.shards import ArrayEncoder
from ava.errors import store_outage
from ava.jsonfile import read_json

FORMAT_NAME = "ava-feature-cache"
FORMAT_VERSION = 2  # 2: the key is the identity + codec + format version (no name, no repeated fields)
ROWS_FILE = "rows.json"
DEFAULT_SHARD_SIZE = 64
OBJECT_SHARD_BYTES = 64 << 20  # raw bytes a token shard object aims at in object storage (tens of MB per object)
MAX_OBJECT_SHARD_SIZE = 4096
_KEY = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
KEY_FIELDS = ("identity", "codec", "format_version")
_KEY_FIELDS_V1 = ("identity", "preprocess", "layers", "prefix_policy", "dtype", "codec", "format_version")


def default_shard_size(
    cache_dir: str | os.PathLike[str] | CachePath, num_tokens: int, dim: int, itemsize: int = 2
) -> int:
    """Images per shard when none is asked for: :data:`DEFAULT_SHARD_SIZE` on a local disk; in object storage enough
    images that a token shard holds about :data:`OBJECT_SHARD_BYTES` raw (a power of two, at least 64): each object
    costs a request, and stores are slow with many small objects. At SigLIP shapes (729 x 1152 fp16, 1.7 MB an
    image) that is 64 images (~107 MB a shard); at random-vit's (196 x 192) 512."""
    if not is_remote(cache_path(cache_dir)):
        return DEFAULT_SHARD_SIZE
    per_image = max(1, num_tokens * dim * itemsize)
    rows = DEFAULT_SHARD_SIZE
    while rows * 2 * per_image <= OBJECT_SHARD_BYTES and rows * 2 <= MAX_OBJECT_SHARD_SIZE:
        rows *= 2
    return rows


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def key_fields(spec: dict[str, Any]) -> tuple[str, ...]:
    """The fields of ``spec`` that define its features (format 1 groups repeated some identity fields)."""
    return _KEY_FIELDS_V1 if spec.get("format_version") == 1 else KEY_FIELDS


def spec_key(spec: dict[str, Any]) -> str:
    """Short hash of the fields that define the stored features."""
    keyed = {k: spec.get(k) for k in key_fields(spec)}
    return hashlib.sha256(canonical_json(keyed).encode()).hexdigest()[:12]


def _flatten(obj: Any, prefix: str) -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def spec_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted names of the key fields that differ, with both values (``codec: 'fp16' != 'int8'``)."""
    fields = dict.fromkeys((*key_fields(old), *key_fields(new)))
    a = _flatten(json.loads(canonical_json({k: old.get(k) for k in fields})), "")
    b = _flatten(json.loads(canonical_json({k: new.get(k) for k in fields})), "")
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def open_root(cache_dir: str | os.PathLike[str], *, create: bool) -> Any:
    """The root Zarr group of a cache directory, checked to be an ava feature cache of a known version."""
    import zarr

    path = cache_path(cache_dir)
    if not (path / "zarr.json").is_file():
        if not create:
            probe(path, write=False)  # a store that cannot be reached or refuses these credentials: said as such
            raise CacheError(f"{path} is not a feature cache (no zarr.json); make one with `ava cache extract`")
        path.mkdir(parents=True, exist_ok=True)
        root = zarr.open_group(zarr_store(path, read_only=False), mode="a")
        root.attrs.update({"format": FORMAT_NAME, "format_version": FORMAT_VERSION})
        return root
    root = zarr.open_group(zarr_store(path, read_only=not create), mode="a" if create else "r")
    attrs = dict(root.attrs)
    if attrs.get("format") != FORMAT_NAME:
        raise CacheError(f"{path} is a Zarr store but not an ava feature cache (format={attrs.get('format')!r})")
    if attrs.get("format_version", 0) > FORMAT_VERSION:
        raise CacheError(f"{path}: cache format version {attrs['format_version']} is newer than this ava")
    return root


def _groups(root: Any) -> list[tuple[str, Any]]:
    """The root's child groups (Zarr warns about each folder without a zarr.json: :func:`lost_groups` names them)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component of a Zarr hierarchy")
        return list(root.groups())


def group_keys(cache_dir: str | os.PathLike[str], *, incomplete: bool = False) -> list[str]:
    """Names of the groups that hold a spec (or, with ``incomplete``, of those cut off while being made)."""
    root = open_root(cache_dir, create=False)
    return sorted(name for name, g in _groups(root) if ("spec" in g.attrs) != incomplete)


def open_groups(cache_dir: str | os.PathLike[str]) -> list[CacheGroup]:
    """Every complete group of a cache, read-only, in key order: one pass over the groups' metadata."""
    root = open_root(cache_dir, create=False)
    path = cache_path(cache_dir)
    found = [(name, dict(g.attrs)) for name, g in _groups(root)]
    return [CacheGroup(path / name, name, attrs) for name, attrs in sorted(found) if "spec" in attrs]


def lost_groups(cache_dir: str | os.PathLike[str]) -> list[str]:
    """Folders of a cache that hold a group's data (a ``rows.json``) but no ``zarr.json``: Zarr no longer sees them.
    ``ava cache extract`` of the same VFM rebuilds such a group (its arrays are made again, every row recomputed)."""
    path = cache_path(cache_dir)
    if not path.is_dir():
        return []
    return sorted(
        d.name for d in path.iterdir() if d.is_dir() and not (d / "zarr.json").exists() and (d / ROWS_FILE).is_file()
    )


def lost_groups_note(cache_dir: str | os.PathLike[str]) -> str:
    """``; group(s) X lost their zarr.json (...)`` for an error message, or ``""``."""
    lost = lost_groups(cache_dir)
    if not lost:
        return ""
    return (
        f"; folder(s) {', '.join(lost)} of {cache_dir} hold a cache group whose zarr.json is missing: "
        "`ava cache extract` of its VFM rebuilds it (every row recomputed)"
    )


@dataclass
class CacheGroup:
    """One cache group opened for reading or writing. Zarr handles are opened lazily and not pickled,
    so the object can be sent to DataLoader workers."""

    path: CachePath  # a local directory or a RemotePath (ava.cache.location)
    key: str
    attrs: dict[str, Any]
    writable: bool = False
    _arrays: dict[str, Any] = field(default_factory=dict, repr=False)
    # array -> its chunk files, listed once by ava.cache.chunks (never pickled: a worker lists them again)
    chunk_files: dict[str, Any] = field(default_factory=dict, repr=False)
    _encoders: dict[str, ArrayEncoder | None] = field(default_factory=dict, repr=False)
    _rows: list[str] | None = field(default=None, repr=False)
    _index: dict[str, int] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, cache_dir: str | os.PathLike[str], key: str, *, writable: bool = False) -> CacheGroup:
        import zarr

        open_root(cache_dir, create=False)
        root = cache_path(cache_dir)
        if not _KEY.match(key) or not (root / key / "zarr.json").is_file():  # only this group's metadata
            raise CacheError(f"{cache_dir}: no cache group {key!r}; groups: {group_keys(cache_dir)}")
        v3 = 3 if is_remote(root) else None  # object storage: no requests for v2 metadata
        attrs = dict(zarr.open_group(zarr_store(root / key, read_only=True), mode="r", zarr_format=v3).attrs)
        if "spec" not in attrs:
            raise CacheError(f"{root / key}: not an ava cache group (no spec in its attrs)")
        return cls(root / key, key, attrs, writable)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_arrays"], state["chunk_files"], state["_encoders"] = {}, {}, {}
        return state

    # -- spec ---------------------------------------------------------------------------------------
    @property
    def spec(self) -> dict[str, Any]:
        return self.attrs["spec"]

    def names(self) -> list[str]:
        """The VFM names this group was extracted under (``dinov2``, ``dinov2@DIR``, ``hf:DIR``...)."""
        spec = self.spec
        legacy = spec.get("identity", {}).get("vfm")  # format 1 kept the name in the identity
        found = [spec.get("vfm"), spec.get("requested"), legacy, *self.attrs.get("names", [])]
        return list(dict.fromkeys(n for n in found if n))

    def remember_names(self, spec: dict[str, Any]) -> None:
        """Add the names of ``spec`` (same features, maybe another name) to the group's attrs."""
        import zarr

        new = [n for n in (spec.get("vfm"), spec.get("requested")) if n and n not in self.names()]
        if new:
            self.attrs["names"] = [*self.attrs.get("names", []), *new]
            zarr.open_group(zarr_store(self.path, read_only=False), mode="a").attrs["names"] = self.attrs["names"]

    @property
    def codec(self) -> Codec:
        return get_codec(self.spec["codec"])

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(self.spec["layers"])

    @property
    def shard_size(self) -> int:
        return int(self.attrs["shard_size"])

    @property
    def num_tokens(self) -> int:
        return int(self.spec["num_tokens"])

    @property
    def dim(self) -> int:
        return int(self.spec["dim"])

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(int(g) for g in self.spec.get("grid") or ())

    @property
    def views(self) -> tuple[str, ...]:
        """The pooled views stored beside the tokens (none in groups made before views were stored)."""
        return tuple(self.spec.get("views") or ())

    # -- arrays -------------------------------------------------------------------------------------
    def array(self, name: str) -> Any:
        if name not in self._arrays:
            import zarr

            batch_shard_chunks()
            try:
                # in object storage zarr_format=3: Zarr would also look for v2 metadata (.zarray, .zattrs), a
                # request each (on a local disk it does, so that a v2 array planted in a cache is named as such)
                arr = zarr.open_array(
                    zarr_store(self.path / name, read_only=not self.writable),
                    mode="r+" if self.writable else "r",
                    zarr_format=3 if is_remote(self.path) else None,
                )
            except FileNotFoundError as e:
                raise CacheError(
                    f"{self.path / name}: cache array is missing (no zarr.json); the group is damaged "
                    f"beyond `ava cache verify --repair`: delete {self.path} and extract again"
                ) from e
            except (MemoryError, OSError):  # a full, read-only or failing disk: said as such by the CLI
                raise
            except Exception as e:  # a zarr.json that is not an array's metadata
                if store_outage(e) is not None:  # the store went away: the group is not damaged
                    raise
                raise CacheError(
                    f"{self.path / name}: cache array cannot be opened ({type(e).__name__}: {e}); the group is "
                    f"damaged beyond `ava cache verify --repair`: delete {self.path} and extract again"
                ) from e
            if self.writable:
                # a writer stores every chunk it is given: by default Zarr compares each chunk with the fill value and
                # leaves an all-zero one out, which a reader then takes for a missing row (ava.cache.chunks). The
                # setting must be applied to the opened array: open_array ignores its config= for an existing
                # array (zarr 3.1.6)
                arr = arr.with_config({"write_empty_chunks": True})
            self._arrays[name] = arr
        return self._arrays[name]

    def encoder(self, name: str) -> ArrayEncoder | None:
        """The encoder that writes array ``name``'s shard files as Zarr would, in the calling thread
        (:mod:`ava.cache.shards`); None for a layout it does not know (Zarr then writes it)."""
        if name not in self._encoders:
            self._encoders[name] = ArrayEncoder.of(self.array(name))
        return self._encoders[name]

    def features(self, layer: int) -> Any:
        return self.array(f"features/{layer}")

    def scales(self, layer: int) -> Any | None:
        return self.array(f"scales/{layer}") if self.codec.has_scale else None

    def pooled(self, layer: int, view: str) -> Any:
        return self.array(f"pooled/{layer}/{view}")

    @property
    def done(self) -> Any:
        return self.array("done")

    def array_names(self) -> list[str]:
        names = ["done"] + [f"features/{la}" for la in self.layers]
        names += [f"scales/{la}" for la in self.layers] if self.codec.has_scale else []
        return names + [f"pooled/{la}/{v}" for la in self.layers for v in self.views]

    # -- index --------------------------------------------------------------------------------------
    def rows(self) -> list[str]:
        """Image sha256 of each row, in row order."""
        if self._rows is None:
            try:
                self._rows = read_json(self.path / ROWS_FILE)
            except FileNotFoundError:
                self._rows = []
        return self._rows

    def index(self) -> dict[str, int]:
        if self._index is None:
            self._index = {sha: i for i, sha in enumerate(self.rows())}
        return self._index

    def done_mask(self) -> np.ndarray:
        """Whether each row is done (a done chunk that is not on disk reads as not done: its shard was never
        finished); a done chunk that does not decode is refused, naming it (:mod:`ava.cache.chunks`)."""
        from ava.cache.chunks import read_rows

        n = len(self.rows())
        return (
            np.asarray(read_rows(self, "done", 0, n, need=np.zeros(n, bool)), dtype=bool)
            if n
            else np.zeros(0, dtype=bool)
        )

    def reload(self) -> None:
        self._rows = self._index = None
        self._arrays, self.chunk_files, self._encoders = {}, {}, {}

    # -- layout -------------------------------------------------------------------------------------
    def shard_rows(self, shard: int) -> range:
        n = len(self.rows())
        return range(shard * self.shard_size, min((shard + 1) * self.shard_size, n))

    def num_shards(self) -> int:
        return -(-len(self.rows()) // self.shard_size)


def create_group(
    cache_dir: str | os.PathLike[str], spec: dict[str, Any], *, key: str | None = None, shard_size: int = 64
) -> CacheGroup:
    """Open the group of ``spec`` (creating the store and group if needed); refuses a differing spec."""
    import zarr

    open_root(cache_dir, create=True)
    auto = spec_key(spec)
    key = key or auto
    if not _KEY.match(key):
        raise CacheError(f"--key {key!r}: use letters, digits, '.', '_' and '-' only (it names a directory)")
    path = cache_path(cache_dir) / key
    existing = (
        dict(zarr.open_group(zarr_store(path, read_only=True), mode="r").attrs)
        if (path / "zarr.json").is_file()
        else {}
    )
    if "spec" in existing:  # a group without a spec was cut off while being made
        group = CacheGroup(path, key, existing, writable=True)
        diff = spec_diff(group.spec, spec)
        if diff:
            raise CacheError(
                f"{path}: cache group {key!r} holds features of another spec; differing fields: "
                + "; ".join(diff)
                + ". Use another --key, or leave --key out to get a group of its own."
            )
        group.remember_names(spec)
        return group
    if shard_size < 1:
        raise CacheError(f"shard size must be >= 1, got {shard_size}")
    attrs = {"spec": spec, "key": key, "auto_key": auto, "shard_size": shard_size}
    g = zarr.open_group(zarr_store(path, read_only=False), mode="a")
    _create_arrays(g, spec, shard_size)
    g.attrs.update(attrs)  # written last: a group with a spec is complete
    return CacheGroup(path, key, attrs, writable=True)


ZARR_BATCH_SIZE = DEFAULT_SHARD_SIZE  # chunks Zarr's codec pipeline encodes or decodes per batch (see below)


def batch_shard_chunks() -> None:
    """Set Zarr's ``codec_pipeline.batch_size`` to ``ZARR_BATCH_SIZE`` when it is still Zarr's default (1).

    A token array's shard holds one chunk per image. At a batch size of 1, Zarr's sharding codec encodes or decodes each
    of those chunks as its own batch of asyncio tasks, and that Python work holds the GIL: shards written and rows read
    at a batch size of 1 cost markedly more CPU than at 64 (``benchmarks/bench_cache.py``). The values are the same. A
    batch holds the compressed bytes of up to that many chunks (whole shards when writing; ``ResidentFeatures`` reads
    runs of at most 64 rows). The setting is Zarr's process-wide config: a value the user chose (anything but 1) is
    left alone."""
    import zarr

    if zarr.config.get("codec_pipeline.batch_size") == 1:
        zarr.config.set({"codec_pipeline.batch_size": ZARR_BATCH_SIZE})


def _create_arrays(g: Any, spec: dict[str, Any], shard_size: int) -> None:
    codec = get_codec(spec["codec"])
    t, d = int(spec["num_tokens"]), int(spec["dim"])
    import zarr.codecs

    g.create_array(
        "done",
        shape=(0,),
        dtype="bool",
        chunks=(shard_size,),
        fill_value=False,
        overwrite=True,
        compressors=(zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()),
    )
    row, scale_row = codec.value_shape(t, d), codec.scale_shape(t, d)  # what one image's row holds, per codec
    for layer in spec["layers"]:
        g.create_array(
            f"features/{layer}",
            shape=(0, *row),
            dtype=codec.storage_dtype,
            chunks=(1, *row),
            shards=(shard_size, *row),
            compressors=codec.compressors(),
            fill_value=0,
            overwrite=True,
        )
        if scale_row is not None:
            g.create_array(
                f"scales/{layer}",
                shape=(0, *scale_row),
                dtype=codec.scale_dtype,
                chunks=(1, *scale_row),
                shards=(shard_size, *scale_row),
                compressors=codec.compressors(),
                fill_value=0,
                overwrite=True,
            )
        for view in spec.get("views") or ():
            width = pool_dim(d, view)
            g.create_array(
                f"pooled/{layer}/{view}",
                shape=(0, width),
                dtype="float32",
                chunks=(shard_size, width),
                compressors=_float32_compressors(),
                fill_value=0,
                overwrite=True,
            )


def _float32_compressors() -> Any:
    """Pooled views (float32): byte shuffle + lz4, as the tokens (ava.cache.codecs), then a CRC-32C per chunk."""
    import zarr.codecs

    return (zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4), zarr.codecs.Crc32cCodec())


def add_rows(group: CacheGroup, shas: list[str]) -> int:
    """Append the images not yet indexed, in the order given (the order they first appear in the dataset, which
    every rank reads alike), so the images of one ability get consecutive rows.

    Arrays are grown before the index is rewritten: a kill in between leaves spare rows, never an
    index pointing past the arrays. Returns the number of rows added.
    """
    known = group.index()
    new = [sha for sha in dict.fromkeys(shas) if sha not in known]
    rows = group.rows() + new
    for name in group.array_names():
        arr = group.array(name)
        if arr.shape[0] != len(rows):
            arr.resize((len(rows), *arr.shape[1:]))
    if new:
        write_text_atomic(group.path / ROWS_FILE, json.dumps(rows))
    group.reload()
    return len(new)


def disk_bytes(path: CachePath) -> int:
    return total_bytes(path)
