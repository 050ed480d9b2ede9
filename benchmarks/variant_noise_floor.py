"""How far apart noise alone puts the variants the 2x2-grid tasks compare (not a timing).

The tile and variant rules of `ava data build` (ava/curate/tasks.py, ``_alike``) drop a question whose right tile
cannot be told from the others: mean absolute difference under MIN_VARIANT_DIFF (8 of 0..255). This script makes flat
grey 640 x 480 pictures with grain (sigma 2 to 16, one channel's worth shared by all three, as sensor grain is, plus
a third of it per channel), encodes each as JPEG at the quality photo sets use (75) and the build writes (95), cuts
the rotated-jigsaw tile from the 256 px centre square as the build does, and prints the largest difference between
the tile and its rotations: compared at full size, and as the rule compares them, averages of SMOOTH x SMOOTH px.
A flat tile's rotations look the same, so any difference here is noise.

    python benchmarks/variant_noise_floor.py
"""

from __future__ import annotations

import argparse
import io
import itertools

import numpy as np
import results  # benchmarks/, beside this script
from PIL import Image

from ava.curate.tasks import MIN_VARIANT_DIFF, SMOOTH, TILE, _diff, _square, _tile_rotations


def noisy_jpeg(sigma: float, quality: int, rng: np.random.Generator) -> Image.Image:
    grain = rng.normal(0, sigma, (480, 640, 1)) + rng.normal(0, sigma / 3, (480, 640, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(128 + grain, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=quality)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def worst(sigma: float, quality: int, pictures: int, cuts: int, seed: int) -> tuple[float, float]:
    """The largest (over pictures and cut-outs) least difference between a tile and its rotations."""
    full = smooth = 0.0
    rng = np.random.default_rng(seed)
    for _ in range(pictures):
        base = _square(noisy_jpeg(sigma, quality, rng), 2 * TILE)
        for k in range(cuts):
            tiles, _ = _tile_rotations(base, np.random.default_rng(k))
            full = max(full, min(_diff(tiles[0], t) for t in tiles[1:]))
            small = [t.reduce(SMOOTH) for t in tiles]
            smooth = max(smooth, min(_diff(small[0], t) for t in small[1:]))
    return full, smooth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pictures", type=int, default=10)
    parser.add_argument("--cuts", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    results.json_option(parser)
    args = parser.parse_args()
    print(
        f"rule: a tile's rotations must differ by >= {MIN_VARIANT_DIFF:g} (mean |a - b|, 0..255) as {SMOOTH} px "
        f"averages; largest difference noise alone gives ({args.pictures} pictures x {args.cuts} cut-outs each):"
    )
    print(f"{'grain sigma':>11}  {'JPEG q':>6}  {'full size':>9}  {f'{SMOOTH} px averages':>15}")
    rows = []
    for sigma, quality in itertools.product((2, 4, 8, 12, 16), (75, 95)):
        full, smooth = worst(sigma, quality, args.pictures, args.cuts, args.seed)
        print(f"{sigma:>11}  {quality:>6}  {full:>9.2f}  {smooth:>15.2f}")
        rows.append({"sigma": sigma, "jpeg_quality": quality, "full": round(full, 2), "averaged": round(smooth, 2)})
    worst_row = max(rows, key=lambda r: r["averaged"])
    figure = results.figure(
        f"largest difference noise alone gives, {SMOOTH} px averages",
        worst_row["averaged"],
        target=f"< {MIN_VARIANT_DIFF:g}",
        note=f"grain sigma {worst_row['sigma']}, JPEG quality {worst_row['jpeg_quality']}",
    )
    results.write(args.json, "variant_noise_floor", [figure], rows, rows)


if __name__ == "__main__":
    main()
