"""A fingerprint without a cache (ava.heads.memory): the same scores as `ava fingerprint` on a cache of the same
features, kept pixels that change nothing, and bad inputs."""

from __future__ import annotations

import pytest

from ava.errors import AvaError
from ava.heads.memory import EvalSuite, fingerprint_in_memory
from tests.helpers import SUITE_ABILITIES, tiny_vfm, tiny_vit


@pytest.mark.slow
def test_in_memory_equals_the_cache_path(small_suite, tmp_path):
    """Linear probe (with OCR's token reader) and kNN in memory give the scores of `ava fingerprint` on a cache
    extracted from the same VFM with the fp16 codec, value for value."""
    from ava.cache import ExtractConfig, extract
    from ava.heads.fingerprint import FingerprintConfig, fingerprint

    vfm = tiny_vfm(tiny_vit(seed=3))
    mem = fingerprint_in_memory(vfm, small_suite, heads=("probe-linear", "knn"))
    assert set(mem.scores) == {"probe-linear", "knn"}
    assert all(set(per) == set(SUITE_ABILITIES) for per in mem.scores.values())
    assert mem.n == {a: 4 for a in SUITE_ABILITIES} and mem.higher_is_better["color"] is False
    assert mem.metrics["ocr"] == "anls" and not mem.random_weights and mem.synthetic

    cache = tmp_path / "cache"
    extract(ExtractConfig(vfm="", data=str(small_suite), cache=str(cache), progress=False, num_workers=0), vfm=vfm)
    res = fingerprint(
        FingerprintConfig(
            vfm="tiny-vit",
            data=str(small_suite),
            cache=str(cache),
            out=str(tmp_path / "runs"),
            heads=["probe-linear", "knn"],
            device="cpu",
            progress=False,
        )
    )
    on_cache = {h: {a: r["abilities"][a]["value"] for a in SUITE_ABILITIES} for h, r in res.results.items()}
    assert on_cache == mem.scores


def test_kept_pixels_change_nothing_and_abilities_subset(small_suite):
    vfm = tiny_vfm(tiny_vit(seed=1))
    suite = EvalSuite(small_suite, ["color", "spatial"], keep_pixels=True)
    kept = fingerprint_in_memory(vfm, suite, heads=["knn"])
    again = fingerprint_in_memory(vfm, suite, heads=["knn"])  # from the kept uint8 pixels, no decoding
    plain = fingerprint_in_memory(vfm, small_suite, abilities=["color", "spatial"], heads=["knn"])
    assert kept.scores == again.scores == plain.scores and set(kept.scores["knn"]) == {"color", "spatial"}
    assert len(suite._pixels) == 1


def test_attentive_probe_is_optional(small_suite):
    vfm = tiny_vfm(tiny_vit(seed=2))
    out = fingerprint_in_memory(vfm, small_suite, abilities=["spatial"], heads=["probe-attn"])
    assert set(out.scores) == {"probe-attn"} and -1 <= out.scores["probe-attn"]["spatial"] <= 1


def test_a_frozen_vfm_works_too(small_suite):
    from ava.vfm import load_vfm

    out = fingerprint_in_memory(load_vfm("pixels#size=64"), small_suite, abilities=["color"], heads=["knn"])
    assert out.vfm.startswith("pixels") and out.scores["knn"]["color"] < 60  # CIEDE2000: pixels see colour


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"heads": ["llm"]}, "head 'llm' cannot be part of a fingerprint"),
        ({"heads": []}, "no heads given"),
        ({"abilities": ["nope"]}, "nope"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"split": "val"}, "no 'val' samples"),
        ({"parallel": "both"}, "parallel='both'; use one of abilities, heads"),
    ],
)
def test_bad_inputs(small_suite, kwargs, says):
    with pytest.raises(AvaError, match=says):
        fingerprint_in_memory(tiny_vfm(tiny_vit()), small_suite, **kwargs)


@pytest.mark.slow
def test_abilities_at_once_equal_heads_at_once_and_errors_surface(small_suite, monkeypatch):
    """parallel="abilities" (whole abilities on 2 threads) gives the scores of "heads" (`ava fingerprint`'s way),
    value for value; a fit failing in a worker thread is raised in the caller, and the GC is left as found."""
    import gc

    import torch

    from ava.heads.knn.train import KNNRun

    frozen = gc.get_freeze_count()
    vfm = tiny_vfm(tiny_vit(seed=7))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # 2 fitting threads of 1 intra-op thread each, on any machine
    try:
        by_ability = fingerprint_in_memory(vfm, small_suite, jobs=2, parallel="abilities")
        assert torch.get_num_threads() == 2  # the fitting threads' counts do not stay behind
        by_head = fingerprint_in_memory(vfm, small_suite, jobs=2, parallel="heads")
    finally:
        torch.set_num_threads(threads)
    assert by_ability.scores == by_head.scores
    real = KNNRun.fit_ability

    def fails_on_ocr(self, ava, *args, **kwargs):
        if ava == "ocr":
            raise RuntimeError("knn broke on ocr")
        return real(self, ava, *args, **kwargs)

    monkeypatch.setattr(KNNRun, "fit_ability", fails_on_ocr)
    with pytest.raises(RuntimeError, match="knn broke on ocr"):
        fingerprint_in_memory(vfm, small_suite, jobs=2, parallel="abilities")
    assert gc.get_freeze_count() == frozen  # as found (0, but Python 3.12 counts its immortal objects from the start)
