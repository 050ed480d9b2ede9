"""The ``timm:`` family: any timm model, by name or from a local directory, under ava's feature contract.

- ``timm:<name>[.<tag>]`` (``timm:vit_pe_spatial_large_patch14_448.fb``): the architecture and its pretrained
  config come from timm itself; the weights are the Hugging Face hub repository timm names for that tag
  (``timm/<name>.<tag>``), found in the Hugging Face cache or downloaded (safetensors and JSON only).
- ``timm:<dir>``: a folder holding ``config.json`` + ``model.safetensors`` as ``timm.models.save_for_hf`` writes
  them (the same layout as timm's hub repositories).

Features come from timm's ``forward_intermediates`` (its uniform multi-layer API): layer ``i`` is the output of
intermediate ``i`` of ``model.feature_info`` (one per block for ViTs, one per stage for CNNs; there is no
embedding output, so -1 is the last block/stage and -2 the one before, the paper's choice). Prefix tokens (CLS,
registers) come from the model (``num_prefix_tokens``) and are returned in front of the patch tokens, so the
generic check "raw tokens = prefix + grid" of :class:`ava.vfm.model.FrozenVFM` holds for timm too. A CNN's
feature map ``[B, C, H, W]`` becomes ``H*W`` tokens of dimension ``C``; its "patch size" is the stage's stride.
Mean, std and input size come from the model's pretrained config; the cache key from the weights' identity.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ava.errors import AvaError
from ava.jsonfile import read_json
from ava.vfm.spec import VFMSpec

TIMM = "timm"  # the model_class of every timm spec


def import_timm() -> Any:
    """``timm``, or an error saying what is missing (torchvision is imported through :mod:`ava.torchvision_fix`)."""
    try:
        import timm
    except ImportError as e:
        raise AvaError(f"the timm family needs timm and torchvision: pip install timm ({e})") from e
    return timm


# -- specs ---------------------------------------------------------------------------------------------------
def timm_spec(text: str) -> VFMSpec:
    """The spec of ``timm:<name-or-dir>``, read from timm's pretrained config (nothing downloaded)."""
    name = f"timm:{text}"
    path = Path(text).expanduser()
    if path.is_dir():
        arch, model_args, cfg = read_dir_config(path)
        hub_id: str | None = str(path)
    else:
        from ava.vfm.weights import looks_like_path

        if looks_like_path(text):
            raise AvaError(f"timm model directory {text} does not exist")
        arch, model_args, cfg, hub_id = _named(text)
    return spec_from_model(name, arch, model_args, cfg, hub_id=hub_id, title=f"timm {text}")


def _named(text: str) -> tuple[str, dict[str, Any], dict[str, Any], str]:
    timm = import_timm()
    arch = text.split(".")[0]
    if not timm.is_model(arch):
        close = timm.list_models(f"*{arch.split('_')[0]}*")[:5] if "_" in arch else []
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise AvaError(f"timm has no model {arch!r}{hint}; see timm.list_models()")
    pcfg = timm.models.get_pretrained_cfg(text)
    if pcfg is None:
        raise AvaError(f"timm has no pretrained config {text!r}; tags: {', '.join(timm.list_pretrained(arch + '*'))}")
    cfg = pcfg.to_dict()
    if not cfg.get("hf_hub_id"):
        raise AvaError(f"timm's {text!r} has no Hugging Face hub weights; save them with save_for_hf and use timm:DIR")
    return arch, {}, cfg, str(cfg["hf_hub_id"])


def read_dir_config(path: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(architecture, model_args, pretrained_cfg) from a timm ``config.json``."""
    file = path / "config.json"
    try:
        data = read_json(file)
    except (OSError, ValueError) as e:
        raise AvaError(f"{file}: not a timm config ({e})") from e
    if not isinstance(data, dict) or "architecture" not in data:
        raise AvaError(f"{file} names no 'architecture': not a timm model directory (save it with save_for_hf)")
    cfg = dict(data.get("pretrained_cfg") or {k: v for k, v in data.items() if k != "architecture"})
    return str(data["architecture"]), dict(data.get("model_args") or {}), cfg


def build(arch: str, model_args: dict[str, Any], device: str = "cpu", seed: int = 0) -> Any:
    """The timm architecture with random weights (seeded) or on the meta device; no weights are loaded."""
    timm = import_timm()
    if device == "meta":
        with torch.device("meta"):
            return timm.create_model(arch, pretrained=False, **model_args)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return timm.create_model(arch, pretrained=False, **model_args)


def layer_facts(model: Any, layer: int) -> tuple[int, int]:
    """(channels, stride) of intermediate ``layer`` (negative) of a timm model, from its ``feature_info``."""
    info = _feature_info(model)
    item = info[layer]
    return int(item["num_chs"]), int(item["reduction"])


def _feature_info(model: Any) -> list[dict[str, Any]]:
    info = getattr(model, "feature_info", None)
    if not info or not hasattr(model, "forward_intermediates"):
        raise AvaError(
            f"timm model {type(model).__name__} has no forward_intermediates/feature_info: ava cannot read its layers"
        )
    return list(info.info if hasattr(info, "info") else info)


def spec_from_model(
    key: str,
    arch: str,
    model_args: dict[str, Any],
    cfg: dict[str, Any],
    *,
    hub_id: str | None,
    title: str,
    layers: tuple[int, ...] = (-2,),
    **kw: Any,
) -> VFMSpec:
    """A spec from a timm architecture and its pretrained config; the model is built on the meta device."""
    model = build(arch, model_args, "meta")
    dim, stride = layer_facts(model, layers[0])
    size = int((cfg.get("input_size") or (3, 224, 224))[-1])
    prefix = int(getattr(model, "num_prefix_tokens", 0) or 0)
    return VFMSpec(
        key=key,
        model_class=TIMM,
        hub_id=hub_id,
        image_size=size,
        patch_size=stride,
        dim=dim,
        prefix_tokens=prefix,
        prefix_desc=_prefix_desc(model),
        mean=tuple(map(float, cfg.get("mean") or (0.485, 0.456, 0.406))),  # type: ignore[arg-type]
        std=tuple(map(float, cfg.get("std") or (0.229, 0.224, 0.225))),  # type: ignore[arg-type]
        config={"architecture": arch, "model_args": model_args},
        layers=layers,
        title=title,
        loader="timm",
        **kw,
    )


def _prefix_desc(model: Any) -> str:
    n = int(getattr(model, "num_prefix_tokens", 0) or 0)
    if n == 0:
        return "none"
    regs = int(getattr(model, "num_reg_tokens", 0) or 0)
    cls = n - regs
    return f"{cls} CLS" + (f" + {regs} registers" if regs else "")


# -- loading -------------------------------------------------------------------------------------------------
class TimmBackbone(nn.Module):
    """A timm model whose ``forward(pixel_values, layers)`` gives the chosen intermediates as
    ``[B, prefix + H*W, C]`` each (see the module docstring)."""

    takes_layers = True

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.num_hidden = len(_feature_info(model))
        params = inspect.signature(model.forward_intermediates).parameters
        self._prefix = "return_prefix_tokens" in params and int(getattr(model, "num_prefix_tokens", 0) or 0) > 0
        # A CNN (convolutions past the stem) runs in channels-last memory: its depthwise and 1x1 convolutions are
        # faster so on a CPU (measured on EfficientNet-Lite0), and it is the layout GPUs prefer too.
        self.channels_last = sum(isinstance(m, nn.Conv2d) for m in model.modules()) > 1
        if self.channels_last:
            model.to(memory_format=torch.channels_last)

    def forward(self, pixel_values: torch.Tensor, layers: tuple[int, ...]) -> list[torch.Tensor]:
        if self.channels_last:
            pixel_values = pixel_values.contiguous(memory_format=torch.channels_last)
        wanted = sorted({self.num_hidden + layer for layer in layers})
        kwargs = {"return_prefix_tokens": True} if self._prefix else {}
        out = self.model.forward_intermediates(
            pixel_values, indices=wanted, intermediates_only=True, stop_early=True, **kwargs
        )
        by_index = dict(zip(wanted, out, strict=True))
        states = []
        for layer in layers:
            item = by_index[self.num_hidden + layer]
            spatial, prefix = item if isinstance(item, tuple) else (item, None)
            tokens = spatial.flatten(2).transpose(1, 2)  # NCHW -> [B, H*W, C]
            states.append(tokens if prefix is None else torch.cat([prefix, tokens], dim=1))
        return states


def spec_for_layers(spec: VFMSpec, model: Any, layers: tuple[int, ...]) -> VFMSpec:
    """The spec with dim and stride of the chosen layers (CNN stages differ); all layers must share them."""
    facts = {layer_facts(model, layer) for layer in layers}
    if len(facts) > 1:
        raise AvaError(
            f"layers {list(layers)} of VFM {spec.key!r} have different shapes (channels, stride) {sorted(facts)}: "
            f"choose layers of one stage"
        )
    dim, stride = facts.pop()
    return replace(spec, dim=dim, patch_size=stride)


def load_timm(spec: VFMSpec, path: Path) -> Any:
    """The timm model in ``path`` (config.json + model.safetensors), loaded strictly (a partial load is an error)."""
    timm = import_timm()
    arch, _, _ = read_dir_config(path)
    want = (spec.config or {}).get("architecture")
    if want and arch != want:
        raise AvaError(f"{path} holds timm {arch!r}, VFM {spec.key!r} is {want!r}")
    if not (path / "model.safetensors").is_file():
        raise AvaError(f"no model.safetensors in {path} (ava loads safetensors only)")
    try:
        return timm.create_model(f"local-dir:{path}", pretrained=True)
    except (RuntimeError, ValueError, KeyError, OSError) as e:
        raise AvaError(f"cannot load timm {arch!r} from {path}: {str(e).splitlines()[0]}") from e
