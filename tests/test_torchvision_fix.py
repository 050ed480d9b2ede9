"""ava.torchvision_fix: acts only when importing torchvision fails with pytorch/vision#9085's error, warns once.

A fake ``torchvision`` package on a temporary path plays the broken wheel, so this runs with or without a real
torchvision installed; when a real one is installed, transformers and timm are checked to import through ava.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A torchvision whose package init fails like the CUDA wheel beside a CPU torch, unless the schema is declared.
FAKE = """
import torch
try:
    torch.ops.torchvision.nms
except (AttributeError, RuntimeError):
    raise RuntimeError({message!r})
loaded = True
"""


def _run(code: str, fake_message: str | None, tmp_path: Path) -> subprocess.CompletedProcess:
    paths = [str(ROOT)]
    if fake_message is not None:
        (tmp_path / "torchvision").mkdir()
        (tmp_path / "torchvision" / "__init__.py").write_text(FAKE.format(message=fake_message))
        paths.insert(0, str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip


def test_broken_torchvision_imports_after_the_fix_with_one_warning(tmp_path):
    code = "import ava, torchvision, ava.torchvision_fix as f; print(torchvision.loaded, f.applied)"
    result = _run(code, "operator torchvision::nms does not exist", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
    assert result.stderr.count("pytorch/vision#9085") == 1


def test_other_torchvision_errors_are_not_hidden(tmp_path):
    result = _run("import ava, torchvision", "some other failure", tmp_path)
    assert result.returncode != 0 and "some other failure" in result.stderr


def test_without_ava_the_fake_fails_as_the_real_wheel_does(tmp_path):
    result = _run("import torchvision", "operator torchvision::nms does not exist", tmp_path)
    assert result.returncode != 0 and "torchvision::nms does not exist" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="no torchvision installed here")
def test_real_torchvision_transformers_and_timm_import_through_ava(tmp_path):
    code = "import ava; from transformers import Qwen2ForCausalLM, SiglipVisionModel; import timm; print('ok')"
    result = _run(code, None, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
