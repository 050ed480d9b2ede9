"""``ava data build``: read the sources, run every rule, balance, split, render and write one ``ava`` dataset.

The dataset is written to a temporary sibling of ``out`` and renamed into place only when everything is written,
so a bad record found late, a full disk or a kill never leaves a half-written dataset at ``out``.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from ava.curate import jpeg
from ava.curate import sources as src
from ava.curate.abilities import BUILDERS, FOLDER_ABILITIES
from ava.curate.abilities import PIXEL_RULES as ABILITY_PIXEL_RULES
from ava.curate.core import RULE_VERSION, Context, Question, cached_image, cached_padded
from ava.curate.parallel import imap
from ava.curate.split import MIN_STRATUM, assign
from ava.curate.tasks import PIXEL_RULES as TASK_PIXEL_RULES
from ava.curate.tasks import TASKS, top_up
from ava.data.format import DatasetWriter, Sample, check_replaceable, encode_png, image_name
from ava.errors import AvaError

IMAGE_FORMATS = ("auto", "png", "jpeg")


class BuildError(AvaError, ValueError):
    """The build cannot go as asked (an ability without the sources it needs, an existing --out, ...)."""


@dataclass
class BuildConfig:
    """What ``ava data build`` reads and writes; every field is a CLI option of the same name."""

    out: Path
    coco: Path | None = None
    images: Path | None = None
    depth: Path | None = None
    depth_model: str | None = None  # a transformers depth-estimation checkpoint (hub id or directory), run once
    device: str = "cpu"  # of the depth model and the clip@ miner
    classes: list[str] = field(default_factory=list)  # "DIR" (ability-named subfolders) or "ABILITY=DIR"
    text: Path | None = None
    attributes: Path | None = None
    ava: list[str] | None = None  # None: every ability the sources allow; []: none
    tasks: list[str] | None = None  # None: every task the sources allow; []: none
    seed: int = 0
    options: int | None = None  # options of sampled-option abilities (default: the paper's counts)
    boxes: bool = True  # False: spatial without drawn boxes (the paper's Figure 8a variant)
    test_frac: float = 0.2
    family: str = "object"  # fine-grained: "What species of {family} ..."
    max_pairs: int = 4  # object pairs per image, for pair questions
    max_per_task: int | None = 2000  # questions per task-augmentation task (balanced); None: all
    image_format: str = "auto"  # auto: a drawn image is JPEG (quality 95) where its source is a JPEG, else PNG
    miner: str = "random"  # options of choice abilities: random (the paper) or clip@<hub-id-or-dir> (FOCI)
    workers: int = 1
    force: bool = False


@dataclass
class BuildResult:
    out: Path
    counts: dict[str, dict[str, int]]
    summary: list[dict[str, Any]]
    skipped: dict[str, str]  # ability -> why it was not built
    split: dict[str, Any]
    seconds: float
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # provenance, as in dataset.json


def read_sources(config: BuildConfig) -> tuple[Context, dict[str, dict[str, Any]]]:
    """The build context and each source's provenance (path and sha256)."""
    ctx = Context(
        seed=config.seed,
        options_k=config.options,
        boxes=config.boxes,
        family=config.family,
        max_pairs=config.max_pairs,
        max_per_task=config.max_per_task,
        workers=config.workers,
    )
    prov: dict[str, dict[str, Any]] = {}
    from ava.curate.mining import sampler_factory

    ctx.sampler, ctx.miner = sampler_factory(config.miner, config.device)
    if ctx.miner is not None:
        prov["miner"] = ctx.miner.record()
    if (config.coco or config.text) and config.images is None:
        raise BuildError("--images DIR is required with --coco or --text (the directory their file names are in)")
    if config.images is not None and not Path(config.images).is_dir():
        raise BuildError(f"--images {config.images}: no such directory")
    if config.coco:
        ctx.coco = src.read_coco(Path(config.coco), Path(config.images))  # type: ignore[arg-type]
        prov["coco"] = {
            "path": str(config.coco),
            "sha256": src.sha256_file(Path(config.coco)),
            "images": len(ctx.coco.images),
            "annotations": ctx.coco.n_annotations,
            "classes": ctx.coco.class_names,
        }
        if ctx.coco.exif:
            prov["coco"]["exif_rotated"] = ctx.coco.exif
    if config.depth and config.depth_model:
        raise BuildError("--depth and --depth-model both give depth; pass one")
    if config.depth_model:
        if ctx.coco is None:
            raise BuildError("--depth-model needs --coco (depth questions are about annotated objects)")
        from ava.curate import depth_model

        ctx.scratch = Path(tempfile.mkdtemp(prefix="ava-depth-"))
        try:
            ctx.depth, prov["depth"] = depth_model.run(
                config.depth_model, list(ctx.coco.images.values()), ctx.scratch, device=config.device
            )
        except BaseException:
            shutil.rmtree(ctx.scratch, ignore_errors=True)
            raise
    if config.depth:
        if ctx.coco is None:
            raise BuildError("--depth needs --coco (depth questions are about annotated objects)")
        src.check_depth_root(Path(config.depth), list(ctx.coco.images.values()))
        ctx.depth = src.DepthSource(Path(config.depth))
        prov["depth"] = {
            "path": str(config.depth),
            "kind": "maps (16-bit PNG mm or .npy m)",
            "metric": True,
            "sha256": _maps_digest(ctx),
        }
    for spec in config.classes:
        for ava, root in _class_roots(spec).items():
            if ava in ctx.classes:
                raise BuildError(f"--classes names {ava} twice ({ctx.classes[ava].root} and {root})")
            ctx.classes[ava] = src.read_class_folders(root)
            prov[f"classes:{ava}"] = {
                "path": str(root),
                "classes": len(ctx.classes[ava].classes),
                "sha256": _listing_digest(ctx.classes[ava]),
            }
    if config.text:
        ctx.words = src.read_text(Path(config.text), Path(config.images))  # type: ignore[arg-type]
        prov["text"] = {"path": str(config.text), "sha256": src.sha256_file(Path(config.text))}
    if config.attributes:
        if ctx.coco is None:
            raise BuildError("--attributes needs --coco (attributes are keyed by COCO annotation id)")
        known = {a.id for im in ctx.coco.images.values() for a in im.instances}
        ctx.attributes = src.read_attributes(Path(config.attributes), known)
        prov["attributes"] = {
            "path": str(config.attributes),
            "sha256": src.sha256_file(Path(config.attributes)),
            "attributes": ctx.attributes.names,
        }
    if config.images and ctx.coco:
        prov["images"] = {"path": str(config.images), "sha256": _images_digest(ctx)}
    return ctx, prov


def _class_roots(spec: str) -> dict[str, Path]:
    """``ABILITY=DIR`` -> that ability; ``DIR`` -> each subfolder named after a class-folder ability."""
    from ava.abilities import get_ability

    if "=" in spec:
        name, root = spec.split("=", 1)
        ava = get_ability(name).key
        if ava not in FOLDER_ABILITIES:
            raise BuildError(f"--classes {spec}: {ava} is not built from class folders ({', '.join(FOLDER_ABILITIES)})")
        return {ava: Path(root)}
    root = Path(spec)
    found = {a: root / a for a in FOLDER_ABILITIES if (root / a).is_dir()}
    if not found:
        raise BuildError(
            f"--classes {root}: no subfolder named after a class-folder ability "
            f"({', '.join(FOLDER_ABILITIES)}); or pass ABILITY=DIR"
        )
    return found


def _digest(items: list[tuple[str, str]]) -> str:
    return hashlib.sha256("".join(f"{a}\0{b}\n" for a, b in sorted(items)).encode()).hexdigest()


def _images_digest(ctx: Context) -> str:
    """sha256 over (file name, sha256 of the file) of every image the annotations name."""
    return _digest([(im.file_name, src.sha256_file(im.path)) for im in ctx.coco.images.values()])  # type: ignore[union-attr]


def _maps_digest(ctx: Context) -> str:
    items = []
    for im in ctx.coco.images.values():  # type: ignore[union-attr]
        p = ctx.depth.find(im.file_name)  # type: ignore[union-attr]
        if p is not None:
            items.append((str(p.relative_to(ctx.depth.root)), src.sha256_file(p)))  # type: ignore[union-attr]
    return _digest(items)


def _listing_digest(folders: src.ClassFolders) -> str:
    return _digest(
        [(str(p.relative_to(folders.root)), src.sha256_file(p)) for ps in folders.classes.values() for p in ps]
    )


def _have(ctx: Context) -> set[str]:
    have = {f"classes:{a}" for a in ctx.classes}
    for name, value in (("coco", ctx.coco), ("depth", ctx.depth), ("text", ctx.words), ("attributes", ctx.attributes)):
        if value is not None:
            have.add(name)
    return have


METRIC_ONLY = ("abs_depth",)  # abilities that need depth in metres (not a relative-depth model's map)
_SOURCE_OPTION = {"coco": "--coco", "depth": "--depth", "text": "--text", "attributes": "--attributes"}


def _option(source: str) -> str:
    """The option that gives a source: ``coco`` -> ``--coco``, ``classes:scene`` -> ``--classes scene=DIR``."""
    return _SOURCE_OPTION.get(source) or f"--classes {source.split(':', 1)[1]}=DIR"


def plan(ctx: Context, ava: list[str] | None, tasks: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """What to build (in registry order) and, for the rest, why not; an ability asked for by name whose sources
    are missing is an error."""
    from ava.abilities import ABILITIES, BUILTIN_KEYS

    have = _have(ctx)
    table = {**BUILDERS, **TASKS}
    wanted = set()
    for names, pool in ((ava, BUILDERS), (tasks, TASKS)):
        if names is None:
            wanted |= set(pool)
            continue
        for name in names:
            key = ABILITIES.canonical(name) if name not in pool else name
            if key not in pool:
                raise BuildError(
                    f"{name!r} is not one of the {'tasks' if pool is TASKS else 'abilities'} a build "
                    f"makes ({', '.join(pool)})"
                )
            missing = [s for s in pool[key][0] if s not in have]
            if missing:
                raise BuildError(f"{key} needs {', '.join(_option(s) for s in missing)}")
            if key in METRIC_ONLY and not ctx.depth.metric:  # type: ignore[union-attr]
                raise BuildError(
                    f"{key} asks for metres, and the --depth-model predicts relative depth; use a "
                    "metric depth model or --depth maps, or only nearer/farther questions"
                )
            wanted.add(key)
    chosen, skipped = [], {}
    for key in BUILTIN_KEYS:
        if key not in wanted:
            continue
        missing = [s for s in table[key][0] if s not in have]
        if missing:
            skipped[key] = "no " + ", ".join(_option(s) for s in missing)
        elif key in METRIC_ONLY and not ctx.depth.metric:  # type: ignore[union-attr]
            skipped[key] = "relative depth model: no metres"
        else:
            chosen.append(key)
    return chosen, skipped


def _cap(questions: list[Question], n: int | None) -> list[Question]:
    """At most ``n`` questions, equally many per answer (so a balanced task stays balanced)."""
    if n is None or len(questions) <= n:
        return questions
    from ava.curate.core import stable_hash

    by: dict[str, list[Question]] = {}
    for q in questions:
        by.setdefault(q.answer, []).append(q)
    per = max(1, n // len(by))
    keep = {q.id for qs in by.values() for q in sorted(qs, key=lambda q: stable_hash(q.ava, q.id))[:per]}
    return [q for q in questions if q.id in keep]


def make_questions(ctx: Context, keys: list[str], max_per_task: int | None, progress: bool = False) -> list[Question]:
    """Every ability's and task's kept questions, in ``keys`` order. The rules that read pixels get them from one
    pass over the images (:mod:`ava.curate.pixels`), while the builders that need none run."""
    from ava.abilities.tasks import is_task
    from ava.curate.pixels import run_pass

    table = {**BUILDERS, **TASKS}
    rules = {k: r for k, r in {**ABILITY_PIXEL_RULES, **TASK_PIXEL_RULES}.items() if k in keys}
    built: dict[str, list[Question]] = {}

    def build(key: str) -> None:
        qs = table[key][1](ctx)
        if is_task(key):
            before = len(qs)
            qs = _cap(qs, max_per_task)
            if before > len(qs):
                ctx.summary.cap(key, f"over --max-per-task {max_per_task}", n=before - len(qs))
        ids = [q.id for q in qs]
        if len(set(ids)) != len(ids):
            raise AssertionError(f"{key}: two questions with one id")  # a builder's bug, never the user's input
        ctx.summary.kept[key] = len(qs)
        built[key] = qs

    run_pass(ctx, rules, progress, meanwhile=lambda: [build(k) for k in keys if k not in rules])
    for key in keys:
        if key in rules:
            build(key)
        while more := top_up(ctx, key, len(built[key])):  # too few passed: the cap picks among more images
            if key in rules:
                found = ctx.pixels[key]
                run_pass(ctx, {key: ((lambda ctx, more=more: more), rules[key][1])}, progress)
                ctx.pixels[key] = {**found, **ctx.pixels[key]}
            ctx.summary.forget(key)
            build(key)
    return [q for key in keys for q in built[key]]


# -- writing --------------------------------------------------------------------------------------------------------

Stored = tuple[str, int, int]  # the image's path in the dataset, width, height


class _Store:
    """Draws, encodes and stores the questions' images (in the worker processes, when there are several): each
    process writes the content-addressed files itself and hands back only their names.

    The files go into the build's own temporary directory, which is renamed into place only when everything is
    written and removed on any failure, so a file is created and written directly (``O_EXCL``: of two processes
    storing the same picture, one writes it), with no per-file temporary and rename."""

    def __init__(self, questions: list[Question], fmt: str, images: Path) -> None:
        self.questions, self.fmt, self.images = questions, fmt, images
        self.done: dict[tuple, Stored] = {}  # image_key -> stored image, for the questions of the current image
        self.coded: dict[tuple, jpeg.RowCoded] = {}  # picture -> its JPEG without marks, for the current image
        self.origin: object = None  # that image's file name
        self.dirs: set[str] = set()
        self.splice = jpeg.splices_exactly()

    def _put(self, data: bytes, ext: str) -> str:
        rel = image_name(data, ext)
        folder = rel.split("/", 1)[0]
        if folder not in self.dirs:
            (self.images / folder).mkdir(parents=True, exist_ok=True)
            self.dirs.add(folder)
        try:
            fd = os.open(self.images / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return rel
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return rel

    def __call__(self, index: int) -> Stored:
        q = self.questions[index]
        key = q.image_key
        if key is not None and key in self.done:
            return self.done[key]
        origin = q.meta["origin"]["file"]
        if origin != self.origin:  # questions come source image by source image
            self.done.clear()
            self.coded.clear()
            self.origin = origin
        data, w, h, ext = self._encode(q)
        out = (self._put(data, ext), w, h)
        if key is not None:
            self.done[key] = out
        return out

    def _encode(self, q: Question) -> tuple[bytes, int, int, str]:
        """A question's image as file bytes, its size and file extension."""
        source = getattr(q.render, "source", None)
        out = _as_stored(source) if source is not None else None
        if out is not None:
            return out
        drawn = getattr(q.render, "drawn", None)  # marks drawn on the cached picture itself, taken off once encoded
        if drawn is None:
            return _encoded(q.render(), q, self.fmt)
        image, undo, changed = drawn()
        try:
            if not (self.splice and _jpeg(q, self.fmt)):  # (the cached pictures are RGB)
                return _encoded(image, q, self.fmt)
            picture = q.render.picture  # type: ignore[attr-defined]
            base = self.coded.get(picture)
            if base is not None:  # the picture's file with the rows under the marks encoded again
                return base.patched(image, changed).tobytes(), image.width, image.height, "jpg"
            data = jpeg.encode(image)
        finally:
            undo()
        coded = jpeg.RowCoded.parse(data)
        if coded is not None:  # the next question on this picture starts from its file without these marks
            self.coded[picture] = coded.patched(image, changed)
        return data, image.width, image.height, "jpg"


def _jpeg(q: Question, fmt: str) -> bool:
    """Whether a drawn question's image is stored as JPEG (else PNG)."""
    return fmt == "jpeg" or (fmt == "auto" and _source_format(q) == "JPEG")


def _encoded(image: Image.Image, q: Question, fmt: str) -> tuple[bytes, int, int, str]:
    if image.mode != "RGB":  # convert() copies even an RGB image
        image = image.convert("RGB")
    if _jpeg(q, fmt):
        return jpeg.encode(image), image.width, image.height, "jpg"
    return encode_png(image), image.width, image.height, "png"


def _as_stored(path: Path) -> tuple[bytes, int, int, str] | None:
    """A source file's own bytes when ``ava.data.images`` would keep them as they are (an RGB JPEG or PNG without
    EXIF rotation or transparency): no re-encoding, no quality lost."""
    from ava.data.images import keep_as_is

    data = Path(path).read_bytes()
    with Image.open(io.BytesIO(data)) as im:
        if keep_as_is(im):
            return data, im.width, im.height, "jpg" if im.format == "JPEG" else "png"
    return None


def _source_format(q: Question) -> str | None:
    """The file format of the source image a question was drawn from (JPEG sources give JPEG questions)."""
    origin = q.meta.get("origin") or {}
    path = _SOURCE_PATHS.get(str(origin.get("file")))
    if path is None:
        return None
    if path not in _FORMATS:
        with Image.open(path) as im:
            _FORMATS[path] = str(im.format)
    return _FORMATS[path]


_SOURCE_PATHS: dict[str, Path] = {}  # origin file name -> path, set by build_dataset
_FORMATS: dict[Path, str] = {}


def _write(
    tmp: Path,
    questions: list[Question],
    splits: dict[str, str],
    info: dict[str, Any],
    fmt: str,
    workers: int,
    progress: bool,
) -> dict[str, dict[str, int]]:
    """Draw and store every question's image (source image by source image, so each is decoded once; by
    ``workers`` forked processes), then write the sample lists and ``dataset.json``."""
    counts: dict[str, dict[str, int]] = {}
    order = sorted(range(len(questions)), key=lambda i: (str(questions[i].meta["origin"]["file"]), i))
    samples: list[Sample | None] = [None] * len(questions)
    from rich.progress import TimeRemainingColumn

    from ava.progress import progress as progress_bar

    store = _Store(questions, fmt, tmp / "images")
    stored = zip(order, imap(store, order, workers, chunk=256), strict=True)  # the workers are forked here
    with DatasetWriter(tmp, info) as writer, progress_bar(progress, TimeRemainingColumn()) as bar:
        job = bar.add_task("draw", total=len(questions))
        for i, (rel, w, h) in stored:
            bar.advance(job)
            q = questions[i]
            split = splits[f"{q.ava}\0{q.id}"]
            samples[i] = Sample(
                id=q.id,
                ava=q.ava,
                image=rel,
                width=w,
                height=h,
                question=q.question,
                answer=q.answer,
                truth=q.truth,
                options=q.options,
                split=split,
                meta=q.meta,
            )
            counts.setdefault(q.ava, {"train": 0, "test": 0})[split] += 1
        for sample in samples:  # in the builders' order, whatever order the images were drawn in
            writer.add_sample(sample)  # type: ignore[arg-type]
    return counts


def build_dataset(config: BuildConfig, progress: bool = False) -> BuildResult:
    """Build an ``ava`` dataset at ``config.out`` from the sources ``config`` names (see ``docs/build.md``);
    ``progress`` shows a bar while the questions' images are drawn."""
    start = time.perf_counter()
    cached_image.cache_clear()  # a source image may have changed since an earlier build in this process
    cached_padded.cache_clear()
    out = Path(config.out)
    if config.image_format not in IMAGE_FORMATS:
        raise BuildError(f"--image-format must be one of {', '.join(IMAGE_FORMATS)}, not {config.image_format!r}")
    _check_numbers(config)
    if os.path.lexists(out) and (not out.is_dir() or any(out.iterdir())):
        if not config.force:
            raise BuildError(
                f"{out} exists and is not empty; pass --force to replace it (only an ava dataset is ever replaced)"
            )
        check_replaceable(out, option="--force")
    ctx, prov = read_sources(config)
    try:
        return _build(config, ctx, prov, out, start, progress)
    finally:
        if ctx.scratch is not None:
            shutil.rmtree(ctx.scratch, ignore_errors=True)


def _check_numbers(config: BuildConfig) -> None:
    """Every number of the config in its range, before any source is read (``--max-pairs -1`` would otherwise cut
    a list from its end)."""
    from ava.validate import check, int_at_least

    rules = {
        "test_frac": check,
        "max_pairs": check,
        "workers": check,
        "max_per_task": lambda _, v: int_at_least(1)(v),  # None: no cap (the CLI's 0)
        "options": lambda _, v: int_at_least(2)(v),
    }
    for name, rule in rules.items():
        value = getattr(config, name)
        if value is None:
            continue
        try:
            rule(name, value)
        except ValueError as e:
            raise BuildError(f"--{name.replace('_', '-')} {e}") from None


def _build(
    config: BuildConfig, ctx: Context, prov: dict[str, dict[str, Any]], out: Path, start: float, progress: bool
) -> BuildResult:
    keys, skipped = plan(ctx, config.ava, config.tasks)
    if not keys:
        raise BuildError(
            "nothing to build: "
            + ("; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no abilities or tasks chosen")
        )
    questions = make_questions(ctx, keys, config.max_per_task, progress)
    if not questions:
        raise BuildError("every question was dropped by the rules: " + "; ".join(ctx.summary.line(k) for k in keys))
    splits, split_report = assign(questions, config.test_frac, config.seed)
    split_info = {
        "made_by": "ava data build",
        "test_frac": config.test_frac,
        "seed": config.seed,
        "stratified_by": "class x answer bin (fine); the answer bin alone where a class x bin stratum has "
        f"under {MIN_STRATUM} questions (coarse)",
        "strata": split_report,
    }
    info = {
        "source": "ava data build",
        "synthetic": _synthetic(ctx),
        "split": split_info,
        "build": {
            "rule_version": RULE_VERSION,
            "seed": config.seed,
            "sources": prov,
            "built": keys,
            "skipped": skipped,
            "options": _options(config),
            "classes": _classes(ctx, keys),
            "summary": ctx.summary.rows(),
        },
    }
    _SOURCE_PATHS.clear()
    _FORMATS.clear()
    if ctx.coco:
        _SOURCE_PATHS.update({im.file_name: im.path for im in ctx.coco.images.values()})
    _SOURCE_PATHS.update({w.image.file_name: w.image.path for w in ctx.words or []})
    for folders in ctx.classes.values():
        _SOURCE_PATHS.update({str(p.relative_to(folders.root)): p for ps in folders.classes.values() for p in ps})
    tmp = out.with_name(f".{out.name}.build-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        counts = _write(tmp, questions, splits, info, config.image_format, config.workers, progress)
        _replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        cached_image.cache_clear()
        cached_padded.cache_clear()
    return BuildResult(out, counts, ctx.summary.rows(), skipped, split_info, time.perf_counter() - start, prov)


def _replace(tmp: Path, out: Path) -> None:
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if os.path.lexists(out):
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _classes(ctx: Context, keys: list[str]) -> dict[str, list[str]]:
    """Per choice ability built from a class list, every class it draws options from (the annotation file's
    categories, a root's class folders), whether or not a kept question has it as its answer: what ``ava data
    options`` offers as distractors."""
    out = {}
    if "recognition" in keys and ctx.coco is not None:
        out["recognition"] = ctx.coco.class_names
    for ava, folders in ctx.classes.items():
        if ava in keys:
            out[ava] = sorted(folders.classes)
    return out


def _synthetic(ctx: Context) -> bool:
    """Sources written by ``ava data synth-sources`` say so in their COCO ``info``; the dataset then says so too."""
    return bool(ctx.coco and ctx.coco.synthetic)


def _options(config: BuildConfig) -> dict[str, Any]:
    return {
        "options": config.options,
        "boxes": config.boxes,
        "test_frac": config.test_frac,
        "family": config.family,
        "max_pairs": config.max_pairs,
        "max_per_task": config.max_per_task,
        "image_format": config.image_format,
        **({"miner": config.miner} if config.miner != "random" else {}),
    }  # the paper's random: as before
