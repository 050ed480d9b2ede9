"""LLM-head checkpoints: nothing is unpickled (planted payloads do not run), the swap is atomic (a kill at any
point of a save resumes from the previous checkpoint), and state round-trips exactly through safetensors + JSON."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ava.errors import AvaError
from ava.heads.llm import checkpoint as ckpt
from tests.helpers import plant_pickle


def _state(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3, generator=g))], lr=1e-3, fused=True)
    opt.param_groups[0]["params"][0].grad = torch.ones(3)
    opt.step()
    return {
        "model": {"a.weight": torch.randn(2, 2, generator=g)},
        "optimizer": opt.state_dict(),
        "rng": [{"torch": torch.random.get_rng_state()}],
        "step": step,
        "total_steps": 10,
    }


def test_state_round_trips_exactly(tmp_path):
    state = _state(3)
    ckpt.write_checkpoint(tmp_path, state)
    back = ckpt.read_checkpoint(tmp_path)
    assert back["step"] == 3 and torch.equal(back["model"]["a.weight"], state["model"]["a.weight"])
    rng = back["rng"][0]["torch"]
    assert torch.equal(rng, state["rng"][0]["torch"]) and rng.dtype == torch.uint8
    opt = back["optimizer"]
    assert set(opt["state"]) == {0} and opt["param_groups"][0]["betas"] == (0.9, 0.999)  # int keys, tuples kept
    assert torch.equal(opt["state"][0]["exp_avg"], state["optimizer"]["state"][0]["exp_avg"])
    files = sorted(p.name for p in (tmp_path / "checkpoint").rglob("*") if p.is_file())
    assert files == ["latest", "state.json", "state.safetensors"]
    with pytest.raises(TypeError, match="not a tensor or a plain value"):
        ckpt.write_checkpoint(tmp_path, {"step": 4, "bad": object()})
    assert ckpt.read_checkpoint(tmp_path)["step"] == 3  # the failed save changed nothing


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


@pytest.mark.parametrize("at", ["version", "pointer"])
def test_kill_during_the_swap_keeps_the_previous_checkpoint(tmp_path, monkeypatch, at):
    ckpt.write_checkpoint(tmp_path, _state(5))
    real = os.replace

    def replace(src, dst):
        if (Path(dst).name == ckpt.LATEST) == (at == "pointer"):
            raise _Killed
        return real(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    with pytest.raises(_Killed):
        ckpt.write_checkpoint(tmp_path, _state(9))
    monkeypatch.undo()
    assert ckpt.read_checkpoint(tmp_path)["step"] == 5  # never none, never a half-written one
    ckpt.write_checkpoint(tmp_path, _state(9))
    assert ckpt.read_checkpoint(tmp_path)["step"] == 9
    assert len([p for p in (tmp_path / "checkpoint").iterdir() if p.is_dir()]) == 1  # leftovers removed


def test_background_writer_snapshots_and_reports_errors(tmp_path, monkeypatch):
    w = ckpt.CheckpointWriter(tmp_path)
    state = _state(2)
    w.save(state)
    state["model"]["a.weight"].add_(1.0)  # training goes on while the write runs: the snapshot does not change
    w.close()
    assert not torch.equal(ckpt.read_checkpoint(tmp_path)["model"]["a.weight"], state["model"]["a.weight"])

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "write_checkpoint", fail)
    w.save(_state(3))
    with pytest.raises(OSError, match="No space"):
        w.close()


def test_planted_pickle_in_a_run_dir_does_not_run(tmp_path):
    marker = tmp_path / "marker"
    plant_pickle(tmp_path / "run" / "checkpoint" / "state.pt", marker)
    with pytest.raises(AvaError, match="old pickle format"):
        ckpt.read_checkpoint(tmp_path / "run")
    assert not marker.exists()
    # a pickle where the safetensors file should be is refused by the safetensors reader, not run
    ckpt.write_checkpoint(tmp_path / "run2", _state(1))
    version = ckpt.current_version(tmp_path / "run2")
    plant_pickle(version / ckpt.TENSORS, marker)
    with pytest.raises(AvaError, match="cannot be read"):
        ckpt.read_checkpoint(tmp_path / "run2")
    assert not marker.exists()
    (tmp_path / "run2" / "checkpoint" / "latest").write_text("../../etc\n")
    with pytest.raises(AvaError, match="not a complete checkpoint"):
        ckpt.read_checkpoint(tmp_path / "run2")


def test_planted_pickle_as_init_projector_does_not_run(tmp_path):
    from ava.heads.llm.runtime import read_init

    marker = tmp_path / "marker"
    plant_pickle(tmp_path / "stage2" / "mm_projector.bin", marker)
    with pytest.raises(AvaError, match=r"mm_projector.bin: not loaded.*never runs code"):
        read_init(str(tmp_path / "stage2"))
    assert not marker.exists()


def test_no_unsafe_torch_load_in_the_package():
    """Every torch.load in ava/ passes weights_only=True."""
    import re

    root = Path(__file__).resolve().parents[1] / "ava"
    for path in root.rglob("*.py"):
        for call in re.findall(r"torch\.load\(([^)]*)\)", path.read_text()):
            assert "weights_only=True" in call, f"{path}: torch.load({call})"
