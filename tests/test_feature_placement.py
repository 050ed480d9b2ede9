"""Where an ability's features are held during a fingerprint: the previous ability's features are released before the
next is placed, free GPU memory counts what PyTorch's caching allocator holds unused (a fake device memory API on the
CPU), and an ability that fits in no memory streams from the cache, read ahead, with the same results."""

from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path

import pytest
import torch

from ava.cache import placement
from ava.data.format import Dataset
from ava.heads.ability_runs import train_abilities
from tests.helpers import FakeCache, handmade

ABILITIES = ("color", "counting", "scene")


class FakeGPU:
    """A CUDA memory API over a caching allocator: freed tensors stay reserved (``mem_get_info`` does not count
    them as free), as PyTorch's allocator keeps them."""

    def __init__(self, total: int) -> None:
        self.total, self.allocated, self.reserved = total, 0, 0
        self.on_query: list = []

    def alloc(self, tensor: torch.Tensor) -> torch.Tensor:
        n = tensor.numel() * tensor.element_size()
        self.allocated += n
        self.reserved = max(self.reserved, self.allocated)
        weakref.finalize(tensor, self.release, n)
        return tensor

    def release(self, n: int) -> None:
        self.allocated -= n

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def mem_get_info(device=None):
            for check in self.on_query:
                check()
            return self.total - self.reserved, self.total

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(placement, "host_free_bytes", lambda: 1 << 40)
        # tensors "on the device" stay in host memory here; the fake GPU accounts for them
        import ava.heads.features as features

        def hold(tokens, where):
            return self.alloc(tokens.clone()) if where.kind == placement.ON_DEVICE else tokens

        def empty(shape, dtype, where):
            tokens = torch.empty(shape, dtype=dtype)
            return self.alloc(tokens) if where.kind == placement.ON_DEVICE else tokens

        monkeypatch.setattr(features, "_hold", hold)
        monkeypatch.setattr(features, "_empty", empty)


class RecordingRun:
    """A feature head that records where each ability's features were held, and keeps a weak reference to them."""

    head = "recording"

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.placed: dict[str, str] = {}
        self.seen: list[weakref.ref] = []

    def pending(self, ava: str) -> bool:
        return ava not in self.placed

    def train_samples(self, ava: str):
        return self.dataset.samples(ava, split="train")

    def eval_samples(self, ava: str):
        return self.dataset.samples(ava, split="test")

    def layers(self):
        return [None]

    def needs(self, ava: str):
        return [], True

    def fit(self, ava: str, features, on_step=None) -> None:
        self.placed[ava] = features.placement
        self.seen.append(weakref.ref(features))


def test_free_device_memory_counts_reserved_but_unused_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    gb = 1 << 30
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 * gb, 10 * gb))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 8 * gb)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * gb)
    monkeypatch.setattr(placement, "host_free_bytes", lambda: 100 * gb)
    assert placement.device_free_bytes("cuda") == 7 * gb
    assert placement.place("cuda", 4 * gb) == placement.Placement(placement.ON_DEVICE, "cuda")
    assert placement.place("cuda", 6 * gb).kind == placement.STAGED
    monkeypatch.setattr(placement, "host_free_bytes", lambda: 5 * gb)
    assert placement.place("cuda", 8 * gb).kind == placement.STREAMED
    assert placement.place("cpu", 3 * gb).kind == placement.HOST
    assert placement.place("cpu", 8 * gb).kind == placement.STREAMED


def test_each_ability_is_released_and_the_third_placed_on_the_device(tmp_path: Path, monkeypatch) -> None:
    """One ability's features take X bytes on a 3X GPU. Kept alive while the next is placed, and with freed bytes
    not counted, the third would go to host memory (batches staged); released and counted, all three sit on the
    device."""
    root, fake = handmade(tmp_path / "data", abilities=ABILITIES, n=60)
    x = 60 * fake.num_tokens * fake.dim * 4  # float32 rows of one ability (train + test)
    gpu = FakeGPU(total=3 * x)
    gpu.install(monkeypatch)
    run = RecordingRun(Dataset(root))

    def previous_released() -> None:
        alive = [r for r in run.seen if r() is not None]
        assert not alive, "the previous ability's features are still alive while the next is placed"

    gpu.on_query.append(previous_released)
    train_abilities([run], fake, ABILITIES, device="cuda", progress=False)
    assert run.placed == dict.fromkeys(ABILITIES, placement.ON_DEVICE)
    assert gpu.allocated == 0 and gpu.reserved == x  # one ability at a time


class CyclicRun(RecordingRun):
    """A head that leaves its features in a reference cycle when its fit ends: only the garbage collector frees them."""

    def fit(self, ava: str, features, on_step=None) -> None:
        super().fit(ava, features, on_step)
        loop: list = [features]
        loop.append(loop)


@pytest.mark.parametrize("run_class", [RecordingRun, CyclicRun])
def test_a_full_collection_runs_only_when_a_cycle_holds_the_features(tmp_path: Path, monkeypatch, run_class) -> None:
    """A full collection after every ability cost 0.1 s and more (14 per fingerprint, growing with the dataset's
    objects). Features freed by reference counting need none; features a cycle holds are collected before the next
    ability is placed, as before."""
    import gc

    from ava.heads import ability_runs

    root, fake = handmade(tmp_path / "data", abilities=ABILITIES, n=60)
    gpu = FakeGPU(total=1 << 40)
    gpu.install(monkeypatch)
    run = run_class(Dataset(root))
    collections: list[int] = []
    collect = gc.collect
    monkeypatch.setattr(ability_runs.gc, "collect", lambda *a: collections.append(1) or collect(*a))

    def previous_released() -> None:
        assert not [r for r in run.seen if r() is not None], "features still alive while the next ability is placed"

    gpu.on_query.append(previous_released)
    enabled = gc.isenabled()
    gc.disable()  # (no automatic collection may free the cycle first)
    try:
        train_abilities([run], fake, ABILITIES, device="cuda", progress=False)
    finally:
        if enabled:
            gc.enable()
    assert len(run.seen) == len(ABILITIES) and all(r() is None for r in run.seen)
    assert len(collections) == (len(ABILITIES) if run_class is CyclicRun else 0)


def _fingerprint(root: Path, fake: FakeCache, out: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    from ava.heads.fingerprint import FingerprintConfig, fingerprint

    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: fake)
    result = fingerprint(
        FingerprintConfig(vfm="fake", data=str(root), cache="x", out=str(out), progress=False, device="cpu", jobs=1)
    )
    return {head: json.loads((d / "results_test.json").read_text()) for head, d in result.run_dirs.items()}


class ThreadCache(FakeCache):
    """A FakeCache that notes the thread of every token read."""

    threads: set[str]

    def read(self, shas, layer=None):
        self.threads.add(threading.current_thread().name)
        return super().read(shas, layer)


@pytest.mark.slow
def test_an_ability_that_fits_in_no_memory_streams_with_the_same_results(tmp_path: Path, monkeypatch) -> None:
    root, fake = handmade(tmp_path / "data", abilities=("spatial", "color"), n=30)
    held = _fingerprint(root, fake, tmp_path / "held", monkeypatch)
    streaming = ThreadCache(fake.rows, layers=fake.layers)
    streaming.threads = set()
    monkeypatch.setattr(placement, "host_free_bytes", lambda: 0)
    streamed = _fingerprint(root, streaming, tmp_path / "streamed", monkeypatch)
    for head, results in held.items():
        assert results["run"]["features"] == dict.fromkeys(("spatial", "color"), placement.HOST)
        assert streamed[head]["run"]["features"] == dict.fromkeys(("spatial", "color"), placement.STREAMED)
        for ava, r in results["abilities"].items():
            assert streamed[head]["abilities"][ava]["value"] == r["value"], (head, ava)
    assert any(name.startswith("ava-read-ahead") for name in streaming.threads)  # batches read ahead


def test_a_cuda_device_without_index_is_the_current_one(monkeypatch):
    """``torch.device("cuda") != torch.device("cuda:0")``: the resident reader compares its device with the held
    tensor's, which always has an index (a bare "cuda" sent every gather down the host path on the first H100 run)."""
    import torch

    from ava.cache.placement import concrete_device

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert concrete_device("cuda") == torch.device("cuda", 0)
    assert concrete_device("cuda:1") == torch.device("cuda", 1)
    assert concrete_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.uint8])
def test_held_host_rows_of_every_dtype(dtype: torch.dtype) -> None:
    """Rows held in host memory (allocated by numpy, which asks the kernel for huge pages for large arrays, and
    shared with torch): every dtype the cache holds, bfloat16 (no numpy type) too, writable, each its own memory."""
    from ava.cache.placement import held_empty

    a, b = held_empty((3, 4, 6), dtype), held_empty((3, 4, 6), dtype, torch.device("cpu"))
    assert a.dtype == dtype and a.shape == (3, 4, 6) and a.device.type == "cpu" and a.is_contiguous()
    a.fill_(1), b.fill_(0)
    assert bool((a == 1).all()) and a.data_ptr() != b.data_ptr()
    assert held_empty((0, 4, 6), dtype).shape == (0, 4, 6)


@pytest.mark.parametrize(
    "pinned",
    [
        False,
        pytest.param(
            True,
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA"),
            ],
        ),
    ],
)
def test_staging_buffers_for_rows_on_their_way_to_a_gpu(pinned: bool) -> None:
    """A reader's reused host buffer (numpy, the stored arrays' types): the shape and type asked, writable, shared with
    torch without a copy; pinned (page-locked, for the GPU's DMA) where asked."""
    import numpy as np

    from ava.cache.placement import staging_array

    for dtype in (np.float16, np.int8, np.uint8, np.uint16, np.float32):
        a = staging_array((4, 3, 5), dtype, pinned=pinned)
        assert a.shape == (4, 3, 5) and a.dtype == dtype and a.flags.writeable and a.flags.c_contiguous
        a[...] = 7
        t = torch.from_numpy(a[:2])
        assert t.data_ptr() == a.ctypes.data and bool((t == 7).all())
        assert t.is_pinned() == pinned
    assert staging_array((0, 3, 5), np.float16, pinned=pinned).shape == (0, 3, 5)


def test_a_host_set_stays_where_it_is_for_the_cpu() -> None:
    """``to_device`` to the CPU hands back the set itself (no copy of host rows)."""
    rows = torch.arange(24, dtype=torch.float16).view(2, 3, 4)
    assert placement.to_device(rows, "cpu") is rows


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the pinned chunks are a copy to a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_host_set_copied_to_the_gpu_in_pinned_chunks(dtype: torch.dtype) -> None:
    """Many chunks, the last one short, behind queued work whose tensor was freed (its block may hold the copy): the
    same values as ``.to()``, bit for bit, complete on the caller's stream."""
    g = torch.Generator().manual_seed(0)
    rows = (torch.randn(37, 29, 11, generator=g) * 100).to(dtype)
    busy = torch.randn(2048, 2048, device="cuda")
    for _ in range(8):
        busy = busy @ busy / 2048
    del busy  # freed while its matmuls are still queued
    got = placement.to_device(rows, "cuda", chunk_bytes=1000)
    want = rows.to("cuda")
    assert got.dtype == dtype and got.shape == rows.shape and got.device.type == "cuda"
    assert torch.equal(
        got.view(torch.uint8 if dtype != torch.float32 else torch.int32).cpu(),
        want.view(torch.uint8 if dtype != torch.float32 else torch.int32).cpu(),
    )
    small = rows[:1].contiguous()  # one chunk: a plain copy
    assert torch.equal(placement.to_device(small, "cuda", chunk_bytes=1 << 20).cpu(), small)


class RecordedRead:
    """Stands in for ``ResidentFeatures`` in a read ahead: notes where it was asked to hold the rows."""

    made: list[dict] = []

    def __init__(self, cache, shas, layer=None, *, device="cpu", held=None, names=None) -> None:
        self.where = torch.device(device if held == placement.ON_DEVICE else "cpu")
        self.rows = torch.arange(len(shas))
        RecordedRead.made.append({"device": device, "held": held, "rows": len(shas)})


def test_a_read_ahead_goes_onto_the_gpu_only_beside_room_for_the_fits(tmp_path: Path, monkeypatch) -> None:
    """The next ability's rows are read straight onto the GPU when they fit in ``AHEAD_SHARE`` of its free memory
    (the fits running meanwhile keep the rest), else into host memory; rows read onto the GPU are held there when
    the ability is placed (a placement then would count their own bytes as taken)."""
    import ava.cache.reader as reader
    import ava.heads.features as features

    root, fake = handmade(tmp_path / "data", abilities=ABILITIES, n=60)
    samples = [s for s in Dataset(root).samples() if s.ava == "color"]
    nbytes = len(samples) * fake.num_tokens * fake.dim * 2
    monkeypatch.setattr(features, "_resident", lambda cache, codec: True)
    monkeypatch.setattr(reader, "ResidentFeatures", RecordedRead)
    RecordedRead.made = []
    for total, held in ((3 * nbytes, placement.ON_DEVICE), (2 * nbytes, placement.HOST)):  # 0.35 x 3X > X > 0.7X
        gpu = FakeGPU(total=total)
        gpu.install(monkeypatch)
        ahead = features.read_ahead(fake, samples, [None], device="cuda")
        assert ahead is not None and RecordedRead.made[-1]["held"] == held
        assert RecordedRead.made[-1]["device"] == ("cuda" if held == placement.ON_DEVICE else "cpu")
    assert features.read_ahead(fake, samples, [None], device="cpu") is not None
    assert RecordedRead.made[-1] == {"device": "cpu", "held": placement.HOST, "rows": len(samples)}

    class Done:  # a read ahead that ended on the GPU: where it was asked to hold the rows, and the rows
        where = torch.device("cuda", 0)
        rows = torch.arange(len(samples))

        @staticmethod
        def wait() -> torch.Tensor:
            return torch.zeros(len(samples), fake.num_tokens, fake.dim, dtype=torch.float16)

    asked: list[int] = []
    monkeypatch.setattr(features.AbilityFeatures, "_placement", staticmethod(lambda d, n: asked.append(n)))
    monkeypatch.setattr(features, "_hold", lambda tokens, where: tokens)
    shas = [s.image_sha256 for s in samples]
    made = features.AbilityFeatures(
        fake, samples, [None], device="cuda", reads=features.AheadReads(shas, {fake.layers[0]: Done()})
    )
    assert made.placement == placement.ON_DEVICE and made.device == "cuda" and not asked
