"""Checkpoints published in remote-code format, loaded into transformers' native class by a key/shape mapping.

No code from the checkpoint runs: its ``config.json`` is read as JSON and its ``*.safetensors`` as tensors. Every
tensor is either mapped into the native class or dropped by a named rule (heads that the patch features of any
layer never use); anything else, and any native parameter left without a tensor, is an error (a partial load is
never accepted).

RADIO (``nvidia/RADIO-L``, and the other RADIO checkpoints written by NVlabs' ``hf_hub.py``): the publisher's
``RADIOModel`` wraps ``radio_model.model``, a timm ``VisionTransformer`` whose patch embedding is replaced by a
"CPE" patch generator (``patch_generator.embedder``: a bias-free linear patch projection; ``pos_embed``: a
``max_resolution / patch`` square table, bilinearly resized to the input's grid; ``cls_token.token``: one summary
token per teacher, then registers up to a multiple of ``register_multiple``), timm blocks (fused ``attn.qkv``),
no final norm (``model_norm`` off) and no classifier; ``radio_model.input_conditioner`` normalizes [0, 1] pixels.
transformers' :class:`~transformers.RadioModel` is that architecture (its own conversion table for the ``radio``
model type renames the same keys). Left out by rule: ``radio_model.adaptors.*`` (the per-teacher summary/feature
MLP heads), ``radio_model.feature_normalizer.*`` and ``radio_model.inter_feature_normalizer.*`` (optional
post-hoc normalizations of the outputs, not applied to the layer outputs), and timm's ``fc_norm`` / ``head`` if a
checkpoint carries them (pooled-classifier parts). What the mapping does not represent (a final norm, a pre-norm,
a patch bias or patch norm, SwiGLU blocks, ViTDet windows, any other key) is refused by name.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.jsonfile import read_json

RADIO = "radio_model."
MAPPING = "radio-remote-code-to-RadioModel/1"  # in the cache identity: a changed mapping never reuses old features
# Heads of timm's ViT names (what the publisher's config names in args.model); model_kwargs.num_heads overrides.
TIMM_VIT_HEADS = {"vit_tiny": 3, "vit_small": 6, "vit_base": 12, "vit_large": 16, "vit_huge": 16}
UNUSED_RULES = {
    f"{RADIO}adaptors.": "per-teacher summary/feature heads (adaptors): not part of the backbone's layers",
    f"{RADIO}feature_normalizer.": "post-hoc normalizer of the final features: not applied to layer outputs",
    f"{RADIO}inter_feature_normalizer.": "post-hoc normalizer of intermediates: optional, off by default",
    f"{RADIO}model.fc_norm.": "timm's norm of the pooled classifier input: never applied to the tokens",
    f"{RADIO}model.head.": "timm's classifier (the publisher replaces it by an identity)",
}
_BLOCK = re.compile(rf"^{re.escape(RADIO)}model\.blocks\.(\d+)\.(.+)$")
_BLOCK_PARTS = {
    "norm1.weight": "norm1.weight",
    "norm1.bias": "norm1.bias",
    "norm2.weight": "norm2.weight",
    "norm2.bias": "norm2.bias",
    "attn.proj.weight": "attention.o_proj.weight",
    "attn.proj.bias": "attention.o_proj.bias",
    "mlp.fc1.weight": "mlp.fc1.weight",
    "mlp.fc1.bias": "mlp.fc1.bias",
    "mlp.fc2.weight": "mlp.fc2.weight",
    "mlp.fc2.bias": "mlp.fc2.bias",
    "ls1.gamma": "layer_scale1.lambda1",
    "ls2.gamma": "layer_scale2.lambda1",
}
_TOP = {
    f"{RADIO}model.patch_generator.embedder.weight": "embeddings.patch_projection.weight",
    f"{RADIO}model.patch_generator.pos_embed": "embeddings.position_embedding",
    f"{RADIO}model.patch_generator.cls_token.token": "embeddings.cls_register_token",
    f"{RADIO}input_conditioner.norm_mean": "input_conditioner.norm_mean",
    f"{RADIO}input_conditioner.norm_std": "input_conditioner.norm_std",
    f"{RADIO}summary_idxs": "summary_idxs",
}


def published_radio(path: Path) -> dict[str, Any] | None:
    """The publisher's config.json of a RADIO checkpoint in remote-code format, else None (native or other)."""
    try:
        data = read_json(path / "config.json")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("args"), dict) or not data.get("auto_map"):
        return None
    return data if "radio" in str(data.get("version", "")).lower() or "teachers" in data["args"] else None


def _files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise AvaError(f"no *.safetensors weights in {path} (ava loads safetensors only)")
    return files


def read_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of the checkpoint (headers only, nothing loaded)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for file in _files(path):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has keys(), not __iter__
                shapes[name] = tuple(f.get_slice(name).get_shape())
    return shapes


def radio_config(data: dict[str, Any], shapes: dict[str, tuple[int, ...]], where: str) -> dict[str, Any]:
    """kwargs of ``RadioConfig`` for a published RADIO checkpoint, from its config's ``args`` and its shapes."""
    args = data["args"]
    refuse = _unsupported(data, shapes)
    if refuse:
        raise AvaError(
            f"{where}: this RADIO checkpoint has {refuse}, which transformers' RadioModel cannot "
            f"represent; load it with --trust-remote-code if you trust its code"
        )
    try:
        dim, patch_dim = shapes[f"{RADIO}model.patch_generator.embedder.weight"]
        table = shapes[f"{RADIO}model.patch_generator.pos_embed"][1]
        tokens = shapes[f"{RADIO}model.patch_generator.cls_token.token"][0]
        hidden_mlp = shapes[f"{RADIO}model.blocks.0.mlp.fc1.weight"][0]
    except KeyError as e:
        raise AvaError(f"{where}: not a RADIO ViT checkpoint (no tensor {e.args[0]})") from e
    patch = math.isqrt(patch_dim // 3)
    blocks = {int(m.group(1)) for m in map(_BLOCK.match, shapes) if m}
    teachers = args.get("teachers") or []
    per_teacher = args.get("cls_token_per_teacher", True)
    num_cls = len({t["name"] for t in teachers}) if per_teacher and teachers else 1
    if tokens < num_cls:
        raise AvaError(f"{where}: {tokens} summary/register tokens, fewer than its {num_cls} teachers")
    heads = _heads(args, where)
    return {
        "hidden_size": dim,
        "num_hidden_layers": len(blocks),
        "num_attention_heads": heads,
        "mlp_ratio": hidden_mlp / dim,
        "patch_size": patch,
        "image_size": int(_preferred(data) or 224),
        "max_img_size": math.isqrt(table) * patch,
        "num_cls_tokens": num_cls,
        "num_registers": tokens - num_cls,
        "qkv_bias": f"{RADIO}model.blocks.0.attn.qkv.bias" in shapes,
        "layer_norm_eps": 1e-6,
        "hidden_act": "gelu",
        "summary_idxs": [i for i, t in enumerate(teachers) if t.get("use_summary", True)] or [0],
    }


def _preferred(data: dict[str, Any]) -> int | None:
    res = data.get("preferred_resolution")
    return int(res[0]) if isinstance(res, (list, tuple)) and res else None


def _heads(args: dict[str, Any], where: str) -> int:
    kwargs = args.get("model_kwargs") or {}
    if kwargs.get("num_heads"):
        return int(kwargs["num_heads"])
    name = str(args.get("model", ""))
    for prefix, heads in TIMM_VIT_HEADS.items():
        if name.startswith(prefix + "_"):
            return heads
    raise AvaError(
        f"{where}: RADIO backbone {name!r} is not a timm ViT ava knows the head count of "
        f"({', '.join(TIMM_VIT_HEADS)}); load it with --trust-remote-code"
    )


def _unsupported(data: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> str | None:
    if data.get("vitdet_window_size"):
        return "ViTDet windowed attention (vitdet_window_size)"
    for key in shapes:
        if key.startswith(f"{RADIO}model.norm."):
            return "a final norm (model_norm)"
        if key.startswith(f"{RADIO}model.patch_generator.") and key not in _TOP:
            return f"a patch-generator part the native class lacks ({key})"
        block = _BLOCK.match(key)
        if block and block.group(2) not in _BLOCK_PARTS and not block.group(2).startswith("attn.qkv."):
            return f"a block part the native class lacks ({key})"
    return None


def map_radio(state: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """Published RADIO tensors -> RadioModel state dict, and the names dropped by :data:`UNUSED_RULES`.
    A tensor that is neither mapped nor dropped by a rule is an error."""
    out: dict[str, Any] = {}
    dropped, unknown = [], []
    for key, value in state.items():
        if key in _TOP:
            out[_TOP[key]] = value
        elif block := _BLOCK.match(key):
            index, part = block.groups()
            if part in ("attn.qkv.weight", "attn.qkv.bias"):
                kind = part.rsplit(".", 1)[1]
                for name, chunk in zip("qkv", value.chunk(3, dim=0), strict=True):
                    out[f"encoder.layer.{index}.attention.{name}_proj.{kind}"] = chunk
            elif part in _BLOCK_PARTS:
                out[f"encoder.layer.{index}.{_BLOCK_PARTS[part]}"] = value
            else:
                unknown.append(key)
        elif any(key.startswith(rule) for rule in UNUSED_RULES):
            dropped.append(key)
        else:
            unknown.append(key)
    if unknown:
        raise AvaError(
            f"{where}: {len(unknown)} tensor(s) of this RADIO checkpoint have no place in RadioModel, "
            f"e.g. {', '.join(sorted(unknown)[:3])}"
        )
    return out, dropped


# The attention's names in the installed transformers' RadioModel, by the layout its own state dict shows: separate
# q/k/v/o projections (as in transformers 5.24), or ViT-style ``attention.{query,key,value}`` and ``output.dense`` (as
# in 5.17). :func:`map_radio` writes the first; a model with the second gets them renamed.
_ATTENTION_LAYOUTS = (
    {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "o_proj"},
    {"q_proj": "attention.query", "k_proj": "attention.key", "v_proj": "attention.value", "o_proj": "output.dense"},
)
_ATTENTION_KEY = re.compile(r"^(encoder\.layer\.\d+\.attention\.)([qkvo]_proj)(\.(?:weight|bias))$")


def _native_attention_names(native: Any, where: str) -> dict[str, str]:
    """Which of :data:`_ATTENTION_LAYOUTS` the installed RadioModel's state dict keys ``native`` use (layer 0)."""
    for layout in _ATTENTION_LAYOUTS:
        if all(f"encoder.layer.0.attention.{part}.weight" in native for part in layout.values()):
            return layout
    import transformers

    found = sorted(k for k in native if k.startswith("encoder.layer.0.attention."))
    raise AvaError(
        f"{where}: transformers {transformers.__version__}'s RadioModel names its attention in a way ava "
        f"does not know ({', '.join(found[:4]) or 'no attention weights'}): a partial load is refused"
    )


def _in_native_names(mapped: dict[str, Any], layout: dict[str, str]) -> dict[str, Any]:
    """:func:`map_radio`'s output with its attention keys renamed to ``layout``'s."""
    out = {}
    for key, value in mapped.items():
        m = _ATTENTION_KEY.match(key)
        out[f"{m[1]}{layout[m[2]]}{m[3]}" if m else key] = value
    return out


def _load_tensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for file in _files(path):
        state.update(load_file(str(file), device="cpu"))
    return state


def load_radio(path: Path, data: dict[str, Any], dtype: Any) -> Any:
    """transformers' RadioModel holding the published weights in ``path`` (strict: nothing missing or left over)."""
    return radio_from_state(_load_tensors(path), data, dtype, str(path))


def radio_from_state(state: dict[str, Any], data: dict[str, Any], dtype: Any, where: str) -> Any:
    """RadioModel from a published RADIO state dict (names ``radio_model.*``) and its config.json ``data``."""
    import torch
    import transformers

    if not hasattr(transformers, "RadioModel"):
        raise AvaError(
            f"{where}: RADIO loads into transformers' RadioModel, which transformers "
            f"{transformers.__version__} does not have: upgrade transformers"
        )
    kwargs = radio_config(data, {k: tuple(v.shape) for k, v in state.items()}, where)
    idxs = state.get(f"{RADIO}summary_idxs")
    if idxs is not None and idxs.device.type != "meta":  # the saved buffer decides which summary tokens it reads
        kwargs["summary_idxs"] = [int(i) for i in idxs.tolist()]
    config = transformers.RadioConfig(**kwargs)
    mapped, _ = map_radio(state, where)
    with torch.device("meta"):
        model = transformers.RadioModel(config)
    native = model.state_dict()
    mapped = _in_native_names(mapped, _native_attention_names(native, where))
    device = next(iter(mapped.values())).device
    for key in native:  # the publisher's blocks have no layer scale: the native one is then the identity
        if key.endswith("lambda1") and key not in mapped:
            mapped[key] = torch.full(native[key].shape, float(config.layerscale_value), device=device)
    # buffers the publisher's code fills itself when a checkpoint lacks them: its default conditioner (OpenAI CLIP
    # mean/std, RadioConfig's defaults too) and the teachers' summary indices from the config
    defaults = {
        "input_conditioner.norm_mean": torch.tensor(config.norm_mean).view(-1, 1, 1),
        "input_conditioner.norm_std": torch.tensor(config.norm_std).view(-1, 1, 1),
        "summary_idxs": torch.tensor(config.summary_idxs, dtype=torch.long),
    }
    for key, value in defaults.items():
        mapped.setdefault(key, value.to(device))
    missing = sorted(set(native) - set(mapped))
    if missing:
        raise AvaError(
            f"{where}: the RADIO checkpoint lacks {len(missing)} tensor(s) RadioModel needs, e.g. "
            f"{', '.join(missing[:3])} (a partial load is refused)"
        )
    mapped = {k: v if k == "summary_idxs" else v.to(dtype) for k, v in mapped.items()}
    try:
        model.load_state_dict(mapped, strict=True, assign=True)
    except RuntimeError as e:
        raise AvaError(f"{where}: the RADIO weights do not fit RadioModel: {' '.join(str(e).split())[:400]}") from e
    model.ava_mapping = MAPPING
    return model.eval()
