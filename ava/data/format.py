"""The on-disk dataset format shared by import, synthesis, split, export, scoring and the cache.

A dataset is a directory::

    DIR/
      dataset.json                 # format version, source, split provenance, whether synthetic
      samples/<ability>.jsonl      # one Sample per line
      images/<sha[:2]>/<sha>.<ext> # images normalized to RGB, content-addressed by sha256 of the file

Sample ids are unique within an ability (the release's ids are per config); ``(ava, id)`` is the global key.
Images are stored once however many samples share them; the feature cache keys rows by the same sha256.
Every write goes to a temporary file first and is renamed into place, so an interrupted write never
leaves a half-written file where a good one was.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from PIL import Image

from ava.data.paths import MAX_IMAGE_BYTES, MAX_TEXT_BYTES, PathError, check_size, confined_file, safe_name
from ava.errors import AvaError
from ava.jsonfile import loads, read_json
from ava.sample import Sample  # the record type, below every package that reads it (abilities too)

FORMAT_NAME = "ava-dataset"
FORMAT_VERSION = 1
SPLITS = ("train", "test")
STORED_FORMATS = ("JPEG", "PNG")  # what import stores (ava.data.images): nothing else is decoded from a dataset


class DatasetError(AvaError, ValueError):
    """A dataset directory or one of its records is not as the format requires; names the file at fault."""


# The JSON type of each Sample field (None allowed where the field is optional): a record is checked on read,
# so a number where a path belongs, or a list where the ability belongs, names its line instead of failing later.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "ava": (str,),
    "image": (str,),
    "width": (int,),
    "height": (int,),
    "question": (str,),
    "answer": (str,),
    "truth": (dict,),
    "options": (list, type(None)),
    "split": (str, type(None)),
    "meta": (dict,),
}


def _sample_from_line(line: str) -> Sample:
    """One Sample from a JSONL line; ValueError saying what is wrong with it."""
    record = loads(line)  # its errors are ValueErrors: the caller names the file and line
    if not isinstance(record, dict):
        raise ValueError(f"not a JSON object but {type(record).__name__}")
    unknown = sorted(set(record) - set(_FIELD_TYPES))
    missing = sorted(
        k for k in ("id", "ava", "image", "width", "height", "question", "answer", "truth") if k not in record
    )
    if unknown or missing:
        raise ValueError(f"unknown field(s) {unknown}" if unknown else f"missing field(s) {missing}")
    for key, value in record.items():
        types = _FIELD_TYPES[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"field {key!r} is {value!r:.60}, not {' or '.join(_JSON_NAMES[t] for t in types)}")
    if not all(isinstance(o, str) for o in record.get("options") or ()):
        raise ValueError("field 'options' is not a list of strings")
    try:
        _check_option_truth(record["truth"], record.get("options") or [])
    except ValueError as e:
        raise ValueError(f"sample {record['ava']}/{record['id']}: {e}") from None
    return Sample.from_dict(record)


def _check_option_truth(truth: dict[str, Any], options: list[str]) -> None:
    """A choice question's truth names one of its options: ``index`` within the list, ``text`` in it (and equal to
    the option at ``index`` when both are given). A truth outside its list would be scored against no option, and
    taken by ``ava data options`` for a class of its own that other questions are then offered."""
    if not options:
        return
    index, text = truth.get("index"), truth.get("text")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(options)):
        raise ValueError(
            f"truth index {index!r} is not an option of its list of {len(options)} (0 to {len(options) - 1})"
        )
    if text is None:
        return
    if index is not None and options[index] != text:
        raise ValueError(f"truth text {text!r} is not option {index} of its list ({options[index]!r})")
    if text not in options:
        raise ValueError(f"truth text {text!r} is in none of its options")


_JSON_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "a list", type(None): "null"}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """While inside, Python's cyclic garbage collector does not run (reference counting still frees whatever holds
    no cycle, which is every record built here). Reading a few hundred thousand samples otherwise sets off full
    collections that each walk every record read so far: amortized linear, but each walk of a heap larger than the
    CPU's caches costs more per object the larger the set, so loading grew faster than the samples. Only the caller
    that turned the collector off turns it on again."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def read_samples(path: Path) -> list[Sample]:
    """All samples of one ``samples/<ability>.jsonl`` file; a bad line is reported with its number, and so is
    a second sample with the ``(ava, id)`` of an earlier line (it would be scored twice)."""
    samples = []
    first_line: dict[tuple[str, str], int] = {}
    check_size(path, MAX_TEXT_BYTES, what="sample file")
    with path.open(encoding="utf-8") as f, gc_paused():
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                sample = _sample_from_line(line)
            except ValueError as e:  # JSONDecodeError is a ValueError
                raise DatasetError(f"{path}:{lineno}: malformed sample ({e})") from e
            if sample.key in first_line:
                raise DatasetError(
                    f"{path}:{lineno}: duplicate sample: ava {sample.ava!r}, id {sample.id!r} is also on line "
                    f"{first_line[sample.key]} ({path}:{first_line[sample.key]}); each (ava, id) must be unique, "
                    "or it is scored twice"
                )
            first_line[sample.key] = lineno
            samples.append(sample)
    return samples


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    # O_EXCL | O_NOFOLLOW: never write through a file or symlink someone else put at the temporary name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk or a kill: leave no half-written temporary behind
        tmp.unlink(missing_ok=True)
        raise


def image_name(data: bytes, ext: str) -> str:
    """Where image bytes are stored under a dataset's ``images/``: by their sha256, so equal bytes are one file."""
    sha = hashlib.sha256(data).hexdigest()
    return f"{sha[:2]}/{sha}.{ext.lstrip('.').lower()}"


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def encode_png(image: Image.Image) -> bytes:
    """PNG bytes of an RGB image; level 1 keeps synthesis fast and the bytes deterministic."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


class Dataset:
    """A dataset directory opened for reading (samples are loaded per ability on first use)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        info_path = self.root / "dataset.json"
        if not info_path.is_file():
            raise DatasetError(f"{self.root} is not an ava dataset: {info_path} is missing")
        try:
            self.info: dict[str, Any] = read_json(info_path)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{info_path}: not valid JSON ({e})") from e
        if not isinstance(self.info, dict):
            raise DatasetError(f"{info_path}: not an ava dataset (a JSON {type(self.info).__name__}, not an object)")
        if self.info.get("format") != FORMAT_NAME:
            raise DatasetError(f"{info_path}: not an ava dataset (format={self.info.get('format')!r})")
        version = self.info.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise DatasetError(f"{info_path}: format version {version!r} is not an integer")
        if version > FORMAT_VERSION:
            raise DatasetError(f"{info_path}: format version {self.info['version']} is newer than this ava")
        self._samples: dict[str, list[Sample]] = {}

    # -- reading -----------------------------------------------------------------------------------
    def abilities(self) -> list[str]:
        """The abilities present, in the registry's order (the 14, then the task-augmentation tasks)."""
        from ava.abilities import BUILTIN_KEYS

        present = {p.stem for p in (self.root / "samples").glob("*.jsonl")}
        return [k for k in BUILTIN_KEYS if k in present]

    def has_samples(self, ava: str) -> bool:
        """Whether ``samples/<ava>.jsonl`` exists (``ava`` must be a plain name: it comes from options)."""
        return (self.root / "samples" / f"{safe_name(ava, what='ability')}.jsonl").is_file()

    def _load(self, ava: str) -> list[Sample]:
        if ava not in self._samples:
            name = f"{safe_name(ava, what='ability')}.jsonl"
            try:
                path = confined_file(self.root / "samples", name, what="sample file")
            except PathError as e:
                raise DatasetError(f"{self.root}: no samples for ability {ava!r} ({e})") from e
            samples = read_samples(path)
            stray = next((s for s in samples if s.ava != ava), None)
            if stray is not None:  # it would be scored under another ability than the file's
                raise DatasetError(
                    f"{path}: sample {stray.id!r} says ava {stray.ava!r}, but this file holds ability {ava!r}"
                )
            self._samples[ava] = samples
        return self._samples[ava]

    def samples(self, ava: str | Iterable[str] | None = None, split: str | None = None) -> list[Sample]:
        """Samples of one ability, several, or all; optionally of one split."""
        if ava is None:
            keys = self.abilities()
        elif isinstance(ava, str):
            keys = [ava]
        else:
            keys = list(ava)
        out: list[Sample] = []
        for key in keys:
            out.extend(s for s in self._load(key) if split is None or s.split == split)
        return out

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples())

    def image_path(self, sample: Sample | str) -> Path:
        """The stored image file, resolved; DatasetError when the sample's ``image`` leaves ``images/``
        (absolute, ``..``, a symlink out), is no regular file, or is over the size limit."""
        rel = sample.image if isinstance(sample, Sample) else sample
        try:
            path = confined_file(self.root / "images", rel, what="image")
            check_size(path, MAX_IMAGE_BYTES, what="image")
        except PathError as e:
            sid = sample.id if isinstance(sample, Sample) else rel
            raise DatasetError(f"sample {sid!r}: {e}") from e
        return path

    def load_image(self, sample: Sample | str) -> Image.Image:
        """The stored image as RGB (stored images are already normalized)."""
        path = self.image_path(sample)
        try:
            with Image.open(path, formats=STORED_FORMATS) as im:  # stored images are JPEG or PNG, nothing else
                return im.convert("RGB")
        except (OSError, Image.DecompressionBombError) as e:
            if isinstance(e, OSError) and e.errno is not None:  # the disk or the system, not this image's bytes
                raise
            sid = sample.id if isinstance(sample, Sample) else sample
            raise DatasetError(f"image {path} of sample {sid!r} cannot be read: {e}") from e

    @property
    def split_info(self) -> dict[str, Any] | None:
        """How the train/test split was made: ``{"made_by": "official"|"ava"|"synthetic", ...}``."""
        return self.info.get("split")

    @property
    def is_synthetic(self) -> bool:
        return bool(self.info.get("synthetic", False))


class DatasetWriter:
    """Builds a dataset directory. Images are content-addressed; samples are written on ``close``.

    Opening an existing dataset for writing keeps its samples (``replace=False``) so an import can
    add abilities to it; samples with an existing ``(ava, id)`` are replaced.
    """

    def __init__(self, root: str | os.PathLike[str], info: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        self._made = not self.root.exists()  # this writer makes the directory: on an error, it removes it whole
        (self.root / "images").mkdir(parents=True, exist_ok=True)
        (self.root / "samples").mkdir(parents=True, exist_ok=True)
        self.info: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION}
        if (self.root / "dataset.json").is_file():
            self.info.update(read_json(self.root / "dataset.json"))
        self.info.update(info or {})
        self._samples: dict[str, dict[str, Sample]] = {}

    def add_image_bytes(self, data: bytes, ext: str) -> str:
        """Store already-normalized image bytes; returns the relative path (sha256-addressed)."""
        rel = image_name(data, ext)
        path = self.root / "images" / rel
        if not path.exists():
            atomic_write_bytes(path, data)
        return rel

    def add_image(self, image: Image.Image) -> str:
        """Store an RGB PIL image as PNG; returns the relative path."""
        if image.mode != "RGB":
            image = image.convert("RGB")
        return self.add_image_bytes(encode_png(image), "png")

    def add_sample(self, sample: Sample) -> None:
        self._samples.setdefault(sample.ava, {})[sample.id] = sample

    def _existing(self, ava: str) -> dict[str, Sample]:
        path = self.root / "samples" / f"{ava}.jsonl"
        return {s.id: s for s in read_samples(path)} if path.is_file() else {}

    def close(self) -> None:
        for ava, new in self._samples.items():
            merged = self._existing(ava)
            merged.update(new)
            text = "".join(s.to_json() + "\n" for s in merged.values())
            atomic_write_text(self.root / "samples" / f"{ava}.jsonl", text)
        atomic_write_text(self.root / "dataset.json", json.dumps(self.info, indent=2) + "\n")

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        # On an error, keep the sample files as they were: images already stored are harmless (content-addressed),
        # a half-written sample list is not; a directory this writer made holds nothing else and goes whole.
        if exc_type is None:
            self.close()
        elif self._made:
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)


# What a dataset directory may hold besides dataset.json: only these are deleted when one is replaced.
DATASET_ENTRIES = frozenset({"dataset.json", "samples", "images", "import_errors.jsonl"})


def check_replaceable(root: str | os.PathLike[str], *, option: str = "--overwrite") -> None:
    """Raise DatasetError unless ``root`` is absent, empty, or recognizably an ava dataset and nothing else.

    An ava dataset has a ``dataset.json`` with ``"format": "ava-dataset"`` and only the entries of
    :data:`DATASET_ENTRIES`; a directory with anything else in it (a user's file, another tool's output)
    is never deleted, whatever the option says.
    """
    path = Path(root)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        raise DatasetError(f"{path} exists and is not a directory; {option} replaces only an ava dataset directory")
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        return
    try:
        info = read_json(path / "dataset.json", encoding="utf-8")
    except (OSError, ValueError):
        info = None
    if not isinstance(info, dict) or info.get("format") != FORMAT_NAME:
        raise DatasetError(
            f"{path} is not empty and is not an ava dataset (no dataset.json of format "
            f"{FORMAT_NAME!r}); {option} deletes only ava datasets: choose another --out"
        )
    foreign = [e for e in entries if e not in DATASET_ENTRIES]
    if foreign:
        raise DatasetError(
            f"{path} holds {', '.join(foreign[:5])}, which is not part of an ava dataset; "
            f"{option} will not delete it: move it away or choose another --out"
        )


def write_samples(root: str | os.PathLike[str], ava: str, samples: list[Sample]) -> None:
    """Replace the sample file of one ability (used by split, which rewrites ``split`` fields)."""
    atomic_write_text(Path(root) / "samples" / f"{ava}.jsonl", "".join(s.to_json() + "\n" for s in samples))


def update_info(root: str | os.PathLike[str], **fields: Any) -> None:
    path = Path(root) / "dataset.json"
    info = read_json(path)
    info.update(fields)
    atomic_write_text(path, json.dumps(info, indent=2) + "\n")
