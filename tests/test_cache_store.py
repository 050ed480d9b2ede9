"""The cache's store layer: the key, spec differences, refusing a mismatched group, growing the index."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from ava.cache.store import (
    FORMAT_VERSION,
    CacheError,
    CacheGroup,
    add_rows,
    create_group,
    open_root,
    spec_diff,
    spec_key,
)

SPEC = {
    "format": "ava-feature-cache",
    "format_version": FORMAT_VERSION,
    "vfm": "tiny-x",
    "identity": {"weights": "random:0", "revision": "abc", "image_size": 32, "layers": [-2]},
    "preprocess": "pad",
    "layers": [-2],
    "dtype": "float32",
    "codec": "fp16",
    "num_tokens": 4,
    "dim": 8,
    "grid": [2, 2],
    "random_weights": True,
}


def _other(**changes: object) -> dict:
    spec = copy.deepcopy(SPEC)
    for k, v in changes.items():
        if k == "revision":
            spec["identity"]["revision"] = v
        else:
            spec[k] = v
    return spec


def test_key_depends_on_defining_fields_only() -> None:
    assert spec_key(SPEC) == spec_key(copy.deepcopy(SPEC))
    assert spec_key(SPEC) != spec_key(_other(codec="int8"))
    assert spec_key(SPEC) != spec_key(_other(revision="def"))
    assert spec_key(SPEC) == spec_key(_other(random_weights=False))  # derived, not defining


def test_diff_names_nested_fields() -> None:
    diff = spec_diff(SPEC, _other(codec="int8", revision="def"))
    assert len(diff) == 2
    assert diff[0].startswith("codec: 'fp16' != 'int8'") and diff[1].startswith("identity.revision")


def test_new_spec_makes_new_group_but_named_key_refuses(tmp_path: Path) -> None:
    a = create_group(tmp_path / "c", SPEC, shard_size=4)
    b = create_group(tmp_path / "c", _other(codec="int8"), shard_size=4)
    assert a.key != b.key and a.key == spec_key(SPEC)
    assert create_group(tmp_path / "c", SPEC).key == a.key  # same spec: same group
    create_group(tmp_path / "c", SPEC, key="mine")
    with pytest.raises(CacheError, match=r"differing fields: codec: 'fp16' != 'int8'.*--key"):
        create_group(tmp_path / "c", _other(codec="int8"), key="mine")


def test_add_rows_appends_new_images_in_the_order_given(tmp_path: Path) -> None:
    g = create_group(tmp_path / "c", _other(codec="int8"), shard_size=4)
    shas = [f"{i:064x}" for i in (5, 3, 9, 3)]
    assert add_rows(g, shas) == 3
    assert g.rows() == shas[:3]  # first appearance, not sorted: one ability's images stay together
    assert add_rows(g, [f"{i:064x}" for i in (3, 7, 1)]) == 2
    assert g.rows()[3:] == [f"{7:064x}", f"{1:064x}"]
    reopened = CacheGroup.open(tmp_path / "c", g.key)
    assert reopened.rows() == g.rows() and reopened.features(-2).shape == (5, 4, 8)
    assert reopened.scales(-2).shape == (5, 4) and not reopened.done_mask().any()
    assert reopened.num_shards() == 2 and list(reopened.shard_rows(1)) == [4]


def test_a_foreign_zarr_store_is_refused(tmp_path: Path) -> None:
    import zarr

    zarr.open_group(str(tmp_path / "z"), mode="w").create_array("x", shape=(2,), dtype="f4")
    with pytest.raises(CacheError, match="not an ava feature cache"):
        open_root(tmp_path / "z", create=False)
    with pytest.raises(CacheError, match="ava cache extract"):
        open_root(tmp_path / "missing", create=False)
    assert np.asarray(zarr.open_array(str(tmp_path / "z" / "x"))[:]).shape == (2,)


def test_a_group_cut_off_while_being_made_is_remade(tmp_path: Path) -> None:
    import zarr

    from ava.cache.inspect import list_cache, verify_cache

    create_group(tmp_path / "c", SPEC, shard_size=4)
    zarr.open_group(str(tmp_path / "c" / spec_key(_other(codec="int8"))), mode="a").create_array(
        "done", shape=(0,), dtype="bool"
    )  # arrays begun, spec never written
    assert [g["codec"] for g in list_cache(tmp_path / "c")] == ["fp16"]
    report = verify_cache(tmp_path / "c")
    assert not report["ok"] and any("cut off" in p for p in report["problems"])
    assert create_group(tmp_path / "c", _other(codec="int8"), shard_size=4).spec["codec"] == "int8"
    with pytest.raises(CacheError, match="letters, digits"):
        create_group(tmp_path / "c", SPEC, key="../escape")


def test_opening_an_array_batches_a_shards_chunks_unless_the_user_chose(tmp_path: Path) -> None:
    """Zarr's default of one chunk per codec batch makes a token shard 64 batches of asyncio tasks (50 vs 31-44 ms
    of CPU per random-vit shard write); ava raises it when, and only when, it is still Zarr's default."""
    import zarr

    from ava.cache.store import ZARR_BATCH_SIZE

    g = create_group(tmp_path / "c", SPEC, shard_size=4)
    add_rows(g, [f"{i:064x}" for i in range(6)])
    values = np.arange(6 * 4 * 8, dtype=np.float16).reshape(6, 4, 8)
    with zarr.config.set({"codec_pipeline.batch_size": 1}):  # restored after the test
        g.features(-2)[0:6] = values
        assert zarr.config.get("codec_pipeline.batch_size") == ZARR_BATCH_SIZE
        reopened = CacheGroup.open(tmp_path / "c", g.key)
        np.testing.assert_array_equal(reopened.features(-2)[0:6], values)  # the same bytes back, across shards
    with zarr.config.set({"codec_pipeline.batch_size": 3}):
        CacheGroup.open(tmp_path / "c", g.key).features(-2)[0:2]
        assert zarr.config.get("codec_pipeline.batch_size") == 3  # the user's own value is kept
