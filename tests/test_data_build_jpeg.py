"""The build's JPEG files of marked pictures: only the rows under the marks are encoded again, and the file is the
one encoding the whole marked picture gives, byte for byte."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from ava.curate import jpeg


def _photo(w: int, h: int, seed: int) -> Image.Image:
    """Smooth colours with noise (a flat picture would code most rows to a few bytes and prove little)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], -1)
    return Image.fromarray(np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8))


def test_this_pillow_splices_exactly() -> None:
    assert jpeg.splices_exactly()  # the pinned Pillow writes restart markers; the build relies on it here


@pytest.mark.parametrize("size", [(640, 480), (427, 640), (61, 45), (16, 16), (33, 7)])
def test_patched_file_is_the_whole_encoding(size: tuple[int, int]) -> None:
    w, h = size
    picture = _photo(w, h, seed=w)
    base = jpeg.RowCoded.parse(jpeg.encode(picture))
    assert base is not None and len(base.rows) == -(-h // 16)
    rng = np.random.default_rng(h)
    for _ in range(12):
        boxes = []
        marked = picture.copy()
        for _ in range(int(rng.integers(1, 4))):
            x0, y0 = int(rng.integers(-5, w)), int(rng.integers(-5, h))
            x1, y1 = x0 + int(rng.integers(1, w + 1)), y0 + int(rng.integers(1, h // 2 + 2))
            ImageDraw.Draw(marked).rectangle([x0, y0, x1, y1], outline=(255, 0, 0), width=3)
            boxes.append((x0 - 1, y0 - 1, x1 + 2, y1 + 2))  # the box the outline lies in, end exclusive
        whole = jpeg.encode(marked)
        assert base.patched(marked, boxes).tobytes() == whole
    assert base.tobytes() == jpeg.encode(picture)  # patching gave new files; the base is as it was


def test_rows_outside_the_marks_are_not_encoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    picture = _photo(320, 240, seed=1)
    base = jpeg.RowCoded.parse(jpeg.encode(picture))
    assert base is not None
    encoded: list[tuple[int, int]] = []
    real = jpeg.encode
    monkeypatch.setattr(jpeg, "encode", lambda image, quality=95: (encoded.append(image.size), real(image, quality))[1])
    marked = picture.copy()
    marked.paste((0, 0, 255), (10, 100, 200, 104))  # rows 100..103: MCU row 6 alone
    marked.paste((0, 0, 255), (10, 170, 200, 200))  # MCU rows 10..12
    out = base.patched(marked, [(10, 100, 200, 104), (10, 170, 200, 200)]).tobytes()
    assert encoded == [(320, 16), (320, 48)]
    assert out == real(marked)


def test_files_without_a_marker_per_row_are_not_split() -> None:
    picture = _photo(64, 48, seed=2)
    for options in (
        {},
        {"progressive": True},
        {"restart_marker_blocks": 3},
        {"restart_marker_blocks": 8},
        {"restart_marker_rows": 2},
    ):
        buf = io.BytesIO()
        picture.save(buf, format="JPEG", quality=95, **options)
        assert jpeg.RowCoded.parse(buf.getvalue()) is None, options
    buf = io.BytesIO()
    picture.save(buf, format="JPEG", quality=95, restart_marker_blocks=4)  # 64 px: 4 MCUs a row, so the same file
    assert jpeg.RowCoded.parse(buf.getvalue()) is not None
    assert jpeg.RowCoded.parse(b"\xff\xd8\xff\xe0\x00") is None  # cut short


def test_a_build_writes_what_whole_encodings_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build from JPEG sources writes the same files, byte for byte, as one that encodes every picture whole."""
    from ava.curate.build import BuildConfig, build_dataset
    from ava.curate.synthetic import write_sources

    write_sources(tmp_path / "src", n_images=12, seed=4, scale=2, image_format="jpeg")

    def build(out: str) -> dict[str, bytes]:
        config = BuildConfig(
            out=tmp_path / out,
            coco=tmp_path / "src" / "instances.json",
            images=tmp_path / "src" / "images",
            ava=["recognition", "spatial", "color"],
            tasks=["ta_truncated", "ta_brighter_point", "ta_blurred_object", "ta_noisy_object", "ta_true_colour_tile"],
            workers=1,
        )
        build_dataset(config)
        return {str(p.relative_to(tmp_path / out)): p.read_bytes() for p in (tmp_path / out).rglob("*") if p.is_file()}

    spliced = []
    real = jpeg.RowCoded.tobytes
    monkeypatch.setattr(jpeg.RowCoded, "tobytes", lambda self: (spliced.append(1), real(self))[1])
    patched = build("patched")
    assert len(spliced) > 40  # marked pictures spliced, not encoded whole
    monkeypatch.setattr(jpeg, "splices_exactly", lambda: False)
    whole = build("whole")
    assert patched.keys() == whole.keys()
    assert [k for k in patched if patched[k] != whole[k]] == []
    assert sum(k.endswith(".jpg") for k in patched) > 60
