"""Extraction and reading: stored features equal the online forward, dedup, resume, bad images, spec refusal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ava.cache import ExtractConfig, FeatureDataset, content_digest, extract, open_cache, verify_cache
from ava.cache import extraction as extract_mod
from ava.data.format import Dataset
from ava.errors import AvaError
from tests.helpers import corrupt_image, online

torch.set_num_threads(1)
VFM = "tiny-dinov2"


def _cfg(data: Path, cache: Path, **kw: object) -> ExtractConfig:
    base = {"vfm": VFM, "batch_size": 2, "shard_size": 4, "device": "cpu", "progress": False}
    return ExtractConfig(data=str(data), cache=str(cache), **{**base, **kw})  # type: ignore[arg-type]


def test_fp16_features_equal_the_rounded_online_forward(cache_data: Path, tmp_path: Path) -> None:
    summary = extract(_cfg(cache_data, tmp_path / "c"))
    shas = sorted({s.image_sha256 for s in Dataset(cache_data).samples()})
    assert summary["images"] == len(shas) == 10 and summary["extracted"] == 10  # 15 samples, 10 images
    cache = open_cache(tmp_path / "c", VFM)
    assert cache.random_weights and cache.layers == (-2,) and all(cache.has(s) for s in shas)
    expected = online(VFM, cache_data, shas, batch_size=2)
    got = cache.read(shas[::-1])[::-1]  # any order in, same order out
    np.testing.assert_array_equal(got, expected.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(cache.read_pooled(shas[:3]), got[:3].mean(axis=1), rtol=1e-6)
    assert got.shape == (10, cache.num_tokens, cache.dim)


@pytest.mark.parametrize("codec", ["bf16", "int8", "int4"])
def test_other_codecs_within_their_stated_error(cache_data: Path, tmp_path: Path, codec: str) -> None:
    extract(_cfg(cache_data, tmp_path / "c", codec=codec))
    shas = sorted({s.image_sha256 for s in Dataset(cache_data).samples()})
    expected = online(VFM, cache_data, shas, batch_size=2)
    cache = open_cache(tmp_path / "c", VFM)
    got = cache.read(shas)
    if codec == "bf16":
        np.testing.assert_array_equal(got, torch.from_numpy(expected).bfloat16().float().numpy())
    elif codec == "int8":  # per token: |error| <= max|x| / 254
        bound = np.abs(expected).max(axis=-1, keepdims=True) / 254.0
        assert (np.abs(got - expected) <= bound * (1 + 1e-5)).all()
    else:  # per group of 64 features (one group at this dim): |error| <= max|x| / 14, the scale's fp16 rounding
        assert cache.dim == 64 and cache.spec["codec_group_size"] == 64
        bound = np.abs(expected).max(axis=-1, keepdims=True) / 14.0
        assert (np.abs(got - expected) <= bound * (1 + 2**-10)).all()
        assert not (got == expected.astype(np.float16).astype(np.float32)).all()  # (not an fp16 cache after all)
    assert verify_cache(tmp_path / "c")["ok"]


@pytest.mark.parametrize("codec", ["int8", "int4", "bf16"])
def test_heads_read_path_decodes_the_codes_to_the_caches_values(cache_data: Path, tmp_path: Path, codec: str) -> None:
    """The heads' read path (an ability's rows held for every head; the LLM head's resident rows) decodes the stored
    codes where it holds them (``decode_device``): the same float32 values as ``FeatureCache.read``. The resident
    rows also in runs of 3 on one and on two threads: each thread's host buffer, reused run after run (the last run
    shorter), leaves no run's values in another's rows."""
    from ava.cache.reader import ResidentFeatures
    from ava.heads.features import AbilityFeatures

    extract(_cfg(cache_data, tmp_path / "c", codec=codec))
    cache = open_cache(tmp_path / "c", VFM)
    samples = Dataset(cache_data).samples()
    held = AbilityFeatures(cache, samples, [None], device="cpu", chunk=3)  # chunks of 3: several decodes
    shas = [s.image_sha256 for s in samples]
    want = cache.read(shas)
    np.testing.assert_array_equal(held.read(shas), want)
    assert held.tokens().dtype == (torch.bfloat16 if codec == "bf16" else torch.float32)  # (bf16: held as stored)
    for kw in ({}, {"chunk_rows": 3, "threads": 1}, {"chunk_rows": 3, "threads": 2}):
        resident = ResidentFeatures(cache, shas, **kw)
        assert torch.equal(resident.gather(torch.arange(len(shas))), torch.from_numpy(want).to(resident.dtype)), kw


def test_subset_first_then_the_rest(cache_data: Path, tmp_path: Path) -> None:
    first = extract(_cfg(cache_data, tmp_path / "c", ava=["counting"], split="test"))
    rest = extract(_cfg(cache_data, tmp_path / "c"))
    assert first["images"] == 3 and rest["already_done"] == 3 and rest["extracted"] == 7
    again = extract(_cfg(cache_data, tmp_path / "c"))
    assert again["extracted"] == 0 and again["already_done"] == 10
    fresh = extract(_cfg(cache_data, tmp_path / "d"))
    assert fresh["key"] == rest["key"]
    a, b = open_cache(tmp_path / "c", VFM), open_cache(tmp_path / "d", VFM)
    assert content_digest(a.group) == content_digest(b.group)  # row layout differs, content does not


def test_interrupted_writer_resumes_to_the_same_digest(cache_data: Path, tmp_path: Path, monkeypatch) -> None:
    """A failure after a shard's values were (badly) written but before its rows were marked done."""
    real = extract_mod.write_shard
    calls = []

    def broken(group, shard, results):  # type: ignore[no-untyped-def]
        calls.append(shard)
        if len(calls) == 2:
            rows = group.shard_rows(shard)
            group.features(-2)[rows.start : rows.stop] = np.full((len(rows), group.num_tokens, group.dim), 7.0)
            raise RuntimeError("killed while writing")
        real(group, shard, results)

    monkeypatch.setattr(extract_mod, "write_shard", broken)
    with pytest.raises(RuntimeError, match="killed"):  # one writer thread: shards finish in order
        extract(_cfg(cache_data, tmp_path / "c", writers=1))
    monkeypatch.setattr(extract_mod, "write_shard", real)
    cache = open_cache(tmp_path / "c", VFM)
    assert cache.done.sum() == 4  # the first shard only
    resumed = extract(_cfg(cache_data, tmp_path / "c"))
    assert resumed["already_done"] == 4 and resumed["extracted"] == 6
    extract(_cfg(cache_data, tmp_path / "ref"))
    digest = content_digest(open_cache(tmp_path / "c", VFM).group)
    assert digest == content_digest(open_cache(tmp_path / "ref", VFM).group)


def test_a_cpu_overflow_stops_at_its_batch_and_keeps_the_shards_before(
    cache_data: Path, tmp_path: Path, monkeypatch
) -> None:
    """On the CPU a batch's fp16 range is checked at once: the error names the peak, the shards handed to the writers
    before it are written and marked done, and a run without the overflow resumes from there."""
    real = extract_mod._forward
    calls = []

    def overflowing(vfm, pixels, device):  # type: ignore[no-untyped-def]
        out = real(vfm, pixels, device)
        calls.append(len(pixels))
        if len(calls) == 3:  # rows 4-5: the first batch of the second shard
            out = out.clone()
            out[1, 0, 2, 3] = 7.5e4
        return out

    monkeypatch.setattr(extract_mod, "_forward", overflowing)
    with pytest.raises(AvaError, match="7.5e\\+04, beyond the fp16 range"):
        extract(_cfg(cache_data, tmp_path / "c", writers=1))
    assert open_cache(tmp_path / "c", VFM).done.sum() == 4
    monkeypatch.setattr(extract_mod, "_forward", real)
    assert extract(_cfg(cache_data, tmp_path / "c"))["already_done"] == 4


def test_corrupt_image_is_reported_by_sample_and_left_undone(cache_data: Path, tmp_path: Path) -> None:
    import shutil

    bad_data = tmp_path / "bad"
    shutil.copytree(cache_data, bad_data)
    path = corrupt_image(bad_data, "c3")
    summary = extract(_cfg(bad_data, tmp_path / "c", num_workers=1))
    assert summary["extracted"] == 9 and len(summary["failed"]) == 1
    assert "color/c3" in summary["failed"][0] and str(path) in summary["failed"][0]
    cache = open_cache(tmp_path / "c", VFM)
    assert not cache.has(path.stem) and cache.done.sum() == 9
    report = verify_cache(tmp_path / "c", data=bad_data)
    assert not report["ok"] and any("not done" in p for p in report["problems"])
    with pytest.raises(AvaError, match="not in cache"):
        cache.read([path.stem])


def test_named_key_refuses_another_codec(cache_data: Path, tmp_path: Path) -> None:
    extract(_cfg(cache_data, tmp_path / "c", key="mine", ava=["counting"]))
    with pytest.raises(AvaError, match=r"codec: 'fp16' != 'int8'"):
        extract(_cfg(cache_data, tmp_path / "c", key="mine", codec="int8", ava=["counting"]))
    other = extract(_cfg(cache_data, tmp_path / "c", codec="int8", ava=["counting"]))  # no --key: a group of its own
    assert other["key"] != "mine"
    with pytest.raises(AvaError, match="several cache groups"):
        open_cache(tmp_path / "c", VFM)
    assert open_cache(tmp_path / "c", VFM, key="mine").spec["codec"] == "fp16"
    with pytest.raises(AvaError, match="ava cache extract --vfm pixels"):
        open_cache(tmp_path / "c", "pixels")


def test_feature_dataset_decodes_in_workers(cache_data: Path, tmp_path: Path) -> None:
    extract(_cfg(cache_data, tmp_path / "c", ava=["counting"]))
    cache = open_cache(tmp_path / "c", VFM)
    samples = Dataset(cache_data).samples("counting")
    loader = torch.utils.data.DataLoader(FeatureDataset(cache, samples), batch_size=2, num_workers=1)
    batches = list(loader)
    feats = torch.cat([b["features"] for b in batches]).numpy()
    index = torch.cat([b["index"] for b in batches]).tolist()
    assert index == list(range(len(samples)))
    np.testing.assert_array_equal(feats, cache.read([s.image_sha256 for s in samples]))
    ds = FeatureDataset(cache, samples)
    for item, i in zip(ds.__getitems__([2, 0]), [2, 0], strict=True):  # a batch read equals single reads
        assert item["index"] == i and torch.equal(item["features"], ds[i]["features"])
    with pytest.raises(AvaError, match="color/c"):
        FeatureDataset(cache, Dataset(cache_data).samples("color"))  # not extracted: refused, naming samples


@pytest.mark.slow
def test_every_builtin_model_class_extracts(tmp_path: Path) -> None:
    """The synthetic suite through the tiny variant of every model class (plus the two controls)."""
    from ava.synth import SynthConfig, generate
    from ava.vfm import VFMS

    data = generate(SynthConfig(out=str(tmp_path / "synth"), per_ava=2, ava=["color", "ocr"], size=64), progress=False)
    names = [n for n in VFMS.names() if n.startswith("tiny-")] + ["pixels", "random-vit"]
    shas = sorted({s.image_sha256 for s in Dataset(data).samples()})
    for name in names:
        extract(_cfg(data, tmp_path / "c", vfm=name, batch_size=4))
        got = open_cache(tmp_path / "c", name).read(shas)
        expected = online(name, data, shas, batch_size=4)
        np.testing.assert_array_equal(got, expected.astype(np.float16).astype(np.float32), err_msg=name)


def test_a_second_job_on_the_same_group_is_refused_while_the_first_runs(cache_data: Path, tmp_path: Path) -> None:
    from ava.cache.extraction import _lock_group
    from ava.cache.store import CacheGroup

    extract(_cfg(cache_data, tmp_path / "c", ava=["counting"]))
    cache = open_cache(tmp_path / "c", VFM)
    lock = _lock_group(CacheGroup.open(tmp_path / "c", cache.key, writable=True))  # as a running job holds it
    try:
        with pytest.raises(AvaError, match="another `ava cache extract` is writing"):
            extract(_cfg(cache_data, tmp_path / "c"))
    finally:
        lock.close()
    assert extract(_cfg(cache_data, tmp_path / "c"))["failed"] == []  # free again: it resumes


def test_two_names_of_one_checkpoint_share_a_group(cache_data: Path, tmp_path: Path) -> None:
    """``key@DIR`` and ``hf:DIR`` load the same weights the same way: one cache key, found by either name."""
    from ava.vfm import load_vfm

    weights = tmp_path / "w"
    load_vfm(VFM).model.save_pretrained(weights)
    by_key, by_hf = f"{VFM}@{weights}", f"hf:{weights}"
    first = extract(_cfg(cache_data, tmp_path / "c", vfm=by_key, ava=["counting"]))
    second = extract(_cfg(cache_data, tmp_path / "c", vfm=by_hf, ava=["counting"]))
    assert second["key"] == first["key"] and second["extracted"] == 0 and second["already_done"] == first["images"]
    assert open_cache(tmp_path / "c", by_key).key == open_cache(tmp_path / "c", by_hf).key == first["key"]
    with pytest.raises(AvaError, match="no features of vfm"):
        open_cache(tmp_path / "c", VFM)  # built-in random weights: other features, not this group


def test_non_finite_rows_decoded_on_a_device_are_named() -> None:
    """``check_finite`` on a decoded tensor (the scaled codecs' read path) names the sample whose row holds NaN."""
    from ava.heads.features import check_finite
    from ava.sample import Sample

    rows = torch.zeros(3, 2, 4)
    rows[1, 0, 2] = float("nan")
    samples = [Sample(f"s{i}", "color", f"img{i}.png", 8, 8, "q", "a", {}) for i in range(3)]
    check_finite(rows[[0, 2]], [samples[0], samples[2]], None, -2)
    with pytest.raises(AvaError, match=r"1 sample\(s\) hold NaN or inf .*color/s1 \(image img1.png\)"):
        check_finite(rows, samples, None, -2)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8])
@pytest.mark.parametrize("layout", ["read-only", "reversed"])
def test_non_finite_rows_of_an_array_are_named(dtype, layout) -> None:
    """``check_finite`` on rows as a cache's ``read`` hands them out (numpy; read-only when they are a store's
    buffer, any strides): NaN, +inf and -inf each name their row, a finite array passes, and no warning is left."""
    import warnings

    from ava.heads.features import check_finite
    from ava.sample import Sample

    rows = np.zeros((5, 3, 4), dtype)
    if dtype != np.int8:
        rows[1, 2, 3], rows[3, 0, 0], rows[4, 1, 1] = np.nan, np.inf, -np.inf
    samples = [Sample(f"s{i}", "color", f"img{i}.png", 8, 8, "q", "a", {}) for i in range(5)]
    if layout == "reversed":  # negative strides: torch cannot view them, the numpy check runs
        rows, samples = rows[::-1], samples[::-1]
    rows.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_finite(rows[[0, 2]] if layout == "read-only" else rows[[4, 2]], [samples[0], samples[2]], None, -2)
        if dtype == np.int8:
            check_finite(rows, samples, None, -2)
            return
        with pytest.raises(AvaError, match=r"3 sample\(s\) hold NaN or inf .*") as e:
            check_finite(rows, samples, None, -2)
    assert {"color/s1", "color/s3", "color/s4"} == {w for w in e.value.args[0].split() if w.startswith("color/")}


def test_int4_shards_are_the_files_zarr_writes(
    cache_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """int4's arrays (packed codes [N, T, D/2] uint8, fp16 scales [N, T, D/64], views pooled from the input) go
    through the writer threads' encoder (ava.cache.shards) as the other codecs do: the same bytes as Zarr's writes."""
    from ava.cache.store import CacheGroup

    files = {}
    for way in ("ours", "zarr"):
        if way == "zarr":
            monkeypatch.setattr(CacheGroup, "encoder", lambda self, name: None)
        extract(_cfg(cache_data, tmp_path / way, vfm="pixels#size=16", codec="int4", num_workers=0))
        root = tmp_path / way
        files[way] = {
            str(p.relative_to(root)): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        }
    assert files["ours"].keys() == files["zarr"].keys() and any("scales" in k for k in files["ours"])
    assert [k for k in files["ours"] if files["ours"][k] != files["zarr"][k]] == []


@pytest.mark.parametrize(("codec", "held"), [("int8", "float32"), ("int4", "codes")])
def test_a_non_finite_scale_in_a_later_chunk_is_named(
    cache_data: Path, tmp_path: Path, codec: str, held: str, monkeypatch
) -> None:
    """An int8/int4 cache's rows are read a chunk per reader thread, decoded into float32 or held as codes: a NaN
    scale planted in the last chunk's row is refused from that thread, naming its sample, and the chunks before it
    are not blamed."""
    from ava.heads.features import AbilityFeatures

    extract(_cfg(cache_data, tmp_path / "c", codec=codec))
    cache = open_cache(tmp_path / "c", VFM)
    samples = list({s.image_sha256: s for s in Dataset(cache_data).samples()}.values())
    bad = samples[-1]
    import zarr

    scales = zarr.open_array(str(cache.group.path / f"scales/{cache.layers[0]}"), mode="r+")
    row = cache.group.index()[bad.image_sha256]
    planted = np.asarray(scales[row : row + 1]).copy()
    planted.reshape(-1)[0] = np.nan
    scales[row : row + 1] = planted
    cache = open_cache(tmp_path / "c", VFM)
    if held == "codes":
        _codes_only_fit(monkeypatch, len(samples), cache)
    with pytest.raises(AvaError, match=rf"1 sample\(s\) hold NaN or inf .*{bad.ava}/{bad.id} "):
        AbilityFeatures(cache, samples, [None], device="cpu", chunk=3)


def _codes_only_fit(monkeypatch: pytest.MonkeyPatch, n: int, cache: object) -> None:
    """Host memory where an ability's int8/int4 codes fit but its float32 rows do not (a CPU run's limit)."""
    from ava.cache import placement

    codec = cache.group.codec  # type: ignore[attr-defined]
    nbytes32 = n * cache.num_tokens * cache.dim * 4  # type: ignore[attr-defined]
    codes = n * sum(codec.row_bytes(cache.num_tokens, cache.dim))  # type: ignore[attr-defined]
    assert codes < nbytes32
    monkeypatch.setattr(placement, "host_free_bytes", lambda: int((codes + nbytes32) / 2 / placement.SHARE))


@pytest.mark.parametrize("codec", ["int8", "int4"])
def test_codes_held_where_float32_would_not_fit_give_the_same_rows(
    cache_data: Path, tmp_path: Path, codec: str, monkeypatch
) -> None:
    """Where an ability's float32 rows would not fit but the stored codes do, the codes are held and decoded batch
    by batch: every read path gives the float32 values the cache gives (not streamed from the cache)."""
    from ava.cache.placement import HOST
    from ava.heads.features import AbilityFeatures

    extract(_cfg(cache_data, tmp_path / "c", codec=codec))
    cache = open_cache(tmp_path / "c", VFM)
    samples = list({s.image_sha256: s for s in Dataset(cache_data).samples()}.values())
    shas = [s.image_sha256 for s in samples]
    whole = AbilityFeatures(cache, samples, [None], device="cpu", chunk=3)
    _codes_only_fit(monkeypatch, len(shas), cache)
    coded = AbilityFeatures(cache, samples, [None], device="cpu", chunk=3)
    assert (whole.held_as, coded.held_as, coded.placement) == ("float32", "codes", HOST)
    assert coded.tokens().values.dtype == (torch.int8 if codec == "int8" else torch.uint8)
    want = cache.read(shas)
    np.testing.assert_array_equal(coded.read(shas[::-1]), want[::-1])
    rows = coded.held_rows(samples, [None], "cpu")
    assert torch.equal(rows[np.array([2, 0, 1])], torch.from_numpy(want[[2, 0, 1]]))
    for pool in ("mean", "grid2"):
        np.testing.assert_array_equal(coded.pooled(shas, None, pool), whole.pooled(shas, None, pool))


@pytest.mark.parametrize("codec", ["int8", "int4"])
def test_codes_read_ahead_are_decoded_not_read_again(cache_data: Path, tmp_path: Path, codec: str, monkeypatch) -> None:
    """An int8/int4 cache's codes read ahead (a fingerprint on a GPU reads the next ability's while this one's heads
    fit) are what the ability's rows are decoded from, float32 or held as codes: the same rows, no second read."""
    from ava.cache import placement
    from ava.heads.features import AbilityFeatures, AheadCodes, read_ahead

    extract(_cfg(cache_data, tmp_path / "c", codec=codec))
    cache = open_cache(tmp_path / "c", VFM)
    samples = list({s.image_sha256: s for s in Dataset(cache_data).samples()}.values())[::-1]
    shas = [s.image_sha256 for s in samples]
    want = cache.read(shas)
    calls: list[int] = []
    real = cache.read_stored
    cache.read_stored = lambda sha256s, layer=None: calls.append(len(sha256s)) or real(sha256s, layer)
    for codes_only in (False, True):
        if codes_only:
            _codes_only_fit(monkeypatch, len(shas), cache)
        calls.clear()
        ahead = read_ahead(cache, samples, [None], device="cpu", views=["mean"])
        assert ahead is not None and all(isinstance(r, AheadCodes) for r in ahead.reads.values())
        for r in ahead.reads.values():
            r.wait()
        read = sum(calls)
        made = AbilityFeatures(cache, samples, [None], device="cpu", chunk=3, views=["mean"], reads=ahead)
        assert read == len(shas) and sum(calls) == read  # every row read once, ahead
        assert made.held_as == ("codes" if codes_only else "float32")
        np.testing.assert_array_equal(made.read(shas), want)
        np.testing.assert_array_equal(made.pooled(shas, None, "mean"), cache.read_view(shas, None, "mean"))
    monkeypatch.setattr(placement, "host_free_bytes", lambda: 0)  # codes that would not fit: nothing read ahead
    assert read_ahead(cache, samples, [None], device="cpu") is None


@pytest.mark.parametrize("codec", ["int8", "int4"])
def test_a_damaged_code_read_ahead_fails_as_a_plain_read(cache_data: Path, tmp_path: Path, codec: str) -> None:
    """Codes read ahead from a damaged shard raise, where the ability's features are made, the error a plain read
    raises."""
    import shutil

    from ava.heads.features import AbilityFeatures, read_ahead

    extract(_cfg(cache_data, tmp_path / "c", codec=codec))
    cache = open_cache(tmp_path / "c", VFM)
    for shard in (cache.group.path / "features" / str(cache.layers[0]) / "c").iterdir():
        shutil.rmtree(shard)
        break
    samples = list({s.image_sha256: s for s in Dataset(cache_data).samples()}.values())
    ahead = read_ahead(cache, samples, [None], device="cpu")
    with pytest.raises(AvaError) as plain:
        AbilityFeatures(cache, samples, [None], device="cpu")  # (chunks of the read ahead's size)
    with pytest.raises(AvaError) as taken:
        AbilityFeatures(cache, samples, [None], device="cpu", reads=ahead)
    assert str(taken.value) == str(plain.value) and "cannot be read" in str(taken.value)


@pytest.mark.slow
def test_a_fingerprint_on_held_codes_scores_as_on_float32(tmp_path: Path, monkeypatch, small_suite: Path) -> None:
    """The three heads of a fingerprint on an int4 cache give the same replies and scores whether each ability's rows
    are held in float32 or, where that would not fit, as the codes decoded batch by batch."""

    from ava.cache import placement
    from ava.heads.fingerprint import FingerprintConfig, fingerprint

    suite = small_suite  # 20 images per ability
    extract(
        ExtractConfig(vfm=VFM, data=str(suite), cache=str(tmp_path / "c"), device="cpu", codec="int4", progress=False)
    )
    cache = open_cache(tmp_path / "c", VFM)
    row32, row = cache.num_tokens * cache.dim * 4, sum(cache.group.codec.row_bytes(cache.num_tokens, cache.dim))
    runs = {}
    for held in ("float32", "codes"):
        if held == "codes":  # room for 30 rows' codes (an ability has 20 images), under 8 rows of float32
            assert 30 * row < 8 * row32
            monkeypatch.setattr(placement, "host_free_bytes", lambda: int(30 * row / placement.SHARE))
        res = fingerprint(
            FingerprintConfig(
                vfm=VFM,
                data=str(suite),
                cache=str(tmp_path / "c"),
                out=str(tmp_path / held),
                device="cpu",
                progress=False,
            )
        )
        runs[held] = {
            h: (
                (d / "predictions_test.jsonl").read_text(),
                {a: r["value"] for a, r in res.results[h]["abilities"].items()},
            )
            for h, d in res.run_dirs.items()
        }
        for h in res.run_dirs:
            assert set(res.results[h]["run"]["features"].values()) == {placement.HOST}, res.results[h]["run"]
    assert runs["codes"] == runs["float32"] and len(runs["codes"]) == 3
