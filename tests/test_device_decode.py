"""JPEGs decoded and padded on the VFM's device (ava.vfm.device_decode): the resize and padding agree with Pillow's
(the CPU workers' path), the decoder is probed before it is trusted, and an extraction that decodes on the device
stores the features of the workers' path within resampling rounding, mixed batches (PNG beside JPEG) and unreadable
files included. torchvision's nvJPEG itself runs only on a GPU (benchmarks/gpu.sh); here a host decoder stands in
for it, behind the same interface."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from ava.cache import extraction, open_cache
from ava.data.format import Dataset, DatasetWriter, Sample
from ava.errors import AvaError
from ava.vfm import device_decode as dd
from ava.vfm.preprocess import PAD_FILL
from tests.helpers import extract_cache

EFFNET = {"vfm": "effnet-lite0#size=96", "batch_size": 3, "num_workers": 0}  # a real CNN, in one process


def _photos() -> dict[str, np.ndarray]:
    skimage = pytest.importorskip("skimage.data")
    return {
        "astronaut": skimage.astronaut(),
        "coffee": skimage.coffee(),
        "chelsea": skimage.chelsea(),
        "portrait": np.ascontiguousarray(skimage.coffee().transpose(1, 0, 2)),
    }


@pytest.mark.parametrize("size", [61, 224, 384])
def test_pad_resize_is_pillows_pad_within_rounding(size: int) -> None:
    for name, rgb in _photos().items():
        want = np.array(
            ImageOps.pad(Image.fromarray(rgb), (size, size), method=Image.Resampling.BICUBIC, color=PAD_FILL)
        )
        got = dd.pad_resize(torch.from_numpy(rgb).permute(2, 0, 1).contiguous(), size).permute(1, 2, 0).numpy()
        assert got.shape == want.shape == (size, size, 3) and got.dtype == np.uint8
        pad = (want == PAD_FILL).all(axis=2) & (got == PAD_FILL).all(axis=2)
        assert (pad.all(axis=1).sum(), pad.all(axis=0).sum()) == (
            (want == PAD_FILL).all(axis=2).all(axis=1).sum(),
            (want == PAD_FILL).all(axis=2).all(axis=0).sum(),
        )
        diff = np.abs(got.astype(int) - want.astype(int))
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.998, (name, size, diff.mean(), diff.max())


def test_a_batch_is_padded_as_each_image_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """pad_resize_batch (images of one size resized together, in parts) gives each image's pad_resize exactly:
    mixed sizes and orientations, a square already at the size, a run of one shape split across parts."""
    photos = [torch.from_numpy(rgb).permute(2, 0, 1).contiguous() for rgb in _photos().values()]
    rng = np.random.default_rng(0)
    small = [torch.from_numpy(rng.integers(0, 256, (3, h, w), dtype=np.uint8)) for h, w in ((7, 33), (61, 61), (40, 9))]
    images = photos + small + [photos[1], photos[1].clone(), photos[0]]
    for size in (61, 224):
        want = torch.stack([dd.pad_resize(im, size) for im in images])
        assert torch.equal(dd.pad_resize_batch(images, size), want), size
        monkeypatch.setattr(dd, "RESIZE_CHUNK_VALUES", 3 * 400 * 600)  # one photo a part
        assert torch.equal(dd.pad_resize_batch(images, size), want), size
        monkeypatch.undo()
    assert dd.pad_resize_batch([], 61).shape == (0, 3, 61, 61)


@pytest.mark.parametrize(("w", "h"), [(640, 480), (480, 640), (427, 640), (451, 300), (33, 7), (7, 33), (50, 50)])
def test_fit_size_is_pillows(w: int, h: int) -> None:
    for size in (61, 224, 384, 1024):
        assert dd.fit_size(w, h, size) == ImageOps.contain(Image.new("RGB", (w, h)), (size, size)).size


def _host_decoder(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """A stand-in for torchvision's batched decode_jpeg: Pillow, one file at a time."""
    out = []
    for d in data:
        with Image.open(io.BytesIO(d.numpy().tobytes()), formats=("JPEG",)) as im:
            out.append(torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1).contiguous())
    return out


def test_the_decoder_is_probed_before_it_is_trusted() -> None:
    cuda = torch.device("cuda")
    assert dd.jpeg_decoder(torch.device("cpu"))[0] is None
    decode, note = dd.jpeg_decoder(cuda, lambda: _host_decoder)
    assert decode is _host_decoder and note == "nvjpeg"

    def raising() -> dd.Decoder:
        raise RuntimeError("torchvision::decode_jpegs_cuda is not available")

    decode, note = dd.jpeg_decoder(cuda, raising)
    assert decode is None and note.startswith("workers (torchvision cannot decode JPEG on cuda: RuntimeError")

    def grey(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        return [torch.full((3, 12, 20), 128, dtype=torch.uint8) for _ in data]

    decode, note = dd.jpeg_decoder(cuda, lambda: grey)
    assert decode is None and "gave other pixels" in note


def _jpeg(rgb: np.ndarray, quality: int = 92) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


@pytest.fixture()
def photos_data(tmp_path: Path) -> Path:
    """Photographs as JPEG files, a PNG among them and one JPEG that no decoder reads."""
    photos = list(_photos().values())
    with DatasetWriter(tmp_path / "data", {"source": "test"}) as w:
        files = [w.add_image_bytes(_jpeg(rgb), "jpg") for rgb in photos]
        files.append(w.add_image(Image.fromarray(photos[1][::2, ::2])))  # a PNG: the workers decode it
        for i, rel in enumerate(files):
            img = Image.open(w.root / "images" / rel)
            w.add_sample(
                Sample(f"s{i}", "scene", rel, img.width, img.height, "q", "a", {"index": 0, "text": "a"}, split="test")
            )
    return tmp_path / "data"


@pytest.mark.slow  # two extractions through a real CNN
def test_device_decode_stores_the_workers_features_within_rounding(
    photos_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = extract_cache(photos_data, tmp_path / "workers", **EFFNET, decode="workers")
    assert ref["decoder"] == "workers (--decode workers)"
    monkeypatch.setattr(extraction, "jpeg_decoder", lambda device: (_host_decoder, "nvjpeg"))
    got = extract_cache(photos_data, tmp_path / "device", **EFFNET, decode="device")
    assert got["decoder"] == "nvjpeg" and got["extracted"] == ref["extracted"] == 5 and not got["failed"]
    shas = [s.image_sha256 for s in Dataset(photos_data).samples()]
    a = open_cache(tmp_path / "workers", "effnet-lite0#size=96").read(shas)
    b = open_cache(tmp_path / "device", "effnet-lite0#size=96").read(shas)
    rel = np.linalg.norm(b - a) / np.linalg.norm(a)
    assert rel < 1e-3, rel  # within the fp16 codec's own error: the pixels are >= 99.8% equal (test above)
    assert np.array_equal(a[-1], b[-1])  # the PNG went through the workers in both runs


def test_an_unreadable_jpeg_fails_alone_and_decode_device_without_a_decoder_is_refused(
    photos_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = Dataset(photos_data)
    bad = ds.image_path(ds.samples()[1])
    bad.write_bytes(bad.read_bytes()[:200])  # cut short: neither nvJPEG nor Pillow decodes it
    monkeypatch.setattr(extraction, "jpeg_decoder", lambda device: (_host_decoder, "nvjpeg"))
    got = extract_cache(photos_data, tmp_path / "device", **EFFNET)
    assert got["extracted"] == 4 and len(got["failed"]) == 1 and "sample(s) scene/s1" in got["failed"][0]
    assert "cannot decode JPEG" in got["failed"][0]
    monkeypatch.setattr(extraction, "jpeg_decoder", lambda device: (None, "workers (no torchvision here)"))
    with pytest.raises(AvaError, match=r"--decode device: JPEGs cannot be decoded on the device here: workers \(no"):
        extract_cache(photos_data, tmp_path / "other", **EFFNET, decode="device")
    with pytest.raises(AvaError, match=r"--decode 'gpu': use one of auto, workers, device"):
        extract_cache(photos_data, tmp_path / "other", **EFFNET, decode="gpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="nvJPEG runs on a GPU only")
def test_a_device_decode_is_ordered_with_the_callers_queued_work() -> None:
    """torchvision's decode_jpeg(device="cuda") writes from nvJPEG's own stream into memory taken on the current
    stream: called while that stream still ran work on freed blocks, ~4% of an extraction's rows came out wrong (H200,
    2026-11-28). decode_padded decodes on a stream of its own: every batch decoded behind queued work that allocates
    and frees memory gives the pixels of a decode with nothing queued, bit for bit."""
    cuda = torch.device("cuda")
    decode, note = dd.jpeg_decoder(cuda)
    if decode is None:
        pytest.skip(note)
    rng = np.random.default_rng(0)
    files = []
    for i in range(96):
        w, h = (640, 480) if i % 3 else (480, 640)
        rgb = rng.integers(0, 256, (h // 16, w // 16, 3), dtype=np.uint8).repeat(16, 0).repeat(16, 1)
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
        files.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
    batches = [files[i : i + 32] for i in range(0, len(files), 32)]
    want = []
    for batch in batches:  # the reference: nothing queued around each decode
        torch.cuda.synchronize()
        out, errors = dd.decode_padded(batch, 384, cuda, decode)
        torch.cuda.synchronize()
        assert errors == [None] * len(batch)
        want.append(torch.stack(out).cpu())
    x = torch.randn(4096, 4096, device=cuda)
    for _ in range(3):
        got = []
        for batch in batches:
            for _ in range(8):  # a forward's worth of queued work, its blocks freed while it still runs
                y = x @ x
                del y
            out, _ = dd.decode_padded(batch, 384, cuda, decode)
            got.append(torch.stack(out).float().mul_(1.0).to(torch.uint8))  # used on the caller's stream at once
            del out
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g.cpu(), w)
