"""Subgroups the paper reports by (docs/metrics.md): functions ``sample -> bin label`` (None: cannot be read).

An ability lists the keys it reports by in ``Ability.subgroups``; scoring averages the per-sample scores
within each bin. Bins come from the sample's truth or its ``meta`` (source dataset, scene type, class). A
sample whose bin cannot be read goes to the :data:`UNKNOWN` bin, which scoring counts and shows like any other:
a sample is never dropped from a subgroup table.
"""

from __future__ import annotations

from collections.abc import Callable

from ava.registry import Registry
from ava.sample import Sample

Subgroup = Callable[[Sample], str | None]
SUBGROUPS: Registry[Subgroup] = Registry("subgroup")

INDOOR_MAX_DEPTH = 7.0  # metres: indoor bins are 1-2 ... 6-7, outdoor 8-9 ... 30-31
UNKNOWN = "unknown"  # the bin of a sample whose subgroup (or class) cannot be read
# Text domains of well-known OCR source datasets (lowercased, punctuation dropped), for ``text_domain`` when a
# sample does not carry ``meta["text_domain"]``. ava's own table of the datasets' published descriptions.
OCR_TEXT_DOMAINS = {
    "scene text": (
        "icdar",
        "icdar2013",
        "icdar2015",
        "totaltext",
        "textocr",
        "cocotext",
        "svt",
        "iiit5k",
        "hiertext",
        "mlt",
        "art",
        "lsvt",
        "rects",
        "ctw",
        "ctw1500",
        "textvqa",
        "stvqa",
        "uber",
    ),
    "document": ("docvqa", "funsd", "sroie", "cord", "rvlcdip", "infographicvqa", "chartqa", "xfund"),
    "handwriting": ("iam", "rimes", "cvl", "hkr", "imgur5k"),
}


def _bin(value: float, edges: tuple[tuple[float, str], ...], last: str) -> str:
    """The label of the first ``(upper, label)`` edge with ``value <= upper``, else ``last``."""
    for upper, label in edges:
        if value <= upper:
            return label
    return last


def _truth_text(sample: Sample) -> str | None:
    truth = sample.truth or {}
    if truth.get("text") is not None and "index" in truth:
        return str(truth["text"])
    if "index" in truth and sample.options and 0 <= int(truth["index"]) < len(sample.options):
        return sample.options[int(truth["index"])]
    return None


def box_area(sample: Sample) -> str | None:
    """Normalized area of the true box: 0-0.1, 0.1-0.2, 0.2-0.3, 0.3-0.5 (and >0.5 outside the paper's range)."""
    box = (sample.truth or {}).get("box")
    if not box or len(box) != 4:
        return None
    x1, y1, x2, y2 = (float(v) for v in box)
    area = abs(x2 - x1) * abs(y2 - y1)
    return _bin(area, ((0.1, "0-0.1"), (0.2, "0.1-0.2"), (0.3, "0.2-0.3"), (0.5, "0.3-0.5")), ">0.5")


def count_range(sample: Sample) -> str | None:
    """The true count: <=5, 6-10, 11-20, >20."""
    value = (sample.truth or {}).get("value")
    if value is None:
        return None
    return _bin(float(value), ((5, "<=5"), (10, "6-10"), (20, "11-20")), ">20")


def source(sample: Sample) -> str | None:
    """The source dataset (``meta["source"]``)."""
    value = sample.meta.get("source")
    return str(value) if value not in (None, "") else None


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def text_domain(sample: Sample) -> str | None:
    """OCR text domain (scene text, document, handwriting): ``meta["text_domain"]``, else from the source dataset
    (:data:`OCR_TEXT_DOMAINS`); None when neither says."""
    value = sample.meta.get("text_domain")
    if value not in (None, ""):
        return str(value)
    src = source(sample)
    if src is None:
        return None
    key = _key(src)
    for domain, names in OCR_TEXT_DOMAINS.items():
        if any(key == n or key.startswith(n) for n in names):
            return domain
    return None


def depth_range(sample: Sample) -> str | None:
    """The true depth (the bin's midpoint, metres): <=5, 5-10, 10-20, >20 m."""
    bin_ = (sample.truth or {}).get("bin")
    if not bin_ or len(bin_) != 2:
        return None
    mid = (float(bin_[0]) + float(bin_[1])) / 2
    return _bin(mid, ((5, "<=5 m"), (10, "5-10 m"), (20, "10-20 m")), ">20 m")


def text_length(sample: Sample) -> str | None:
    """Characters in the true text: 1-5, 6-10, 11-20, >20."""
    text = (sample.truth or {}).get("text")
    if not text:
        return None
    return _bin(len(str(text)), ((5, "1-5"), (10, "6-10"), (20, "11-20")), ">20")


def view(sample: Sample) -> str | None:
    """The true orientation view (the truth option's text)."""
    return _truth_text(sample)


def scene_type(sample: Sample) -> str | None:
    """indoor / outdoor from ``meta["scene_type"]``; for a depth bin without it, from the bin (<= 7 m indoor)."""
    value = sample.meta.get("scene_type")
    if value not in (None, ""):
        return str(value)
    bin_ = (sample.truth or {}).get("bin")
    if bin_ and len(bin_) == 2:
        return "indoor" if float(bin_[1]) <= INDOOR_MAX_DEPTH else "outdoor"
    return None


def class_(sample: Sample) -> str | None:
    """The true class: the truth option's text, else ``meta["class"]``."""
    text = _truth_text(sample)
    if text is not None:
        return text
    value = sample.meta.get("class")
    return str(value) if value not in (None, "", UNKNOWN) else None


for _fn in (box_area, count_range, source, text_length, text_domain, view, scene_type, depth_range):
    SUBGROUPS.register(_fn.__name__, _fn)
SUBGROUPS.register("class", class_)
