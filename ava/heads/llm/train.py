"""Training the LLM head (``ava head train --head llm``) and the loop shared with connector alignment.

The loop is deterministic in the seed: batches come from :func:`length_grouped_batches` (seeded by seed and
epoch, independent of torch's RNG), the DataLoader has its own generator, and a checkpoint holds the model's
trainable weights, the optimizer, the scheduler, the RNG states and the step, at optimizer-step boundaries.
Re-running the same command resumes from it and ends with the same weights as an uninterrupted run.

A step reads nothing back from the device: the collator computes positions and counts on the host, the loss of
each step stays on the device, and the log reads the pending steps' losses every ``log_every`` steps (and before
a checkpoint). Checkpoints (:mod:`ava.heads.llm.checkpoint`: safetensors + JSON, an atomic ``latest`` pointer)
are snapshots written on a background thread.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ava.errors import AvaError
from ava.heads.llm import compiled as compiled_cache
from ava.heads.llm.checkpoint import CHECKPOINT, CheckpointWriter, read_checkpoint, write_checkpoint
from ava.heads.llm.config import LLMHeadConfig
from ava.heads.llm.data import Collator, LoopData, length_grouped_batches, steps_per_epoch
from ava.heads.llm.devices import Dist, adamw, autocast, init_dist, progress_bar, resolve_dtype, to_device
from ava.jsonfile import loads, read_json

__all__ = ["LoopData", "fit", "init_dist", "resolve_dtype", "autocast", "train", "train_step", "check_resumable"]

# Config fields that do not change what training computes: a resumed run may differ in these.
NON_TRAINING_FIELDS = {
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
    "log_every",
    "compile",
    "pack",
    "force",  # how the run directory was claimed (ava.heads.rundir.ownership), not what trains
}


# -- the loop ------------------------------------------------------------------------------------------------
def schedule(total_steps: int, warmup_ratio: float, optimizer: torch.optim.Optimizer) -> Any:
    from transformers import get_cosine_schedule_with_warmup

    return get_cosine_schedule_with_warmup(optimizer, math.ceil(warmup_ratio * total_steps), total_steps)


def _rng_state(device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.random.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def rng_states(device: torch.device, dist: Dist) -> list[dict[str, Any]]:
    """Every rank's RNG state, in rank order (each rank draws its own dropout masks from its own seed).

    Under DDP this is a collective (``all_gather_object``): all ranks call it at the same optimizer step.
    """
    mine = _rng_state(device)
    if dist.world == 1:
        return [mine]
    states: list[Any] = [None] * dist.world
    torch.distributed.all_gather_object(states, mine)
    return states


def checkpoint_state(
    head: Any, optimizer: Any, scheduler: Any, step: int, total: int, rng: list[dict[str, Any]]
) -> dict[str, Any]:
    """What a resume needs at optimizer step ``step``; a finished run keeps no optimizer state (nothing resumes it)."""
    state = {"model": head.trainable_state(), "rng": rng, "step": step, "total_steps": total}
    if step < total:
        state.update(optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict())
    return state


def save_checkpoint(
    run_dir: Path,
    head: Any,
    optimizer: Any,
    scheduler: Any,
    step: int,
    total: int,
    device: torch.device,
    rng: list[dict[str, Any]] | None = None,
) -> None:
    """Write a checkpoint now (in this thread); ``rng`` defaults to this process's state."""
    state = checkpoint_state(head, optimizer, scheduler, step, total, rng if rng is not None else [_rng_state(device)])
    write_checkpoint(run_dir, state)


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    return read_checkpoint(run_dir)


def _trim_log(path: Path, step: int) -> None:
    """Drop log lines after ``step`` (they will be recomputed identically)."""
    if path.is_file():
        keep = [ln for ln in path.read_text().splitlines() if ln.strip() and loads(ln, path)["step"] <= step]
        from ava.data.format import atomic_write_text

        atomic_write_text(path, "".join(ln + "\n" for ln in keep))


class _Log:
    """Per-step records whose losses stay on the device until :meth:`flush` reads them all at once (one sync).

    Rates are samples/s and tokens/s since the start of this call (rank totals under DDP), as of each step.
    """

    def __init__(self, path: Path | None, dist: Dist, device: torch.device, bar: Any, task: Any) -> None:
        self.file = path.open("a") if path is not None else None
        self.dist, self.device, self.bar, self.task = dist, device, bar, task
        self.t0, self.samples, self.tokens, self.loss = time.perf_counter(), 0, 0, float("nan")
        self.pending: list[tuple[dict[str, Any], torch.Tensor, int, int, float]] = []

    def add(self, rec: dict[str, Any], loss: torch.Tensor, samples: int, tokens: int) -> None:
        self.pending.append((rec, loss, samples, tokens, time.perf_counter()))

    def flush(self) -> None:
        if not self.pending:
            return
        losses = torch.stack([p[1].float() for p in self.pending])
        counts = torch.tensor([[p[2], p[3]] for p in self.pending], dtype=torch.float64)
        if self.dist.world > 1:  # the mean loss and the total counts over ranks
            losses, counts = losses.to(self.device), counts.to(self.device)
            torch.distributed.all_reduce(losses)
            torch.distributed.all_reduce(counts)
            losses = losses / self.dist.world
        values, counts_ = losses.tolist(), counts.tolist()
        for (rec, _, _, _, t), loss, (n, toks) in zip(self.pending, values, counts_, strict=True):
            self.samples, self.tokens, self.loss = self.samples + int(n), self.tokens + int(toks), loss
            dt = t - self.t0
            rec = {
                **rec,
                "loss": loss,
                "samples_per_s": self.samples / dt if dt else 0.0,
                "tokens_per_s": self.tokens / dt if dt else 0.0,
            }
            if self.file:
                self.file.write(json.dumps(rec) + "\n")
            self.bar.update(
                self.task, completed=rec["step"], loss=loss, sps=rec["samples_per_s"], tps=rec["tokens_per_s"]
            )
        self.pending = []
        if self.file:
            self.file.flush()

    def rates(self) -> dict[str, float]:
        dt = time.perf_counter() - self.t0
        return {
            "seconds": dt,
            "samples_per_s": self.samples / dt if dt else 0.0,
            "tokens_per_s": self.tokens / dt if dt else 0.0,
        }

    def close(self) -> None:
        if self.file:
            self.file.close()


def _micro_batch(batch_size: int, world: int, accum: int) -> int:
    micro = batch_size // (world * accum)
    if micro < 1 or micro * world * accum != batch_size:
        raise AvaError(
            f"--batch-size {batch_size} is not a multiple of ranks ({world}) x --grad-accum ({accum}); "
            "the global batch must split evenly"
        )
    return micro


class _EpochBatches:
    """Every epoch's micro-batches from optimizer step ``step`` on, in order: the batch sampler of ONE DataLoader
    for the whole run (its workers start once, not at every epoch: with 8 decode workers a new loader per epoch
    cost the H100 run ~1 s at each epoch's start). :meth:`groups` gives each optimizer step's (epoch, number of
    micro-batches) in the same order."""

    def __init__(self, lengths: list[int], micro: int, cfg: Any, dist: Dist, step: int, spe: int) -> None:
        self.lengths, self.micro, self.cfg, self.dist, self.step, self.spe = lengths, micro, cfg, dist, step, spe

    def _plan(self) -> Iterator[tuple[int, list[list[int]]]]:
        """(epoch, the micro-batches of one optimizer step), step after step, epoch after epoch."""
        step, ga = self.step, self.cfg.grad_accum
        while True:
            epoch, offset = divmod(step, self.spe)
            batches = length_grouped_batches(
                self.lengths, self.micro, seed=self.cfg.seed, epoch=epoch, rank=self.dist.rank, world=self.dist.world
            )
            for i in range(offset, self.spe):
                yield epoch, batches[i * ga : (i + 1) * ga]
                step += 1

    def __iter__(self) -> Iterator[list[int]]:
        for _, group in self._plan():
            yield from group

    def groups(self) -> Iterator[tuple[int, int]]:
        for epoch, group in self._plan():
            yield epoch, len(group)


def _step_groups(
    data: LoopData,
    lengths: list[int],
    micro: int,
    cfg: Any,
    dist: Dist,
    step: int,
    spe: int,
    pin: bool = False,
    pack: bool = False,
) -> Any:
    """From optimizer step ``step`` on: (epoch, the micro-batches of one optimizer step), epoch after epoch."""
    collate = Collator(data.encoded, data.num_image_tokens, data.pad_id, pack=pack)
    plan = _EpochBatches(lengths, micro, cfg, dist, step, spe)
    loader = torch.utils.data.DataLoader(
        data.items,
        batch_sampler=plan,
        collate_fn=collate,
        num_workers=cfg.num_workers,
        generator=torch.Generator().manual_seed(cfg.seed + step // spe),
        pin_memory=pin,
    )
    it = iter(loader)
    for epoch, n in plan.groups():
        yield epoch, [next(it) for _ in range(n)]


def ahead(groups: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """``groups`` made ``depth`` items ahead on a thread of their own (the loader, collator and pinning of the next
    steps run while this thread launches the current one's work), in the same order; an error raised making one is
    raised here, at that item. Closing this generator stops the thread after the item it is making."""
    import queue
    import threading

    items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def fill() -> None:
        try:
            for item in groups:
                while not stop.is_set():
                    try:
                        items.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            items.put(("error", e))

    thread = threading.Thread(target=fill, name="ava-llm-batches", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join()
        close = getattr(groups, "close", None)
        if close is not None:
            close()  # the loader's workers stop now


def _restore(run_dir: Path, head: Any, optimizer: Any, scheduler: Any, device: torch.device, dist: Dist) -> int:
    """Continue from the run's checkpoint if there is one; returns the optimizer step to start from.

    The log keeps only the lines up to that step (none without a checkpoint), so a resumed run never repeats one.
    """
    state = load_checkpoint(run_dir)
    step = 0
    if state is not None:
        head.load_trainable_state(state["model"])
        if "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
        rng = state["rng"]
        if dist.rank < len(rng):  # (resumed on more ranks than saved: the new ones keep their fresh seed)
            _set_rng_state(rng[dist.rank], device)
        step = int(state["step"])
    if dist.main:
        _trim_log(run_dir / "train_log.jsonl", step)
    return step


def use_compile(option: bool | None, device: torch.device) -> bool:
    """``--compile`` default: on for CUDA, off elsewhere."""
    return device.type == "cuda" if option is None else bool(option)


def use_pack(option: bool | None) -> bool:
    """``--pack`` default: on (PyTorch's varlen flash kernel on CUDA, an exact sample-by-sample SDPA elsewhere)."""
    return True if option is None else bool(option)


COMPILE_BACKEND: Any = "inductor"  # torch.compile's backend for the decoder layers (tests give one that fails)


def compile_layers(head: Any) -> bool:
    """Compile each decoder layer in place (fuses RMSNorm, RoPE, SwiGLU and LoRA's elementwise work).

    Returns False, leaving the model as it was, where this PyTorch refuses to compile at all. Nothing is compiled
    here: the layers compile on their first call, in the first step, and a layer that fails then (no compiler
    toolchain, dynamic shapes, the varlen op, another torch) makes the loop run the step again eagerly
    (:func:`eager_layers`, see :func:`fit`). A separate toolchain probe used to compile a function of its own
    first: 2 s per run with warm caches, 9 s on a fresh machine (CPU), for what the first step finds out anyway.
    Layers already compiled are kept as they are (no recompilation when a loop resumes in the same process).
    """
    import warnings

    try:
        for layer in head.base.get_decoder().layers:
            if getattr(layer, "_compiled_call_impl", None) is None:
                layer.compile(dynamic=True, backend=COMPILE_BACKEND)
    except Exception as e:  # noqa: BLE001 - torch.compile refuses some Pythons and builds outright
        eager_layers(head)
        warnings.warn(
            f"--compile: torch.compile is not usable here ({type(e).__name__}: {e}); running eagerly", stacklevel=2
        )
        return False
    return True


def compiling() -> Any:
    """The Dynamo settings the compiled layers are traced under (a context manager around each compiled step).

    The layers' Python floats (RMSNorm's epsilon, LoRA's scale, dropout's p) are kept as constants of the graph.
    With ``dynamic=True`` Dynamo otherwise first makes them inputs (0-d float64 tensors), fails to turn them back
    into numbers in a later pass, and traces the whole layer again: the first attempt (the trace and the forward
    and backward graph) was thrown away in every run. With the probe that :func:`compile_layers` no longer runs, that
    was half of a warm-cache CPU warm-up's compile overhead (8-9 s -> 4-4.6 s). Where this torch has no such
    setting, nothing changes.
    """
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    if config is None or not hasattr(config, "specialize_float"):
        return nullcontext()
    return config.patch(specialize_float=True)


def eager_layers(head: Any) -> None:
    """Undo :func:`compile_layers`: every decoder layer runs eagerly again."""
    for layer in head.base.get_decoder().layers:
        layer._compiled_call_impl = None


def _compiled_step(head: Any, step: Any, device: torch.device) -> tuple[Any, str | None]:
    """``step()`` with compiled layers; where it raises (not for lack of memory), the layers go back to eager and the
    step runs again from the same RNG state and zeroed gradients. Returns (the step's result, the compile error's
    first line, or None when compiled layers ran)."""
    rng = _rng_state(device)
    try:
        return step(), None
    except torch.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - dynamo/inductor errors have many types; the eager retry decides
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [""]
        first = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]  # "backend='inductor' raised:" + why
        error = f"{type(e).__name__}: {first[:240]}"
    eager_layers(head)
    for p in head.parameters():
        p.grad = None
    _set_rng_state(rng, device)
    return step(), error  # a genuine error raises again here, eagerly


def train_step(
    model: Any,
    params: list,
    optimizer: Any,
    scheduler: Any,
    group: list[dict],
    data: LoopData,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, int, int]:
    """Forward/backward over one optimizer step's micro-batches (DDP syncs on the last only), then the update.

    Returns (mean loss as a device tensor, samples, tokens); reads nothing back from the device.
    """
    total: torch.Tensor | None = None
    n, toks = 0, 0
    for i, batch in enumerate(group):
        sync = i == len(group) - 1 or not hasattr(model, "no_sync")
        with nullcontext() if sync else model.no_sync():
            on_device = to_device(batch, device)
            if "index" in batch:  # the host copy too: features held in host memory are gathered without a sync
                on_device["index_host"] = batch["index"]
            with autocast(device, dtype):
                loss = model(on_device, data.featurize(on_device))
            (loss / len(group)).backward()
        total = loss.detach() if total is None else total + loss.detach()
        n += batch["index"].shape[0]  # (a packed batch is one row of several samples)
        toks += batch["n_tokens"]
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    assert total is not None
    return total / max(len(group), 1), n, toks


def fit(
    head: Any,
    data: LoopData,
    cfg: Any,
    run_dir: Path,
    *,
    dist: Dist,
    device: torch.device,
    dtype: torch.dtype,
    epochs: int,
    lr: float,
    batch_size: int,
    description: str = "train",
    checkpoints: bool = True,
) -> dict:
    """Train ``head``'s trainable parameters; resumable; returns a summary (steps, final loss, speed).

    ``checkpoints=False`` writes no checkpoint (benchmarks: a timed window must not time one; such a run resumes
    from the last checkpoint an earlier call wrote, if any).

    The summary's ``setup_s`` and ``teardown_s`` are the call's seconds before its first step's timing starts (the
    attention check, the compile artifacts' load...) and after its last step (the loader's workers stopping...), the
    part of a warm-up that ``seconds`` does not hold."""
    entered = time.perf_counter()
    micro = _micro_batch(batch_size, dist.world, cfg.grad_accum)
    lengths = [e.length(data.num_image_tokens) for e in data.encoded]
    n_micro = len(length_grouped_batches(lengths, micro, seed=cfg.seed, epoch=0, rank=dist.rank, world=dist.world))
    spe = steps_per_epoch(n_micro, cfg.grad_accum)
    total = spe * epochs
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = adamw(params, lr, cfg.weight_decay)
    scheduler = schedule(total, cfg.warmup_ratio, optimizer)
    step = start = _restore(run_dir, head, optimizer, scheduler, device, dist)
    packed = use_pack(getattr(cfg, "pack", None)) and step < total and head.use_packing(device, dtype)
    attention = head.attention_path()
    compiled: bool | str = use_compile(getattr(cfg, "compile", None), device) and step < total and compile_layers(head)
    artifacts, compile_cache = None, "off"
    if compiled is True:  # what an earlier run compiled for this setup, preloaded (ava.heads.llm.compiled)
        artifacts = compiled_cache.artifacts_path(head, device, dtype, attention)
        compile_cache = compiled_cache.load(artifacts)
    model = head
    if dist.world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            head, device_ids=[device.index] if device.type == "cuda" else None
        )
    if cfg.gradient_checkpointing:
        head.base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    stop_at = min(total, step + cfg.stop_after_steps) if cfg.stop_after_steps else total
    if dist.main:
        run_dir.mkdir(parents=True, exist_ok=True)
    every = max(1, int(getattr(cfg, "log_every", 1) or 1))
    writer = CheckpointWriter(run_dir) if dist.main and checkpoints else None
    # every rank's RNG state at the current step boundary: a checkpoint holds it with that boundary's weights
    # (an interrupted step's micro-batches have drawn dropout masks since, which a resumed run must redraw).
    rng = rng_states(device, dist)
    head.train()
    log = None
    data_wait = 0.0  # seconds this thread waited for the next step's batches (made ahead on a thread: ahead())
    groups = None
    ended = None  # when the last step ended (the loop left normally)
    try:
        with progress_bar(cfg.progress and dist.main) as bar:
            task = bar.add_task(description, total=total, completed=step, loss=float("nan"), sps=0.0, tps=0.0)
            log = _Log(run_dir / "train_log.jsonl" if dist.main else None, dist, device, bar, task)
            groups = ahead(
                _step_groups(data, lengths, micro, cfg, dist, step, spe, pin=device.type == "cuda", pack=packed)
            )
            while step < stop_at:
                t = time.perf_counter()
                epoch, group = next(groups)  # (the loader and collator, on this thread)
                data_wait += time.perf_counter() - t
                if compiled is True:  # a layer that fails to compile falls back to eager, once, with a warning

                    def run(group: list[dict] = group) -> tuple[torch.Tensor, int, int]:
                        return train_step(model, params, optimizer, scheduler, group, data, device, dtype)

                    with compiling():
                        (loss, n, toks), error = _compiled_step(head, run, device)
                    if error is not None:
                        import warnings

                        compiled = "fell-back"
                        warnings.warn(
                            f"--compile: the decoder layers did not compile here ({error}); training "
                            "eagerly from this step on",
                            stacklevel=2,
                        )
                    elif compile_cache in ("none", "unreadable") and dist.main and artifacts is not None:
                        # the first step compiled the forward and the backward: kept for the runs after this one
                        compile_cache = "saved" if compiled_cache.save(artifacts) else compile_cache
                else:
                    loss, n, toks = train_step(model, params, optimizer, scheduler, group, data, device, dtype)
                step += 1
                save = step % cfg.checkpoint_every == 0 or step % spe == 0 or step == stop_at
                if save or dist.world == 1:  # (a collective under DDP: only where a checkpoint is written)
                    rng = rng_states(device, dist)
                log.add({"step": step, "epoch": epoch, "lr": scheduler.get_last_lr()[0]}, loss, n, toks)
                if save or step % every == 0:
                    log.flush()
                if save and writer:
                    writer.save(checkpoint_state(head, optimizer, scheduler, step, total, rng))
        ended = time.perf_counter()
    except KeyboardInterrupt:  # one process: keep the last finished step (under DDP the last checkpoint stands)
        if log and dist.world == 1:
            log.flush()
        if writer and dist.world == 1:
            writer.save(checkpoint_state(head, optimizer, scheduler, step, total, rng))
        raise
    finally:
        if groups is not None:
            groups.close()  # the run's one DataLoader: its workers stop now
        if log:
            log.flush()
            log.close()
        if writer:
            writer.close()
        if cfg.gradient_checkpointing:
            head.base.gradient_checkpointing_disable()
        if packed:
            head.use_packing(device, dtype, on=False)
    rates = log.rates() if log else {}
    timing = {
        "setup_s": log.t0 - entered if log else None,
        "teardown_s": time.perf_counter() - ended if ended is not None else None,
    }
    return {
        "total_steps": total,
        "steps_per_epoch": spe,
        "micro_batch": micro,
        "world_size": dist.world,
        "resumed_from_step": start,
        "step": step,
        "done": step >= total,
        "final_loss": log.loss if log else None,
        "compiled": compiled if compiled == "fell-back" else bool(compiled),
        "compile_cache": compile_cache,
        "packed": bool(packed),
        "attention": attention,
        "data_wait_s": data_wait,
        **rates,
        **timing,
    }


# -- the LLM head's train() ----------------------------------------------------------------------------------
def comparable(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NON_TRAINING_FIELDS}


def check_resumable(run_dir: Path, config: Any) -> None:
    """Refuse to mix two different runs in one directory, or to resume from a checkpoint ava cannot read safely."""
    from ava.heads.llm.checkpoint import current_version

    current_version(run_dir)  # refuses an old pickle checkpoint before anything is loaded or written
    path = run_dir / "config.json"
    if not path.is_file():
        return
    old, new = comparable(read_json(path)), comparable(json.loads(json.dumps(asdict(config))))
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff and (run_dir / CHECKPOINT).exists():
        raise AvaError(
            f"{run_dir} holds a run with a different config ({', '.join(diff)}); pass another --out, "
            "or delete the directory to start over"
        )


def train(config: LLMHeadConfig) -> Path:
    """Train the LLM head on the abilities of ``config``; writes the run directory, then evaluates (eval_after)."""
    from ava.heads.llm.runtime import prepare_training, save_weights, write_run_files

    dist, device = init_dist(config.device)
    dtype = resolve_dtype(config.dtype, device)
    run_dir = Path(config.out)
    if not config.out:
        raise AvaError("no output directory given (--out)")
    check_resumable(run_dir, config)
    run_file = run_dir / "run.json"
    previous = read_json(run_file).get("training") if run_file.is_file() else None
    prep = prepare_training(config, device=device, dtype=dtype, rank=dist.rank)
    if dist.main:
        write_run_files(run_dir, config, prep.run)
    if dist.world > 1:
        torch.distributed.barrier()
    summary = fit(
        prep.head,
        prep.loop,
        config,
        run_dir,
        dist=dist,
        device=device,
        dtype=dtype,
        epochs=prep.epochs,
        lr=prep.lr,
        batch_size=prep.batch_size,
    )
    if summary["step"] == summary["resumed_from_step"] and previous:  # nothing left to train: keep its record
        summary = previous
    if dist.main:
        save_weights(prep.head, run_dir)
        write_run_files(run_dir, config, {**prep.run, "training": summary})
    if dist.world > 1:
        torch.distributed.barrier()
    if summary["done"] and config.eval_after:
        from ava.heads.llm.evaluate import evaluate

        del prep
        evaluate(
            run_dir,
            split=config.split,
            decode=config.decode,
            max_eval=config.max_eval,
            device=config.device,
            progress=config.progress,
        )
    return run_dir
