"""Shards encoded in the writer threads (ava.cache.shards) are the files Zarr writes, byte for byte: for every codec,
full shards, the array's last (short) shard, all-zero chunks, and a resumed shard that keeps its done rows; the
pooled views of a GPU extraction (torch) agree with the numpy pooling readers use."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from ava.cache.pooling import pool_tokens, pool_tokens_torch
from ava.cache.shards import ArrayEncoder, write_file
from ava.cache.store import CacheGroup, add_rows, create_group
from ava.data.format import Dataset
from tests.helpers import extract_cache, make_dataset


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def _spec(codec: str) -> dict:
    return {
        "format": "ava-feature-cache",
        "format_version": 3,
        "vfm": "x",
        "identity": {"codec": codec},
        "codec": codec,
        "layers": [-2],
        "num_tokens": 6,
        "dim": 5,
        "grid": [2, 3],
        "views": ["mean", "grid2"],
    }


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8"])
def test_encoded_files_are_zarrs_files(tmp_path: Path, codec: str) -> None:
    """10 rows in shards of 4: two full shards and a last one of 2 rows; a row of zeros in the second shard."""
    groups = {}
    for way in ("zarr", "ours"):
        group = create_group(tmp_path / way, _spec(codec), shard_size=4)
        add_rows(group, [f"{i:064x}" for i in range(10)])
        for name in group.array_names():
            arr, encoder = group.array(name), group.encoder(name)
            assert encoder is not None, name
            for shard in range(3):
                lo, hi = shard * 4, min(shard * 4 + 4, arr.shape[0])
                rng = np.random.default_rng(zlib.crc32(f"{name}/{shard}".encode()))
                if name == "done":
                    block = rng.random(hi - lo) > 0.3
                else:
                    block = (rng.standard_normal((hi - lo, *arr.shape[1:])) * 3).astype(arr.dtype)
                    if shard == 1:
                        block[1] = 0  # stored too: a done row without its chunk would read as missing
                if way == "zarr":
                    arr[lo:hi] = block
                else:
                    parts = encoder.shard_parts(list(block)) if encoder.sharded else encoder.chunk_parts(block)
                    write_file(group.path / name / encoder.key(shard), parts)
        groups[way] = group
    zarr_files, ours = _files(tmp_path / "zarr"), _files(tmp_path / "ours")
    assert len(zarr_files) == (27 if codec == "int8" else 22)
    assert ours.keys() == zarr_files.keys()
    assert [k for k in zarr_files if zarr_files[k] != ours[k]] == []
    features = CacheGroup.open(tmp_path / "ours", groups["ours"].key).features(-2)
    assert not (np.asarray(features[5]) != 0).any() and (np.asarray(features[4]) != 0).any()


def test_a_layout_it_does_not_know_is_left_to_zarr(tmp_path: Path) -> None:
    import zarr
    import zarr.codecs

    g = zarr.open_group(str(tmp_path), mode="a")
    sharded = g.create_array(
        "gzip",
        shape=(8, 3),
        dtype="float32",
        chunks=(1, 3),
        shards=(4, 3),
        compressors=zarr.codecs.GzipCodec(),
        fill_value=0,
    )
    start = g.create_array(
        "start",
        shape=(8, 3),
        dtype="float32",
        chunks=(1, 3),
        shards=(4, 3),
        compressors=(zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()),
        fill_value=0,
    )
    plain = g.create_array(
        "plain",
        shape=(8, 3),
        dtype="float32",
        chunks=(4, 3),
        compressors=(zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()),
        fill_value=0,
    )
    assert ArrayEncoder.of(sharded) is None
    assert ArrayEncoder.of(start) is not None and ArrayEncoder.of(plain) is not None
    big_endian = g.create_array("be", shape=(8,), dtype=">f4", chunks=(4,), fill_value=0)
    assert ArrayEncoder.of(big_endian) is None


@pytest.mark.parametrize("codec", ["fp16", "int8"])
def test_extraction_writes_zarrs_bytes_and_a_resume_keeps_done_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    """The same extraction twice: through the writer threads' encoder, and through Zarr's own writes (the encoder
    switched off). Each time a first run meets two unreadable images (their shards are written partly), then a
    second run finishes them (their shards are rewritten keeping the done rows). The caches are the same bytes."""
    data = make_dataset(tmp_path / "data", n_images=10)
    ds = Dataset(data)
    paths = [ds.image_path(next(s for s in ds.samples("color") if s.id == sid)) for sid in ("c1", "c8")]
    images = {path: path.read_bytes() for path in paths}  # in a full shard and in the last, short one
    caches = {}
    for way in ("ours", "zarr"):
        if way == "zarr":
            monkeypatch.setattr(CacheGroup, "encoder", lambda self, name: None)
        for path in images:
            path.write_bytes(b"not an image")
        first = extract_cache(data, tmp_path / way, "pixels#size=16", codec=codec, batch_size=3, num_workers=0)
        assert len(first["failed"]) == 2 and first["extracted"] == 8
        for path, raw in images.items():
            path.write_bytes(raw)
        second = extract_cache(data, tmp_path / way, "pixels#size=16", codec=codec, batch_size=3, num_workers=0)
        assert second["extracted"] == 2 and second["already_done"] == 8
        caches[way] = _files(tmp_path / way)
    assert caches["ours"].keys() == caches["zarr"].keys()
    assert [k for k in caches["ours"] if caches["ours"][k] != caches["zarr"][k]] == []


@pytest.mark.parametrize("view", ["mean", "grid2", "grid4"])
def test_views_pooled_in_torch_agree_with_numpy(view: str) -> None:
    tokens = np.random.default_rng(0).standard_normal((3, 35, 8)).astype(np.float16).astype(np.float32) * 40
    grid = (5, 7)
    want = pool_tokens(tokens, view, grid)
    got = pool_tokens_torch(torch.from_numpy(tokens), view, grid).numpy()
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8", "int4"])
def test_rows_decoded_in_the_calling_thread_are_zarrs_rows(tmp_path: Path, codec: str) -> None:
    """Every array ava shards, read both ways over spans inside one shard, across shards and to the short last one;
    into a given array too; a chunk the index does not list reads as zeros, as in Zarr, where no row needs it."""
    from ava.cache import chunks
    from ava.cache.shards import decode_shard

    group = create_group(tmp_path / "c", {**_spec(codec), "dim": 6}, shard_size=4)  # (int4: an even dim)
    add_rows(group, [f"{i:064x}" for i in range(10)])
    sharded = [n for n in group.array_names() if (group.encoder(n) or ArrayEncoder).sharded]
    assert "features/-2" in sharded and (codec not in ("int8", "int4") or "scales/-2" in sharded)
    rng = np.random.default_rng(0)
    for name in sharded:
        arr = group.array(name)
        arr[:] = (rng.standard_normal(arr.shape) * 3).astype(arr.dtype)
        assert chunks._decoded(group, name, 0, 10) is None  # not listed yet (no row had to be there): Zarr reads it
        for lo, hi in [(0, 4), (1, 3), (3, 9), (0, 10), (8, 10), (9, 10)]:
            got = chunks.read_rows(group, name, lo, hi)
            assert chunks._decoded(group, name, lo, hi) is not None  # the checked read decodes it here
            assert got.dtype == arr.dtype and np.array_equal(got, np.asarray(arr[lo:hi]))
            into = np.full_like(got, 7)
            assert chunks.read_rows(group, name, lo, hi, out=into) is into and np.array_equal(into, got)
    # shard 1 rewritten with the chunks of rows 4 and 5 only: rows 6 and 7 are listed as absent
    name = "features/-2"
    arr, encoder = group.array(name), group.encoder(name)
    kept = np.asarray(arr[4:6])
    write_file(group.path / name / encoder.key(1), encoder.shard_parts(list(kept)))
    group.chunk_files.clear()
    need = np.array([True, True, False, False, True])
    got = chunks.read_rows(group, name, 4, 9, need=need)
    assert np.array_equal(got, np.asarray(arr[4:9])) and not got[2:4].any()
    out = np.empty((2, *arr.shape[1:]), arr.dtype)
    entries = np.array([[2**64 - 1] * 2] * 2, dtype="<u8")
    decode_shard(encoder, group.path / name / encoder.key(1), entries, out)
    assert not out.any()


def test_a_chunk_that_fails_its_checksum_is_left_to_zarr_which_names_it(tmp_path: Path) -> None:
    from ava.cache import chunks
    from ava.cache.chunks import CacheDataError

    group = create_group(tmp_path / "c", _spec("fp16"), shard_size=4)
    add_rows(group, [f"{i:064x}" for i in range(8)])
    arr = group.array("features/-2")
    arr[:] = np.arange(arr.size, dtype=np.float16).reshape(arr.shape)
    path = group.path / "features/-2" / group.encoder("features/-2").key(1)
    raw = bytearray(path.read_bytes())
    raw[5] ^= 0xFF  # inside row 4's chunk (the first of shard 1)
    path.write_bytes(bytes(raw))
    assert np.array_equal(chunks.read_rows(group, "features/-2", 0, 4), np.asarray(arr[0:4]))
    assert chunks._decoded(group, "features/-2", 4, 8) is None
    with pytest.raises(CacheDataError, match=r"row\(s\) 4 cannot be read"):
        chunks.read_rows(group, "features/-2", 2, 8)


def test_a_shard_is_read_one_chunk_at_a_time(tmp_path: Path) -> None:
    """The bytes a read holds at once are one chunk's, not the shard's: a shard-sized buffer was a fresh allocation
    each time, every page of it faulted in by the kernel (half a fingerprint's token-read faults). Python's own
    allocations are traced: the shard's 32 stored rows (~49 KB, incompressible) against ~1.5 KB a row."""
    import tracemalloc

    from ava.cache import chunks

    group = create_group(tmp_path / "c", {**_spec("fp16"), "num_tokens": 24, "dim": 32}, shard_size=32)
    add_rows(group, [f"{i:064x}" for i in range(32)])
    arr = group.array("features/-2")
    arr[:] = np.random.default_rng(0).standard_normal(arr.shape).astype(np.float16)
    want = np.asarray(arr[:])
    stored = (group.path / "features/-2" / group.encoder("features/-2").key(0)).stat().st_size
    out = np.empty_like(want)
    assert chunks.read_rows(group, "features/-2", 0, 32, out=out) is out  # the shard's index read and kept
    tracemalloc.start()
    try:
        assert chunks._decoded(group, "features/-2", 0, 32, out) is out
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(out, want)
    row_bytes = want[0].nbytes
    assert stored > 16 * row_bytes  # the file holds the rows (their bytes do not compress)
    assert peak < 8 * row_bytes, f"a read held {peak} bytes at once; one row is {row_bytes}"  # (the shard: 32)
