"""`ava head`: train and evaluate heads (LLM, probes, kNN) on cached VFM features.

Every command calls one library function. ``train`` is generic over :data:`ava.heads.HEADS`: the options the
user sets (and a ``--config`` TOML file) become the chosen head's config dataclass; an option the head has no
field for is refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ava.cli.params import PANEL_RESOURCES, ThreadsOpt, checked, list_callback, threads_setup, vfm_callback

app = typer.Typer(no_args_is_help=True)

_O = typer.Option


def _set_options(options: dict[str, Any]) -> dict[str, Any]:
    """Only the options the user gave (None and empty lists mean "not set")."""
    return {k: v for k, v in options.items() if v is not None and v != []}


def build_config(head: str, config_file: Path | None, options: dict[str, Any]) -> tuple[Any, Any]:
    """(HeadSpec, config): the head's config from defaults < TOML file < the options the user set."""
    from ava.api import head_config

    return head_config(head, config_file, **options)


def print_results(results: dict[str, Any] | None, where: Path) -> None:
    """A table of per-ability scores, and where the files are (printed once, by rank 0 under torchrun)."""
    import os

    if os.environ.get("RANK", "0") != "0":
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if results:
        run = results.get("run") or {}
        table = Table(
            title=f"{run.get('head', '')} on {run.get('vfm', '')}  (split {results['split']['name']}"
            f"{', decode ' + results['decode'] if results.get('decode') else ''})"
        )
        for col in ("ability", "metric", "value", "n", "unparsed"):
            table.add_column(col, justify="left" if col in ("ability", "metric") else "right")
        for key, r in results["abilities"].items():
            arrow = "↑" if r["higher_is_better"] else "↓"
            table.add_row(key, f"{r['metric']} {arrow}", f"{r['value']:.4f}", str(r["n"]), str(r["n_unparsed"]))
        console.print(table)
        if run.get("random_weights"):
            console.print("[yellow]random weights[/] (VFM or LLM): a control or a test, not a real result")
    from ava.heads.rundir import shown

    console.print(f"run directory: [bold]{shown(where)}[/]")


P_COMMON, P_TRAIN, P_LLM, P_KNN, P_PROBE = "Common", "Training (llm, probes)", "LLM head", "kNN head", "Probe heads"
P_RES = PANEL_RESOURCES


def _num(name: str, help: str, panel: str = P_COMMON) -> Any:
    return _O(help=help, callback=checked(name), rich_help_panel=panel, show_default=False)


def _check_required(cfg: Any, config_file: Path | None) -> None:
    from ava.api import check_required

    check_required(cfg, config_file)


@app.command("train")
def train(
    head: Annotated[
        str, _O(help="Head: llm, probe-linear, probe-attn or knn (see `ava head list`).", rich_help_panel=P_COMMON)
    ] = "llm",
    ava: Annotated[
        list[str] | None,
        _O(
            help="Abilities (repeat or comma-separate); default: every ability in --data.",
            callback=list_callback,
            rich_help_panel=P_COMMON,
        ),
    ] = None,
    vfm: Annotated[
        str | None,
        _O(help="VFM key (the cache's VFM). Required.", rich_help_panel=P_COMMON, callback=vfm_callback),
    ] = None,
    data: Annotated[
        str | None, _O(help="Dataset directory (already split). Required.", rich_help_panel=P_COMMON)
    ] = None,
    cache: Annotated[
        str | None,
        _O(
            help="Feature cache: a directory or a URL, s3://bucket/prefix (`ava cache extract`). Required.",
            rich_help_panel=P_COMMON,
        ),
    ] = None,
    out: Annotated[
        str | None,
        _O(
            "--out",
            "-o",
            help="Run directory to write (re-running the same command resumes). Required.",
            rich_help_panel=P_COMMON,
        ),
    ] = None,
    config: Annotated[
        Path | None, _O("--config", help="TOML file with config fields; options override it.", rich_help_panel=P_COMMON)
    ] = None,
    seed: Annotated[int | None, _O(help="Random seed (default 0).", rich_help_panel=P_COMMON)] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda, cuda:1 ...", rich_help_panel=P_RES)] = None,
    layer: Annotated[
        int | None,
        _O(
            help="Cached VFM layer to use (default: the cache's first; probes try last vs all).",
            rich_help_panel=P_COMMON,
        ),
    ] = None,
    split: Annotated[
        str | None, _O(help="Split evaluated after training (default test).", rich_help_panel=P_COMMON)
    ] = None,
    eval_after: Annotated[
        bool | None,
        _O(
            "--eval-after/--no-eval-after",
            help="Evaluate after training (default: yes).",
            rich_help_panel=P_COMMON,
            show_default=False,
        ),
    ] = None,
    max_train: Annotated[int | None, _num("max_train", "Cap on training samples per ability (quick runs).")] = None,
    batch_size: Annotated[
        int | None,
        _num(
            "batch_size",
            "Batch size. llm: the global batch (default 16); "
            "probes: 128 mean-pooled / 64 tokens; knn: queries per search (4096).",
            P_TRAIN,
        ),
    ] = None,
    epochs: Annotated[
        int | None,
        _num(
            "epochs",
            "Epochs. llm: 10 (20 for localization); probes: enough for ~500 optimizer steps. Not for knn.",
            P_TRAIN,
        ),
    ] = None,
    lr: Annotated[
        float | None,
        _num(
            "lr",
            "Learning rate. llm: 1e-4; probes: one rate instead of the grid "
            "picked on a 10% held-out slice of train (linear 1e-3,3e-3,1e-2,3e-2; attn "
            "3e-3,1e-2). Not for knn.",
            P_TRAIN,
        ),
    ] = None,
    llm: Annotated[
        str | None, _O(help="LLM: registry name, hub id or local dir (default qwen2-0.5b).", rich_help_panel=P_LLM)
    ] = None,
    joint: Annotated[
        bool | None,
        _O("--joint", help="One joint head on all abilities (default: one head per ability).", rich_help_panel=P_LLM),
    ] = None,
    grad_accum: Annotated[int | None, _num("grad_accum", "Gradient accumulation steps (default 1).", P_LLM)] = None,
    lora_r: Annotated[int | None, _num("lora_r", "LoRA rank (default 128; alpha = 2 r).", P_LLM)] = None,
    features: Annotated[
        str | None, _O(help="cache (default) or online (VFM on every batch).", rich_help_panel=P_LLM)
    ] = None,
    trust_remote_code: Annotated[
        bool | None,
        _O(
            "--trust-remote-code",
            help="With --features online: let the VFM checkpoint run its own Python code (remote-code "
            "repositories). Off by default: without it no checkpoint code runs. Recorded in the run.",
            rich_help_panel=P_LLM,
            show_default=False,
        ),
    ] = None,
    init: Annotated[
        str | None, _O(help="Warm start: an align/train run or a stage-2 directory.", rich_help_panel=P_LLM)
    ] = None,
    dtype: Annotated[str | None, _O(help="auto (bf16 on GPU), fp32 or bf16.", rich_help_panel=P_LLM)] = None,
    max_eval: Annotated[int | None, _num("max_eval", "Cap on evaluated samples per ability.", P_LLM)] = None,
    decode: Annotated[
        str | None, _O(help="Evaluation after training: generate (default) or score.", rich_help_panel=P_LLM)
    ] = None,
    gradient_checkpointing: Annotated[
        bool | None, _O("--gradient-checkpointing", help="Save memory.", rich_help_panel=P_LLM, show_default=False)
    ] = None,
    num_workers: Annotated[int | None, _num("num_workers", "DataLoader workers (default 0).", P_LLM)] = None,
    compile_: Annotated[
        bool | None,
        _O(
            "--compile/--no-compile",
            help="torch.compile the LLM's decoder layers (default: on with CUDA, off on CPU; falls back to eager "
            "where this PyTorch cannot compile).",
            rich_help_panel=P_LLM,
            show_default=False,
        ),
    ] = None,
    pack: Annotated[
        bool | None,
        _O(
            "--pack/--no-pack",
            help="llm: pack a batch's samples into one row without padding (varlen flash attention on CUDA, an "
            "exact per-sample attention elsewhere; default: on).",
            rich_help_panel=P_LLM,
            show_default=False,
        ),
    ] = None,
    k: Annotated[
        list[str] | None,
        _O(
            help="Neighbour counts to choose from (repeat or comma-separate; default "
            "1,5,20, picked with the pool on train, see --selection).",
            callback=checked("k", as_list=True, convert=int),
            rich_help_panel=P_KNN,
            show_default=False,
        ),
    ] = None,
    pools: Annotated[
        list[str] | None,
        _O(
            help="Pooled views to choose from: mean or gridN (N x N cell means "
            "beside the mean), repeat or comma-separate. Default: knn "
            "mean,grid2,grid4; probe-linear mean,grid4.",
            callback=checked("pools", as_list=True),
            rich_help_panel=P_KNN,
            show_default=False,
        ),
    ] = None,
    selection: Annotated[
        str | None,
        _O(
            help="How k and the pool are picked: auto (default: loo up to --loo-max-rows train rows per ability, "
            "subsample above), loo (every train row answered by all the others: N x N similarities), subsample "
            "(--heldout-rows train rows, stratified by answer and deterministic, each answered by all the other "
            "train rows) or heldout (a 10% slice answered by the other 90%).",
            callback=checked("selection"),
            rich_help_panel=P_KNN,
            show_default=False,
        ),
    ] = None,
    loo_max_rows: Annotated[
        int | None,
        _num("loo_max_rows", "Train rows per ability up to which --selection auto uses loo (default 4000).", P_KNN),
    ] = None,
    heldout_rows: Annotated[
        int | None,
        _num(
            "heldout_rows",
            "Train rows answered when the pick is a subsample (--selection subsample, or auto above "
            "--loo-max-rows; default 1000).",
            P_KNN,
        ),
    ] = None,
    force: Annotated[
        bool | None,
        _O(
            "--force",
            help="Replace the run in --out (another head, VFM or config) once this one has finished.",
            rich_help_panel=P_COMMON,
            show_default=False,
        ),
    ] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Train a head on cached features of one VFM, then evaluate it on the test split.

    Defaults per head: probe-linear and probe-attn pick the learning rate (and probe-linear the pooled view) on a
    10% held-out slice of train, ~500 optimizer steps; knn picks k and the pooled view by leave-one-out over
    train (cosine neighbours), above 4000 train rows on a stratified subsample of 1000 of them; llm uses the
    paper's stage-3 settings (lr 1e-4, batch 16, LoRA r 128).
    Writes results_<split>.json and predictions_<split>.jsonl into --out.
    """
    from ava.api import train_head

    result = train_head(
        head,
        config=config,
        threads=threads or "auto",
        ava=ava,
        vfm=vfm,
        data=data,
        cache=cache,
        out=out,
        seed=seed,
        device=device,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        layer=layer,
        split=split,
        eval_after=eval_after,
        max_train=max_train,
        llm=llm,
        joint=joint,
        grad_accum=grad_accum,
        lora_r=lora_r,
        features=features,
        init=init,
        dtype=dtype,
        max_eval=max_eval,
        decode=decode,
        gradient_checkpointing=gradient_checkpointing,
        num_workers=num_workers,
        k=k,
        pools=pools,
        selection=selection,
        loo_max_rows=loo_max_rows,
        heldout_rows=heldout_rows,
        compile=compile_,
        pack=pack,
        trust_remote_code=trust_remote_code,
        force=force,
    )
    print_results(result.results, result.run_dir)


@app.command("eval")
def evaluate(
    run: Annotated[Path, _O(help="A run directory written by `ava head train`.")],
    split: Annotated[str, _O(help="Split to evaluate.")] = "test",
    decode: Annotated[
        str | None,
        _O(
            help="llm only: generate (greedy; writes results_<split>.json) or score "
            "(option log-likelihood; writes results_<split>_score.json).",
            rich_help_panel=P_LLM,
        ),
    ] = None,
    max_eval: Annotated[int | None, _num("max_eval", "llm only: cap on evaluated samples per ability.", P_LLM)] = None,
    batch_size: Annotated[int | None, _num("batch_size", "Evaluation batch size.")] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda ...", rich_help_panel=P_RES)] = None,
    trust_remote_code: Annotated[
        bool,
        _O(
            "--trust-remote-code",
            help="llm only, a run trained with it (online features): let the VFM checkpoint run its own Python "
            "code again. Never taken from the run directory: a recorded value must match this flag.",
            rich_help_panel=P_LLM,
        ),
    ] = False,
    threads: ThreadsOpt = None,
) -> None:
    """Evaluate a trained head on a split; writes results_<split>.json and predictions_<split>.jsonl
    (llm with --decode score: results_<split>_score.json and predictions_<split>_score.jsonl).

    The run's data and cache must be those it was trained on (recorded in run.json); otherwise nothing is written."""
    from ava.api import evaluate_head

    result = evaluate_head(
        run,
        split=split,
        decode=decode,
        max_eval=max_eval,
        batch_size=batch_size,
        device=device,
        trust_remote_code=trust_remote_code,
        threads=threads or "auto",
    )
    print_results(result.results, run)


@app.command("align")
def align(
    vfm: Annotated[str | None, _O(help="VFM key. Required.", callback=vfm_callback)] = None,
    data: Annotated[str | None, _O(help="Captions dataset dir made by `ava head import-captions`. Required.")] = None,
    cache: Annotated[str | None, _O(help="Feature cache holding the caption images. Required.")] = None,
    out: Annotated[str | None, _O("--out", "-o", help="Run directory to write. Required.")] = None,
    config: Annotated[Path | None, _O("--config", help="TOML file with config fields.")] = None,
    llm: Annotated[str | None, _O(help="LLM (default qwen2-0.5b).")] = None,
    epochs: Annotated[int | None, _num("epochs", "Epochs (default 1).")] = None,
    lr: Annotated[float | None, _num("lr", "Learning rate (default 1e-3, the paper's stage 1).")] = None,
    batch_size: Annotated[
        int | None, _num("batch_size", "Global batch size (default 256, the paper's stage 1: 8 x 32).")
    ] = None,
    features: Annotated[str | None, _O(help="cache (default) or online.")] = None,
    trust_remote_code: Annotated[
        bool | None,
        _O(
            "--trust-remote-code",
            help="With --features online: let the VFM checkpoint run its own Python code "
            "(off by default; recorded in the run).",
            show_default=False,
        ),
    ] = None,
    max_train: Annotated[int | None, _num("max_train", "Cap on caption pairs.")] = None,
    seed: Annotated[int | None, _O(help="Random seed.")] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda ...")] = None,
    dtype: Annotated[str | None, _O(help="auto, fp32 or bf16.")] = None,
    force: Annotated[bool | None, _O("--force", help="Replace the run in --out once this one has finished.")] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Pre-train the connector alone on image-caption pairs (the paper's stage 1); use with `train --init`."""
    from ava.config import load_config
    from ava.heads.llm import AlignConfig
    from ava.heads.llm import align as run_align

    given = _set_options(
        dict(
            vfm=vfm,
            data=data,
            cache=cache,
            out=out,
            llm=llm,
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            features=features,
            trust_remote_code=trust_remote_code,
            max_train=max_train,
            seed=seed,
            device=device,
            dtype=dtype,
            force=force,
        )
    )
    cfg = load_config(AlignConfig, config, **given)
    _check_required(cfg, config)
    threads_setup(threads, cfg.num_workers)
    run_dir = run_align(cfg)
    print_results(None, run_dir)


@app.command("instruct")
def instruct(
    vfm: Annotated[str | None, _O(help="VFM key. Required.", callback=vfm_callback)] = None,
    data: Annotated[
        str | None, _O(help="Conversations dataset dir made by `ava head import-instructions`. Required.")
    ] = None,
    cache: Annotated[str | None, _O(help="Feature cache holding the conversations' images. Required.")] = None,
    out: Annotated[
        str | None, _O("--out", "-o", help="Directory to write: a stage-2 checkpoint `train --init` takes. Required.")
    ] = None,
    init: Annotated[str | None, _O(help="The stage-1 run (`ava head align`) whose connector to start from.")] = None,
    config: Annotated[Path | None, _O("--config", help="TOML file with config fields.")] = None,
    llm: Annotated[str | None, _O(help="LLM (default qwen2-0.5b).")] = None,
    epochs: Annotated[int | None, _num("epochs", "Epochs (default 1).")] = None,
    lr: Annotated[float | None, _num("lr", "Learning rate (default 2e-5, the paper's stage 2).")] = None,
    batch_size: Annotated[
        int | None, _num("batch_size", "Global batch size (default 128, the paper's stage 2: 8 x 16).")
    ] = None,
    grad_accum: Annotated[
        int | None, _num("grad_accum", "Gradient accumulation steps (default: micro-batches of 16).")
    ] = None,
    max_train: Annotated[int | None, _num("max_train", "Cap on conversations (of each kind).")] = None,
    seed: Annotated[int | None, _O(help="Random seed.")] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda ...")] = None,
    dtype: Annotated[str | None, _O(help="auto, fp32 or bf16.")] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Tune the whole LLM and the connector on instruction conversations (the paper's stage 2), from the cache."""
    from ava.config import load_config
    from ava.heads.llm import InstructConfig
    from ava.heads.llm import instruct as run_instruct

    given = _set_options(
        dict(
            vfm=vfm,
            data=data,
            cache=cache,
            out=out,
            init=init,
            llm=llm,
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            grad_accum=grad_accum,
            max_train=max_train,
            seed=seed,
            device=device,
            dtype=dtype,
        )
    )
    cfg = load_config(InstructConfig, config, **given)
    _check_required(cfg, config)
    threads_setup(threads, cfg.num_workers)
    print_results(None, run_instruct(cfg))


@app.command("import-instructions")
def import_instructions(
    instructions: Annotated[Path, typer.Argument(help="LLaVA-665K-style JSON: [{id, image?, conversations}].")],
    images: Annotated[Path, _O(help="Directory the JSON's image paths are relative to.")],
    out: Annotated[Path, _O("--out", "-o", help="Dataset directory to write (samples/instructions.jsonl).")],
    max_items: Annotated[int | None, _num("max_items", "Import only the first N conversations.")] = None,
) -> None:
    """Import instruction conversations for stage 2 (`ava cache extract --ava instructions` reads their images)."""
    from rich.console import Console

    from ava.heads.llm.stage2 import import_instructions as run_import

    n_image, n_text = run_import(instructions, images, out, max_items=max_items)
    Console().print(f"{n_image} conversations with an image, {n_text} without -> [bold]{out}[/]")


@app.command("import-captions")
def import_captions(
    captions: Annotated[Path, typer.Argument(help="LLaVA-558K-style JSON: [{id, image, conversations}].")],
    images: Annotated[Path, _O(help="Directory the JSON's image paths are relative to.")],
    out: Annotated[Path, _O("--out", "-o", help="Dataset directory to write (samples/captions.jsonl).")],
    max_pairs: Annotated[int | None, _num("max_pairs", "Import only the first N pairs.")] = None,
) -> None:
    """Import image-caption pairs into a dataset directory that `ava cache extract --ava captions` can read."""
    from rich.console import Console

    from ava.heads.llm.align import import_captions as run_import

    n = run_import(captions, images, out, max_pairs=max_pairs)
    Console().print(f"{n} caption pairs -> [bold]{out}[/]")


@app.command("list")
def list_heads() -> None:
    """The registered heads and LLMs."""
    from rich.console import Console
    from rich.table import Table

    from ava.heads import HEADS
    from ava.heads.llm.llms import LLMS

    console = Console()
    table = Table(title="heads")
    table.add_column("name")
    table.add_column("aliases")
    table.add_column("description")
    for name in HEADS:
        try:
            desc = HEADS.get(name).description
        except Exception as e:  # a head whose module cannot load is listed with the reason
            desc = f"[red]unavailable: {e}[/]"
        if HEADS.package_of(name):
            desc += f" (plugin from {HEADS.package_of(name)})"
        table.add_row(name, ", ".join(HEADS.aliases_of(name)), desc)
    console.print(table)
    from rich.markup import escape

    for problem in HEADS.plugin_errors:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[yellow]warning:[/] {escape(str(problem))}")
    llms = Table(title="LLMs (--llm; or a hub id or a local directory)")
    for col in ("name", "source", "description"):
        llms.add_column(col)
    for name in LLMS:
        spec = LLMS.get(name)
        llms.add_row(name, spec.hub_id or "random weights (built locally)", spec.description)
    console.print(llms)


# -- the connector probe (ava.report.connector) -----------------------------------------------------------------
@app.command("probe-connector")
def probe_connector(
    run: Annotated[Path, typer.Option("--run", help="A finished LLM-head run directory (with connector.safetensors).")],
    head: Annotated[
        list[str] | None,
        typer.Option("--head", help="Probes: probe-linear (default), knn.", callback=list_callback, show_default=False),
    ] = None,
    device: Annotated[str, typer.Option(help="Where the probes train: auto, cpu, cuda ...")] = "auto",
    threads: ThreadsOpt = None,
) -> None:
    """The same probe on the LLM head's connector outputs and on the raw VFM features it was given, per ability:
    where the connector scores lower, the ability was lost in the connector (the paper's section 6)."""
    threads_setup(threads)
    from rich.console import Console
    from rich.table import Table

    from ava.report.connector import DEFAULT_HEADS
    from ava.report.connector import probe_connector as run_probe

    result = run_probe(run, heads=tuple(head or DEFAULT_HEADS), device=device)
    table = Table(
        title=f"connector probe of {run} (VFM {result.vfm}; raw {result.dims['raw']}-d, connector "
        f"{result.dims['connector']}-d)"
    )
    for col in ("ability", "probe", "metric", "raw features", "connector outputs", "change"):
        table.add_column(col, justify="left" if col in ("ability", "probe", "metric") else "right")
    for row in result.rows():
        table.add_row(*row)
    Console().print(table)
