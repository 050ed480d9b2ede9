"""``ava data export``: write a dataset as LLaVA JSON + images, in the release's layout.

Output (OUT)::

    train.json, test.json        # one LLaVA JSON list per split (all.json when the dataset is unsplit)
    <Config>/images/<id>.<ext>   # the stored (already RGB-normalized) image; "/" in an id becomes "_"
    ava_export.json              # what was exported, and the split provenance, for a lossless re-import

Each record is ``{id, image, conversations: [human "<image>\\n{question}", gpt answer], ava, split}``
plus the sample's meta fields as extra keys (LLaVA trainers ignore unknown keys; ``ava data import``
keeps them as meta). Importing OUT gives back the same samples: questions, answers, truth, meta,
split and image content (the stored bytes are copied, so even the sha256 is the same).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ava.abilities import get_ability
from ava.data.format import Dataset, Sample, atomic_write_bytes, atomic_write_text
from ava.data.paths import confined_dest, read_confined
from ava.errors import AvaError

EXPORT_FORMATS = ("llava",)
_RESERVED = {"id", "image", "conversations", "ava", "split"}


def export_dataset(
    root: str | os.PathLike[str], out: str | os.PathLike[str], *, fmt: str = "llava", split: str | None = None
) -> Path:
    """Export the dataset at ROOT to OUT (see the module docstring); ``split`` limits it to one split."""
    if fmt not in EXPORT_FORMATS:
        raise AvaError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    ds = Dataset(root)
    out_path = Path(out)
    out_path.mkdir(parents=True, exist_ok=True)
    samples = ds.samples(split=split)
    if not samples:
        raise AvaError(f"{ds.root}: no samples to export" + (f" in split {split!r}" if split else ""))
    by_file: dict[str, list[dict]] = {}
    names: dict[str, set[str]] = {}
    for s in samples:
        record = _record(ds, s, out_path, names)
        by_file.setdefault(f"{s.split or 'all'}.json", []).append(record)
    for name, records in by_file.items():
        atomic_write_text(out_path / name, json.dumps(records, ensure_ascii=False, indent=1) + "\n")
    sidecar = {
        "exported_from": str(ds.root.resolve()),
        "format": fmt,
        "files": {k: len(v) for k, v in by_file.items()},
        "split": ds.split_info,
        "synthetic": ds.is_synthetic,
    }
    atomic_write_text(out_path / "ava_export.json", json.dumps(sidecar, indent=2) + "\n")
    return out_path


def _record(ds: Dataset, s: Sample, out: Path, names: dict[str, set[str]]) -> dict:
    config = get_ability(s.ava).config_name
    rel = f"{config}/images/{_image_name(s, names.setdefault(config, set()))}"
    src = ds.image_path(s)  # confined to the dataset's images/ (an absolute or '..' path is refused)
    (out / config / "images").mkdir(parents=True, exist_ok=True)
    dest = confined_dest(out / config / "images", Path(rel).name)
    # a rename over the name, never a write through whatever (a symlink, say) already sits there
    atomic_write_bytes(dest, read_confined(src.parent, src.name, what="image"))
    record = {
        "id": s.id,
        "image": rel,
        "conversations": [{"from": "human", "value": f"<image>\n{s.question}"}, {"from": "gpt", "value": s.answer}],
        "ava": s.ava,
        "split": s.split,
    }
    record.update({k: v for k, v in s.meta.items() if k not in _RESERVED})
    return record


def _image_name(s: Sample, used: set[str]) -> str:
    """``<id>.<ext>`` as the release names it; an id that collides after "/" -> "_" gets its sha prefix."""
    ext = Path(s.image).suffix
    name = s.id.replace("/", "_").replace("\\", "_") + ext
    if name in used:
        name = f"{Path(name).stem}_{s.image_sha256[:12]}{ext}"
    used.add(name)
    return name
