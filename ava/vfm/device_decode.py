"""JPEG decoding and the ``pad`` preprocessing on the VFM's GPU, for extraction (``ava cache extract --decode``).

A 640x480 JPEG costs ~25 ms of CPU to decode and resize in a DataLoader worker: at 16 cores that is ~650 images/s
at best, slower than the forward pass of the VFMs this project runs. torchvision decodes JPEGs on an NVIDIA GPU
(nvJPEG, ``torchvision.io.decode_jpeg(..., device="cuda")``, a batch at a time), so the workers only read the files'
bytes and the GPU decodes, pads and resizes them.

The pixels are those of :func:`ava.vfm.preprocess.pad_pixels`: the image is resized to fit the square (bicubic,
antialiased: ``torch.nn.functional.interpolate(..., antialias=True)``, the filter of Pillow's bicubic resize, in
Pillow's two passes, each rounded to 8 bits) and centred on the pad colour, with the sizes and offsets of Pillow's
``ImageOps.pad``: >= 99.8% of the pixels equal, the rest one level apart (tests/test_device_decode.py, on
scikit-image's photographs). nvJPEG's decode itself may differ from libjpeg-turbo's by a level here and there
(another IDCT and chroma upsampling): ``benchmarks/bench_cache.py --decode-check`` measures what that does to the
features on the GPU.

Where torchvision cannot decode on the device (no torchvision, a torchvision without its compiled image operators, a
CPU run), :func:`jpeg_decoder` says why and extraction decodes in the workers as before. A JPEG that nvJPEG refuses
(e.g. CMYK, 12-bit) is decoded by Pillow on the host and resized the same way.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ava.vfm.preprocess import PAD_FILL, channel_values

JPEG_SUFFIXES = (".jpg", ".jpeg")

Decoder = Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]]


def fit_size(width: int, height: int, size: int) -> tuple[int, int]:
    """(width, height) of an image resized to fit a ``size`` square, as Pillow's ``ImageOps.contain`` rounds them."""
    if width > height:
        return size, max(1, round(height / width * size))
    if width < height:
        return max(1, round(width / height * size)), size
    return size, size


def pad_resize(image: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 ``[3, H, W]`` -> uint8 ``[3, size, size]`` on the image's device: resized to fit (bicubic,
    antialiased) and centred on the pad colour, as :func:`ava.vfm.preprocess.pad_pixels` does with Pillow."""
    import torch.nn.functional as F

    _, h, w = image.shape
    nw, nh = fit_size(w, h, size)
    if (nh, nw) != (h, w):
        # as Pillow: the width first, then the height, each pass rounded to 8 bits (one pass in float differs from
        # Pillow by ~0.1 of a level on average; two agree on >= 99.8% of the pixels, the rest by one level)
        x = image.float()[None]
        for target in ((h, nw), (nh, nw)):
            if target != tuple(x.shape[2:]):
                x = F.interpolate(x, size=target, mode="bicubic", antialias=True, align_corners=False)
                x = x.round_().clamp_(0, 255)
        image = x[0].to(torch.uint8)
    if (nh, nw) == (size, size):
        return image
    out = channel_values(PAD_FILL, torch.uint8, image.device).repeat(1, size, size)
    if nw != size:
        x0 = round((size - nw) * 0.5)
        out[:, :, x0 : x0 + nw] = image
    else:
        y0 = round((size - nh) * 0.5)
        out[:, y0 : y0 + nh, :] = image
    return out


RESIZE_CHUNK_VALUES = 1 << 26  # float32 values resized in one call at most (256 MB: a batch of large photos in parts)


def pad_resize_batch(images: Sequence[torch.Tensor], size: int) -> torch.Tensor:
    """uint8 ``[3, H, W]`` images (one device) -> uint8 ``[N, 3, size, size]``: each as :func:`pad_resize` makes it,
    the same values, but the images of one size resized together (two interpolations for them all, not two per
    image: one at a time, a batch of 128 photos was ~2,300 host ops, 18 an image, each a small GPU kernel), in parts
    of at most :data:`RESIZE_CHUNK_VALUES` float values."""
    import torch.nn.functional as F

    if not images:
        return torch.empty((0, 3, size, size), dtype=torch.uint8)
    device = images[0].device
    out = channel_values(PAD_FILL, torch.uint8, device).view(1, 3, 1, 1).repeat(len(images), 1, size, size)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, im in enumerate(images):
        by_shape.setdefault((int(im.shape[1]), int(im.shape[2])), []).append(i)
    for (h, w), members in by_shape.items():
        nw, nh = fit_size(w, h, size)
        x0, y0 = (round((size - nw) * 0.5), 0) if nw != size else (0, round((size - nh) * 0.5))
        window = out[:, :, y0 : y0 + nh, x0 : x0 + nw]
        step = max(1, RESIZE_CHUNK_VALUES // (3 * h * w))
        for start in range(0, len(members), step):
            part = members[start : start + step]
            x = torch.stack([images[i] for i in part])
            if (nh, nw) != (h, w):  # as pad_resize: the width first, then the height, each rounded to 8 bits
                x = x.float()
                for target in ((h, nw), (nh, nw)):
                    if target != tuple(x.shape[2:]):
                        x = F.interpolate(x, size=target, mode="bicubic", antialias=True, align_corners=False)
                        x = x.round_().clamp_(0, 255)
                x = x.to(torch.uint8)
            index = torch.tensor(part, dtype=torch.long)
            if device.type == "cuda":  # from pinned memory, without waiting (see channel_values)
                index = index.pin_memory()
            window.index_copy_(0, index.to(device, non_blocking=True), x)
    return out


def _torchvision_decoder() -> Decoder:
    from torchvision.io import ImageReadMode, decode_jpeg

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        return list(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))

    return decode


def _probe_jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (20, 12), (200, 30, 90)).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def jpeg_decoder(
    device: torch.device, decoder: Callable[[], Decoder] = _torchvision_decoder
) -> tuple[Decoder | None, str]:
    """The batched JPEG decoder for ``device`` and the words a run records about it: (decoder, ``"nvjpeg"``) where
    torchvision decodes a probe JPEG there with the right pixels, else (None, why not)."""
    if device.type != "cuda":
        return None, f"workers (the VFM runs on {device.type}: no device decoder)"
    try:
        decode = decoder()
        got = decode([torch.frombuffer(bytearray(_probe_jpeg()), dtype=torch.uint8)], device)[0]
    except Exception as e:  # noqa: BLE001 - no torchvision, no compiled image ops, no nvJPEG: the workers decode
        return None, f"workers (torchvision cannot decode JPEG on {device}: {type(e).__name__}: {str(e)[:120]})"
    colour = got.float().mean(dim=(1, 2)).cpu()
    if tuple(got.shape) != (3, 12, 20) or (colour - torch.tensor([200.0, 30.0, 90.0])).abs().max() > 6:
        return None, f"workers (torchvision's decode on {device} gave other pixels: shape {tuple(got.shape)})"
    return decode, "nvjpeg"


_STREAMS: dict[torch.device, Any] = {}  # each CUDA device's decode stream (one per process: made at first use)


def decode_padded(
    data: Sequence[torch.Tensor], size: int, device: torch.device, decode: Decoder
) -> tuple[list[torch.Tensor | None], list[str | None]]:
    """JPEG files' bytes (uint8 1-D tensors, host) -> uint8 ``[3, size, size]`` images on ``device`` (decoded there in
    one batch, resized and padded together by :func:`pad_resize_batch`) and, per file, None or why it could not be
    decoded. A batch the device refuses is decoded file by file, and a file it refuses alone by Pillow on the host.

    On CUDA the decode and the resize run on a stream of their own, which the caller's stream then waits for.
    torchvision's ``decode_jpeg(device="cuda")`` takes its output from PyTorch's allocator on the current stream but
    writes it from nvJPEG's own stream, in no order with the work queued on the current one. Called on the stream
    whose forward pass was still running, it wrote into memory that forward was still reading or writing: a few
    percent of an extraction's rows after its first batch came out wrong, with no error.
    Here each call first waits for the decode stream's own earlier work (the last batch's resize: short), so a
    block that stream freed is truly free when nvJPEG writes into it; the images handed out are recorded on the
    caller's stream, so their memory is not reused before the caller's work on them is done. The host no longer
    waits for the previous batch's forward either: the decode's own waits (nvJPEG's, and any copy to the device) are
    on the decode stream, which holds none of the forward's work."""
    if device.type != "cuda":
        return _decode_padded(data, size, device, decode)
    stream = _STREAMS.get(device)
    if stream is None:
        stream = _STREAMS[device] = torch.cuda.Stream(device)
    stream.synchronize()
    with torch.cuda.stream(stream):
        out, errors = _decode_padded(data, size, device, decode)
    caller = torch.cuda.current_stream(device)
    caller.wait_stream(stream)
    for image in out:
        if image is not None:
            image.record_stream(caller)
    return out, errors


def _decode_padded(
    data: Sequence[torch.Tensor], size: int, device: torch.device, decode: Decoder
) -> tuple[list[torch.Tensor | None], list[str | None]]:
    try:
        images: list[torch.Tensor | None] = list(decode(list(data), device))
        errors: list[str | None] = [None] * len(images)
    except Exception:  # noqa: BLE001 - one file nvJPEG does not take fails the whole batch: each is retried alone
        pairs = [_decode_one(d, device, decode) for d in data]
        images, errors = [p[0] for p in pairs], [p[1] for p in pairs]
    ok = [i for i, im in enumerate(images) if im is not None]
    padded = pad_resize_batch([images[i] for i in ok], size)
    out: list[torch.Tensor | None] = [None] * len(images)
    for j, i in enumerate(ok):
        out[i] = padded[j]
    return out, errors


def _decode_one(data: torch.Tensor, device: torch.device, decode: Decoder) -> tuple[torch.Tensor | None, str | None]:
    try:
        return decode([data], device)[0], None
    except Exception:  # noqa: BLE001 - e.g. a CMYK or 12-bit JPEG: Pillow on the host
        import numpy as np
        from PIL import Image

        try:
            with Image.open(io.BytesIO(data.numpy().tobytes()), formats=("JPEG",)) as im:
                rgb = np.array(im.convert("RGB"), dtype=np.uint8)
        except Exception as e:  # noqa: BLE001 - not a JPEG either decoder reads: this image fails, not the run
            return None, f"cannot decode JPEG ({type(e).__name__}: {e})"
        return torch.from_numpy(rgb).permute(2, 0, 1).contiguous().to(device), None


def raw_pad_size(preprocess: Any) -> int | None:
    """The square side when ``preprocess`` (a VFM's ``preprocess_fn(raw=True)``) is exactly the uint8 pad pipeline
    this module reproduces, else None (the processor mode, a module VFM's own pipeline: decoded by the workers)."""
    from ava.vfm import preprocess as pp

    if getattr(preprocess, "func", None) is pp.pad_pixels and not getattr(preprocess, "args", ()):
        size = (getattr(preprocess, "keywords", None) or {}).get("size")
        return int(size) if isinstance(size, int) else None
    return None


def read_bytes(path: Any) -> torch.Tensor:
    """A file's bytes as a uint8 tensor (what the device decoder takes)."""
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
