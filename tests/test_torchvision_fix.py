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
__version__ = {version!r}
try:
    torch.ops.torchvision.nms
except (AttributeError, RuntimeError):
    raise RuntimeError({message!r})
loaded = True
"""


def _run(
    code: str, fake_message: str | None, tmp_path: Path, version: str = "0.0.1", requires: str | None = None
) -> subprocess.CompletedProcess:
    """``code`` in a child python; ``fake_message``: a fake torchvision failing like the CUDA wheel, of ``version``,
    with a dist-info requiring ``requires`` (e.g. ``torch (==2.13.0)``) when given."""
    paths = [str(ROOT)]
    if fake_message is not None:
        (tmp_path / "torchvision").mkdir()
        (tmp_path / "torchvision" / "__init__.py").write_text(FAKE.format(message=fake_message, version=version))
        if requires is not None:
            info = tmp_path / f"torchvision-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: torchvision\nVersion: {version}\nRequires-Dist: {requires}\n"
            )
        paths.insert(0, str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


def test_broken_torchvision_imports_after_the_fix_with_one_warning(tmp_path):
    code = "import ava, torchvision, ava.torchvision_fix as f; print(torchvision.loaded, f.applied)"
    result = _run(code, "operator torchvision::nms does not exist", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
    assert result.stderr.count("pytorch/vision#9085") == 1


def _torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


@pytest.mark.parametrize(
    ("version", "requires", "warns"),
    [
        ("0.28.0+cu130", "torch (=={torch})", False),  # the release made for this torch, a CUDA build: complete for ava
        ("0.28.0+cu130", "torch (==1.0.0)", True),  # made for another torch
        ("0.28.0", "torch (=={torch})", True),  # not a CUDA build: something else broke its operators
        ("0.99.0+cu130", None, True),  # no metadata of its own to tell
    ],
)
def test_the_readmes_pairing_imports_without_a_warning_any_other_warns(tmp_path, version, requires, warns):
    import torch

    if torch.version.cuda is not None:
        pytest.skip("a CUDA torch: every pairing that needs the fix warns")
    code = "import ava, torchvision, ava.torchvision_fix as f; print(torchvision.loaded, f.applied)"
    result = _run(
        code,
        "operator torchvision::nms does not exist",
        tmp_path,
        version,
        requires and requires.format(torch=_torch_version()),
    )
    assert result.returncode == 0 and result.stdout.split() == ["True", "True"], result.stderr
    assert result.stderr.count("pytorch/vision#9085") == (1 if warns else 0), result.stderr


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
