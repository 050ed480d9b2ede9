"""Training the LLM head (``ava head train --head llm``) and the loop shared with connector alignment.

The loop is deterministic in the seed: batches come from :func:`length_grouped_batches` (seeded by seed and
epoch, independent of torch's RNG), the DataLoader has its own generator, and a checkpoint holds the model's
trainable weights, the optimizer, the scheduler, the RNG states and the step, at optimizer-step boundaries.
Re-running the same command resumes from it and ends with the same weights as an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ava.errors import AvaError
from ava.heads.llm.config import LLMHeadConfig
from ava.heads.llm.data import Collator, length_grouped_batches, steps_per_epoch

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
}
CHECKPOINT = "checkpoint"


# -- devices, precision, processes ---------------------------------------------------------------------------
@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_dist(device: str) -> tuple[Dist, torch.device]:
    """Under ``torchrun`` (WORLD_SIZE > 1): join the process group (nccl on GPU, gloo on CPU); else a single rank."""
    from ava.heads.common import resolve_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = Dist(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
    dev = torch.device(resolve_device(device))
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(dev)
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return dist, dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The autocast dtype: bf16 on GPU by default, fp32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    if dtype not in table:
        raise AvaError(f"--dtype {dtype!r}: use auto, fp32 or bf16")
    return table[dtype]


def autocast(device: torch.device, dtype: torch.dtype) -> Any:
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


# -- the loop ------------------------------------------------------------------------------------------------
@dataclass
class LoopData:
    """What the loop trains on: items (features or pixels + index), their encodings, and how to get features."""

    items: torch.utils.data.Dataset
    encoded: list
    num_image_tokens: int
    pad_id: int
    featurize: Any  # batch -> features [B, T, D] on the device


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
    """Everything needed to continue exactly: written to a temporary directory, then renamed into place.

    ``rng`` is every rank's RNG state at the same step boundary as the weights (default: this process's now).
    """
    tmp = run_dir / f".{CHECKPOINT}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(
        {
            "model": head.trainable_state(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng if rng is not None else [_rng_state(device)],
            "step": step,
            "total_steps": total,
        },
        tmp / "state.pt",
    )
    old = run_dir / f".{CHECKPOINT}.old"
    shutil.rmtree(old, ignore_errors=True)
    if (run_dir / CHECKPOINT).exists():
        os.replace(run_dir / CHECKPOINT, old)
    os.replace(tmp, run_dir / CHECKPOINT)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / CHECKPOINT / "state.pt"
    return torch.load(path, map_location="cpu", weights_only=False) if path.is_file() else None


def _trim_log(path: Path, step: int) -> None:
    """Drop log lines after the checkpoint's step (they will be recomputed identically)."""
    if path.is_file():
        keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
        from ava.data.format import atomic_write_text

        atomic_write_text(path, "".join(ln + "\n" for ln in keep))


def _progress(enabled: bool, training: bool = True) -> Any:
    """The shared progress bar; training bars also show loss, samples/s and tokens/s."""
    from rich.progress import TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ava.progress import progress

    stats = "loss {task.fields[loss]:.4f}  {task.fields[sps]:.1f} samples/s  {task.fields[tps]:.0f} tokens/s"
    extra = [TextColumn(stats)] if training else []
    return progress(enabled, *extra, TimeElapsedColumn(), TimeRemainingColumn())


class _Meter:
    """Running samples/s and tokens/s since the start of this call (rank totals under DDP)."""

    def __init__(self, dist: Dist, device: torch.device) -> None:
        self.dist, self.device = dist, device
        self.t0, self.samples, self.tokens, self.loss = time.perf_counter(), 0, 0, float("nan")

    def add(self, loss: float, samples: int, tokens: int) -> None:
        if self.dist.world > 1:  # the mean loss and the total counts over ranks
            red = torch.tensor([loss, samples, tokens], dtype=torch.float64, device=self.device)
            torch.distributed.all_reduce(red)
            loss, samples, tokens = red[0].item() / self.dist.world, int(red[1].item()), int(red[2].item())
        self.loss, self.samples, self.tokens = loss, self.samples + samples, self.tokens + tokens

    def rates(self) -> dict[str, float]:
        dt = time.perf_counter() - self.t0
        return {"seconds": dt, "samples_per_s": self.samples / dt if dt else 0.0,
                "tokens_per_s": self.tokens / dt if dt else 0.0}  # fmt: skip


def _micro_batch(batch_size: int, world: int, accum: int) -> int:
    micro = batch_size // (world * accum)
    if micro < 1 or micro * world * accum != batch_size:
        raise AvaError(
            f"--batch-size {batch_size} is not a multiple of ranks ({world}) x --grad-accum ({accum}); "
            "the global batch must split evenly"
        )
    return micro


def _step_groups(
    data: LoopData, lengths: list[int], micro: int, cfg: Any, dist: Dist, step: int, spe: int, pin: bool = False
) -> Any:
    """From optimizer step ``step`` on: (epoch, the micro-batches of one optimizer step), epoch after epoch."""
    collate = Collator(data.encoded, data.num_image_tokens, data.pad_id)
    while True:
        epoch, offset = divmod(step, spe)
        batches = length_grouped_batches(lengths, micro, seed=cfg.seed, epoch=epoch, rank=dist.rank, world=dist.world)
        loader = torch.utils.data.DataLoader(
            data.items, batch_sampler=batches[offset * cfg.grad_accum :], collate_fn=collate,
            num_workers=cfg.num_workers, generator=torch.Generator().manual_seed(cfg.seed + epoch), pin_memory=pin,
        )  # fmt: skip
        it = iter(loader)
        for _ in range(offset, spe):
            yield epoch, [b for _, b in zip(range(cfg.grad_accum), it, strict=False)]
            step += 1


def _restore(run_dir: Path, head: Any, optimizer: Any, scheduler: Any, device: torch.device, dist: Dist) -> int:
    """Continue from the run's checkpoint if there is one; returns the optimizer step to start from."""
    state = load_checkpoint(run_dir)
    if state is None:
        return 0
    head.load_trainable_state(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    rng = state["rng"]
    if isinstance(rng, dict):  # a checkpoint from before per-rank states: one state for all ranks
        _set_rng_state(rng, device)
    elif dist.rank < len(rng):  # (resumed on more ranks than saved: the new ones keep their fresh seed)
        _set_rng_state(rng[dist.rank], device)
    if dist.main:
        _trim_log(run_dir / "train_log.jsonl", int(state["step"]))
    return int(state["step"])


def fit(
    head: Any, data: LoopData, cfg: Any, run_dir: Path, *, dist: Dist, device: torch.device, dtype: torch.dtype,
    epochs: int, lr: float, batch_size: int, description: str = "train",
) -> dict:  # fmt: skip
    """Train ``head``'s trainable parameters; resumable; returns a summary (steps, final loss, speed)."""
    micro = _micro_batch(batch_size, dist.world, cfg.grad_accum)
    lengths = [e.length(data.num_image_tokens) for e in data.encoded]
    n_micro = len(length_grouped_batches(lengths, micro, seed=cfg.seed, epoch=0, rank=dist.rank, world=dist.world))
    spe = steps_per_epoch(n_micro, cfg.grad_accum)
    total = spe * epochs
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    scheduler = schedule(total, cfg.warmup_ratio, optimizer)
    step = start = _restore(run_dir, head, optimizer, scheduler, device, dist)
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
    log = (run_dir / "train_log.jsonl").open("a") if dist.main else None
    meter = _Meter(dist, device)
    # every rank's RNG state at the current step boundary: a checkpoint holds it with that boundary's weights
    # (an interrupted step's micro-batches have drawn dropout masks since, which a resumed run must redraw).
    rng = rng_states(device, dist)
    head.train()
    try:
        with _progress(cfg.progress and dist.main) as bar:
            task = bar.add_task(description, total=total, completed=step, loss=float("nan"), sps=0.0, tps=0.0)
            groups = _step_groups(data, lengths, micro, cfg, dist, step, spe, pin=device.type == "cuda")
            while step < stop_at:
                epoch, group = next(groups)
                meter.add(*_accumulate(model, group, data, device, dtype))
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step, rng = step + 1, rng_states(device, dist)
                rec = {"step": step, "epoch": epoch, "loss": meter.loss, "lr": scheduler.get_last_lr()[0]}
                rec.update({k: v for k, v in meter.rates().items() if k != "seconds"})
                bar.update(task, completed=step, loss=meter.loss, sps=rec["samples_per_s"], tps=rec["tokens_per_s"])
                if log:
                    log.write(json.dumps(rec) + "\n")
                if dist.main and (step % cfg.checkpoint_every == 0 or step % spe == 0 or step == stop_at):
                    log.flush()
                    save_checkpoint(run_dir, head, optimizer, scheduler, step, total, device, rng)
    except KeyboardInterrupt:
        if dist.main:
            save_checkpoint(run_dir, head, optimizer, scheduler, step, total, device, rng)
        raise
    finally:
        if log:
            log.close()
        if cfg.gradient_checkpointing:
            head.base.gradient_checkpointing_disable()
    return {"total_steps": total, "steps_per_epoch": spe, "micro_batch": micro, "world_size": dist.world,
            "resumed_from_step": start, "step": step, "done": step >= total, "final_loss": meter.loss,
            **meter.rates()}  # fmt: skip


def _accumulate(
    model: Any, group: list[dict], data: LoopData, device: torch.device, dtype: torch.dtype
) -> tuple[float, int, int]:
    """Forward/backward over one optimizer step's micro-batches (DDP syncs on the last only).

    Returns (mean loss, samples, tokens).
    """
    total, n, toks = 0.0, 0, 0
    for i, batch in enumerate(group):
        sync = i == len(group) - 1 or not hasattr(model, "no_sync")
        with nullcontext() if sync else model.no_sync():
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with autocast(device, dtype):
                loss = model(batch, data.featurize(batch))
            (loss / len(group)).backward()
        total += loss.item()
        n += batch["input_ids"].shape[0]
        toks += int(batch["attention_mask"].sum())
    return total / max(len(group), 1), n, toks


# -- the LLM head's train() ----------------------------------------------------------------------------------
def comparable(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NON_TRAINING_FIELDS}


def check_resumable(run_dir: Path, config: Any) -> None:
    """Refuse to mix two different runs in one directory."""
    path = run_dir / "config.json"
    if not path.is_file():
        return
    old, new = comparable(json.loads(path.read_text())), comparable(json.loads(json.dumps(asdict(config))))
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
    previous = json.loads(run_file.read_text()).get("training") if run_file.is_file() else None
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
