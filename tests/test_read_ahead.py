"""A fingerprint reads the next ability's tokens and stored views while the current ability's heads fit
(ava.heads.features.read_ahead): the reads start before the fits end, the results are those of reading each ability
when it comes, the views read ahead are the ones the heads get, and no token read starts ahead where the rows would
not fit in host memory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ava.cache import ExtractConfig, extract, open_cache
from ava.heads import ability_runs
from ava.heads import features as features_mod
from ava.heads.fingerprint import FingerprintConfig, fingerprint

ABILITIES = ["color", "counting", "scene"]


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from ava.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("ahead")
    data, cache = root / "data", root / "cache"
    generate(SynthConfig(out=str(data), per_ava=10, ava=ABILITIES, size=64, seed=0), progress=False)
    extract(ExtractConfig(vfm="pixels#size=64", data=str(data), cache=str(cache), device="cpu", progress=False))
    return data, cache


def _fingerprint(data: Path, cache: Path, out: Path, heads: list[str]) -> dict[str, str]:
    result = fingerprint(
        FingerprintConfig(
            vfm="pixels#size=64",
            data=str(data),
            cache=str(cache),
            out=str(out),
            heads=heads,
            device="cpu",
            progress=False,
            jobs=1,
            max_train=6,
        )
    )
    return {h: (d / "predictions_test.jsonl").read_text() for h, d in result.run_dirs.items()}


@pytest.mark.slow  # two fingerprints with the attentive probe
def test_the_next_abilitys_reads_run_during_the_fits_and_change_nothing(cached, tmp_path, monkeypatch) -> None:
    data, cache = cached
    events: list[tuple[str, str, float]] = []
    real_ahead, real_fit = features_mod.read_ahead, ability_runs.AbilityRun.fit

    def ahead(cache, samples, *a, **k):
        reads = real_ahead(cache, samples, *a, **k)
        events.append(("ahead", samples[0].ava, time.perf_counter()) if reads is not None else ("none", "", 0.0))
        return reads

    def fit(self, ava, features, on_step=None):
        real_fit(self, ava, features, on_step)
        events.append(("fitted", ava, time.perf_counter()))

    monkeypatch.setattr(features_mod, "read_ahead", ahead)
    monkeypatch.setattr(ability_runs.AbilityRun, "fit", fit)
    assert not ability_runs.reads_ahead("cpu") and ability_runs.reads_ahead("cuda:0")
    monkeypatch.setattr(ability_runs, "reads_ahead", lambda device: True)  # as on a GPU: the mechanism, on a CPU
    with_ahead = _fingerprint(data, cache, tmp_path / "ahead", ["probe-attn"])
    names = [(kind, ava) for kind, ava, _ in events]
    order = [ava for kind, ava in names if kind == "fitted"]  # the dataset's order of abilities
    assert sorted(order) == sorted(ABILITIES)
    # each next ability's reads start before the current one's fit ends; the last has no next
    want = [("fitted", order[0])]
    for nxt, current in zip(order[1:], order[:-1], strict=True):
        want[-1:] = [("ahead", nxt), ("fitted", current), ("fitted", nxt)]
    assert names == want, names
    monkeypatch.setattr(features_mod, "read_ahead", lambda *a, **k: None)
    without = _fingerprint(data, cache, tmp_path / "plain", ["probe-attn"])
    assert with_ahead == without


def test_no_read_ahead_where_it_would_not_fit_or_is_not_needed(cached, monkeypatch) -> None:
    from ava.cache import placement
    from ava.data.format import Dataset

    data, cache_dir = cached
    cache = open_cache(cache_dir, "pixels#size=64")
    samples = Dataset(data).samples("counting")
    reads = features_mod.read_ahead(cache, samples, [None], device="cpu")
    assert reads is not None and len(reads.reads) == 1
    assert reads.take([s.image_sha256 for s in samples][::-1]) == {}  # other rows: read again, not these
    for r in reads.reads.values():
        r.wait()
    # stored views only (probe-linear, kNN): the views alone
    views = features_mod.read_ahead(cache, samples, [None], views=["mean"], tokens=False)
    assert views is not None and views.reads == {} and list(views.views) == [(cache.layers[0], "mean")]
    monkeypatch.setattr(placement, "host_free_bytes", lambda: 1000)  # rows that would not fit beside the held ones
    assert features_mod.read_ahead(cache, samples, [None], device="cpu") is None


@pytest.mark.parametrize("tokens", [True, False])
def test_views_read_ahead_are_the_ones_the_heads_get(cached, tokens: bool) -> None:
    """The stored views read ahead (with the tokens, or alone) are taken, not read again, and equal a plain read of
    them in the rows' held order; features of other rows read their own."""
    import numpy as np

    from ava.data.format import Dataset

    data, cache_dir = cached
    cache = open_cache(cache_dir, "pixels#size=64")
    calls: list[str] = []
    real = cache.read_view
    cache.read_view = lambda shas, layer, view: calls.append(view) or real(shas, layer, view)
    samples = Dataset(data).samples("counting")[::-1]  # (not in the cache's row order)
    pools = [v for v in ("mean", "grid2") if v in cache.views]
    ahead = features_mod.read_ahead(cache, samples, [None], views=pools, tokens=tokens)
    assert ahead is not None and sorted(v for _, v in ahead.views) == sorted(pools)
    for _, future in ahead.views.values():
        future.result()
    assert sorted(calls) == sorted(pools)
    held = features_mod.AbilityFeatures(cache, samples, [None], views=pools, tokens=tokens, reads=ahead)
    plain = features_mod.AbilityFeatures(cache, samples, [None], views=pools, tokens=tokens)
    shas = [s.image_sha256 for s in samples]
    for view in pools:
        np.testing.assert_array_equal(held.pooled(shas, None, view), plain.pooled(shas, None, view))
    assert sorted(calls) == sorted(pools * 2) and held.view_reads == plain.view_reads == len(pools)
    other = features_mod.AbilityFeatures(cache, samples[1:], [None], views=pools, tokens=tokens, reads=ahead)
    other.pooled(shas[1:], None, pools[0])
    # other rows: read again (each view at once when no head needs the tokens, else the one asked for)
    assert len(calls) == 2 * len(pools) + (1 if tokens else len(pools))


def test_a_damaged_view_read_ahead_fails_where_the_heads_take_it(cached, tmp_path: Path) -> None:
    """A stored view whose file is gone fails its read ahead on its thread; the error reaches the caller when the
    features are made, the same error a plain read gives, naming the array and the rows."""
    import shutil

    from ava.data.format import Dataset
    from ava.errors import AvaError

    data, cache_dir = cached
    copy = tmp_path / "cache"
    shutil.copytree(cache_dir, copy)
    cache = open_cache(copy, "pixels#size=64")
    for shard in (cache.group.path / "pooled" / str(cache.layers[0]) / "mean" / "c").iterdir():
        shutil.rmtree(shard)
    samples = Dataset(data).samples("counting")
    ahead = features_mod.read_ahead(cache, samples, [None], views=["mean"], tokens=False)
    with pytest.raises(AvaError) as plain:
        features_mod.AbilityFeatures(cache, samples, [None], views=["mean"], tokens=False)
    with pytest.raises(AvaError) as taken:
        features_mod.AbilityFeatures(cache, samples, [None], views=["mean"], tokens=False, reads=ahead)
    assert str(taken.value) == str(plain.value) and "pooled/" in str(taken.value)
