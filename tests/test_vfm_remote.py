"""No checkpoint code runs unless asked, and ``--trust-remote-code`` runs it when asked.

A planted checkpoint maps its config and model to its own Python files (``auto_map``), whose import writes a
marker file: the payload.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ava.cli.main import app
from ava.errors import AvaError
from ava.vfm import load_vfm
from tests.helpers import make_dataset, plant

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_yes_on_stdin_runs_no_planted_code(tmp_path):
    """The issue's repro: `yes | ava cache extract --vfm hf:DIR` ran the planted code; now a one-line refusal."""
    ckpt = plant(tmp_path)
    data = make_dataset(tmp_path / "data", n_images=2)
    args = [
        "cache",
        "extract",
        "--vfm",
        f"hf:{ckpt}",
        "--data",
        str(data),
        "--cache",
        str(tmp_path / "cache"),
        "--device",
        "cpu",
        "-q",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "ava", *args], input="yes\n" * 50, capture_output=True, text=True, env=env, timeout=300
    )
    assert not (tmp_path / "payload_ran").exists()
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "published with its own Python code" in message and "never runs unless asked" in message, message
    assert "Traceback" not in result.stderr and "[y/N]" not in result.stdout + result.stderr
    # the only option it names is one `ava cache extract` has
    options = set(re.findall(r"--[a-z][a-z-]+", message))
    help_text = CliRunner().invoke(app, ["cache", "extract", "--help"], terminal_width=200).output
    assert options == {"--trust-remote-code"} and all(o in help_text for o in options)
    # a registered key pointed at it, and `vfm show`: the same refusal, no code
    runner = CliRunner()
    for argv in ([*args[:3], f"dinov2@{ckpt}", *args[4:]], ["vfm", "show", f"hf:{ckpt}"]):
        result = runner.invoke(app, argv, input="yes\n" * 20)
        assert isinstance(result.exception, AvaError) and "its own Python code" in str(result.exception), argv
    assert not (tmp_path / "payload_ran").exists()


def test_trust_remote_code_runs_it_when_asked_and_is_recorded(tmp_path):
    ckpt = plant(tmp_path)
    vfm = load_vfm(f"hf:{ckpt}#prefix=1", trust_remote_code=True)
    assert (tmp_path / "payload_ran").read_text().count("ran") >= 2  # asked for: the publisher's code ran
    assert type(vfm.model.model).__name__ == "EvilModel"
    out = vfm(torch.zeros(1, 3, 32, 32))
    assert tuple(out.shape) == (1, 1, 4, 32)
    assert vfm.identity()["trust_remote_code"] is True and vfm.spec.loader == "remote"
    facts = json.loads(
        CliRunner().invoke(app, ["vfm", "show", f"hf:{ckpt}#prefix=1", "--json", "--trust-remote-code"]).output
    )
    assert facts["trust_remote_code"] is True and facts["loader"] == "remote"


def test_trust_remote_code_goes_into_the_cache_spec(tmp_path):
    ckpt = plant(tmp_path)
    data = make_dataset(tmp_path / "data", n_images=2)
    args = [
        "cache",
        "extract",
        "--vfm",
        f"hf:{ckpt}#prefix=1",
        "--data",
        str(data),
        "--cache",
        str(tmp_path / "cache"),
        "--device",
        "cpu",
        "-q",
        "--trust-remote-code",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    specs = [json.loads(p.read_text()) for p in (tmp_path / "cache").rglob("*.json")]
    assert any('"trust_remote_code": true' in json.dumps(s) for s in specs)


def test_llm_head_online_vfm_runs_remote_code_only_when_asked(tmp_path):
    """The LLM head's online path (the VFM inside training): a remote-code checkpoint is refused without
    trust_remote_code (nothing runs), loads with it, and the run's feature info records the choice."""
    from types import SimpleNamespace

    from ava.data.format import Dataset
    from ava.heads.llm.config import AlignConfig, LLMHeadConfig
    from ava.heads.llm.runtime import _online_source

    assert LLMHeadConfig().trust_remote_code is False and AlignConfig().trust_remote_code is False
    ckpt = plant(tmp_path)
    dataset = Dataset(make_dataset(tmp_path / "data", n_images=2))
    samples = dataset.samples("color")
    cfg = SimpleNamespace(vfm=f"hf:{ckpt}#prefix=1", cache="", layer=None, trust_remote_code=False)
    with pytest.raises(AvaError, match="its own Python code.*--trust-remote-code"):
        _online_source(cfg, dataset, samples, torch.device("cpu"))
    assert not (tmp_path / "payload_ran").exists()
    source = _online_source(
        SimpleNamespace(**{**vars(cfg), "trust_remote_code": True}), dataset, samples, torch.device("cpu")
    )
    assert (tmp_path / "payload_ran").exists() and source.info["vfm_trust_remote_code"] is True
    assert source.featurize.vfm.identity()["trust_remote_code"] is True
    help_text = CliRunner().invoke(app, ["head", "train", "--help"], terminal_width=200).output
    assert "--trust-remote-code" in help_text
