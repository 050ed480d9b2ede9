"""Generalized IoU of two boxes in normalized image coordinates (Rezatofighi et al., CVPR 2019).

GIoU = IoU - |C minus (A union B)| / |C|, with C the smallest box enclosing A and B; it ranges over -1..1
and, unlike IoU, still ranks disjoint boxes by how far apart they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from ava.metrics.base import Metric, constant

Box = Sequence[float]


def _ordered(box: Box) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = (float(v) for v in box)
    return min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)


def giou(prediction: Box, truth: Box) -> float:
    """GIoU of two ``(x1, y1, x2, y2)`` boxes; swapped corners are reordered first."""
    ax1, ay1, ax2, ay2 = _ordered(prediction)
    bx1, by1, bx2, by2 = _ordered(truth)
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    hull = (max(ax2, bx2) - min(ax1, bx1)) * (max(ay2, by2) - min(ay1, by1))
    if union <= 0.0:  # both boxes have zero area: only identical ones agree
        return 1.0 if (ax1, ay1, ax2, ay2) == (bx1, by1, bx2, by2) else -1.0
    iou = inter / union
    return iou - (hull - union) / hull if hull > 0.0 else iou


GIOU = Metric(
    key="giou",
    title="GIoU",
    higher_is_better=True,
    best=1.0,
    compute=giou,
    worst=constant(-1.0),
    worst_rule="-1, the lower bound of GIoU.",
)
