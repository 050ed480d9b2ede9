"""Resumable training checkpoints without pickle: tensors in safetensors, everything else in JSON.

Layout (a versioned directory per checkpoint and one pointer file)::

    RUN/checkpoint/latest                       # the name of the current version, e.g. "step-00000012.1a2b3c"
    RUN/checkpoint/step-00000012.1a2b3c/
        state.safetensors                       # model, optimizer and RNG tensors (RNG states are uint8 tensors)
        state.json                              # the rest (step, scheduler, optimizer hyper-parameters, tensor keys)

A new version is written into a hidden temporary directory, fsynced, renamed to its final name, and only then
does ``latest`` change, by one ``os.replace`` of a fsynced file. A process killed at any point leaves ``latest``
naming a complete version (the new one or the previous one), never none: a resumed run never restarts from step 0
because of a crash during a save. Versions other than the current one are removed after the swap.

Nothing here unpickles: ``safetensors`` holds raw tensor bytes, JSON holds plain values, and a nested state
(optimizer, scheduler) is flattened into the two by :func:`flatten` / :func:`unflatten`. A checkpoint in the old
pickle format (``checkpoint/state.pt``) is refused with a message instead of being loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

import torch

from ava.errors import AvaError
from ava.jsonfile import read_json

CHECKPOINT = "checkpoint"
LATEST = "latest"
TENSORS = "state.safetensors"
META = "state.json"
FORMAT = 1


# -- nested state <-> (JSON, tensors) -------------------------------------------------------------------------
def flatten(obj: Any, tensors: dict[str, torch.Tensor], path: str = "s") -> Any:
    """A JSON-able copy of ``obj`` with every tensor moved into ``tensors`` (a CPU copy) under a path key.

    Dicts with non-string keys, tuples and tensors are tagged so :func:`unflatten` gives back the same types.
    Anything that is not a tensor, dict, list, tuple, str, int, float, bool or None is refused.
    """
    if isinstance(obj, torch.Tensor):
        tensors[path] = obj.detach().to("cpu", copy=True).contiguous()
        return {"__tensor__": path}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: flatten(v, tensors, f"{path}.{k}") for k, v in obj.items()}
        return {
            "__items__": [
                [flatten(k, tensors, f"{path}.k{i}"), flatten(v, tensors, f"{path}.{i}")]
                for i, (k, v) in enumerate(obj.items())
            ]
        }
    if isinstance(obj, tuple):
        return {"__tuple__": [flatten(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [flatten(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    raise TypeError(f"checkpoint state at {path}: {type(obj).__name__} is not a tensor or a plain value")


def unflatten(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__items__" in obj:
            return {_hashable(unflatten(k, tensors)): unflatten(v, tensors) for k, v in obj["__items__"]}
        if "__tuple__" in obj:
            return tuple(unflatten(v, tensors) for v in obj["__tuple__"])
        return {k: unflatten(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unflatten(v, tensors) for v in obj]
    return obj


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


# -- files ----------------------------------------------------------------------------------------------------
def _fsync(path: Path) -> None:
    """Flush a file's or a directory's entry to disk (directories: where the OS allows opening them)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_checkpoint(run_dir: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (a dict with at least ``step``) as a new version and point ``latest`` at it.

    ``state`` should already be a snapshot (CPU copies): this may run on a background thread while training goes on.
    """
    from safetensors.torch import save_file

    root = Path(run_dir) / CHECKPOINT
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{int(state['step']):08d}.{uuid.uuid4().hex[:8]}"
    tmp = root / f".{name}.tmp"
    tmp.mkdir()
    try:
        tensors: dict[str, torch.Tensor] = {}
        meta = {"format": FORMAT, "state": flatten(state, tensors)}
        save_file(tensors, str(tmp / TENSORS))
        (tmp / META).write_text(json.dumps(meta))
        for f in (tmp / TENSORS, tmp / META, tmp):
            _fsync(f)
        os.replace(tmp, root / name)
        _fsync(root)
        pointer = root / f".{LATEST}.tmp"
        pointer.write_text(name + "\n")
        _fsync(pointer)
        os.replace(pointer, root / LATEST)  # the one atomic step: before it the old version is current
        _fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in root.iterdir():  # every other version, and temporaries left by a killed save
        if old.name != name and old.name != LATEST:
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
    return root / name


def current_version(run_dir: Path) -> Path | None:
    """The directory ``latest`` names, or None when the run has no checkpoint; refuses old pickle checkpoints."""
    root = Path(run_dir) / CHECKPOINT
    if (root / "state.pt").exists():
        raise AvaError(
            f"{root / 'state.pt'} is a checkpoint in the old pickle format, which ava no longer loads (unpickling "
            f"can run code); delete {root} to start the run over"
        )
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    version = root / name
    if not name or "/" in name or name.startswith(".") or not (version / META).is_file():
        raise AvaError(f"{pointer} names {name!r}, which is not a complete checkpoint in {root}; delete {root}")
    return version


def read_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The state of the current checkpoint version, or None."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    version = current_version(run_dir)
    if version is None:
        return None
    try:
        meta = read_json(version / META)
        tensors = load_file(str(version / TENSORS))
    except (OSError, ValueError, SafetensorError) as e:
        raise AvaError(f"checkpoint {version} cannot be read ({e}); delete {version.parent} to start over") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise AvaError(f"checkpoint {version / META}: unknown format; delete {version.parent} to start over")
    return unflatten(meta["state"], tensors)


def snapshot(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``state`` whose tensors are CPU copies (what training mutates next cannot change it)."""
    tensors: dict[str, torch.Tensor] = {}
    return unflatten(flatten(state, tensors), tensors)


class CheckpointWriter:
    """Writes snapshots on one background thread, one at a time, so the training loop does not wait for the disk.

    ``save`` waits for the previous write (at most one is pending) and re-raises its error; ``close`` waits for
    the last one. ``background=False`` writes in the caller's thread.
    """

    def __init__(self, run_dir: Path, background: bool = True) -> None:
        self.run_dir, self.background = Path(run_dir), background
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _write(self, state: dict[str, Any]) -> None:
        try:
            write_checkpoint(self.run_dir, state)
        except BaseException as e:  # handed to the training thread at the next save/close
            self._error = e

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def save(self, state: dict[str, Any]) -> None:
        self.wait()
        snap = snapshot(state)
        if not self.background:
            write_checkpoint(self.run_dir, snap)
            return
        self._thread = threading.Thread(target=self._write, args=(snap,), name="ava-checkpoint", daemon=False)
        self._thread.start()

    def close(self) -> None:
        self.wait()
