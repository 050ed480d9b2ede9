"""Image normalization: what is kept byte for byte, what is re-encoded, what is rejected."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from ava.data.images import ImageError, normalize_image
from tests.helpers import image_kinds


def test_rgb_jpeg_and_png_are_kept_as_is() -> None:
    kinds = image_kinds()
    for kind, ext in (("jpeg", "jpg"), ("png_rgb", "png")):
        norm = normalize_image(kinds[kind])
        assert norm.data == kinds[kind] and norm.ext == ext


@pytest.mark.parametrize("kind", ["mpo", "palette", "palette_alpha", "gray", "gray16", "la", "rgba", "cmyk"])
def test_other_kinds_become_rgb_png(kind: str) -> None:
    norm = normalize_image(image_kinds()[kind])
    assert norm.ext == "png"
    with Image.open(io.BytesIO(norm.data)) as im:
        assert (im.format, im.mode, im.size) == ("PNG", "RGB", (norm.width, norm.height))
    assert normalize_image(norm.data).data == norm.data  # normalizing twice changes nothing


def test_exif_rotation_is_applied() -> None:
    norm = normalize_image(image_kinds()["exif_rotated"])
    assert (norm.ext, norm.width, norm.height) == ("png", 20, 40)


@pytest.mark.parametrize("cut", [0.5, 0.98])
def test_truncated_and_corrupt_bytes_are_rejected(cut: float) -> None:
    data = image_kinds()["jpeg"]
    with pytest.raises(ImageError, match="img.jpg: cannot decode"):
        normalize_image(data[: int(len(data) * cut)], source="img.jpg")
    with pytest.raises(ImageError, match="empty"):
        normalize_image(b"", source="img.jpg")
