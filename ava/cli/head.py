"""`ava head`: train and evaluate heads (LLM, probes, kNN) on cached VFM features.

Every command calls one library function. ``train`` is generic over :data:`ava.heads.HEADS`: the options the
user sets (and a ``--config`` TOML file) become the chosen head's config dataclass; an option the head has no
field for is refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True)

_O = typer.Option


def _set_options(options: dict[str, Any]) -> dict[str, Any]:
    """Only the options the user gave (None and empty lists mean "not set")."""
    return {k: v for k, v in options.items() if v is not None and v != []}


def build_config(head: str, config_file: Path | None, options: dict[str, Any]) -> tuple[Any, Any]:
    """(HeadSpec, config): the head's config from defaults < TOML file < the options the user set."""
    import dataclasses

    from ava.config import load_config
    from ava.errors import AvaError
    from ava.heads import HEADS

    spec = HEADS.get(head)
    fields = {f.name for f in dataclasses.fields(spec.config_cls)}
    given = _set_options(options)
    foreign = sorted(k for k in given if k not in fields)
    if foreign:
        flags = ", ".join("--" + k.replace("_", "-") for k in foreign)
        raise AvaError(
            f"head {spec.name!r} has no option {flags}; its config fields (as --options, or in a --config TOML "
            f"file) are: {', '.join(sorted(fields))}"
        )
    return spec, load_config(spec.config_cls, config_file, **given)


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
    console.print(f"run directory: [bold]{where}[/]")


def _latest_results(run_dir: Path, split: str) -> dict[str, Any] | None:
    import json

    path = run_dir / f"results_{split}.json"
    return json.loads(path.read_text()) if path.is_file() else None


@app.command("train")
def train(
    head: Annotated[str, _O(help="Head: llm, probe-linear, probe-attn or knn (see `ava head list`).")] = "llm",
    ava: Annotated[list[str] | None, _O(help="Ability key (repeatable); default: every ability in --data.")] = None,
    vfm: Annotated[str | None, _O(help="VFM key (the cache's VFM).")] = None,
    data: Annotated[str | None, _O(help="Dataset directory (already split).")] = None,
    cache: Annotated[str | None, _O(help="Feature cache directory (`ava cache extract`).")] = None,
    out: Annotated[str | None, _O(help="Run directory to write (re-running the same command resumes).")] = None,
    config: Annotated[Path | None, _O("--config", help="TOML file with config fields; options override it.")] = None,
    seed: Annotated[int | None, _O(help="Random seed.")] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda, cuda:1 ...")] = None,
    epochs: Annotated[int | None, _O(help="Epochs (LLM default: 10, 20 for localization).")] = None,
    lr: Annotated[float | None, _O(help="Learning rate (LLM default: 1e-4).")] = None,
    batch_size: Annotated[int | None, _O(help="Global batch size (LLM default: 16).")] = None,
    layer: Annotated[int | None, _O(help="Cached VFM layer to use (default: the cache's first).")] = None,
    split: Annotated[str | None, _O(help="Split evaluated after training.")] = None,
    eval_after: Annotated[bool | None, _O("--eval-after/--no-eval-after", help="Evaluate after training.")] = None,
    max_train: Annotated[int | None, _O(help="Cap on training samples per ability (quick runs).")] = None,
    llm: Annotated[str | None, _O(help="[llm] LLM: registry name, hub id or local dir (default qwen2-0.5b).")] = None,
    grad_accum: Annotated[int | None, _O(help="[llm] Gradient accumulation steps.")] = None,
    lora_r: Annotated[int | None, _O(help="[llm] LoRA rank (default 128; alpha = 2 r).")] = None,
    features: Annotated[str | None, _O(help="[llm] cache (default) or online (VFM on every batch).")] = None,
    init: Annotated[str | None, _O(help="[llm] Warm start: an align/train run or a stage-2 directory.")] = None,
    dtype: Annotated[str | None, _O(help="[llm] auto (bf16 on GPU), fp32 or bf16.")] = None,
    max_eval: Annotated[int | None, _O(help="[llm] Cap on evaluated samples per ability.")] = None,
    decode: Annotated[str | None, _O(help="[llm] Evaluation after training: generate or score.")] = None,
    gradient_checkpointing: Annotated[bool | None, _O("--gradient-checkpointing", help="[llm] Save memory.")] = None,
    num_workers: Annotated[int | None, _O(help="[llm] DataLoader workers.")] = None,
    k: Annotated[list[int] | None, _O(help="[knn] Neighbours (repeatable: candidates chosen on held-out).")] = None,
    pools: Annotated[
        list[str] | None, _O(help="[probe-linear, knn] Pooled views to choose from: mean, gridN (repeatable).")
    ] = None,
) -> None:
    """Train a head on cached features of one VFM, then evaluate it on the test split."""
    options = dict(
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
    )
    spec, cfg = build_config(head, config, options)
    run_dir = Path(spec.train(cfg))
    split_name = getattr(cfg, "split", "test")
    suffix = "_score" if getattr(cfg, "decode", "generate") == "score" else ""
    print_results(_latest_results(run_dir, split_name + suffix), run_dir)


@app.command("eval")
def evaluate(
    run: Annotated[Path, _O(help="A run directory written by `ava head train`.")],
    split: Annotated[str, _O(help="Split to evaluate.")] = "test",
    decode: Annotated[str | None, _O(help="[llm] generate (greedy) or score (option log-likelihood).")] = None,
    max_eval: Annotated[int | None, _O(help="[llm] Cap on evaluated samples per ability.")] = None,
    batch_size: Annotated[int | None, _O(help="Evaluation batch size.")] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda ...")] = None,
) -> None:
    """Evaluate a trained head on a split; writes results_<split>.json and predictions_<split>.jsonl."""
    from ava.heads import HEADS
    from ava.heads.common import read_json

    head = read_json(run / "run.json").get("head")
    if head == "align":
        from ava.errors import AvaError

        raise AvaError(f"{run} is a connector-alignment run; use it with `ava head train --init {run}`")
    spec = HEADS.get(head)
    results = spec.evaluate(
        run, split, **_set_options(dict(decode=decode, max_eval=max_eval, batch_size=batch_size, device=device))
    )
    print_results(results, run)


@app.command("align")
def align(
    vfm: Annotated[str | None, _O(help="VFM key.")] = None,
    data: Annotated[str | None, _O(help="Captions dataset dir made by `ava head import-captions`.")] = None,
    cache: Annotated[str | None, _O(help="Feature cache holding the caption images.")] = None,
    out: Annotated[str | None, _O(help="Run directory to write.")] = None,
    config: Annotated[Path | None, _O("--config", help="TOML file with config fields.")] = None,
    llm: Annotated[str | None, _O(help="LLM (default qwen2-0.5b).")] = None,
    epochs: Annotated[int | None, _O(help="Epochs (default 1).")] = None,
    lr: Annotated[float | None, _O(help="Learning rate (default 1e-3, the paper's stage 1).")] = None,
    batch_size: Annotated[int | None, _O(help="Global batch size (default 32).")] = None,
    features: Annotated[str | None, _O(help="cache (default) or online.")] = None,
    max_train: Annotated[int | None, _O(help="Cap on caption pairs.")] = None,
    seed: Annotated[int | None, _O(help="Random seed.")] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda ...")] = None,
    dtype: Annotated[str | None, _O(help="auto, fp32 or bf16.")] = None,
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
            max_train=max_train,
            seed=seed,
            device=device,
            dtype=dtype,
        )
    )
    run_dir = run_align(load_config(AlignConfig, config, **given))
    print_results(None, run_dir)


@app.command("import-captions")
def import_captions(
    captions: Annotated[Path, typer.Argument(help="LLaVA-558K-style JSON: [{id, image, conversations}].")],
    images: Annotated[Path, _O(help="Directory the JSON's image paths are relative to.")],
    out: Annotated[Path, _O(help="Dataset directory to write (samples/captions.jsonl).")],
    max_pairs: Annotated[int | None, _O(help="Import only the first N pairs.")] = None,
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
        table.add_row(name, ", ".join(HEADS.aliases_of(name)), desc)
    console.print(table)
    llms = Table(title="LLMs (--llm; or a hub id or a local directory)")
    for col in ("name", "source", "description"):
        llms.add_column(col)
    for name in LLMS:
        spec = LLMS.get(name)
        llms.add_row(name, spec.hub_id or "random weights (built locally)", spec.description)
    console.print(llms)
