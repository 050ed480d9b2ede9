"""`ava data` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ava.cli import synth
from ava.cli.params import AvaOpt, DataArg, DataOpt, ForceOpt, checked, dataset_dir, list_callback

app = typer.Typer(no_args_is_help=True)
app.command("synth")(synth.synth)
app.command("preview")(synth.preview)

MAX_ERRORS_SHOWN = 10


@app.command("import")
def import_(
    src: Annotated[Path, typer.Argument(help="Release repo/train dir/config dir/parquet file, or a JSON/JSONL file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset directory to create or extend.")],
    fmt: Annotated[str, typer.Option("--format", help="auto, hf, llava or eval.")] = "auto",
    image_root: Annotated[
        Path | None, typer.Option(help="Directory image paths are relative to (default: the JSON's directory).")
    ] = None,
    answers: Annotated[Path | None, typer.Option(help="eval format: JSONL of {question_id, answer}.")] = None,
    ava: Annotated[str | None, typer.Option(help="Force the ability of every row (key or config name).")] = None,
    workers: Annotated[
        int, typer.Option(help="Processes that decode and normalize images (0: none).", callback=checked("workers"))
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Import the release (parquet), LLaVA JSON or eval questions into an ava dataset.

    Rows that cannot be imported (corrupt image, malformed conversations, unknown config,
    unparseable answer) are skipped and listed in OUT/import_errors.jsonl; the exit code is then 1.
    """
    from rich.console import Console
    from rich.table import Table

    from ava.api import import_data
    from ava.data.importers import ERRORS_FILE

    report = import_data(
        src, out, format=fmt, image_root=image_root, answers=answers, ava=ava, workers=workers, progress=not quiet
    )
    console = Console()
    table = Table(title=f"imported {report.source} ({report.fmt}) -> {report.out}")
    for col in ("ability", "imported", "skipped"):
        table.add_column(col, justify="left" if col == "ability" else "right")
    for key in sorted(set(report.imported) | set(report.skipped)):
        table.add_row(key, str(report.imported.get(key, 0)), str(report.skipped.get(key, 0)))
    table.add_row("[bold]total", f"[bold]{report.n_imported}", f"[bold]{report.n_skipped}")
    console.print(table)
    console.print(f"{report.n_images} distinct images; split: {report.split or 'none (run `ava data split`)'}")
    if report.errors:
        err = Console(stderr=True)
        for issue in report.errors[:MAX_ERRORS_SHOWN]:
            err.print(
                f"[red]skipped[/] id={issue.id!r} ({issue.file}, row {issue.row}): {issue.reason}", highlight=False
            )
        more = len(report.errors) - MAX_ERRORS_SHOWN
        err.print(f"{'... and ' + str(more) + ' more; ' if more > 0 else ''}all in {report.out / ERRORS_FILE}")
        raise typer.Exit(1)


@app.command("split")
def split(
    data_arg: DataArg = None,
    data: DataOpt = None,
    test_frac: Annotated[
        float,
        typer.Option(help="Fraction of each class/answer bin that goes to test.", callback=checked("test_frac")),
    ] = 0.2,
    seed: Annotated[int, typer.Option(help="Seed of the hash order inside each stratum.")] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing split (official, synthetic or ava's).")
    ] = False,
) -> None:
    """Split a dataset into train/test: deterministic, 80/20 within each ability x class or answer bin."""
    data = dataset_dir(data, data_arg)
    from rich.console import Console
    from rich.table import Table

    from ava.api import split_data

    result = split_data(data, test_frac=test_frac, seed=seed, force=force)
    kept = " (already split this way: kept, nothing to do)" if result.unchanged else ""
    table = Table(title=f"split of {data} (test_frac={test_frac}, seed={seed}){kept}")
    for col in ("ability", "train", "test", "stratified by"):
        table.add_column(col)
    for ava, counts in result.counts.items():
        table.add_row(ava, str(counts["train"]), str(counts["test"]), result.split["stratified_by"][ava])
    Console().print(table)


@app.command("export")
def export(
    data_arg: DataArg = None,
    data: DataOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output directory. Required.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="Output format (llava).")] = "llava",
    split: Annotated[str | None, typer.Option(help="Export only this split (train or test).")] = None,
) -> None:
    """Export a dataset as LLaVA JSON (one file per split) + images as <Config>/images/<id>.<ext>."""
    data = dataset_dir(data, data_arg)
    if out is None:
        raise typer.BadParameter("an output directory is required", param_hint="'--out'")
    from ava.data.export import export_dataset

    path = export_dataset(data, out, fmt=fmt, split=split)
    typer.echo(f"exported {data} -> {path}")


@app.command("info")
def info(
    data_arg: DataArg = None,
    data: DataOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Counts per ability x split, per source dataset and per answer class."""
    data = dataset_dir(data, data_arg)
    from ava.api import data_info

    result = data_info(data)
    if as_json:
        typer.echo(json.dumps(result, indent=2, ensure_ascii=False))
        return
    _print_info(result)


def _print_info(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    split = result["split"]
    made_by = f"{split.get('made_by')} (seed {split.get('seed')})" if split else "unsplit"
    console.print(
        f"[bold]{result['root']}[/]: {result['n_samples']} samples, {result['n_images']} images, split {made_by}"
        + (", synthetic" if result["synthetic"] else ""),
        highlight=False,
    )
    table = Table()
    for col in ("ability", "total", "train", "test", "unsplit", "classes", "sources"):
        table.add_column(col, justify="left" if col in ("ability", "sources") else "right")
    for ava, a in result["abilities"].items():
        sources = ", ".join(f"{k} {v}" for k, v in list(a["sources"].items())[:4])
        table.add_row(ava, *(str(a[k]) for k in ("total", "train", "test", "unsplit")), str(len(a["classes"])), sources)
    console.print(table)


# -- ava data options (FOCI hard negatives; ava.distractors) --------------------------------------------------------
@app.command("options")
def options(
    data: DataOpt = None,
    miner: Annotated[str, typer.Option(help="random, cache:VFM (with --cache) or clip@<hub-id-or-dir>.")] = "random",
    k: Annotated[int, typer.Option("--k", help="Options per question: the truth and k-1 wrong classes.")] = 4,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Dataset directory to write. Required.")] = None,
    cache: Annotated[str | None, typer.Option(help="Feature cache a cache:VFM miner reads (directory or URL).")] = None,
    ava: Annotated[
        list[str] | None,
        typer.Option(
            "--ava", help="Abilities (default: every choice ability with more than k classes).", callback=list_callback
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the option order (per sample).")] = 0,
    template: Annotated[
        str,
        typer.Option(
            help="keep: the question keeps its wording, its list replaced; foci: "
            "FOCI's prompt (A.-D. choices, answer with the letter)."
        ),
    ] = "keep",
    domain: Annotated[str, typer.Option(help="The foci template's noun: 'Which of these DOMAIN is shown ...'.")] = (
        "choices"
    ),
    label_template: Annotated[
        str | None, typer.Option(help="clip@ miner: prompt around each label (default 'a photo of a {}.').")
    ] = None,
    device: Annotated[str, typer.Option(help="clip@ miner: device of the model.")] = "cpu",
    force: ForceOpt = False,
) -> None:
    """Rewrite every choice question's options to the truth plus the k-1 most similar wrong classes (FOCI's hard
    negatives; --miner random: random ones), shuffled with --seed; option list, answer and truth index are rewritten
    to match and the miner recorded. OUT is written whole or not at all.

    Example: ava data options --data data/ava --miner cache:dinov2 --cache cache/ --k 4 --out data/ava-hard
    """
    if data is None:
        raise typer.BadParameter("a dataset directory is required", param_hint="'--data'")
    if out is None:
        raise typer.BadParameter("an output directory is required", param_hint="'--out'")
    from ava.api import rewrite_options

    result = rewrite_options(
        data,
        out,
        miner=miner,
        k=k,
        seed=seed,
        ava=ava,
        cache=cache,
        template=template,
        domain=domain,
        label_template=label_template,
        device=device,
        force=force,
    )
    for key, n in result.rewritten.items():
        line = f"{key}: {n} questions, {result.classes[key]} classes -> {k} options ({result.miner})"
        if key in result.same_photo:
            same = result.same_photo[key]
            line += (
                f"; {same['share']:.0%} of the distractors are other objects of the question's photo (over "
                f"{same['questions']} questions on photos of several classes)"
            )
        typer.echo(line)
        if result.unplaced.get(key):
            typer.echo(
                f"{key}: {len(result.unplaced[key])} classes no object shows, ranked last: "
                + ", ".join(result.unplaced[key][:8])
                + (" ..." if len(result.unplaced[key]) > 8 else "")
            )
    for key, why in result.skipped.items():
        typer.echo(f"{key}: left as it was ({why})")
    typer.echo(f"wrote {result.out}")


@app.command("build")
def build(
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset directory to write (whole, or not at all).")],
    coco: Annotated[Path | None, typer.Option(help="COCO-style instances JSON (boxes, polygons or RLE masks).")] = None,
    images: Annotated[Path | None, typer.Option(help="Directory the COCO / text files' file names are in.")] = None,
    depth: Annotated[Path | None, typer.Option(help="Depth maps by image stem: 16-bit PNG (mm) or .npy (m).")] = None,
    depth_model: Annotated[
        str | None,
        typer.Option(
            help="A transformers depth-estimation checkpoint (hub id or dir) run once over the images; "
            "a relative-depth model gives only nearer/farther questions."
        ),
    ] = None,
    classes: Annotated[
        list[str] | None,
        typer.Option(help="Class folders: DIR with ability-named subfolders, or ABILITY=DIR (repeatable)."),
    ] = None,
    text: Annotated[Path | None, typer.Option(help="COCO-Text / TextOCR JSON (word boxes + transcriptions).")] = None,
    attributes: Annotated[
        Path | None, typer.Option(help="Raters' per-instance attributes, JSON or CSV keyed by annotation id.")
    ] = None,
    ava: AvaOpt = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option(
            help="Task-augmentation tasks (ta_...), comma-separated; 'none' for none; default: all.",
            callback=list_callback,
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of every choice the build makes.")] = 0,
    options: Annotated[
        int | None, typer.Option(help="Options per sampled-option question (default: the paper's counts).")
    ] = None,
    boxes: Annotated[bool, typer.Option("--boxes/--no-boxes", help="Draw the spatial questions' boxes.")] = True,
    test_frac: Annotated[float, typer.Option(help="Test share of each stratum.", callback=checked("test_frac"))] = 0.2,
    family: Annotated[str, typer.Option(help="Fine-grained: 'What species of FAMILY ...'.")] = "object",
    max_pairs: Annotated[int, typer.Option(help="Object pairs per image for pair questions.")] = 4,
    max_per_task: Annotated[int, typer.Option(help="Questions per task-augmentation task (0: all).")] = 2000,
    image_format: Annotated[
        str, typer.Option(help="Drawn images: auto (JPEG q95 from JPEG sources, else PNG), png or jpeg.")
    ] = "auto",
    miner: Annotated[
        str,
        typer.Option(
            help="Options of choice abilities: random or clip@<hub-id-or-dir> (FOCI hard "
            "negatives; cache:VFM only after extraction, with `ava data options`)."
        ),
    ] = "random",
    device: Annotated[str, typer.Option(help="Device of --depth-model and a clip@ --miner.")] = "cpu",
    workers: Annotated[
        int,
        typer.Option(
            help="Processes that read the images for the rules (superpixels, checks, masks) and draw "
            "and encode the questions; one per core is fastest, and the dataset is the same with "
            "any number.",
            callback=checked("workers"),
        ),
    ] = 1,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing ava dataset at --out.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Build AVA abilities and task-augmentation tasks from annotated images (docs/build.md).

    Any subset of the sources; by default every ability and task they allow is built. Prints what each rule kept
    and dropped, and why.
    """
    from ava.api import build_data

    result = build_data(
        out,
        coco=coco,
        images=images,
        depth=depth,
        depth_model=depth_model,
        miner=miner,
        device=device,
        classes=classes or [],
        text=text,
        attributes=attributes,
        ava=ava,
        tasks=[] if tasks == ["none"] else tasks,
        seed=seed,
        options=options,
        boxes=boxes,
        test_frac=test_frac,
        family=family,
        max_pairs=max_pairs,
        max_per_task=max_per_task or None,
        image_format=image_format,
        workers=workers,
        force=force,
        progress=not (quiet or as_json),
    )
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "out": str(result.out),
                    "counts": result.counts,
                    "summary": result.summary,
                    "skipped": result.skipped,
                    "seconds": round(result.seconds, 2),
                    "models": _models_used(result.sources),
                },
                indent=2,
            )
        )
        return
    _print_build(result)


def _print_build(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ava data build -> {result.out} ({result.seconds:.1f} s)")
    for col in ("ability", "considered", "kept", "train", "test", "dropped", "capped"):
        table.add_column(col, justify="left" if col == "ability" else "right")
    for row in result.summary:
        counts = result.counts.get(row["ability"], {"train": 0, "test": 0})
        table.add_row(
            row["ability"],
            str(row["considered"]),
            str(row["kept"]),
            str(counts["train"]),
            str(counts["test"]),
            str(row["dropped"]),
            str(row.get("capped", 0)),
        )
    console = Console()
    console.print(table)
    console.print("[bold]dropped, by rule, and capped[/] (n; an example record):")
    for row in result.summary:
        for r in row["reasons"]:
            example = f"; e.g. {r['example']}" if r["example"] else ""
            cap = "capped: " if r.get("kind") == "cap" else ""
            console.print(
                f"  {row['ability']}: {cap}{r['reason']} ({r['n']}{example})", highlight=False, soft_wrap=True
            )
    for key, why in result.skipped.items():
        console.print(f"not built: {key} ({why})", highlight=False, soft_wrap=True)
    for line in _models_used(result.sources):
        console.print(line, highlight=False, soft_wrap=True)


def _models_used(sources: dict[str, Any]) -> list[str]:
    """One line per model the build ran (depth model, option miner), saying when its weights are random."""
    out = []
    depth = sources.get("depth", {})
    if "model" in depth:
        rand = ", RANDOM WEIGHTS" if depth.get("random_weights") else ""
        out.append(f"depth model: {depth['model']} ({depth['kind']}{rand}; sha256 {depth['sha256'][:12]})")
    if "miner" in sources:
        out.append(f"options mined by {sources['miner']['miner']}")
    return out


@app.command("synth-sources")
def synth_sources(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write the source files to.")],
    n_images: Annotated[int, typer.Option("--images", help="Scenes to draw.", callback=checked("n"))] = 24,
    seed: Annotated[int, typer.Option(help="Seed; the same seed writes the same files.")] = 0,
    photos: Annotated[
        bool,
        typer.Option(
            "--photos",
            help="Real-style sources instead: objects cut from the "
            "photographs scikit-image and matplotlib ship, pasted on real textures "
            "(COCO JSON and JPEGs, one stored on its side with an EXIF tag).",
        ),
    ] = False,
) -> None:
    """Write synthetic scenes as the source formats `ava data build` reads (COCO JSON with masks, depth PNGs,
    class folders, text boxes, a raters' CSV) with their exact truth in truth.json; or, with --photos, real-style
    photos with COCO instances (docs/build.md, "Real photos")."""
    from ava.api import synth_sources as write

    truth = write(out, n_images=n_images, seed=seed, photos=photos)
    if photos:
        n = sum(len(r["instances"]) for r in truth["images"])
        typer.echo(f"wrote {len(truth['images'])} real-style photos with {n} instances to {out}")
        return
    typer.echo(
        f"wrote {len(truth['images'])} scenes, {len(truth['instances'])} instances, {len(truth['words'])} "
        f"words and {sum(len(v) for v in truth['classes'].values())} class-folder images to {out}"
    )
