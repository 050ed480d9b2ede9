"""Generate a synthetic AVA dataset: render every sample in a process pool, store it, split it.

Each sample is rendered from its own RNG seeded by ``(seed, ability, index)``, so the bytes written do not
depend on the worker count or scheduling. The dataset goes to a temporary sibling directory first and is
renamed into place at the end: an interrupted run never leaves a half-written dataset at ``out``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ava.data.format import DatasetWriter, Sample, check_replaceable, encode_png
from ava.errors import AvaError
from ava.jsonfile import read_json
from ava.synth.core import KNOBS, Ctx, SynthConfig, check_config

Task = tuple[str, int, int, int, str]


def resolve_abilities(names: list[str] | str | None) -> list[str]:
    """Canonical ability keys in registry order (all 14 when ``names`` is empty)."""
    from ava.abilities import ABILITIES, ABILITY_KEYS

    if isinstance(names, str):  # `ava = "color"` in a TOML file
        names = [names]
    if not names:
        return list(ABILITY_KEYS)
    wanted = {ABILITIES.canonical(n) for n in names}
    return [k for k in ABILITY_KEYS if k in wanted]


def render_sample(task: Task) -> tuple[str, int, bytes, dict[str, Any]]:
    """Render one sample (runs in a worker): PNG bytes plus the Sample fields the generator decided."""
    from ava.synth.abilities import GENERATORS

    ava, index, seed, size, difficulty = task
    ctx = Ctx(ava=ava, index=index, seed=seed, size=size, difficulty=difficulty)
    try:
        r = GENERATORS.get(ava)(ctx)
    except Exception as e:  # name the sample so the failure can be replayed with Ctx(ava, index, seed, ...)
        raise RuntimeError(
            f"synthetic {ava} sample {index} (seed {seed}, size {size}, {difficulty}) failed: {e!r}"
        ) from e
    if r.image.size != (size, size):
        raise AssertionError(f"synthetic {ava} sample {index}: generator drew {r.image.size}, not {size}x{size}")
    knobs = KNOBS[difficulty]
    meta = {
        "source": "synthetic",
        **r.meta,
        "difficulty": difficulty,
        "noise": knobs.noise,
        "clutter": knobs.clutter,
        "scale": knobs.scale,
        "jitter": knobs.jitter,
        "index": index,
    }
    fields = {"question": r.question, "answer": r.answer, "truth": r.truth, "options": r.options, "meta": meta}
    return ava, index, encode_png(r.image.convert("RGB")), fields


def _tasks(config: SynthConfig, abilities: list[str]) -> list[Task]:
    return [(a, i, config.seed, config.size, config.difficulty) for a in abilities for i in range(config.per_ava)]


def _render_all(tasks: list[Task], workers: int, progress: bool):
    """Yield rendered samples in task order, from a process pool when ``workers > 1``."""
    from rich.progress import TimeRemainingColumn

    from ava.progress import progress as progress_bar

    with progress_bar(progress, TimeRemainingColumn()) as bar:
        job = bar.add_task("synth", total=len(tasks))
        if workers <= 1:
            for t in tasks:
                yield render_sample(t)
                bar.advance(job)
            return
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        chunksize = max(1, min(32, len(tasks) // (workers * 8) or 1))
        # concurrent.futures, not multiprocessing.Pool: a worker killed (OOM, signal) breaks the pool and
        # raises here, where Pool would replace the worker and wait forever for its lost task.
        pool = ProcessPoolExecutor(workers, mp_context=ctx)
        try:
            for out in pool.map(render_sample, tasks, chunksize=chunksize):
                yield out
                bar.advance(job)
        except BrokenProcessPool as e:
            raise AvaError(
                f"a synth worker process died ({e}); it was killed or ran out of memory: try fewer --workers "
                "or a smaller --size"
            ) from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # on an error, do not render what is still queued


def _prepare_out(out: Path, overwrite: bool) -> Path:
    """The temporary directory to write into; refuses to clobber a non-empty ``out`` unless ``overwrite``."""
    for above in out.parents:  # the nearest existing folder above --out must be one (not a file)
        if above.exists():
            if not above.is_dir():
                raise AvaError(f"--out {out}: {above} is a file, not a directory")
            break
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise AvaError(f"{out} already exists and is not empty; choose another --out or pass --force")
    check_replaceable(out)  # --overwrite deletes an ava dataset, never any other directory
    tmp = out.with_name(f".{out.name}.synth-{os.getpid()}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp


def _finish(tmp: Path, out: Path) -> None:
    """Move the finished dataset into place; an old ``out`` is removed only after the new one is complete."""
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out)


def synth_info(config: SynthConfig, abilities: list[str]) -> dict[str, Any]:
    """What dataset.json records about a synthetic set (no dates: same config, same bytes)."""
    import ava

    saved = {k: v for k, v in asdict(config).items() if k not in ("out", "workers", "overwrite")}
    saved["ava"] = abilities
    return {
        "source": "synthetic",
        "synthetic": True,
        "split": {"made_by": "synthetic", "test_frac": config.test_frac, "seed": config.seed},
        "synth_config": saved,
        "difficulty_knobs": asdict(KNOBS[config.difficulty]),
        "ava_version": getattr(ava, "__version__", None),
    }


def made_with(config: SynthConfig) -> tuple[bool, list[str]]:
    """Whether ``config.out`` holds a synthetic set made with these very settings (the same bytes would be
    written again), and else the settings it was made with that differ (empty when it is no synthetic set)."""

    try:
        saved = read_json(Path(config.out) / "dataset.json", encoding="utf-8").get("synth_config")
    except (OSError, ValueError, AttributeError):
        return False, []
    if not isinstance(saved, dict):
        return False, []
    want = synth_info(config, resolve_abilities(config.ava))["synth_config"]
    differ = [
        f"--{k.replace('_', '-')} {_shown(saved.get(k))} there, {_shown(v)} now"
        for k, v in want.items()
        if saved.get(k) != v
    ]
    return not differ, differ


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def generate(config: SynthConfig, progress: bool = True) -> Path:
    """Write a split synthetic dataset to ``config.out`` and return its path. A set already there made with the
    same settings is kept as it is (generating it again would write the same bytes)."""
    from ava.data.split import assign_splits

    check_config(config)
    abilities = resolve_abilities(config.ava)
    out = Path(config.out)
    same, differ = made_with(config)
    if same and not config.overwrite:
        return out
    if differ and not config.overwrite:
        raise AvaError(
            f"{out} holds a synthetic set made with other settings ({'; '.join(differ)}); give the same "
            "options to keep it, another --out, or --force to replace it"
        )
    tmp = _prepare_out(out, config.overwrite)
    workers = config.workers or min(2, os.cpu_count() or 1)
    by_ava: dict[str, list[Sample]] = {a: [] for a in abilities}
    try:
        writer = DatasetWriter(tmp, info=synth_info(config, abilities))
        for ava, index, png, fields in _render_all(_tasks(config, abilities), workers, progress):
            rel = writer.add_image_bytes(png, "png")
            sid = f"synth-{ava}-{index:06d}"
            by_ava[ava].append(Sample(id=sid, ava=ava, image=rel, width=config.size, height=config.size, **fields))
        for samples in by_ava.values():
            assign_splits(samples, test_frac=config.test_frac, seed=config.seed)
            for s in samples:
                writer.add_sample(s)
        writer.close()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _finish(tmp, out)
    return out
