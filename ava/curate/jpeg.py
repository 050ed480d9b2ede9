"""JPEG files of one picture shown with different marks, each re-encoding only the rows the marks cover.

Most questions a build draws are a source picture with a box or two on it (recognition alone asks one per object),
and encoding the whole picture again for each was the largest share of a build's time. Every JPEG the build writes
has a restart marker after each row of MCUs (the 8 or 16 px high strips the codec works in): the entropy-coded data
of one row then depends on that row's pixels alone (the DC prediction restarts with it), so the file of a marked
picture is the file of the unmarked picture with the rows under the marks encoded again, the strip of those rows
encoded on its own as a picture of its own, and its rows put in their place. The result is the same file, byte for
byte, as encoding the marked picture whole (:func:`splices_exactly` checks that on this Pillow and libjpeg, and the
build encodes whole where it does not hold); the restart markers cost a few bytes per row (1-2% of a 640 x 480
file of flat colours, nothing measurable on a photograph) and every decoder reads them.

libjpeg's ``jpegtran -drop`` does this kind of splice on files; Pillow, which the build encodes with, offers no such
operation, so the markers are split here (the file is one Pillow just wrote: baseline, one scan).
"""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from PIL import Image

QUALITY = 95
_RST = [bytes((0xFF, 0xD0 + i)) for i in range(8)]
_EOI = b"\xff\xd9"
_MARKER = re.compile(rb"\xff[\xd0-\xd7]")  # a restart marker: 0xFF in the coded data is stuffed as FF 00


def encode(image: Image.Image, quality: int = QUALITY) -> bytes:
    """``image`` as a baseline JPEG with a restart marker after every row of MCUs."""
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality, restart_marker_rows=1)
    return buf.getvalue()


@dataclass
class RowCoded:
    """A JPEG file cut into its header and the coded data of each MCU row (restart markers left out)."""

    header: bytes
    rows: list[bytes]
    mcu_height: int
    width: int
    height: int
    quality: int = QUALITY

    @classmethod
    def parse(cls, data: bytes, quality: int = QUALITY) -> RowCoded | None:
        """The rows of a file :func:`encode` wrote; None when it has no restart marker per row (a Pillow that
        ignores ``restart_marker_rows``) or is laid out otherwise."""
        i, mcu_height, mcu_width, interval, size = 2, 0, 0, 0, (0, 0)
        while True:
            if i + 4 > len(data) or data[i] != 0xFF:
                return None
            marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
            if marker in (0xC2, 0xC1):  # progressive or extended: more than one scan, or other tables
                return None
            if marker == 0xC0:
                height, width, components = struct.unpack(">HHB", data[i + 5 : i + 10])
                size = (width, height)
                mcu_height = 8 * max(data[i + 11 + 3 * k] & 0x0F for k in range(components))
                mcu_width = 8 * max(data[i + 11 + 3 * k] >> 4 for k in range(components))
            elif marker == 0xDD:
                interval = struct.unpack(">H", data[i + 4 : i + 6])[0]
            i += 2 + length
            if marker == 0xDA:
                break
        if not mcu_height or interval != -(-size[0] // mcu_width) or data[-2:] != _EOI:
            return None  # no restart interval, or one that is not a row of MCUs
        rows = _MARKER.split(data[i:-2])
        if len(rows) != -(-size[1] // mcu_height):
            return None
        return cls(data[:i], rows, mcu_height, size[0], size[1], quality)

    def tobytes(self) -> bytes:
        parts = [self.rows[0]]
        for k in range(1, len(self.rows)):
            parts += (_RST[(k - 1) % 8], self.rows[k])
        return b"".join((self.header, *parts, _EOI))

    def patched(self, image: Image.Image, changed: Sequence[tuple[int, int, int, int]]) -> RowCoded:
        """This file with the rows that the boxes ``changed`` (x0, y0, x1, y1 px, end exclusive) reach encoded
        again from ``image`` (this file's picture, changed there)."""
        if image.size != (self.width, self.height):
            raise ValueError(f"a {image.size} picture patched into a {(self.width, self.height)} file")
        rows = list(self.rows)
        for first, stop in _bands(changed, self.mcu_height, len(rows)):
            strip = image.crop((0, first * self.mcu_height, self.width, min(self.height, stop * self.mcu_height)))
            coded = RowCoded.parse(encode(strip, self.quality), self.quality)
            if coded is None or len(coded.rows) != stop - first:
                raise RuntimeError("a strip of the picture did not encode to its rows")  # splices_exactly said so
            rows[first:stop] = coded.rows
        return RowCoded(self.header, rows, self.mcu_height, self.width, self.height, self.quality)


def _bands(changed: Sequence[tuple[int, int, int, int]], mcu_height: int, n_rows: int) -> list[tuple[int, int]]:
    """The MCU rows (first, stop) the boxes reach, merged where fewer than three rows lie between (one strip
    encoded costs about as much as three rows)."""
    spans = sorted(
        (max(0, y0) // mcu_height, min(n_rows, -(-y1 // mcu_height))) for _, y0, _, y1 in changed if y1 > max(0, y0)
    )
    out: list[tuple[int, int]] = []
    for first, stop in spans:
        if first >= stop:
            continue
        if out and first - out[-1][1] < 3:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((first, stop))
    return out


@lru_cache(maxsize=1)
def splices_exactly() -> bool:
    """Whether a patched file is byte for byte the file of the changed picture on this Pillow and libjpeg (False
    on a Pillow too old to write restart markers); where not, the build encodes every picture whole."""
    import numpy as np

    rng = np.random.default_rng(0)
    picture = Image.fromarray(rng.integers(0, 256, (53, 45, 3), dtype=np.uint8))
    base = RowCoded.parse(encode(picture))
    if base is None:
        return False
    changed = picture.copy()
    changed.paste((255, 0, 0), (3, 20, 30, 22))
    changed.paste((0, 0, 255), (40, 50, 45, 53))
    try:
        spliced = base.patched(changed, [(3, 20, 30, 22), (40, 50, 45, 53)]).tobytes()
    except RuntimeError:
        return False
    return spliced == encode(changed)
