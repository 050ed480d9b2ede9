"""Extraction across processes: kill -9 then resume, and 2 ranks (gloo) equal 1 process."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from ava.cache import ExtractConfig, content_digest, extract, open_cache
from tests.helpers import done_rows, free_port, kill_when_held, make_dataset, start_extract

VFM = "tiny-dinov2"
PIXELS = "pixels"  # no transformers import: the killed child starts faster


def _reference_digest(data: Path, cache: Path, vfm: str = VFM) -> str:
    extract(
        ExtractConfig(
            vfm=vfm, data=str(data), cache=str(cache), batch_size=2, shard_size=4, device="cpu", progress=False
        )
    )
    return content_digest(open_cache(cache, vfm).group)


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_gives_the_same_digest(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_images=10)
    hold = tmp_path / "held"  # batches of 2, shards of 4: killed in batch 3, once shard 0 is committed
    child = start_extract(data, tmp_path / "c", PIXELS, hold_after=2, hold_file=hold)
    kill_when_held(child, hold, lambda: done_rows(tmp_path / "c") >= 4)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    done = done_rows(tmp_path / "c")
    assert done == 4  # killed mid-run, after exactly one committed shard
    resumed = extract(
        ExtractConfig(
            vfm=PIXELS,
            data=str(data),
            cache=str(tmp_path / "c"),
            batch_size=2,
            shard_size=4,
            device="cpu",
            progress=False,
        )
    )
    assert resumed["already_done"] == done and resumed["extracted"] == 10 - done
    digest = content_digest(open_cache(tmp_path / "c", PIXELS).group)
    assert digest == _reference_digest(data, tmp_path / "ref", PIXELS)


@pytest.mark.slow
def test_two_ranks_equal_one_process(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_images=10)
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo"}
    ranks = [start_extract(data, tmp_path / "c", VFM, RANK=str(r), LOCAL_RANK=str(r), **env) for r in (0, 1)]
    summaries = []
    for child in ranks:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        summaries.append(json.loads(out.split("SUMMARY ", 1)[1]))
    assert [s["rank"] for s in summaries] == [0, 1] and all(s["world_size"] == 2 for s in summaries)
    assert [s["extracted"] for s in summaries] == [6, 4]  # shards 0, 2 (4 + 2 rows) and shard 1 (4 rows)
    assert content_digest(open_cache(tmp_path / "c", VFM).group) == _reference_digest(data, tmp_path / "ref")
