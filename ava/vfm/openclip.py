"""open_clip dual encoders (OpenAI/LAION CLIP, Meta's PE-core, SigLIP ports ...) for the zero-shot head and the
``clip@`` miner, loaded through open_clip's own API (``create_model_and_transforms``, ``get_tokenizer``) with its
own eval transform and tokenizer. Three forms, all local (open_clip is never asked to download):

- ``open_clip:local-dir:DIR``: a directory open_clip writes and reads (``open_clip_config.json`` beside
  ``open_clip_model.safetensors`` or ``open_clip_pytorch_model.bin``, e.g. an ``hf download`` of an open_clip repo);
- ``open_clip:NAME@FILE``: a config open_clip ships (``PE-Core-B-16``, ``ViT-B-32`` ...) with a local weights file
  (``.safetensors``, or ``.bin`` / ``.pt`` / ``.pth`` read with ``torch.load(weights_only=True)``);
- ``open_clip:NAME:random``: that config with random weights (seed 0), a control recorded as random weights.

Needs the ``openclip`` extra (``pip install 'ava-bench[openclip]'``).
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ava.errors import AvaError

if TYPE_CHECKING:
    from PIL import Image

PREFIX = "open_clip:"
LOCAL_DIR = "local-dir:"
FORMS = "open_clip:local-dir:DIR, open_clip:NAME@WEIGHTS_FILE or open_clip:NAME:random"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
LOCAL_DIR_SUFFIXES = (".safetensors", ".bin", ".pth")  # the files open_clip looks for in a local-dir
CONFIG_FILE = "open_clip_config.json"


@dataclass(frozen=True)
class OpenClipSource:
    """A parsed ``open_clip:`` name: the model id open_clip takes, and the weights file (None: random weights)."""

    name: str  # the whole ``open_clip:...`` text
    model_id: str  # "local-dir:/abs/dir" or a built-in config name
    weights: Path | None

    @property
    def random_weights(self) -> bool:
        return self.weights is None


def is_open_clip(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def no_features(name: str) -> AvaError:
    """The error for an ``open_clip:`` name given where cached patch features are needed (extraction, the probes,
    kNN, the LLM head): the route yields pooled image-text embeddings only."""
    return AvaError(
        f"--vfm {name!r}: open_clip models serve the zero-shot head and the clip@ miner only (their "
        "pooled image-text embeddings); for patch features use a timm: or hf: name of the image tower, "
        "e.g. timm:vit_pe_core_base_patch16_224 for PE-core"
    )


def parse(name: str) -> OpenClipSource:
    """The parsed form of ``name``, checking only the text and the files (no torch); a wrong form, a missing
    directory or weights file is one :class:`AvaError` line naming it."""
    rest = name[len(PREFIX) :].strip()
    if not rest:
        raise AvaError(f"{name!r}: nothing after 'open_clip:'; use {FORMS}")
    if rest.startswith("hf-hub:"):
        raise AvaError(
            f"{name!r}: ava does not download open_clip checkpoints; fetch it (`hf download "
            f"{rest[7:]} --local-dir DIR`) and give open_clip:local-dir:DIR"
        )
    if rest.startswith(LOCAL_DIR):
        return _parse_local_dir(name, rest[len(LOCAL_DIR) :])
    if rest.endswith(":random"):
        model = rest.removesuffix(":random").strip()
        if not model or "@" in model:
            raise AvaError(f"{name!r}: use open_clip:NAME:random (a built-in config, e.g. PE-Core-B-16)")
        return OpenClipSource(name, model, None)
    model, at, file = rest.partition("@")
    if not at:
        raise AvaError(
            f"{name!r} names no weights; use open_clip:{rest}@WEIGHTS_FILE (.safetensors or .bin), or "
            f"open_clip:{rest}:random for random weights"
        )
    if not model.strip() or not file.strip():
        raise AvaError(
            f"{name!r}: {'no config name before' if not model.strip() else 'no weights file after'} '@'; "
            "use open_clip:NAME@WEIGHTS_FILE, e.g. open_clip:PE-Core-B-16@./open_clip_model.safetensors"
        )
    path = Path(file.strip()).expanduser()
    if not path.is_file():
        raise AvaError(f"{name!r}: weights file {path} does not exist")
    if path.suffix not in WEIGHT_SUFFIXES:
        raise AvaError(f"{name!r}: weights file {path} is not {', '.join(WEIGHT_SUFFIXES)}")
    return OpenClipSource(name, model.strip(), path.resolve())


def _parse_local_dir(name: str, text: str) -> OpenClipSource:
    path = Path(text.strip()).expanduser()
    if not text.strip():
        raise AvaError(f"{name!r}: no directory after 'local-dir:'; use open_clip:local-dir:DIR")
    if not path.is_dir():
        raise AvaError(f"{name!r}: directory {path} does not exist")
    if not (path / CONFIG_FILE).is_file():
        raise AvaError(f"{name!r}: {path} has no {CONFIG_FILE} (the directory open_clip's save_for_hf writes)")
    files = [f for suffix in LOCAL_DIR_SUFFIXES for f in sorted(path.glob(f"*{suffix}"))]
    if not files:
        # open_clip would build the config with random weights and only log a warning: refused instead
        raise AvaError(f"{name!r}: {path} holds {CONFIG_FILE} but no weights file ({', '.join(LOCAL_DIR_SUFFIXES)})")
    return OpenClipSource(name, f"{LOCAL_DIR}{path.resolve()}", files[0].resolve())  # the file open_clip picks: load


def _open_clip() -> Any:
    from ava.extras import require

    require("openclip", "open_clip models")
    import open_clip

    return open_clip


def check_model_name(source: OpenClipSource) -> None:
    """An unknown built-in config name is refused with the nearest ones open_clip ships."""
    if source.model_id.startswith(LOCAL_DIR):
        return
    open_clip = _open_clip()
    known = open_clip.list_models()
    if source.model_id.replace("/", "-") not in known:
        near = difflib.get_close_matches(source.model_id, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else f" ({len(known)} configs: open_clip.list_models())"
        raise AvaError(f"{source.name!r}: open_clip has no model config {source.model_id!r}{hint}")


@dataclass
class OpenClipModel:
    """An open_clip model behind the :class:`ava.vfm.image_text.ImageTextModel` interface."""

    source: str
    identity: str
    model_type: str
    model: Any
    tokenizer: Any
    preprocess: Any  # open_clip's eval transform: PIL image -> [3, S, S] tensor
    device: str = "cpu"
    batch_size: int = 32
    random_weights: bool = False

    @property
    def logit_scale(self) -> float:
        """exp(logit_scale): the temperature the towers were trained with (ranking does not depend on it)."""
        return float(self.model.logit_scale.detach().exp().item())

    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """[N, D] normalized text embeddings (open_clip's tokenizer, its context length)."""
        import torch

        out = []
        for start in range(0, len(texts), self.batch_size):
            tokens = self.tokenizer(list(texts[start : start + self.batch_size])).to(self.device)
            with torch.inference_mode():
                out.append(self.model.encode_text(tokens, normalize=True).float().cpu())
        return _rows(out)

    def images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """[N, D] normalized image embeddings (padded to square, then open_clip's eval transform)."""
        import torch

        from ava.vfm.preprocess import pad_to_square

        out = []
        for start in range(0, len(images), self.batch_size):
            batch = images[start : start + self.batch_size]
            pixels = torch.stack([self.preprocess(pad_to_square(im)) for im in batch]).to(self.device)
            with torch.inference_mode():
                out.append(self.model.encode_image(pixels, normalize=True).float().cpu())
        return _rows(out)


def _rows(parts: list[Any]) -> np.ndarray:
    return np.concatenate([p.numpy() for p in parts]).astype(np.float32) if parts else np.zeros((0, 0), np.float32)


def load_open_clip(name: str, *, device: str = "cpu", batch_size: int = 32) -> OpenClipModel:
    """Load an ``open_clip:`` name (see the module docstring) with no network access."""
    source = parse(name)  # its errors name the open_clip text, which is what the user gave
    check_model_name(source)
    if source.model_id.startswith(LOCAL_DIR):  # hash the file open_clip will load (it prefers open_clip_model.*)
        _open_clip()  # installed, or the one-line error
        from open_clip.factory import _find_checkpoint_in_dir

        source = replace(source, weights=Path(_find_checkpoint_in_dir(Path(source.model_id[len(LOCAL_DIR) :]))))
    with _offline():
        model, preprocess, tokenizer = _build(source)
    identity = _identity(source)
    model_type = f"open_clip:{_arch(source)}"
    return OpenClipModel(
        name,
        identity,
        model_type,
        model.eval().to(device),
        tokenizer,
        preprocess,
        device,
        batch_size,
        source.random_weights,
    )


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """huggingface_hub in offline mode while open_clip loads: a config naming an HF tokenizer (SigLIP ports) reads
    the local cache only, and a missing one is an error, not a download."""
    import huggingface_hub.constants as hub

    before, env = hub.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")
    hub.HF_HUB_OFFLINE, os.environ["HF_HUB_OFFLINE"] = True, "1"
    try:
        yield
    finally:
        hub.HF_HUB_OFFLINE = before
        if env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = env


def _build(source: OpenClipSource) -> tuple[Any, Any, Any]:
    import pickle

    import torch

    open_clip = _open_clip()
    pretrained = None if source.model_id.startswith(LOCAL_DIR) or source.weights is None else str(source.weights)
    if source.weights is None:
        torch.manual_seed(0)  # the random-weight control is the same model every time
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            source.model_id, pretrained=pretrained, device="cpu", weights_only=True
        )
        tokenizer = open_clip.get_tokenizer(source.model_id)
    except pickle.UnpicklingError:  # torch.load(weights_only=True) stopped at an object that is not a tensor
        where = source.weights or source.model_id
        raise AvaError(
            f"{source.name!r}: {where} refused: not a weights-only checkpoint (it pickles objects that would run "
            "code when loaded); nothing from it ran. Convert it to safetensors from a source you trust"
        ) from None
    except (RuntimeError, ValueError, OSError, KeyError, AssertionError) as e:  # open_clip asserts on shapes
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AvaError(f"{source.name!r}: open_clip could not load it ({type(e).__name__}: {first[:300]})") from e
    return model, preprocess, tokenizer


def _arch(source: OpenClipSource) -> str:
    if not source.model_id.startswith(LOCAL_DIR):
        return source.model_id
    return Path(source.model_id[len(LOCAL_DIR) :]).name


def _identity(source: OpenClipSource) -> str:
    """``sha256:`` of the weights (with the local-dir config: other configs give other embeddings), or
    ``random:open_clip:NAME:seed0``."""
    from ava.vfm.weights import hash_files

    if source.weights is None:
        return f"random:open_clip:{source.model_id}:seed0"
    files = [source.weights]
    if source.model_id.startswith(LOCAL_DIR):
        files.append(Path(source.model_id[len(LOCAL_DIR) :]) / CONFIG_FILE)
    return f"sha256:{hash_files(files)}"
