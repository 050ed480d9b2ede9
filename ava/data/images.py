"""Normalize any input image to an RGB file that the dataset stores, once, under its sha256.

Rules (why in brackets):

- An RGB JPEG or PNG without EXIF rotation and without transparency is kept as its original bytes
  [no re-encode, so no quality loss, and the same source image always gets the same sha256].
- Everything else is decoded and re-encoded as PNG [lossless]:
  MPO (multi-picture JPEG from cameras) keeps its first frame; EXIF orientation is applied
  (``PIL.ImageOps.exif_transpose``) so width and height are those of the upright image;
  palette, grayscale and CMYK images are converted to RGB; 16-bit (``I;16``) grayscale is scaled
  to 8 bits by its bit depth (``v * 255 / 65535``), never by the range of the values in the image
  [a dark 16-bit image stays dark]; images with alpha (``LA``, ``RGBA``,
  ``PA``, a palette or RGB with a transparent colour) are composited over **white** [what a viewer
  shows, and what a VFM sees when given the file without its alpha].
- Bytes that Pillow cannot decode raise :class:`ImageError` naming the source.

**Boxes and EXIF orientation.** A box in a sample (the localization answer) is taken to be in the frame
of the file's pixels as decoded *without* EXIF orientation: that is what the release's own loader
(``PIL.Image.open(...).convert("RGB")``) gave the model, and the frame its annotations were drawn in.
Since ava stores the upright image, :func:`orient_box` moves such a box with the same flip/rotation, so
the box stays on the same pixels; :attr:`NormalizedImage.orientation` records the EXIF value applied and
the importer keeps it in the sample's meta (``exif_orientation``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ava.data.format import encode_png
from ava.errors import AvaError

EXIF_ORIENTATION = 0x0112
ALPHA_BACKGROUND = (255, 255, 255)
_KEEP_FORMATS = {"JPEG": "jpg", "PNG": "png"}
# Decoders that hand the file to another program: Pillow renders EPS through Ghostscript, so a planted
# "image" would have an interpreter run its PostScript. Such files are refused as undecodable.
_EXTERNAL_DECODERS = frozenset({"EPS"})


def import_formats() -> list[str]:
    """The Pillow formats an imported image may be in: every decoder Pillow has, less those that run a program."""
    Image.init()
    return [f for f in Image.OPEN if f not in _EXTERNAL_DECODERS]


class ImageError(AvaError, ValueError):
    """An image that cannot be decoded; the message names where it came from."""


@dataclass(frozen=True)
class NormalizedImage:
    data: bytes
    ext: str  # "jpg" or "png"
    width: int  # of the stored (upright) image
    height: int
    orientation: int = 1  # the EXIF orientation applied to the file's pixels (1: none)

    @property
    def source_size(self) -> tuple[int, int]:
        """(width, height) of the file's pixels before the EXIF orientation was applied."""
        return (self.height, self.width) if self.orientation in (5, 6, 7, 8) else (self.width, self.height)


# Where a normalized point (x, y) of the file's pixels lands after ``exif_transpose`` (checked against Pillow).
_ORIENT = {
    1: lambda x, y: (x, y),
    2: lambda x, y: (1 - x, y),
    3: lambda x, y: (1 - x, 1 - y),
    4: lambda x, y: (x, 1 - y),
    5: lambda x, y: (y, x),
    6: lambda x, y: (1 - y, x),
    7: lambda x, y: (1 - y, 1 - x),
    8: lambda x, y: (y, 1 - x),
}


def orient_box(box: list[float], orientation: int) -> list[float]:
    """A normalized ``[x1, y1, x2, y2]`` box of the file's pixels, in the frame of the upright stored image."""
    move = _ORIENT.get(orientation, _ORIENT[1])
    (ax, ay), (bx, by) = move(box[0], box[1]), move(box[2], box[3])
    return [min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)]


def normalize_image(data: bytes, *, source: str = "image") -> NormalizedImage:
    """The RGB file to store for ``data`` (see the module docstring); ``source`` names it in errors."""
    if not data:
        raise ImageError(f"{source}: empty image bytes")
    try:
        formats = import_formats()
        with Image.open(io.BytesIO(data), formats=formats) as im:
            if keep_as_is(im):
                width, height = im.size
                _verify(im)
                return NormalizedImage(data, _KEEP_FORMATS[im.format], width, height)
        with Image.open(io.BytesIO(data), formats=formats) as im:
            frame = _first_frame(im)
            orientation = int(frame.getexif().get(EXIF_ORIENTATION, 1) or 1)
            rgb = to_rgb(ImageOps.exif_transpose(frame))
    except MemoryError:
        raise
    except (
        Exception
    ) as e:  # Pillow's plugins raise many types on malformed data (OSError, SyntaxError, struct.error...)
        if isinstance(e, UnidentifiedImageError):  # its message names the BytesIO, not the file
            raise ImageError(
                f"{source}: cannot decode image (not an image format ava reads; EPS is refused, since "
                "Pillow would run Ghostscript on it)"
            ) from e
        raise ImageError(f"{source}: cannot decode image ({type(e).__name__}: {e})") from e
    return NormalizedImage(encode_png(rgb), "png", rgb.width, rgb.height, orientation if orientation in _ORIENT else 1)


def keep_as_is(im: Image.Image) -> bool:
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
        return Image.fromarray(_to_uint8(np.asarray(im), im.mode), mode="L").convert("RGB")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, ALPHA_BACKGROUND + (255,))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return im.convert("RGB")  # L, 1, P, CMYK, YCbCr, LAB, HSV


def _to_uint8(arr: np.ndarray, mode: str = "I;16") -> np.ndarray:
    """Scale a 16/32-bit or float grayscale array to 0..255 by its bit depth, never by its range.

    ``I;16*``: 16 bits. ``I`` (32-bit int): Pillow decodes 16-bit PNG and TIFF grayscale into it, so values
    up to 65535 are 16-bit data; larger ones are 32-bit. ``F``: a float image in 0..1, else 0..255."""
    arr = arr.astype(np.float64)
    if arr.size == 0:
        return arr.astype(np.uint8)
    top = float(arr.max())
    if mode == "F":
        scale = 1.0 if top <= 1.0 and float(arr.min()) >= 0.0 else 255.0
    elif mode == "I" and top > 65535:
        scale = 2.0**32 - 1
    else:
        scale = 65535.0
    return np.clip(np.rint(arr / scale * 255.0), 0, 255).astype(np.uint8)
