"""Per-model-class facts: how a transformers vision class lays out its hidden states and its prefix tokens.

A *family* is one transformers model class. Its facts let ``hf:<dir>`` work for any checkpoint of a known
class (prefix count read from the config, normalization from the checkpoint's preprocessor), and give every
class a tiny random configuration for tests (``tiny-<key>``). Plain data, no torch import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ava.vfm.spec import CLIP_MEAN, CLIP_STD, HALF, IDENTITY_MEAN, IDENTITY_STD, IMAGENET_MEAN, IMAGENET_STD


def _cfg(config: Any, name: str, default: Any = 0) -> Any:
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)


def _no_prefix(config: Any) -> int:
    return 0


def _one_cls(config: Any) -> int:
    return 1


def _cls_and_registers(config: Any) -> int:
    return 1 + int(_cfg(config, "num_register_tokens", 0))


def _first(value: Any) -> int:
    return int(value[0] if isinstance(value, (list, tuple)) else value)


def _config_size(config: Any) -> int:
    return _first(_cfg(config, "image_size", 0) or 0)


def _config_patch(config: Any) -> int:
    return _first(_cfg(config, "patch_size", 0) or 0)


def _naflex_size(config: Any) -> int:
    """NaFlex SigLIP-2 has no fixed size: ava feeds the square grid of ``num_patches`` (its position table)."""
    return int(round(int(_cfg(config, "num_patches", 256)) ** 0.5)) * _config_patch(config)


def _hiera_stride(config: Any) -> int:
    """Hiera (SAM 2): the patch-embedding stride times 2 per query-pooling stage: the last stage's stride."""
    backbone = _cfg(config, "backbone_config", None) or {}
    stride = _first(_cfg(backbone, "patch_stride", None) or 4)
    return stride * 2 ** int(_cfg(backbone, "num_query_pool_stages", 3))


def _hiera_layers(config: Any) -> int:
    backbone = _cfg(config, "backbone_config", None) or {}
    return sum(_cfg(backbone, "blocks_per_stage", None) or [2, 3, 16, 3])


def _hidden_size(config: Any) -> int:
    return int(_cfg(config, "hidden_size", 0))


def _hiera_dim(config: Any) -> int:
    backbone = _cfg(config, "backbone_config", None) or {}
    return int((_cfg(backbone, "embed_dim_per_stage", None) or [96, 192, 384, 768])[-1])


def _backbone(config: Any) -> Any:
    return _cfg(config, "backbone_config", None) or {}


def _sam3_size(config: Any) -> int:
    return _first(_cfg(_backbone(config), "image_size", 1008))


def _sam3_patch(config: Any) -> int:
    return _first(_cfg(_backbone(config), "patch_size", 14))


def _sam3_layers(config: Any) -> int:
    return int(_cfg(_backbone(config), "num_hidden_layers", 32))


def _sam3_dim(config: Any) -> int:
    return int(_cfg(_backbone(config), "hidden_size", 1024))


def _radio_prefix(config: Any) -> int:
    return int(_cfg(config, "num_cls_tokens", 3)) + int(_cfg(config, "num_registers", 7))


@dataclass(frozen=True)
class Family:
    """How to build, run and read one transformers vision class."""

    model_class: str
    config_class: str
    prefix: Callable[[Any], int]  # prefix tokens from the config (a dict or a config object)
    prefix_desc: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    tiny: dict[str, Any]  # a 2-layer, 64-wide config of this class for tests
    tiny_size: int
    tiny_patch: int
    layout: str = "tokens"  # "tokens": [B, N, D]; "nhwc": [B, H, W, D] (SAM)
    model_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. no pooler: it is never used
    internal_norm: bool = False  # the model normalizes its input itself (RADIO): feed [0, 1] pixels
    tiny_postprocess: str | None = None
    # input size and patch (stride of the read layer) from a config; classes without image_size/patch_size differ
    size_of: Callable[[Any], int] = _config_size
    patch_of: Callable[[Any], int] = _config_patch
    num_layers: Callable[[Any], int] | None = None  # blocks, when the config has no num_hidden_layers
    dim_of: Callable[[Any], int] = _hidden_size  # token dimension at the read layer


_TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}

FAMILIES: dict[str, Family] = {
    f.model_class: f
    for f in [
        Family(
            "SiglipVisionModel",
            "SiglipVisionConfig",
            _no_prefix,
            "none",
            HALF,
            HALF,
            {**_TINY, "intermediate_size": 128, "image_size": 56, "patch_size": 14},
            56,
            14,
        ),
        Family(
            "Aimv2VisionModel",
            "Aimv2VisionConfig",
            _no_prefix,
            "none",
            CLIP_MEAN,
            CLIP_STD,
            {**_TINY, "intermediate_size": 128, "image_size": 56, "patch_size": 14},
            56,
            14,
        ),
        Family(
            "CLIPVisionModel",
            "CLIPVisionConfig",
            _one_cls,
            "1 CLS",
            CLIP_MEAN,
            CLIP_STD,
            {**_TINY, "intermediate_size": 128, "image_size": 56, "patch_size": 14},
            56,
            14,
        ),
        Family(
            "InternVLVisionModel",
            "InternVLVisionConfig",
            _one_cls,
            "1 CLS",
            IMAGENET_MEAN,
            IMAGENET_STD,
            {**_TINY, "intermediate_size": 128, "image_size": [56, 56], "patch_size": [14, 14]},
            56,
            14,
        ),
        Family(
            "RadioModel",
            "RadioConfig",
            _radio_prefix,
            "summary (CLS) + registers",
            IDENTITY_MEAN,
            IDENTITY_STD,
            {**_TINY, "image_size": 64, "patch_size": 16, "max_img_size": 256, "num_cls_tokens": 2, "num_registers": 2},
            64,
            16,
            internal_norm=True,
        ),
        Family(
            "Dinov2Model",
            "Dinov2Config",
            _one_cls,
            "1 CLS",
            IMAGENET_MEAN,
            IMAGENET_STD,
            {**_TINY, "mlp_ratio": 2, "image_size": 56, "patch_size": 14},
            56,
            14,
        ),
        Family(
            "Dinov2WithRegistersModel",
            "Dinov2WithRegistersConfig",
            _cls_and_registers,
            "1 CLS + registers",
            IMAGENET_MEAN,
            IMAGENET_STD,
            {**_TINY, "mlp_ratio": 2, "image_size": 56, "patch_size": 14, "num_register_tokens": 4},
            56,
            14,
        ),
        Family(
            "ViTModel",
            "ViTConfig",
            _one_cls,
            "1 CLS",
            HALF,
            HALF,
            {**_TINY, "intermediate_size": 128, "image_size": 64, "patch_size": 16},
            64,
            16,
            model_kwargs={"add_pooling_layer": False},
        ),
        Family(
            "SamVisionModel",
            "SamVisionConfig",
            _no_prefix,
            "none",
            IMAGENET_MEAN,
            IMAGENET_STD,
            {
                **_TINY,
                "output_channels": 32,
                "image_size": 128,
                "patch_size": 16,
                "window_size": 4,
                "global_attn_indexes": [1],
                "initializer_range": 0.02,
            },
            128,
            16,
            layout="nhwc",
            tiny_postprocess="pool:3x3",
        ),
        Family(
            "DPTModel",
            "DPTConfig",
            _one_cls,
            "1 CLS (readout)",
            HALF,
            HALF,
            {
                **_TINY,
                "intermediate_size": 128,
                "image_size": 64,
                "patch_size": 16,
                "is_hybrid": True,
                "backbone_featmap_shape": [1, 64, 4, 4],
                "neck_hidden_sizes": [16, 32, 64, 64],
                "backbone_config": {
                    "model_type": "bit",
                    "embedding_size": 16,
                    "hidden_sizes": [16, 32, 64, 128],
                    "depths": [1, 1, 1],
                    "num_groups": 4,
                    "layer_type": "bottleneck",
                    "global_padding": "same",
                    "embedding_dynamic_padding": True,
                    "out_features": ["stage1", "stage2", "stage3"],
                },
            },
            64,
            16,
            model_kwargs={"add_pooling_layer": False},
        ),
        Family(
            "DINOv3ViTModel",
            "DINOv3ViTConfig",
            _cls_and_registers,
            "1 CLS + registers",
            IMAGENET_MEAN,
            IMAGENET_STD,
            {**_TINY, "intermediate_size": 128, "image_size": 64, "patch_size": 16, "num_register_tokens": 4},
            64,
            16,
        ),
        Family(
            "Tipsv2VisionModel",
            "Tipsv2VisionConfig",
            _cls_and_registers,
            "1 CLS + registers",
            IDENTITY_MEAN,
            IDENTITY_STD,
            {**_TINY, "mlp_ratio": 2, "image_size": 56, "patch_size": 14, "num_register_tokens": 1},
            56,
            14,
        ),
        Family(
            "MetaClip2VisionModel",
            "MetaClip2VisionConfig",
            _one_cls,
            "1 CLS",
            CLIP_MEAN,
            CLIP_STD,
            {**_TINY, "intermediate_size": 128, "image_size": 56, "patch_size": 14},
            56,
            14,
        ),
        Family(
            "Siglip2VisionModel",
            "Siglip2VisionConfig",
            _no_prefix,
            "none",
            HALF,
            HALF,
            {**_TINY, "intermediate_size": 128, "patch_size": 16, "num_patches": 16},
            64,
            16,
            layout="naflex",
            size_of=_naflex_size,
        ),
        Family(
            "Sam2VisionModel",
            "Sam2VisionConfig",
            _no_prefix,
            "none",
            IMAGENET_MEAN,
            IMAGENET_STD,
            {
                "backbone_config": {
                    "model_type": "sam2_hiera_det_model",
                    "hidden_size": 16,
                    "num_attention_heads": 1,
                    "blocks_per_stage": [1, 1, 2, 2],
                    "embed_dim_per_stage": [16, 32, 64, 128],
                    "num_attention_heads_per_stage": [1, 1, 2, 2],
                    "window_size_per_stage": [4, 2, 4, 2],
                    "global_attention_blocks": [3],
                    "image_size": [128, 128],
                    "window_positional_embedding_background_size": [2, 2],
                },
                "backbone_channel_list": [128, 64, 32, 16],
                "fpn_hidden_size": 32,
                "image_size": 128,
            },
            128,
            32,
            layout="nhwc",
            tiny_postprocess="pool:2x2",
            patch_of=_hiera_stride,
            num_layers=_hiera_layers,
            dim_of=_hiera_dim,
        ),
        Family(
            "Sam3VisionModel",
            "Sam3VisionConfig",
            _no_prefix,
            "none",
            HALF,
            HALF,
            {
                "backbone_config": {
                    "model_type": "sam3_vit_model",
                    **_TINY,
                    "intermediate_size": 128,
                    "image_size": 56,
                    "patch_size": 14,
                    "window_size": 2,
                    "global_attn_indexes": [1],
                    "pretrain_image_size": 28,
                },
                "fpn_hidden_size": 32,
                "backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]],
            },
            56,
            14,
            layout="nhwc",
            tiny_postprocess="pool:2x2",
            size_of=_sam3_size,
            patch_of=_sam3_patch,
            num_layers=_sam3_layers,
            dim_of=_sam3_dim,
        ),
    ]
}

# Config class name -> family, for ``hf:<dir>`` checkpoints (composite configs are reduced to their vision part).
BY_CONFIG: dict[str, Family] = {f.config_class: f for f in FAMILIES.values()}


def family(model_class: str) -> Family:
    """The facts of a model class; AvaError for classes ``ava`` does not know how to read."""
    if model_class not in FAMILIES:
        from ava.errors import AvaError

        raise AvaError(f"no VFM family for transformers class {model_class!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[model_class]
