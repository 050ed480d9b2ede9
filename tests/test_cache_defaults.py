"""Extraction defaults sized to the device and machine, and the codecs' deferred range check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ava.cache.codecs import get_codec
from ava.cache.extraction import _ShardChecks, default_workers, forward_dtype
from ava.errors import AvaError


def test_forward_dtype_is_bf16_on_cuda_only() -> None:
    assert forward_dtype("auto", torch.device("cpu")) == "fp32"
    assert forward_dtype("auto", torch.device("cuda", 0)) == "bf16"
    assert (
        forward_dtype("fp16", torch.device("cuda", 0)) == "fp16"
        and forward_dtype("bf16", torch.device("cpu")) == "bf16"
    )


@pytest.mark.parametrize(("cpus", "cpu_workers"), [(1, 0), (2, 1), (4, 1), (16, 4), (64, 4)])
def test_workers_leave_cores_to_a_cpu_forward(monkeypatch: pytest.MonkeyPatch, cpus: int, cpu_workers: int) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(cpus)), raising=False)
    assert default_workers(torch.device("cpu")) == cpu_workers
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert default_workers(torch.device("cuda", 0)) == max(1, min(8, cpus - 1))


def test_range_flags_are_read_once_per_shard() -> None:
    codec = get_codec("fp16")
    ok, ok_scale, ok_flag = codec.encode_device(torch.ones(2, 3, 4))
    big = torch.ones(2, 3, 4)
    big[1, 2, 3] = 7e4
    _, _, bad_flag = codec.encode_device(big)
    assert ok_scale is None and ok.dtype == torch.float16 and isinstance(ok_flag, torch.Tensor)
    fine = _ShardChecks(flags=[(ok_flag, torch.tensor(1.0))])
    fine.settle(codec)
    mixed = _ShardChecks(flags=[(ok_flag, torch.tensor(1.0)), (bad_flag, torch.tensor(7e4))])
    with pytest.raises(AvaError, match="7e\\+04, beyond the fp16 range"):
        mixed.settle(codec)
    values, scale = get_codec("bf16").encode(torch.tensor([[1.5, -2.0]]))
    assert values.dtype == np.uint16 and scale is None


def test_forked_workers_drop_the_group_lock(tmp_path) -> None:  # noqa: ANN001
    """A worker forked while the lock is held closes its copy, so once the job lets go the group is free, even
    while an orphaned worker lives on; it also runs below the forward's priority by the nice it is given."""
    import functools
    import multiprocessing as mp
    import os

    from ava.cache.extraction import _init_worker, _lock_group

    class Group:
        path, key = tmp_path, "g"

    lock = _lock_group(Group())
    ctx = mp.get_context("fork")
    ready, release, nice = ctx.Event(), ctx.Event(), ctx.Value("i", -99)
    init = functools.partial(_init_worker, lock.fileno(), 3)

    def work() -> None:
        init(0)
        nice.value = os.nice(0)
        ready.set()
        release.wait(30)

    child = ctx.Process(target=work)
    child.start()
    try:
        assert ready.wait(30)
        assert nice.value == os.nice(0) + 3  # the worker only: this process keeps its priority
        with pytest.raises(AvaError, match="another"):
            _lock_group(Group())  # still held by the job itself
        lock.close()  # the job ends while its worker lives on
        _lock_group(Group()).close()  # without _init_worker the worker's inherited descriptor would still hold it
    finally:
        release.set()
        child.join(30)


def test_background_work_yields_to_the_forward_only_on_the_cpu() -> None:
    """Decode workers and writer threads run at a lower priority than a CPU forward pass; nothing changes on a GPU.
    A writer thread lowers its own priority, not its process's."""
    import os
    import threading

    from ava.cache.extraction import BACKGROUND_NICE, _lower_priority, background_nice

    assert background_nice(torch.device("cpu")) == BACKGROUND_NICE > 0
    assert background_nice(torch.device("cuda", 0)) == 0
    seen: list[int] = []

    def thread() -> None:
        _lower_priority(2)
        seen.append(os.nice(0))

    before = os.nice(0)
    t = threading.Thread(target=thread)
    t.start()
    t.join()
    assert seen == [before + 2] and os.nice(0) == before
