"""``--depth-model M``: a transformers depth-estimation checkpoint run once over the build's images.

Each prediction is resized to its image and written as a ``.npy`` map beside the others, so the rules read it
exactly as they read ``--depth`` maps. Whether the maps are in metres is decided from the checkpoint's config, never
guessed from its values: Depth Anything says so in ``depth_estimation_type``; ZoeDepth, GLPN and Depth Pro are
trained on metric depth; every other depth model (DPT / MiDaS, relative Depth Anything) predicts relative inverse
depth, which is turned into a relative depth (1 / disparity: larger is farther) and allowed only nearer/farther
questions. Remote code is never run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ava.curate.sources import DepthSource, SourceImage, load_rgb
from ava.errors import AvaError

METRIC_TYPES = {"zoedepth", "glpn", "depth_pro"}  # model types trained to predict metres
WEIGHT_SUFFIXES = (".safetensors", ".bin")


class DepthModelError(AvaError, ValueError):
    """The --depth-model cannot be used (not a depth-estimation checkpoint, not found, ...)."""


def is_metric(config: Any) -> bool:
    """Metres (True) or relative depth (False), from the checkpoint's config."""
    if getattr(config, "depth_estimation_type", None) is not None:  # Depth Anything and its kin say it themselves
        return config.depth_estimation_type == "metric"
    return getattr(config, "model_type", "") in METRIC_TYPES


def _local_dir(source: str) -> Path:
    """The checkpoint's directory: ``source`` itself, or the hub snapshot of a hub id (config, weights, processor)."""
    if Path(source).is_dir():
        return Path(source)
    if Path(source).exists() or source.startswith((".", "/")) or source.count("/") > 1:
        raise DepthModelError(f"--depth-model {source}: not a directory or a hub id")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(source, allow_patterns=["*.json", "*.safetensors", "*.bin", "*.txt"]))
    except Exception as e:  # noqa: BLE001 - offline, unknown repo, gated: one line either way
        raise DepthModelError(f"--depth-model {source}: cannot fetch it from the hub ({type(e).__name__})") from None


def weights_digest(root: Path) -> str:
    """sha256 over (file name, content) of the checkpoint's config and weight files, read in blocks
    (:func:`ava.vfm.weights.hash_files`, the VFMs' weight digest)."""
    from ava.vfm.weights import hash_files

    return hash_files(sorted(p for p in root.iterdir() if p.name == "config.json" or p.suffix in WEIGHT_SUFFIXES))


def load(source: str, device: str = "cpu") -> tuple[Any, Any, dict[str, Any]]:
    """Model, image processor and its provenance record; a checkpoint that is not a depth model is one line."""
    root = _local_dir(source)
    if not (root / "config.json").is_file():
        raise DepthModelError(f"--depth-model {source}: no config.json there; not a transformers checkpoint")
    import transformers
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForDepthEstimation

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        config = AutoConfig.from_pretrained(root, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        raise DepthModelError(f"--depth-model {source}: unreadable config.json ({str(e).splitlines()[0]})") from None
    from transformers.models.auto.modeling_auto import MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES

    if config.model_type not in MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES:
        raise DepthModelError(
            f"--depth-model {source}: a {config.model_type!r} checkpoint is not a depth-estimation "
            f"model ({', '.join(sorted(MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES))})"
        )
    try:
        model = AutoModelForDepthEstimation.from_pretrained(root, trust_remote_code=False).to(device).eval()
        processor = AutoImageProcessor.from_pretrained(root, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        raise DepthModelError(f"--depth-model {source}: cannot load it ({str(e).splitlines()[0]})") from None
    metric = is_metric(config)
    prov = {
        "model": source,
        "model_type": config.model_type,
        "sha256": weights_digest(root),
        "metric": metric,
        "kind": "metres" if metric else "relative (1 / predicted disparity)",
        "random_weights": bool(getattr(config, "random_weights", False)),
    }
    return model, processor, prov


def predict(model: Any, processor: Any, image: Any, metric: bool) -> np.ndarray:
    """One image's depth map at the image's size (metres, or relative depth: larger is farther)."""
    import torch

    inputs = processor(images=[image], return_tensors="pt").to(model.device)
    with torch.no_grad():
        out = model(**inputs)
    size = [(image.height, image.width)]
    if hasattr(processor, "post_process_depth_estimation"):
        pred = processor.post_process_depth_estimation(out, target_sizes=size)[0]["predicted_depth"]
    else:
        pred = torch.nn.functional.interpolate(out.predicted_depth[:, None], size=size[0], mode="bicubic")[0, 0]
    depth = pred.float().cpu().numpy().astype(np.float32)
    if not metric:
        with np.errstate(divide="ignore", invalid="ignore"):
            depth = np.where(depth > 0, 1.0 / depth, np.nan).astype(np.float32)
    return depth


def run(source: str, images: list[SourceImage], out: Path, device: str = "cpu") -> tuple[DepthSource, dict[str, Any]]:
    """Run the model once over ``images``, writing one ``.npy`` map per image under ``out``; the depth source
    that reads them and the model's provenance."""
    model, processor, prov = load(source, device)
    for im in images:
        path = out / Path(im.file_name).with_suffix(".npy")
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, predict(model, processor, load_rgb(im.path), prov["metric"]), allow_pickle=False)
    prov["images"] = len(images)
    return DepthSource(out, metric=prov["metric"], upright=True), prov  # predicted from the upright pictures
