"""Resident features (ava.cache.reader.ResidentFeatures): one read, gathers by index, reused output buffers."""

from __future__ import annotations

from pathlib import Path

import torch

from ava.cache import ExtractConfig, extract, open_cache
from ava.cache.reader import ResidentFeatures
from ava.data.format import Dataset
from tests._cache_fixtures import make_dataset

torch.set_num_threads(1)


def test_gather_into_reused_buffers_equals_a_fresh_gather(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_images=5)
    extract(ExtractConfig(vfm="tiny-dinov2", data=str(data), cache=str(tmp_path / "c"), batch_size=2, device="cpu",
                          progress=False))  # fmt: skip
    cache = open_cache(tmp_path / "c", "tiny-dinov2")
    shas = [s.image_sha256 for s in Dataset(data).samples()]  # (images shared by several samples, in any order)
    resident = ResidentFeatures(cache, shas)
    want = torch.from_numpy(cache.read(shas)).half()
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
