"""`ava cache` commands: extract, ls, info, verify, push, pull, rm, gc."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ava.cli.params import AvaOpt, ThreadsOpt, checked, split_list, vfm_callback

app = typer.Typer(no_args_is_help=True)

MAX_ERRORS_SHOWN = 10
CACHE_HELP = "Cache directory, or a URL (s3://bucket/prefix, gs://..., any fsspec protocol installed)."


def _parse_layers(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    from ava.errors import AvaError

    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as e:
        raise AvaError(f"--layers {text!r}: give comma-separated integers, e.g. -2 or -2,-1") from e


@app.command("extract")
def extract_cmd(
    vfm: Annotated[
        str | None,
        typer.Option(help="VFM registry key or hf:<hub-id-or-dir> (see `ava vfm list`).", callback=vfm_callback),
    ] = None,
    data: Annotated[Path | None, typer.Option(help="Dataset directory.")] = None,
    cache: Annotated[
        str | None,
        typer.Option(
            help="Cache: a directory or an fsspec URL (s3://bucket/prefix, gs://..., file://DIR); a Zarr "
            "store, created if absent."
        ),
    ] = None,
    ava: AvaOpt = None,
    split: Annotated[str | None, typer.Option(help="Only images of this split: train or test (default both).")] = None,
    codec: Annotated[
        str | None,
        typer.Option(
            help="fp16 (default, 2 bytes per value), bf16 (2), int8 (1 + a scale per token) or int4 (0.5 + a "
            "scale per 64 values)."
        ),
    ] = None,
    layers: Annotated[str | None, typer.Option(help="Hidden layer(s), comma-separated; default -2.")] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Images per forward pass (default 32).", callback=checked("batch_size"))
    ] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda.")] = None,
    dtype: Annotated[
        str | None, typer.Option(help="Forward dtype: auto (default: bf16 on CUDA, fp32 on CPU), fp32, bf16 or fp16.")
    ] = None,
    num_workers: Annotated[
        int | None,
        typer.Option(
            help="DataLoader workers decoding images (default: sized to the machine, leaving cores to a CPU forward).",
            callback=checked("num_workers"),
        ),
    ] = None,
    preprocess: Annotated[str | None, typer.Option(help="pad (pad to square, default) or processor.")] = None,
    decode: Annotated[
        str | None,
        typer.Option(
            help="Where JPEGs are decoded: auto (default: on the VFM's GPU where torchvision can, with "
            "nvJPEG; else the DataLoader workers), workers or device. The summary says which ran."
        ),
    ] = None,
    shard_size: Annotated[
        int | None, typer.Option(help="Images per shard (default 64).", callback=checked("shard_size"))
    ] = None,
    key: Annotated[str | None, typer.Option(help="Fixed group name instead of the spec hash.")] = None,
    config: Annotated[Path | None, typer.Option(help="TOML file with any of these options.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    threads: ThreadsOpt = None,
    trust_remote_code: Annotated[
        bool,
        typer.Option(
            "--trust-remote-code",
            help="Run the checkpoint's own Python code (remote-code repositories). Off by default: without it no "
            "checkpoint code ever runs. Recorded in the cache spec.",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan (group, rows, bytes, free space) and write nothing.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Write even when the size before compression exceeds the free space."),
    ] = False,
) -> None:
    """Extract frozen-VFM features of a dataset's images into the compressed cache.

    Before the first row it prints what it will write (rows x tokens x dim x bytes per value of the codec, views,
    index) and the free space at a local destination; a run that does not fit is refused (one line naming both
    figures and the codecs that would fit) unless --force. Resumable: re-running skips finished rows. Under torchrun
    each rank writes its own shards. Images that cannot be read are listed by sample id and the exit code is 1.
    """
    from rich.console import Console

    from ava.api import extract

    result = extract(
        vfm,
        data,
        cache,
        ava=split_list(ava),
        split=split,
        codec=codec,
        layers=_parse_layers(layers),
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        num_workers=num_workers,
        preprocess=preprocess,
        shard_size=shard_size,
        key=key,
        config=config,
        progress=False if quiet else None,
        trust_remote_code=trust_remote_code,
        threads=threads or "auto",
        decode=decode,
        dry_run=dry_run,
        force=force,
    )
    summary = result.summary
    console, err = Console(), Console(stderr=True)
    if summary.get("dry_run"):
        if summary["rank"] == 0:
            console.print(
                "\n".join(summary["plan"]["text"]) + "\ndry run: nothing written", highlight=False, soft_wrap=True
            )
        return
    if summary["rank"] == 0:
        who = f" by rank 0 of {summary['world_size']}" if summary["world_size"] > 1 else ""
        console.print(_summary(summary, who), highlight=False, soft_wrap=True)
    for msg in summary["failed"][:MAX_ERRORS_SHOWN]:
        err.print(f"[red]failed[/] {msg}", highlight=False)
    if summary["failed"]:
        raise typer.Exit(1)


def _summary(summary: dict[str, Any], who: str) -> str:
    """One line: what was extracted into which cache group (no rate when nothing was extracted)."""
    head = f"{summary['vfm']} -> {summary['cache']} (group {summary['key']}, {summary['codec']}): "
    failed = f", {len(summary['failed'])} failed" if summary["failed"] else ""
    if not summary["extracted"]:
        return head + f"nothing to extract, {summary['already_done']} rows already done{failed}"
    done = f", {summary['already_done']} already done" if summary["already_done"] else ""
    decoded = f", JPEGs decoded by {summary['decoder']}" if summary.get("decoder") == "nvjpeg" else ""
    return head + f"{summary['extracted']} extracted{who}{done}{failed} ({summary['images_per_s']} img/s{decoded})"


def _size(n: int) -> str:
    """Bytes in decimal units (``1.2 GB``), as every ``ava cache`` command prints them (ava.cache.plan.size)."""
    from ava.cache.plan import size

    return size(n)


def _table(groups: list[dict[str, Any]], title: str) -> Any:
    """One row per group, narrow enough for an 80-column terminal (layers, dtype, full spec: ``--json``)."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in ("key", "vfm", "codec", "T x D", "done/rows", "on disk", "vs fp16"):
        table.add_column(col, no_wrap=col != "vfm", min_width=10 if col == "vfm" else None)
    for g in groups:
        vfm = g["vfm"] + (" (random)" if g["random_weights"] else "")
        ratio = f"{g['ratio_to_fp16']:.2f}x" if g["ratio_to_fp16"] is not None else "-"
        table.add_row(
            g["key"],
            vfm,
            g["codec"],
            f"{g['num_tokens']}x{g['dim']}",
            f"{g['rows_done']}/{g['rows']}",
            _size(g["bytes"]),
            ratio,
        )
    return table


@app.command("ls")
def ls(cache: Annotated[str, typer.Argument(help=CACHE_HELP)]) -> None:
    """List the cache groups (one per VFM and spec) with their progress."""
    from rich.console import Console

    from ava.cache import list_cache

    Console().print(_table(list_cache(cache), str(cache)))


@app.command("info")
def info(
    cache: Annotated[str, typer.Argument(help=CACHE_HELP)],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (with each group's full spec).")] = False,
    digest: Annotated[bool, typer.Option(help="Compute the content digest (reads every finished row).")] = True,
) -> None:
    """Rows, bytes on disk, ratio to raw fp16, codec and content digest of every cache group."""
    from rich.console import Console

    from ava.cache import cache_info

    result = cache_info(cache, digest=digest, progress=not as_json)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    console = Console()
    console.print(_table(result["groups"], f"{cache} ({_size(result['bytes'])})"))
    for g in result["groups"] if digest else []:
        console.print(f"{g['key']} digest {g['digest']}", highlight=False, soft_wrap=True)


@app.command("verify")
def verify(
    cache: Annotated[str, typer.Argument(help=CACHE_HELP)],
    data: Annotated[
        Path | None, typer.Option(help="Also check every image of this dataset is present and done.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    repair: Annotated[
        bool,
        typer.Option("--repair", help="Mark damaged or missing rows for re-extraction (then `ava cache extract`)."),
    ] = False,
) -> None:
    """Check the cache: spec consistent, every chunk of every done row on disk and matching its checksum, every row
    done, no NaN/inf, every image of --data.

    Exit code 1 when any problem is found. With --repair, rows whose data is damaged or missing (a checksum mismatch,
    a deleted, empty or truncated shard, a chunk missing from its shard, a garbage done chunk or rows.json) are marked
    not done, so that `ava cache extract` with the same options recomputes exactly those rows.
    """
    from rich.console import Console

    from ava.cache import verify_cache

    report = verify_cache(cache, data=data, progress=not quiet, repair=repair)
    console = Console()
    for key, g in report["groups"].items():
        status = "[green]ok[/]" if not g["problems"] else f"[red]{len(g['problems'])} problem(s)[/]"
        console.print(f"{key} ({g['vfm']}): {status}")
    for p in report["problems"]:
        Console(stderr=True).print(f"[red]problem[/] {p}", highlight=False)
    for note in report.get("notes", []):
        console.print(f"[yellow]note[/] {note}", highlight=False)
    for key, n in report.get("repaired", {}).items():
        vfm = report["groups"][key]["vfm"]
        console.print(
            f"repaired {key}: {n} row(s) marked for re-extraction; run `ava cache extract --vfm {vfm} "
            f"--cache {cache} --data <the dataset>` to recompute only them",
            highlight=False,
        )
    if not report["ok"]:
        raise typer.Exit(1)


def _copy(src: str, dst: str, threads: int, verify: bool, quiet: bool, force: bool) -> None:
    from rich.console import Console

    from ava.cache.transfer import copy_cache

    r = copy_cache(src, dst, threads=threads, verify=verify, progress=not quiet, force=force)
    rate = f", {r['mb_per_s']} MB/s" if r["copied"] else ""
    line = (
        f"{r['src']} -> {r['dst']}: {r['copied']} object(s) copied ({_size(r['bytes'])}{rate}), "
        f"{r['skipped']} already there and identical (size and MD5), skipped"
    )
    if r["replaced"]:
        line += f"; replaced group(s) {', '.join(r['replaced'])} (--force)"
    Console().print(line, highlight=False, soft_wrap=True)
    for key, digest in r["groups"].items():
        Console().print(f"{key} digest {digest} (equal on both sides)", highlight=False, soft_wrap=True)


ThreadsCopyOpt = Annotated[int, typer.Option("--parallel", help="Objects copied at once.", min=1)]
VerifyOpt = Annotated[bool, typer.Option(help="Compare every group's content digest on both sides afterwards.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
CopyForceOpt = Annotated[
    bool,
    typer.Option(
        "--force", help="Replace a destination group that holds features of other images (another dataset's cache)."
    ),
]


@app.command("push")
def push(
    local: Annotated[str, typer.Argument(help="Local cache directory.")],
    url: Annotated[str, typer.Argument(help="Destination URL (s3://bucket/prefix, ...).")],
    parallel: ThreadsCopyOpt = 16,
    verify: VerifyOpt = True,
    quiet: QuietOpt = False,
    force: CopyForceOpt = False,
) -> None:
    """Copy a local cache to object storage, sending only what differs (an object there with the same size and MD5
    is skipped), each group committed last, then verified by content digest. A group there holding another
    dataset's features is refused unless --force."""
    _copy(local, url, parallel, verify, quiet, force)


@app.command("pull")
def pull(
    url: Annotated[str, typer.Argument(help="Source URL (s3://bucket/prefix, ...).")],
    local: Annotated[str, typer.Argument(help="Local cache directory.")],
    parallel: ThreadsCopyOpt = 16,
    verify: VerifyOpt = True,
    quiet: QuietOpt = False,
    force: CopyForceOpt = False,
) -> None:
    """Copy a cache from object storage to a local directory, sending only what differs, each group committed last,
    then verified by content digest. A local group holding another dataset's features is refused unless --force."""
    _copy(url, local, parallel, verify, quiet, force)


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Remove without asking.")]


def _ask(yes: bool) -> Any:
    """The confirm callback of rm/gc: print what would be removed, then ask (unless --yes)."""

    def confirm(planned: list[Any]) -> bool:
        from ava.cache.plan import size

        typer.echo(f"would remove {len(planned)} group(s), {size(sum(r.bytes for r in planned))}:")
        for r in planned:
            typer.echo(f"  {r.line()}")
        return yes or typer.confirm("remove them?", default=False)

    return confirm


def _removed(result: Any) -> None:
    from ava.cache.plan import size

    for r in result.held:
        typer.echo(f"kept {r.key}: {r.held}", err=True)
    if not result.planned:
        typer.echo(f"{result.cache}: nothing to remove")
        return
    if not result.confirmed:
        typer.echo("nothing removed")
        raise typer.Exit(1)
    typer.echo(
        f"removed {len(result.removed)} group(s) from {result.cache} ({size(result.bytes)}): "
        f"{', '.join(result.removed)}"
    )


@app.command("rm")
def rm(
    cache: Annotated[str, typer.Argument(help=CACHE_HELP)],
    keys: Annotated[list[str], typer.Argument(help="Key(s) of the group(s) to remove (`ava cache ls` lists them).")],
    yes: YesOpt = False,
) -> None:
    """Remove cache groups by key: all of them or none. Prints what it would remove and asks unless --yes; a group
    that another job holds (an extraction writing it) is never removed."""
    from ava.cache.remove import remove_groups

    _removed(remove_groups(cache, keys, confirm=_ask(yes)))


@app.command("gc")
def gc(
    cache: Annotated[str, typer.Argument(help=CACHE_HELP)],
    runs: Annotated[
        list[str] | None,
        typer.Option(
            "--runs",
            help="Run directories (or folders of them, e.g. a fingerprint's --out); groups that "
            "none of them was trained on are removed too. Repeat for several.",
        ),
    ] = None,
    yes: YesOpt = False,
) -> None:
    """Remove the groups no one can use: those cut off while being made, and with --runs those no run refers to.
    Prints what it would remove and asks unless --yes; groups held by another job are kept."""
    from ava.cache.remove import collect_garbage

    _removed(collect_garbage(cache, runs, confirm=_ask(yes)))
