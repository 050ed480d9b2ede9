"""A run directory belongs to one run: one head, one VFM, one ability set, one training config.

Every head's training entry point is wrapped in :func:`owns_run_dir`, which applies these rules to ``--out``:

- **One job at a time.** A lock (``flock`` on ``<out>/.lock``, held by the training process only, see
  :mod:`ava.locking`) refuses a second training on the same ``--out``.
- **No mixing.** An ``--out`` that holds a run (``config.json``) of a different head or with a different
  training config (VFM, abilities, data, seed, lr, ...) is refused, naming the fields that differ. Re-running
  the same run continues in place (the LLM head resumes from its checkpoint).
- **--force replaces it whole.** With ``force``, the new run is written to ``.<name>.new`` beside ``--out`` and
  swapped in when it has finished (``renameat2(RENAME_EXCHANGE)`` where Linux has it, else two renames), and
  the old run is deleted only then. A training killed at any point leaves either the old run or the new one at
  ``--out``, never a mix; the leftover ``.<name>.new`` is removed by the next training on that ``--out``.
- **Only runs are replaced.** A non-empty ``--out`` without a ``config.json`` is no run directory: it is
  never deleted, with or without ``force``.

Fields that do not change what training computes (device, evaluation options, progress bars, ``out``,
``force``) may differ between the runs of one directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ava.errors import AvaError, remove_dead_temp_files
from ava.jsonfile import read_json
from ava.locking import JobLock

# Config fields that do not change what training computes: two trainings of one run may differ in these.
NON_TRAINING_FIELDS = frozenset(
    {
        "split",
        "eval_after",
        "max_eval",
        "decode",
        "eval_batch_size",
        "progress",
        "num_workers",
        "checkpoint_every",
        "stop_after_steps",
        "device",
        "out",
        "force",
        "threads",
    }
)


LOCK_FILE = ".lock"


# Fields a head resolves before saving its config (None: "auto"): None in a new config matches the saved value.
RESOLVED_FIELDS = frozenset({"grad_accum"})


class RunDirError(AvaError):
    """``--out`` holds another run, or something that is not a run, or another training is writing it."""


def _world() -> tuple[int, int]:
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def training_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NON_TRAINING_FIELDS}


def _holds_only_the_lock(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds nothing but a training's lock file (no run)."""
    return not any(p.name != LOCK_FILE for p in run_dir.iterdir())


def differing_fields(run_dir: Path, head: str, config: Any) -> list[str] | None:
    """The fields in which the run at ``run_dir`` differs from ``(head, config)``: ``[]`` for the same run,
    ``None`` when ``run_dir`` holds no run (absent or empty); RunDirError when it holds something else."""
    from ava.config import to_jsonable

    if not run_dir.exists():
        return None
    if not run_dir.is_dir():
        raise RunDirError(f"--out {run_dir} is a file, not a run directory")
    if _holds_only_the_lock(run_dir):
        return None
    cfg_path = run_dir / "config.json"
    try:
        old = read_json(cfg_path, encoding="utf-8")
    except FileNotFoundError:
        raise RunDirError(
            f"--out {run_dir} is not empty and holds no ava run (no config.json); it is never "
            "replaced: choose another --out"
        ) from None
    except (OSError, ValueError) as e:
        raise RunDirError(f"{cfg_path} cannot be read ({e}); pass --force to replace the run, or another --out") from e
    old_head = None
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no run.json yet: the config tells the run
        old_head = read_json(run_dir / "run.json", encoding="utf-8").get("head")
    old, new = training_fields(old if isinstance(old, dict) else {}), training_fields(to_jsonable(config))
    if old_head is not None and old_head != head:
        return [f"head ({old_head!r} -> {head!r})"]  # the config fields of two heads differ anyway
    diff = []
    for key in sorted(set(old) | set(new)):
        if key in RESOLVED_FIELDS and new.get(key) is None:
            continue
        if _same_path(key, old.get(key), new.get(key)):  # a run stored before paths were resolved, or after
            continue
        if old.get(key) != new.get(key):
            diff.append(f"{key} ({old.get(key)!r} -> {new.get(key)!r})")
    return diff


def _same_path(key: str, old: Any, new: Any) -> bool:
    """Whether two values of a path field name the same place from here (a relative one, from an older run)."""
    from ava.heads.rundir.identity import PATH_FIELDS, resolved

    if key not in (*PATH_FIELDS, "llm") or not isinstance(old, str) or not isinstance(new, str) or not old or not new:
        return False
    return resolved(old) == resolved(new)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries in one step (Linux renameat2 RENAME_EXCHANGE); False where unavailable."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    # nonzero on a filesystem without RENAME_EXCHANGE: the caller falls back to two renames
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def swap_in(stage: Path, out: Path) -> None:
    """Put the finished run at ``stage`` in place of ``out`` (see the module docstring), then delete the old."""
    if out.exists() and _exchange(stage, out):
        shutil.rmtree(stage, ignore_errors=True)  # now the old run
        return
    if out.exists():
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        os.replace(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out)


def _fix_out(run_dir: Path, stage: Path, out: Path) -> None:
    """The files written while the run lived at ``stage`` record ``out`` (and sub-runs under it) as where they are."""
    from ava.data.format import atomic_write_text

    for path in run_dir.rglob("*.json"):
        try:
            obj = read_json(path, encoding="utf-8")
        except (OSError, ValueError):
            continue
        changed = False
        for block in (obj, obj.get("config") if isinstance(obj, dict) else None):
            where = block.get("out") if isinstance(block, dict) else None
            for old, new in ((str(stage), str(out)), (str(stage.resolve()), str(out.resolve()))):
                if isinstance(where, str) and (where == old or where.startswith(old + os.sep)):
                    block["out"], changed = new + where[len(old) :], True
                    break
        if changed:
            atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


@contextmanager
def claim_run(
    out: str | os.PathLike[str],
    head: str,
    config: Any,
    *,
    force: bool = False,
    replace_hint: str = "Choose another --out, or pass --force to replace that run",
) -> Iterator[Path]:
    """Own ``out`` for one training; yields the directory to write the run in (``out`` itself, or the staging
    directory beside it that replaces ``out`` when the block ends without an error)."""
    if not str(out):
        raise RunDirError("no output directory given (--out)")
    out = Path(out)
    rank, world = _world()
    stage = out.with_name(f".{out.name}.new")
    lock, made_dir, made_lock = None, False, False
    if rank == 0:
        differing_fields(out, head, config)  # a file or a foreign directory is refused before anything is written
        made_dir, made_lock = not out.exists(), not (out / LOCK_FILE).exists()
        lock = JobLock(out / LOCK_FILE, f"another training is writing run directory {out}; wait for it to finish")
    try:
        if rank == 0 and stage.exists():
            shutil.rmtree(stage)  # left by a killed --force training (we hold the lock: nobody else uses it)
        if rank == 0:
            remove_dead_temp_files([out])  # what a training killed mid-write left
        diff = differing_fields(out, head, config)
        if not force and diff:
            raise RunDirError(
                f"--out {out} holds another run: {'; '.join(diff[:4])}{' ...' if len(diff) > 4 else ''}. "
                + replace_hint
            )
        if not force or diff is None:
            yield out
            return
        if world > 1:
            raise RunDirError(f"--force is not supported under torchrun; remove {out} first, then train")
        stage.mkdir(parents=True)
        yield stage
        _fix_out(stage, stage, out)
        swap_in(stage, out)
    finally:
        if lock is not None and made_lock and out.is_dir() and _holds_only_the_lock(out):
            lock.remove()  # a training that failed before writing anything leaves no lock file, nor a directory
            if made_dir:  # holding only that (`ava report runs/*` would name it as a run without run.json)
                with contextlib.suppress(OSError):
                    out.rmdir()
        elif lock is not None:
            lock.close()


def owns_run_dir(head: str | Callable[[Any], str]) -> Callable[[Callable[[Any], Path]], Callable[[Any], Path]]:
    """Decorate a head's ``train(config) -> run_dir`` so that it claims ``config.out`` (see :func:`claim_run`);
    a staged run is trained with ``out`` pointing at the staging directory and returns ``config.out``."""

    def wrap(train: Callable[[Any], Path]) -> Callable[[Any], Path]:
        @functools.wraps(train)
        def run(config: Any) -> Path:
            from ava.heads.rundir.identity import resolved_paths

            config = resolved_paths(config)  # the run records absolute paths (ava.heads.rundir.identity)
            name = head(config) if callable(head) else head
            with claim_run(config.out, name, config, force=bool(getattr(config, "force", False))) as where:
                staged = where != Path(config.out)
                train(dataclasses.replace(config, out=str(where)) if staged else config)
            return Path(config.out)

        return run

    return wrap
