"""Normalize any input image to an RGB file that the dataset stores, once, under its sha256.

Rules (why in brackets):

- An RGB JPEG or PNG without EXIF rotation and without transparency is kept as its original bytes
  [no re-encode, so no quality loss, and the same source image always gets the same sha256].
- Everything else is decoded and re-encoded as PNG [lossless]:
  MPO (multi-picture JPEG from cameras) keeps its first frame; EXIF orientation is applied
  (``PIL.ImageOps.exif_transpose``) so width and height are those of the upright image;
  palette, grayscale and CMYK images are converted to RGB; 16-bit (``I;16``) and 32-bit
  grayscale are scaled to 8 bits rather than clipped; images with alpha (``LA``, ``RGBA``,
  ``PA``, a palette or RGB with a transparent colour) are composited over **white** [what a viewer
  shows, and what a VFM sees when given the file without its alpha].
- Bytes that Pillow cannot decode raise :class:`ImageError` naming the source.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from ava.data.format import encode_png
from ava.errors import AvaError

EXIF_ORIENTATION = 0x0112
ALPHA_BACKGROUND = (255, 255, 255)
_KEEP_FORMATS = {"JPEG": "jpg", "PNG": "png"}


class ImageError(AvaError, ValueError):
    """An image that cannot be decoded; the message names where it came from."""


@dataclass(frozen=True)
class NormalizedImage:
    data: bytes
    ext: str  # "jpg" or "png"
    width: int
    height: int


def normalize_image(data: bytes, *, source: str = "image") -> NormalizedImage:
    """The RGB file to store for ``data`` (see the module docstring); ``source`` names it in errors."""
    if not data:
        raise ImageError(f"{source}: empty image bytes")
    try:
        with Image.open(io.BytesIO(data)) as im:
            if _keep_as_is(im):
                width, height = im.size
                _verify(im)
                return NormalizedImage(data, _KEEP_FORMATS[im.format], width, height)
        with Image.open(io.BytesIO(data)) as im:
            rgb = to_rgb(ImageOps.exif_transpose(_first_frame(im)))
    except MemoryError:
        raise
    except (
        Exception
    ) as e:  # Pillow's plugins raise many types on malformed data (OSError, SyntaxError, struct.error...)
        raise ImageError(f"{source}: cannot decode image ({type(e).__name__}: {e})") from e
    return NormalizedImage(encode_png(rgb), "png", rgb.width, rgb.height)


def _keep_as_is(im: Image.Image) -> bool:
    if im.format not in _KEEP_FORMATS or im.mode != "RGB" or "transparency" in im.info:
        return False
    if getattr(im, "n_frames", 1) > 1:  # MPO opens with format "MPO"; animated PNGs have frames too
        return False
    return im.getexif().get(EXIF_ORIENTATION, 1) in (0, 1)


def _verify(im: Image.Image) -> None:
    """Decode a kept image once so corrupt or truncated data fails now, not in a training run.

    A JPEG is decoded at 1/8 scale (``draft``): the decoder still reads every entropy-coded byte,
    so truncation is caught, at a fraction of the cost of a full decode.
    """
    if im.format == "JPEG":
        im.draft(im.mode, (max(1, im.width // 8), max(1, im.height // 8)))
    im.load()


def _first_frame(im: Image.Image) -> Image.Image:
    if getattr(im, "n_frames", 1) > 1:
        im.seek(0)
    return im.copy()


def to_rgb(im: Image.Image) -> Image.Image:
    """``im`` as mode RGB: alpha composited over white, high bit depths scaled to 8 bits."""
    if im.mode == "RGB" and "transparency" not in im.info:
        return im
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        return Image.fromarray(_to_uint8(np.asarray(im)), mode="L").convert("RGB")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, ALPHA_BACKGROUND + (255,))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return im.convert("RGB")  # L, 1, P, CMYK, YCbCr, LAB, HSV


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """Scale a 16/32-bit or float grayscale array to 0..255 (16-bit data by its full range)."""
    is_float = arr.dtype.kind == "f"
    arr = arr.astype(np.float64)
    if arr.size == 0:
        return arr.astype(np.uint8)
    top = float(arr.max())
    if is_float and top <= 1.0 and float(arr.min()) >= 0.0:
        scale = 1.0  # float image in 0..1
    elif top <= 255:
        scale = 255.0
    elif top <= 65535:
        scale = 65535.0
    else:
        scale = top
    return np.clip(np.rint(arr / scale * 255.0), 0, 255).astype(np.uint8)
