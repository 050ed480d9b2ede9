"""``ava data import``: read the release's formats into an ava dataset directory.

Three input formats (``fmt="auto"`` picks one from what SRC contains):

``hf``
    The release's Hugging Face layout, ``train/<Config>/*.parquet``. SRC may be the repository root,
    its ``train/`` directory, one config directory, or one parquet file; the config name (as in
    ``Ability.config_name``, or an ability key) is the name of the directory holding the parquet
    files. Columns: ``id``, ``image`` (struct ``{bytes, path}``; ``path`` is read from disk, relative
    to ``image_root`` or the parquet file, when ``bytes`` is null) and ``conversations`` (a list of
    ``{from, value}``: a ``human`` turn ``"<image>\\n{question}"`` then a ``gpt`` turn with the answer).
    Files are read in row batches, never whole. Other columns are kept in ``Sample.meta``; a column
    named ``split`` gives the official split.

``llava``
    LLaVA JSON: a list of ``{id, image, conversations}`` (a ``.json`` file or a directory of them),
    images read from ``image_root`` (default: the JSON file's directory). The release's loader
    writes ``image = "<Config>/images/<id>.<ext>"``, so the ability is the image path's first
    component unless ``ava`` forces it or the record has an ``ava`` key. Other keys go to meta;
    a ``split`` key gives the split. ``ava data export`` writes this format.

``eval``
    The LLaVA/TinyLLaVA evaluation question format: JSONL (or a JSON list) of
    ``{question_id, image, text}`` where ``text`` is the question. The reference answer comes from
    an ``answer`` key in the same record, or from ``answers``: a JSONL/JSON file of
    ``{question_id, answer}`` (``text`` is accepted in place of ``answer`` when the record has no
    ``image``, i.e. is an answer record, not a question). The ability comes from ``ava``, the
    record's ``ava`` or ``category`` key when it names an ability, or the image path's first
    component.

Every row becomes a :class:`~ava.data.format.Sample` with its structured truth
(:mod:`ava.data.truth`) and its image normalized to RGB (:mod:`ava.data.images`), stored once per
content. A row that cannot be imported (corrupt or missing image, malformed conversations, unknown
config, unparseable answer, duplicate id) is reported with its id and file and skipped; the rest
of the import completes. All problems are written to ``OUT/import_errors.jsonl``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ava.abilities import ABILITIES, Ability, get_ability
from ava.data.format import DatasetWriter, Sample, atomic_write_text, update_info
from ava.data.images import NormalizedImage, normalize_image, orient_box
from ava.data.paths import PathError, read_confined
from ava.data.truth import derive_truth, source_of
from ava.errors import AvaError
from ava.jsonfile import JsonDepthError, loads, read_json
from ava.progress import progress as progress_bar

FORMATS = ("auto", "hf", "llava", "eval")
ERRORS_FILE = "import_errors.jsonl"
EXPORT_SIDECAR = "ava_export.json"
_LLAVA_KEYS = {"id", "image", "conversations", "ava", "split"}
_EVAL_KEYS = {"question_id", "image", "text", "answer", "ava", "split"}
_SPLIT_NAMES = {"train": "train", "training": "train", "test": "test", "val": "test", "validation": "test"}
_BATCH_ROWS = 64


class RowError(Exception):
    """One row that cannot be imported; the importer records it and goes on."""


@dataclass
class ImportIssue:
    id: str | None
    file: str
    reason: str
    ava: str | None = None
    row: int | None = None


@dataclass
class ImportReport:
    out: Path
    fmt: str
    source: str
    imported: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    errors: list[ImportIssue] = field(default_factory=list)
    split: dict[str, Any] | None = None
    n_images: int = 0  # distinct stored images written or reused by this import

    @property
    def n_imported(self) -> int:
        return sum(self.imported.values())

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "format": self.fmt,
            "source": self.source,
            "imported": self.imported,
            "skipped": self.skipped,
            "n_imported": self.n_imported,
            "n_skipped": self.n_skipped,
            "n_images": self.n_images,
            "split": self.split,
            "errors": [asdict(e) for e in self.errors],
        }


@dataclass
class RawRow:
    """One input record, format-independent, before its image and truth are resolved."""

    file: str
    row: int
    id: str | None
    ava_hint: str | None  # ability key or config name
    question: str | None = None
    answer: str | None = None
    image_bytes: bytes | None = None
    image_path: str | None = None
    image_root: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    split: str | None = None
    error: str | None = None  # found while reading the record


# -- entry point -----------------------------------------------------------------------------------


def import_dataset(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    fmt: str = "auto",
    image_root: str | os.PathLike[str] | None = None,
    answers: str | os.PathLike[str] | None = None,
    ava: str | None = None,
    workers: int = 0,
    progress: bool = True,
) -> ImportReport:
    """Import SRC into the dataset directory OUT (created, or extended: samples with the same id are replaced).

    ``workers`` > 0 decodes and normalizes images in that many processes (the rest stays in this one,
    so the result is identical to ``workers=0``).
    """
    src_path, out_path = Path(src), Path(out)
    if not src_path.exists():
        raise AvaError(f"import source {src_path} does not exist")
    if fmt not in FORMATS:
        raise AvaError(f"unknown import format {fmt!r}; choose one of {', '.join(FORMATS)}")
    forced = get_ability(ava).key if ava else None
    fmt = detect_format(src_path) if fmt == "auto" else fmt
    root = Path(image_root) if image_root else None
    if answers is not None and fmt != "eval":
        raise AvaError(f"--answers is only used with the eval format (SRC {src_path} is {fmt})")
    groups = _groups(fmt, src_path, root, Path(answers) if answers else None)
    report = ImportReport(out=out_path, fmt=fmt, source=str(src_path))
    ctx = _Context(report, forced)
    sidecar = _export_sidecar(src_path, fmt)
    info = {"source": {"path": str(src_path.resolve()), "format": fmt}, "synthetic": bool(sidecar.get("synthetic"))}
    with progress_bar(progress, transient=True) as bar, _pool(workers) as pool:
        for total, rows in groups:
            task = bar.add_task("importing", total=total)
            with DatasetWriter(out_path, info) as writer:
                ctx.writer = writer
                for chunk in _chunks(rows, _BATCH_ROWS * max(1, workers)):
                    if pool is not None:
                        ctx.prefetch(chunk, pool)
                    for raw in chunk:
                        ctx.ingest(raw)
                    ctx.pending.clear()  # images of skipped rows are not stored
                    where = Path(chunk[-1].file).parent.name or chunk[-1].file
                    bar.update(task, advance=len(chunk), description=f"importing {where}")
    report.split = ctx.split_info(sidecar.get("split"))
    if report.n_imported:
        update_info(out_path, split=report.split)
    _write_errors(out_path, report.errors)
    return report


def _chunks(rows: Iterator[RawRow], size: int) -> Iterator[list[RawRow]]:
    chunk: list[RawRow] = []
    for raw in rows:
        chunk.append(raw)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[Executor | None]:
    if workers <= 0:
        yield None
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield pool


def _normalize_or_error(data: bytes, source: str) -> NormalizedImage | str:
    """normalize_image for a worker process: the error message instead of an exception."""
    try:
        return normalize_image(data, source=source)
    except AvaError as e:
        return str(e)


def _write_errors(out: Path, errors: list[ImportIssue]) -> None:
    path = out / ERRORS_FILE
    if errors:
        atomic_write_text(path, "".join(json.dumps(asdict(e), ensure_ascii=False) + "\n" for e in errors))
    elif path.exists():
        path.unlink()  # a stale list from an earlier import would be misleading


# -- per-row work ----------------------------------------------------------------------------------


class _Context:
    """State shared by all rows of one import: the writer, the image cache, the seen ids, the report."""

    def __init__(self, report: ImportReport, forced: str | None) -> None:
        self.report = report
        self.forced = forced
        self.writer: DatasetWriter | None = None
        self.images: dict[str, tuple[str, int, int, int] | str] = {}  # raw sha256 -> (rel, w, h, orientation) or error
        # Normalized but not yet stored: an image is written only once a sample using it is accepted,
        # so skipped rows leave no orphan files. Cleared after every chunk of rows.
        self.pending: dict[str, NormalizedImage] = {}
        self.stored: set[str] = set()
        self.seen: dict[str, set[str]] = {}
        self.splits: Counter[str | None] = Counter()

    def ingest(self, raw: RawRow) -> None:
        label = self.forced or raw.ava_hint or "?"
        try:
            ability = self._ability(raw)
            label = ability.key
            sample = self._sample(raw, ability)
        except (RowError, AvaError) as e:
            self.fail(raw, label, str(e))
            return
        assert self.writer is not None
        self.writer.add_sample(sample)
        self.seen.setdefault(ability.key, set()).add(sample.id)
        self.splits[sample.split] += 1
        self.stored.add(sample.image)
        self.report.n_images = len(self.stored)
        self.report.imported[ability.key] = self.report.imported.get(ability.key, 0) + 1

    def fail(self, raw: RawRow, label: str, reason: str) -> None:
        self.report.errors.append(ImportIssue(raw.id, raw.file, reason, label, raw.row))
        self.report.skipped[label] = self.report.skipped.get(label, 0) + 1

    def _ability(self, raw: RawRow) -> Ability:
        if self.forced:
            return get_ability(self.forced)
        if not raw.ava_hint:
            raise RowError(raw.error or "cannot tell the ability: no config directory or image path prefix; pass --ava")
        try:
            return get_ability(raw.ava_hint)
        except AvaError as e:
            raise RowError(f"unknown config: {e}") from e

    def _sample(self, raw: RawRow, ability: Ability) -> Sample:
        if raw.error:
            raise RowError(raw.error)
        if raw.id is None or str(raw.id).strip() == "":
            raise RowError("missing id")
        sid = str(raw.id)
        if sid in self.seen.get(ability.key, ()):
            raise RowError(f"duplicate id {sid!r} in {ability.key}")
        if not raw.question or not raw.question.strip():
            raise RowError("empty question")
        sha, width, height, orientation = self._image(raw)
        # a box is in the frame of the file's pixels (see ava.data.images): its size, then the upright frame
        source_size = (height, width) if orientation in (5, 6, 7, 8) else (width, height)
        truth = derive_truth(ability, raw.question, raw.answer or "", image_size=source_size)
        if orientation != 1 and "box" in truth.truth:
            truth.truth["box"] = orient_box(truth.truth["box"], orientation)
            truth.meta["exif_orientation"] = orientation
        rel = self._commit(sha)
        meta = {k: _jsonable(v) for k, v in raw.extra.items()}
        source = source_of(raw.extra)
        if source:
            meta.setdefault("source", source)
        for key, value in truth.meta.items():
            meta.setdefault(key, value)
        return Sample(
            id=sid,
            ava=ability.key,
            image=rel,
            width=width,
            height=height,
            question=raw.question,
            answer=raw.answer or "",
            truth=truth.truth,
            options=truth.options,
            split=raw.split,
            meta=meta,
        )

    def _image(self, raw: RawRow) -> tuple[str, int, int, int]:
        """(sha256 of the source bytes, width, height, EXIF orientation applied) of the row's normalized image."""
        data = raw.image_bytes if raw.image_bytes is not None else _read_image_file(raw)
        sha = hashlib.sha256(data).hexdigest()
        if sha not in self.images and sha not in self.pending:
            self._keep(sha, _normalize_or_error(data, raw.image_path or "image"))
        cached = self.images.get(sha) or self.pending[sha]
        if isinstance(cached, str):
            raise RowError(cached)
        if isinstance(cached, NormalizedImage):
            return sha, cached.width, cached.height, cached.orientation
        return sha, cached[1], cached[2], cached[3]

    def _keep(self, sha: str, norm: NormalizedImage | str) -> None:
        if isinstance(norm, str):
            self.images[sha] = norm
        else:
            self.pending[sha] = norm

    def _commit(self, sha: str) -> str:
        """Store the image (once) and return its path relative to DIR/images."""
        if sha in self.pending:
            assert self.writer is not None
            norm = self.pending.pop(sha)
            rel = self.writer.add_image_bytes(norm.data, norm.ext)
            self.images[sha] = (rel, norm.width, norm.height, norm.orientation)
        return self.images[sha][0]  # type: ignore[return-value]

    def prefetch(self, rows: list[RawRow], pool: Executor) -> None:
        """Normalize the new images of ``rows`` in the pool; ``ingest`` then finds them cached."""
        todo: dict[str, tuple[bytes, str]] = {}
        for raw in rows:
            if raw.error:
                continue
            try:
                raw.image_bytes = raw.image_bytes if raw.image_bytes is not None else _read_image_file(raw)
            except RowError:
                continue  # ingest reports it
            sha = hashlib.sha256(raw.image_bytes).hexdigest()
            if sha not in self.images and sha not in self.pending:
                todo.setdefault(sha, (raw.image_bytes, raw.image_path or "image"))
        items = list(todo.values())
        results = pool.map(_normalize_or_error, [d for d, _ in items], [n for _, n in items], chunksize=4)
        for sha, norm in zip(todo, results, strict=True):
            self._keep(sha, norm)

    def split_info(self, sidecar: dict[str, Any] | None) -> dict[str, Any] | None:
        """``{"made_by": "official"}`` when every imported row named its split; None otherwise."""
        if not self.splits or None in self.splits:
            return None
        if sidecar:
            return sidecar
        return {"made_by": "official", "column": "split"}


def _read_image_file(raw: RawRow) -> bytes:
    """The bytes of the row's image file, which must be a regular file inside the image root (see ava.data.paths)."""
    if not raw.image_path:
        raise RowError("no image (neither bytes nor a path)")
    try:
        return read_confined(raw.image_root or Path(raw.file).parent, raw.image_path, what="image file")
    except PathError as e:
        raise RowError(str(e)) from e


def _jsonable(value: Any) -> Any:
    """Extra column values as JSON: bytes are dropped to a note, dates to ISO strings."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if isinstance(value, _dt.date | _dt.datetime | _dt.time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def split_name(value: Any) -> str | None:
    """A split column's value as "train" / "test"; RowError for anything else."""
    if value is None:
        return None
    name = _SPLIT_NAMES.get(str(value).strip().lower())
    if name is None:
        raise RowError(f"unknown split value {value!r} (expected train or test)")
    return name


def parse_conversations(conv: Any) -> tuple[str, str]:
    """(question, answer) from a LLaVA conversation: the first human turn and the gpt turn after it."""
    if isinstance(conv, str):
        try:
            conv = loads(conv, "conversations")
        except json.JSONDecodeError as e:
            raise RowError(f"malformed conversations: not a list of turns ({e})") from e
    if not isinstance(conv, list | tuple) or not conv:
        raise RowError("malformed conversations: expected a non-empty list of {from, value} turns")
    turns = []
    for turn in conv:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise RowError(f"malformed conversations: turn {turn!r} has no text 'value'")
        turns.append((str(turn.get("from", "")).lower(), turn["value"]))
    human = next((i for i, (who, _) in enumerate(turns) if who in ("human", "user")), None)
    if human is None:
        raise RowError("malformed conversations: no human turn")
    answer = next((v for who, v in turns[human + 1 :] if who in ("gpt", "assistant")), None)
    if answer is None:
        raise RowError("malformed conversations: no gpt answer after the question")
    return strip_image_token(turns[human][1]), answer.strip()


def strip_image_token(text: str) -> str:
    return text.replace("<image>\n", "").replace("\n<image>", "").replace("<image>", "").strip()


def _row_fields(conv: Any, split_value: Any) -> dict[str, Any]:
    """question / answer / split of a row, or the error that prevents reading them."""
    try:
        question, answer = parse_conversations(conv)
        return {"question": question, "answer": answer, "split": split_name(split_value)}
    except RowError as e:
        return {"error": str(e)}


# -- format detection ------------------------------------------------------------------------------


def detect_format(src: Path) -> str:
    """hf for parquet, llava for records with ``conversations``, eval for records with ``question_id``."""
    if src.suffix == ".parquet" or (src.is_dir() and _has_parquet(src)):
        return "hf"
    files = _json_files(src)
    if not files:
        raise AvaError(f"{src}: no parquet, JSON or JSONL files to import")
    first = next(iter(_iter_records(files[0])), None)
    record = first[1] if first else None
    if isinstance(record, dict) and "conversations" in record:
        return "llava"
    if isinstance(record, dict) and "question_id" in record:
        return "eval"
    raise AvaError(f"{files[0]}: cannot tell the format (no 'conversations' or 'question_id'); pass --format")


def _has_parquet(src: Path) -> bool:
    """Parquet files up to train/<Config>/ depth (a deep walk of an image tree would be slow)."""
    return any(next(src.glob(pattern), None) is not None for pattern in ("*.parquet", "*/*.parquet", "*/*/*.parquet"))


def _json_files(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    return sorted(
        p for p in src.iterdir() if p.suffix in (".json", ".jsonl") and p.name != EXPORT_SIDECAR and p.is_file()
    )


def _iter_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number, record) of a JSON list or JSONL file; a bad JSONL line yields its error text."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            records = loads(text, path)
        except json.JSONDecodeError as e:
            raise AvaError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(records, list):
            raise AvaError(f"{path}: a JSON {type(records).__name__}, not a list of records")
        yield from enumerate(records)
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield lineno, loads(line, f"line {lineno}")
            except JsonDepthError as e:
                yield lineno, str(e)
            except json.JSONDecodeError as e:
                yield lineno, f"line {lineno} is not valid JSON ({e})"


def _export_sidecar(src: Path, fmt: str) -> dict[str, Any]:
    """What ``ava data export`` left beside its JSON (split provenance, synthetic), so a round trip keeps it."""
    path = (src if src.is_dir() else src.parent) / EXPORT_SIDECAR
    if fmt != "llava" or not path.is_file():
        return {}
    try:
        found = read_json(path)
    except ValueError:  # not JSON, or nested too deeply: no sidecar
        return {}
    return found if isinstance(found, dict) else {}


# -- readers: each yields (total rows, row iterator) groups ----------------------------------------

Groups = list[tuple[int | None, Iterator[RawRow]]]


def _groups(fmt: str, src: Path, image_root: Path | None, answers: Path | None) -> Groups:
    if fmt == "hf":
        return [(n, _hf_rows(path, config, image_root)) for path, config, n in _hf_files(src)]
    files = _json_files(src)
    if not files:
        raise AvaError(f"{src}: no JSON or JSONL files to import")
    if fmt == "llava":
        return [(None, _llava_rows(f, image_root)) for f in files]
    answer_map = _load_answers(answers) if answers else {}
    return [(None, _eval_rows(f, image_root, answer_map)) for f in files]


def _hf_files(src: Path) -> list[tuple[Path, str, int]]:
    """(parquet file, config name, row count) for every parquet file under SRC."""
    import pyarrow.parquet as pq

    if src.is_file():
        files = [src]
    else:
        base = src / "train" if (src / "train").is_dir() else src
        files = sorted(base.rglob("*.parquet"))
    if not files:
        raise AvaError(f"{src}: no parquet files (expected train/<Config>/*.parquet)")
    out = []
    for path in files:
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises several types for a broken file
            raise AvaError(f"{path}: not a readable parquet file ({e})") from e
        missing = {"id", "image", "conversations"} - set(pf.schema_arrow.names)
        if missing:  # checked for every file before anything is written
            raise AvaError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        out.append((path, path.parent.name, pf.metadata.num_rows))
    return out


def _hf_rows(path: Path, config: str, image_root: Path | None) -> Iterator[RawRow]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    row = 0
    for batch in pf.iter_batches(batch_size=_BATCH_ROWS):
        for rec in batch.to_pylist():
            yield _hf_row(rec, path, row, config, image_root)
            row += 1


def _hf_row(rec: dict[str, Any], path: Path, row: int, config: str, image_root: Path | None) -> RawRow:
    image = rec.get("image")
    raw = RawRow(file=str(path), row=row, id=_str_or_none(rec.get("id")), ava_hint=config)
    raw.extra = {k: v for k, v in rec.items() if k not in ("id", "image", "conversations", "split")}
    if isinstance(image, dict):
        raw.image_bytes, raw.image_path = image.get("bytes"), image.get("path")
    elif isinstance(image, bytes | str):
        raw.image_bytes, raw.image_path = (image, None) if isinstance(image, bytes) else (None, image)
    raw.image_root = image_root or path.parent
    for key, value in _row_fields(rec.get("conversations"), rec.get("split")).items():
        setattr(raw, key, value)
    return raw


def _llava_rows(path: Path, image_root: Path | None) -> Iterator[RawRow]:
    for row, rec in _iter_records(path):
        if not isinstance(rec, dict):
            yield RawRow(str(path), row, None, None, error=rec if isinstance(rec, str) else "record is no object")
            continue
        image = rec.get("image")
        raw = RawRow(file=str(path), row=row, id=_str_or_none(rec.get("id")), ava_hint=_ava_field(rec, "ava"))
        raw.ava_hint = raw.ava_hint or _config_from_image(image)
        raw.image_path = image if isinstance(image, str) else None
        raw.image_root = image_root or path.parent
        raw.extra = {k: v for k, v in rec.items() if k not in _LLAVA_KEYS}
        for key, value in _row_fields(rec.get("conversations"), rec.get("split")).items():
            setattr(raw, key, value)
        raw.error = raw.error or _field_error(rec, "ava")
        if raw.error is None and not raw.image_path:
            raw.error = "record has no image path"
        yield raw


def _ava_field(rec: dict[str, Any], key: str) -> str | None:
    """A record's ability field when it is a name (a number or a list is reported by :func:`_field_error`)."""
    value = rec.get(key)
    return value if isinstance(value, str) else None


def _field_error(rec: dict[str, Any], *keys: str) -> str | None:
    """Why a record's text field is unusable (a number, a list, an object where a name or text belongs)."""
    for key in keys:
        value = rec.get(key)
        if value is not None and not isinstance(value, str):
            return f"field {key!r} is {json.dumps(value)[:60]}, not a string"
    return None


def _eval_rows(path: Path, image_root: Path | None, answers: dict[str, str]) -> Iterator[RawRow]:
    for row, rec in _iter_records(path):
        if not isinstance(rec, dict):
            yield RawRow(str(path), row, None, None, error=rec if isinstance(rec, str) else "record is no object")
            continue
        qid = _str_or_none(rec.get("question_id"))
        image = rec.get("image")
        category = _ava_field(rec, "category")
        hint = _ava_field(rec, "ava") or (category if category in ABILITIES else None)
        raw = RawRow(file=str(path), row=row, id=qid, ava_hint=hint or _config_from_image(image))
        raw.image_path = image if isinstance(image, str) else None
        raw.image_root = image_root or path.parent
        raw.extra = {k: v for k, v in rec.items() if k not in _EVAL_KEYS}
        raw.error = _field_error(rec, "ava", "text")
        raw.question = strip_image_token(rec.get("text") if isinstance(rec.get("text"), str) else "")
        answer = rec.get("answer") if rec.get("answer") is not None else answers.get(qid or "")
        raw.answer = str(answer).strip() if answer is not None else None
        try:
            raw.split = split_name(rec.get("split"))
        except RowError as e:
            raw.error = raw.error or str(e)
        if raw.error is None and raw.answer is None:
            raw.error = "no answer (neither an 'answer' key nor an entry in --answers)"
        if raw.error is None and not raw.image_path:
            raw.error = "record has no image path"
        yield raw


def _load_answers(path: Path) -> dict[str, str]:
    """question_id -> reference answer from an answers file (JSONL or JSON list)."""
    if not path.is_file():
        raise AvaError(f"answers file {path} does not exist")
    out: dict[str, str] = {}
    for row, rec in _iter_records(path):
        if not isinstance(rec, dict) or rec.get("question_id") is None:
            raise AvaError(f"{path}: record {row} is not an object with a 'question_id'")
        answer = rec.get("answer")
        if answer is None and "image" not in rec:
            answer = rec.get("text")
        if answer is None:
            raise AvaError(f"{path}: record {row} (question_id {rec['question_id']!r}) has no 'answer'")
        out[str(rec["question_id"])] = str(answer)
    return out


def _config_from_image(image: Any) -> str | None:
    """The release's loader writes ``<Config>/images/<id>.<ext>``: the first component is the config."""
    if not isinstance(image, str) or "/" not in image.replace("\\", "/"):
        return None
    return image.replace("\\", "/").split("/", 1)[0] or None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
