"""The one image preprocessing used by the feature cache and by the online (in-training) path.

Two modes:

- ``"pad"`` (default): convert to RGB, pad to a square with RGB(124, 120, 111) keeping the image centred,
  resize (bicubic) to the model's input size, scale to [0, 1], normalize with the model's mean/std. Nothing
  is cut off, so boxes drawn near the borders of wide or tall images stay in view. The fill colour is the
  paper's (the mean of nine processors' pixel means).
- ``"processor"``: the checkpoint's own image processor (``AutoImageProcessor``), with its output size set to
  the model's input size. This is the release's behaviour: most processors resize the short side and
  centre-crop, which cuts off the sides of non-square images (and boxes drawn there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PIL import Image, ImageOps

from ava.errors import AvaError

if TYPE_CHECKING:
    import torch

    from ava.vfm.spec import VFMSpec

PAD_FILL = (124, 120, 111)
MODES = ("pad", "processor")


def pad_to_square(image: Image.Image, fill: tuple[int, int, int] = PAD_FILL) -> Image.Image:
    """``image`` (as RGB) centred on a square canvas of ``fill``; square images are returned as RGB unchanged."""
    image = image.convert("RGB")
    w, h = image.size
    if w == h:
        return image
    side = max(w, h)
    canvas = Image.new("RGB", (side, side), fill)
    canvas.paste(image, ((side - w) // 2, (side - h) // 2))
    return canvas


def to_normalized_tensor(image: Image.Image, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """RGB image -> float32 [3, H, W], (x / 255 - mean) / std."""
    import numpy as np
    import torch

    array = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array).permute(2, 0, 1).contiguous()
    mean_t = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
    return (tensor - mean_t) / std_t


def pad_pixels(image: Image.Image, size: int) -> torch.Tensor:
    """:func:`pad_preprocess` before its normalization: uint8 [3, size, size]. The extraction's decode workers send
    these (a quarter of float32's bytes, and no arithmetic in the workers); the model normalizes them on its device
    with :func:`normalize_pixels`, which gives the same float32 values as :func:`pad_preprocess`."""
    import numpy as np
    import torch

    image = image.convert("RGB")
    if image.size != (size, size):
        image = ImageOps.pad(image, (size, size), method=Image.Resampling.BICUBIC, color=PAD_FILL)
    return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()


def channel_values(values: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``values`` as a ``[C, 1, 1]`` tensor on ``device``, filled there: ``torch.tensor(values, device=...)`` is a
    copy from the host, and a plain copy to a GPU waits for all the work queued on its stream (in an extraction, the
    previous batch's forward: the host could never queue a batch ahead). The same values as ``torch.tensor``."""
    import torch

    out = torch.empty((len(values), 1, 1), dtype=dtype, device=device)
    for c, v in enumerate(values):
        out[c].fill_(v)
    return out


def normalize_pixels(pixels: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """uint8 [..., 3, H, W] -> float32, ``(x / 255 - mean) / std``: the same operations in the same order as
    :func:`to_normalized_tensor`, so the same float32 values on any device."""
    import torch

    x = pixels.to(torch.float32) / 255.0
    return (x - channel_values(mean, torch.float32, x.device)) / channel_values(std, torch.float32, x.device)


def pad_preprocess(image: Image.Image, size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """The default pipeline: pad to square, bicubic resize to ``size``, normalize. [3, size, size] float32.

    Pillow's ``ImageOps.pad`` resizes the image to fit first and pads after, which gives the padded square at
    ``size`` without resampling a large padded canvas (most of the CPU cost of extraction otherwise).
    """
    image = image.convert("RGB")
    if image.size != (size, size):
        image = ImageOps.pad(image, (size, size), method=Image.Resampling.BICUBIC, color=PAD_FILL)
    return to_normalized_tensor(image, mean, std)


def load_processor(source: str | None, spec: VFMSpec) -> Any:
    """The checkpoint's image processor, set to output ``spec.image_size`` squares (the model's input)."""
    if source is None:
        raise AvaError(
            f"VFM {spec.key!r} has no checkpoint directory, so it has no image processor; use --preprocess pad"
        )
    from transformers import AutoImageProcessor

    try:
        processor = AutoImageProcessor.from_pretrained(source, trust_remote_code=spec.trust_remote_code)
    except (OSError, ValueError) as e:
        raise AvaError(f"no image processor in {source} for VFM {spec.key!r} ({e}); use --preprocess pad") from e
    _set_output_size(processor, spec.image_size)
    return processor


def _set_output_size(processor: Any, side: int) -> None:
    """Keep the processor's own resize/crop policy but make its output the model's input size."""
    size = dict(getattr(processor, "size", None) or {})
    if "shortest_edge" in size:
        processor.size = {"shortest_edge": side}
    elif "longest_edge" in size:
        processor.size = {"longest_edge": side}
    elif size:
        processor.size = {"height": side, "width": side}
    if getattr(processor, "crop_size", None):
        processor.crop_size = {"height": side, "width": side}
    if getattr(processor, "pad_size", None):
        processor.pad_size = {"height": side, "width": side}


def processor_preprocess(image: Image.Image, processor: Any, size: int) -> torch.Tensor:
    """The checkpoint's own pipeline (the release's: resize + centre crop for most models). [3, size, size]."""
    pixel_values = processor(images=image.convert("RGB"), return_tensors="pt")["pixel_values"][0].float()
    if tuple(pixel_values.shape[-2:]) != (size, size):
        raise AvaError(
            f"the image processor produced {tuple(pixel_values.shape[-2:])} pixels, the model needs "
            f"({size}, {size}); use --preprocess pad"
        )
    return pixel_values


def naflex_inputs(pixel_values: torch.Tensor, patch: int) -> dict[str, torch.Tensor]:
    """Square images [B, 3, S, S] as SigLIP-2 NaFlex inputs: patches flattened (y, x, channel) as its image
    processor does, and the grid as ``spatial_shapes``. No attention mask: ava pads the image to a square first,
    so NaFlex's aspect-ratio handling is not used and every patch is real (an all-ones mask gives the same
    output). ``spatial_shapes`` stays on the CPU: the model reads it as sizes, not as data."""
    import torch

    b, c, h, w = pixel_values.shape
    gh, gw = h // patch, w // patch
    patches = pixel_values.reshape(b, c, gh, patch, gw, patch).permute(0, 2, 4, 3, 5, 1).reshape(b, gh * gw, -1)
    return {
        "pixel_values": patches,
        "pixel_attention_mask": None,
        "spatial_shapes": torch.tensor([[gh, gw]] * b, dtype=torch.long),
    }


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise AvaError(f"unknown preprocess {mode!r}; choose one of {', '.join(MODES)}")
    return mode
