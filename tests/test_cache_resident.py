"""Resident features (ava.cache.reader.ResidentFeatures): one read, gathers by index, reused output buffers."""

from __future__ import annotations

from pathlib import Path

import torch

from ava.cache import ExtractConfig, extract, open_cache
from ava.cache.reader import ResidentFeatures
from ava.data.format import Dataset
from tests.helpers import make_dataset

torch.set_num_threads(1)


def test_gather_into_reused_buffers_equals_a_fresh_gather(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_images=5)
    extract(
        ExtractConfig(
            vfm="tiny-dinov2", data=str(data), cache=str(tmp_path / "c"), batch_size=2, device="cpu", progress=False
        )
    )
    cache = open_cache(tmp_path / "c", "tiny-dinov2")
    shas = [s.image_sha256 for s in Dataset(data).samples()]  # (images shared by several samples, in any order)
    resident = ResidentFeatures(cache, shas)
    want = torch.from_numpy(cache.read(shas)).half()
    resident.wait()  # the reader threads' seconds by phase: read and checked on the host, nothing copied to a GPU
    assert resident.phases["read"] > 0 and resident.phases["check"] > 0 and resident.phases["copy"] == 0
    assert resident.seconds is not None and resident.seconds > 0
    index = torch.tensor([3, 0, 2, 2])
    fresh = resident.gather(index)
    assert fresh.dtype == torch.float16 and torch.equal(fresh, want[index])
    first = resident.gather(index, reuse=True)
    assert torch.equal(first, fresh)
    second = resident.gather(torch.tensor([1, 1, 0, 4]), reuse=True)
    assert torch.equal(second, want[[1, 1, 0, 4]]) and second.data_ptr() != first.data_ptr()
    third = resident.gather(torch.tensor([4, 3, 2, 1]), reuse=True)  # the ring (2 buffers) comes round
    assert third.data_ptr() == first.data_ptr() and torch.equal(first, want[[4, 3, 2, 1]])
    other = resident.gather(torch.tensor([0, 1]), reuse=True)  # another batch size: its own buffers
    assert other.shape[0] == 2 and torch.equal(other, want[[0, 1]]) and torch.equal(second, want[[1, 1, 0, 4]])


def test_rows_are_read_straight_where_the_caller_holds_them(tmp_path: Path, monkeypatch) -> None:
    """A fingerprint's placement reaches the reader (``held``): the rows are read into the tensor that is then held,
    not read into host memory and copied whole; host rows for a GPU are held as read, never pinned whole."""
    import pytest

    import ava.cache.reader as reader
    from ava.cache.placement import HOST, ON_DEVICE, STAGED, Placement
    from ava.heads.features import AbilityFeatures, reader_place

    assert reader_place(Placement(STAGED, "cpu"), "cuda:1") == {"device": "cpu", "held": HOST}
    assert reader_place(Placement(ON_DEVICE, "cuda:1"), "cuda:1") == {"device": "cuda:1", "held": ON_DEVICE}
    assert reader_place(Placement(HOST, "cpu"), "cpu") == {"device": "cpu", "held": HOST}
    data = make_dataset(tmp_path / "data", n_images=5)
    extract(
        ExtractConfig(
            vfm="tiny-dinov2",
            data=str(data),
            cache=str(tmp_path / "c"),
            batch_size=2,
            device="cpu",
            codec="fp16",
            progress=False,
        )
    )
    cache = open_cache(tmp_path / "c", "tiny-dinov2")
    samples = list(Dataset(data).samples())
    for bad in ("gpu", "pinned-host"):
        with pytest.raises(ValueError, match=f"held='{bad}'"):
            ResidentFeatures(cache, [s.image_sha256 for s in samples], held=bad)
    made: list[ResidentFeatures] = []

    class Spy(ResidentFeatures):
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(reader, "ResidentFeatures", Spy)
    features = AbilityFeatures(cache, samples, [None], device="cpu")
    assert len(made) == 1 and made[0].where == torch.device("cpu")
    assert features.tokens().data_ptr() == made[0].values.data_ptr()  # held as read: no copy
    shas = list(dict.fromkeys(s.image_sha256 for s in samples))
    assert torch.equal(torch.from_numpy(features.read(shas)), torch.from_numpy(cache.read(shas)))
