"""CLIP-like image-text models: a checkpoint with both an image tower and a text tower (CLIP, SigLIP, SigLIP-2,
MetaCLIP-2, TIPSv2, ...), loaded whole through transformers' ``AutoModel``, embedding labels and images into one space.

Two things use it: the text-tower option miner (``ava data options --miner clip@DIR``, :mod:`ava.distractors.miners`)
and the zero-shot head (``ava head train --head zero-shot``, :mod:`ava.heads.zero_shot`). Both rank option texts
by the cosine similarity of their text embedding (label in a prompt template) with the image embedding, the
standard CLIP zero-shot setup FOCI mines with.

The image embedding is the model's own pooled, projected output (``get_image_features``), not the cached layer -2
tokens the other heads read: a zero-shot head needs the space the text tower was trained against. Images are
padded to square (RGB 124,120,111, as the cache does) and then go through the checkpoint's own image processor.

open_clip checkpoints (PE-core, OpenAI/LAION CLIP ...) take the ``open_clip:`` route (:mod:`ava.vfm.openclip`):
``open_clip:local-dir:DIR``, ``open_clip:NAME@WEIGHTS_FILE`` or ``open_clip:NAME:random``, as ``--vfm`` and after
``clip@``; they load through open_clip's own API, transform and tokenizer, behind the same ``texts()`` / ``images()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ava.errors import AvaError

if TYPE_CHECKING:
    from PIL import Image

# transformers model types whose checkpoint carries an image tower and a text tower in one space
DUAL_ENCODER_TYPES = ("clip", "siglip", "siglip2", "metaclip_2", "tipsv2", "chinese_clip", "altclip", "align", "aimv2")
# the vision-tower classes of ava's VFM registry whose published checkpoints carry a text tower
TEXT_TOWER_CLASSES = (
    "CLIPVisionModel",
    "SiglipVisionModel",
    "Siglip2VisionModel",
    "MetaClip2VisionModel",
    "Tipsv2VisionModel",
    "Aimv2VisionModel",
)
DEFAULT_TEMPLATE = "a photo of a {}."
# SigLIP's text tower was trained on text padded to 64 tokens; other towers take the batch's longest text
MAX_LENGTH_PADDED = {"siglip": 64, "siglip2": 64}


class NoTextTowerError(AvaError):
    """The model named has no text tower, so it cannot score labels against images."""


def text_tower_source(vfm: str) -> str:
    """The checkpoint (hub id or directory) behind a ``--vfm`` name that can carry a text tower, or
    :class:`NoTextTowerError` naming the VFM (DINOv2, SAM, pixels, effnet-lite0 ... have none)."""
    from ava.vfm.openclip import is_open_clip, parse
    from ava.vfm.resolve import resolve_vfm

    if is_open_clip(vfm):
        parse(vfm)  # the form and its files checked now (before any other head trains), the model when loaded
        return vfm
    spec = resolve_vfm(vfm)
    if spec.model_class not in TEXT_TOWER_CLASSES:
        raise NoTextTowerError(
            f"VFM {vfm!r} ({spec.model_class}) has no text tower: the zero-shot head needs a CLIP-like checkpoint "
            "with an image and a text tower (CLIP, SigLIP, SigLIP-2, MetaCLIP-2, TIPSv2, e.g. 'clip@DIR' or 'hf:DIR' "
            "of a full CLIPModel / SiglipModel, or an open_clip model such as PE-core: 'open_clip:local-dir:DIR'); "
            "use the probes, kNN or the LLM head for this VFM"
        )
    if spec.hub_id is None:
        key = spec.key.split("@")[0]
        raise NoTextTowerError(
            f"VFM {vfm!r} has built-in random weights and no checkpoint, so no text tower; give "
            f"one with '{key}@DIR' (a full CLIPModel / SiglipModel directory)"
        )
    return spec.hub_id


def text_tower_random_weights(vfm: str) -> bool:
    """Whether the text-tower VFM ``vfm`` has random weights (a control, labelled so in results)."""
    from ava.vfm.openclip import is_open_clip, parse
    from ava.vfm.resolve import resolve_vfm

    return parse(vfm).random_weights if is_open_clip(vfm) else resolve_vfm(vfm).random_weights


def check_dual_encoder(config: Any, source: str) -> str:
    """The config's model type when it is an image-text model with both towers, else :class:`NoTextTowerError`."""
    model_type = str(getattr(config, "model_type", "") or "")
    if model_type not in DUAL_ENCODER_TYPES or getattr(config, "text_config", None) is None:
        cls = ", ".join(getattr(config, "architectures", None) or []) or "unknown class"
        raise NoTextTowerError(
            f"checkpoint {source} ({cls}, model_type {model_type!r}) has no text tower: a CLIP-like checkpoint with "
            f"both towers is needed (model types {', '.join(DUAL_ENCODER_TYPES)})"
        )
    return model_type


@dataclass
class ImageTextModel:
    """A loaded dual encoder: ``texts()`` and ``images()`` give L2-normalized embeddings in one space."""

    source: str
    identity: str  # "hub:<id>@<commit>" or "sha256:<...>" of the weights (ava.vfm.weights)
    model_type: str
    model: Any
    tokenizer: Any
    image_processor: Any
    device: str = "cpu"
    batch_size: int = 32

    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """[N, D] normalized text embeddings."""
        import torch

        out = []
        pad = MAX_LENGTH_PADDED.get(self.model_type)
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            kw = {"padding": "max_length", "max_length": pad} if pad else {"padding": True}
            enc = self.tokenizer(batch, truncation=True, return_tensors="pt", **kw)
            enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
            with torch.inference_mode():
                out.append(_embedding(self.model.get_text_features(**enc)))
        return _normalized(out, self._dim())

    def images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """[N, D] normalized image embeddings (each image padded to square first)."""
        import torch

        from ava.vfm.preprocess import pad_to_square

        out = []
        for start in range(0, len(images), self.batch_size):
            batch = [pad_to_square(im) for im in images[start : start + self.batch_size]]
            pixels = self.image_processor(images=batch, return_tensors="pt")["pixel_values"].to(self.device)
            with torch.inference_mode():
                out.append(_embedding(self.model.get_image_features(pixel_values=pixels.to(self.model.dtype))))
        return _normalized(out, self._dim())

    def _dim(self) -> int:
        return int(getattr(self.model.config, "projection_dim", 0) or 0)


def _embedding(out: Any) -> Any:
    """The projected embedding of ``get_*_features`` (a tensor, or an output whose ``pooler_output`` it is)."""
    return (out if hasattr(out, "float") else out.pooler_output).float().cpu()


def _normalized(parts: list[Any], dim: int) -> np.ndarray:
    if not parts:
        return np.zeros((0, dim), np.float32)
    x = np.concatenate([p.numpy() for p in parts]).astype(np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def load_image_text(
    source: str,
    *,
    device: str = "cpu",
    batch_size: int = 32,
    what: str = "model",
    trust_remote_code: bool = False,
    local_form: str | None = None,
) -> Any:
    """Load a CLIP-like checkpoint (hub id or directory; safetensors only), or an ``open_clip:`` name
    (:mod:`ava.vfm.openclip`). ``what`` names it in errors ("miner clip@DIR", "VFM 'clip@DIR'"); ``local_form`` is
    the option that takes a local copy, said when the hub cannot be reached (``--miner clip@/path/to/dir``)."""
    import transformers

    from ava.vfm.openclip import is_open_clip, load_open_clip

    if is_open_clip(source):
        return load_open_clip(source, device=device, batch_size=batch_size)  # its errors name the source
    from ava.vfm.weights import locate

    try:
        weights = locate(source, local_form=local_form)
    except AvaError as e:
        raise AvaError(f"{what}: {e}") from None
    path = str(weights.path)
    try:
        config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise AvaError(f"{what}: {source} holds no readable transformers config ({str(e).splitlines()[0]})") from e
    try:
        model_type = check_dual_encoder(config, source)
    except NoTextTowerError as e:
        raise NoTextTowerError(f"{what}: {e}") from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        image_processor = transformers.AutoImageProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        raise AvaError(
            f"{what}: {source} has no usable tokenizer and image processor ({str(e).splitlines()[0]}); "
            "save them beside the weights (processor.save_pretrained)"
        ) from e
    model = transformers.AutoModel.from_pretrained(path, use_safetensors=True, trust_remote_code=trust_remote_code)
    model = model.eval().to(device)
    return ImageTextModel(source, weights.identity, model_type, model, tokenizer, image_processor, device, batch_size)
