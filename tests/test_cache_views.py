"""Pooled views stored beside the tokens at extraction: equal to the views pooled from the tokens at read time, no
change of the cache key, `ava cache verify` clean, and a fingerprint of the heads that need only views reads no
tokens while giving the same results as from a cache without views."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ava.cache import ExtractConfig, extract, open_cache
from ava.cache.inspect import verify_cache
from ava.cache.pooling import pool_tokens, token_grid
from ava.errors import AvaError
from tests.helpers import online

torch.set_num_threads(1)
ABILITIES = ["spatial", "counting", "scene"]


@pytest.fixture(scope="module")
def caches(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(data, cache with views, cache without views) of a small synthetic set through the `pixels` extractor."""
    from ava.synth import SynthConfig, generate

    base = tmp_path_factory.mktemp("views")
    data = base / "data"
    generate(SynthConfig(out=str(data), per_ava=20, ava=ABILITIES, size=64, seed=0), progress=False)
    common = dict(vfm="pixels", data=str(data), device="cpu", progress=False, shard_size=16)
    extract(ExtractConfig(cache=str(base / "views"), **common))
    extract(ExtractConfig(cache=str(base / "plain"), views=(), **common))
    return data, base / "views", base / "plain"


def test_stored_views_equal_views_pooled_from_tokens(caches: tuple[Path, Path, Path]) -> None:
    _, with_views, plain = caches
    cache, old = open_cache(with_views, "pixels"), open_cache(plain, "pixels")
    assert cache.key == old.key  # the views are not part of the key
    assert cache.views == ("mean", "grid2", "grid4") and old.views == ()
    assert cache.spec["views"] == ["mean", "grid2", "grid4"]
    shas = cache.group.rows()[::3][::-1]  # out of row order, rows of several shards
    tokens = cache.read(shas)
    for view in cache.views:
        assert np.array_equal(cache.read_view(shas, None, view), pool_tokens(tokens, view, token_grid(cache))), view
    in_order = cache.group.rows()[2:21]  # in row order, across a shard's end: read as stored, no reordering copy
    for view in cache.views:
        got = cache.read_view(in_order, None, view)
        assert np.array_equal(got, pool_tokens(cache.read(in_order), view, token_grid(cache))), view
    assert np.array_equal(cache.read_pooled(shas), old.read_pooled(shas))
    with pytest.raises(AvaError, match="stores no pooled view 'grid2'"):
        old.read_view(shas, None, "grid2")
    report = verify_cache(with_views)
    assert report["ok"], report


@pytest.mark.slow
def test_fingerprint_of_view_heads_reads_no_tokens(caches: tuple[Path, Path, Path], tmp_path: Path) -> None:
    from ava.heads.fingerprint import FingerprintConfig, fingerprint

    data, with_views, plain = caches
    results = {}
    for name, cache in (("views", with_views), ("plain", plain)):
        out = tmp_path / name
        config = FingerprintConfig(
            vfm="pixels",
            data=str(data),
            cache=str(cache),
            out=str(out),
            heads=["probe-linear", "knn"],
            device="cpu",
            progress=False,
        )
        result = fingerprint(config)
        assert set(result.reads.values()) == ({0} if name == "views" else {1}), result.reads
        results[name] = {h: (d / "predictions_test.jsonl").read_text() for h, d in result.run_dirs.items()}
    assert results["views"] == results["plain"]
    # the attentive probe needs the tokens: one read per ability, whatever the cache stores
    result = fingerprint(
        FingerprintConfig(
            vfm="pixels",
            data=str(data),
            cache=str(with_views),
            ava=["spatial"],
            out=str(tmp_path / "attn"),
            heads=["probe-attn"],
            device="cpu",
            progress=False,
        )
    )
    assert result.reads == {"spatial": 1}


def test_int4_views_are_pooled_from_the_features_before_encoding(tmp_path: Path) -> None:
    """An int4 group's views (float32) come from the features before the 4-bit rounding (``Codec.pools_input``):
    equal to the views of the float32 forward up to float32 summation order, and closer to them than views pooled
    from the decoded int4 tokens by at least an order of magnitude; fp16's views stay the decoded tokens' views."""
    from ava.cache.pooling import pool_tokens_torch
    from ava.data.format import Dataset
    from tests.helpers import make_dataset

    data = make_dataset(tmp_path / "data", n_images=6, size=(64, 64))
    extract(
        ExtractConfig(
            vfm="tiny-dinov2",
            data=str(data),
            cache=str(tmp_path / "c"),
            codec="int4",
            batch_size=3,
            shard_size=4,
            device="cpu",
            progress=False,
        )
    )
    cache = open_cache(tmp_path / "c", "tiny-dinov2")
    shas = sorted({s.image_sha256 for s in Dataset(data).samples()})
    exact = online("tiny-dinov2", data, shas, batch_size=3)
    grid = token_grid(cache)
    for view in cache.views:
        want = pool_tokens(exact, view, grid)
        stored = cache.read_view(shas, None, view)
        from_decoded = pool_tokens(cache.read(shas), view, grid)
        np.testing.assert_allclose(stored, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        assert np.abs(stored - want).max() * 10 < np.abs(from_decoded - want).max(), view
        torch.testing.assert_close(
            pool_tokens_torch(torch.from_numpy(exact), view, grid), torch.from_numpy(want), rtol=1e-5, atol=1e-6
        )
    assert verify_cache(tmp_path / "c")["ok"]
