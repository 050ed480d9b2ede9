"""Building and loading VFMs, and :class:`FrozenVFM`: the one feature contract every head and the cache use.

``FrozenVFM.forward(pixel_values) -> [B, L, T, D]``: for each chosen layer of ``output_hidden_states``, the
patch tokens with the prefix tokens (CLS, registers, summary) dropped and the post-processing applied.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from ava.errors import AvaError
from ava.vfm import preprocess as pp
from ava.vfm.families import FAMILIES
from ava.vfm.spec import VFMSpec, parse_pool

IDENTITY_FORMAT = 2  # 2: no free-form name; random_weights from the weights
DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise AvaError(f"unknown dtype {dtype!r}; choose one of fp32, fp16, bf16")
    return DTYPES[dtype]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise AvaError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AvaError(f"device {device!r} asked for, but CUDA is not available here; use --device cpu or auto")
    return dev


def config_digest(spec: VFMSpec) -> str:
    return hashlib.sha256(json.dumps(spec.config, sort_keys=True).encode()).hexdigest()


def build_config(spec: VFMSpec) -> Any:
    import transformers

    if spec.config is None or spec.config_class is None:
        raise AvaError(f"VFM {spec.key!r} has no architecture config to build")
    return getattr(transformers, spec.config_class)(**spec.config)


def build_model(spec: VFMSpec, device: str | torch.device = "cpu") -> nn.Module:
    """The architecture of ``spec`` from its config. On ``"meta"`` no memory is used (shapes, parameter counts);
    otherwise the weights are random, seeded by ``spec.seed`` (0 when unset) on the CPU so every device agrees."""
    import transformers

    if spec.model_class == "timm":
        from ava.vfm import timm_family

        cfg = spec.config or {}
        if str(device) == "meta":
            return timm_family.TimmBackbone(timm_family.build(cfg["architecture"], cfg.get("model_args", {}), "meta"))
        model = timm_family.build(cfg["architecture"], cfg.get("model_args", {}), "cpu", seed=spec.seed or 0)
        return timm_family.TimmBackbone(model).to(device)
    fam = FAMILIES.get(spec.model_class)
    kwargs = fam.model_kwargs if fam else {}
    config = build_config(spec)
    cls = getattr(transformers, spec.model_class)
    if str(device) == "meta":
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cls(config, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed or 0)
        model = cls(config, **kwargs)
    return model.to(device)


_PARAMS: dict[tuple[str, str | None, str], int] = {}


def param_count(spec: VFMSpec) -> int:
    """Number of parameters of the architecture, computed on the meta device (no weights, no download)."""
    if spec.model_class == "pixels":
        return 0
    key = (spec.model_class, spec.config_class, config_digest(spec))
    if key not in _PARAMS:
        _PARAMS[key] = sum(p.numel() for p in build_model(spec, "meta").parameters())
    return _PARAMS[key]


class PixelPatches(nn.Module):
    """The ``pixels`` baseline: each token is one normalized patch, flattened channel-major (c, y, x)."""

    def __init__(self, patch_size: int) -> None:
        super().__init__()
        self.patch_size = patch_size

    def forward(self, pixel_values: torch.Tensor, **_: Any) -> Any:
        b, c, h, w = pixel_values.shape
        p = self.patch_size
        patches = pixel_values.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        tokens = patches.reshape(b, (h // p) * (w // p), c * p * p)
        return SimpleNamespace(hidden_states=(tokens,))


def normalize_layers(layers: tuple[int, ...], num_hidden: int, key: str) -> tuple[int, ...]:
    """Layers as negative indices into the ``num_hidden`` hidden states (embeddings + one per block)."""
    out = []
    for layer in layers:
        if not -num_hidden <= layer < num_hidden:
            raise AvaError(
                f"layer {layer} is out of range for VFM {key!r}: it has {num_hidden} hidden states "
                f"(0 = embeddings, -1 = last block); use -{num_hidden}..{num_hidden - 1}"
            )
        out.append(layer - num_hidden if layer >= 0 else layer)
    if len(set(out)) != len(out):
        raise AvaError(f"duplicate layers {list(layers)} for VFM {key!r}")
    return tuple(out)


class FrozenVFM(nn.Module):
    """A frozen backbone that turns normalized images into patch tokens ``[B, L, T, D]``."""

    def __init__(
        self,
        spec: VFMSpec,
        model: nn.Module,
        *,
        weights: str,
        preprocess: str,
        layers: tuple[int, ...],
        dtype: torch.dtype,
        source: str | None = None,
        processor: Any = None,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.model = model.eval().requires_grad_(False)
        self.weights = weights
        self.source = source
        self.preprocess_mode = pp.check_mode(preprocess)
        self.processor = processor
        self.dtype = dtype
        self.random_weights = spec.random_weights
        self.layers = layers
        self.num_tokens = spec.num_tokens
        self.dim = spec.dim
        self.grid = spec.grid
        self._layout = FAMILIES[spec.model_class].layout if spec.model_class in FAMILIES else "tokens"
        self._blocks = _block_list(spec, self.model)  # run only up to the deepest chosen layer (None: whole model)

    def train(self, mode: bool = True) -> FrozenVFM:
        """Always eval: the VFM is frozen (dropout off, norms fixed) even inside a module put in train mode."""
        return super().train(False)

    @property
    def device(self) -> torch.device:
        for tensor in self.model.parameters():
            return tensor.device
        return torch.device("cpu")

    def identity(self) -> dict[str, Any]:
        """Everything that defines the features; the feature cache derives its key from this dict.

        No name is in it: ``dinov2@DIR`` and ``hf:DIR`` load the same weights the same way, so they get the same
        identity (and cache key). ``random_weights`` here says the weights were built here from a seed; the
        label ``self.random_weights`` (tiny test models too) stays out, since it follows from the name.
        """
        spec = self.spec
        ident: dict[str, Any] = {
            "format": IDENTITY_FORMAT,
            "model_class": spec.model_class,
            "weights": self.weights,
            "random_weights": self.weights.startswith("random:"),
            "image_size": spec.image_size,
            "patch_size": spec.patch_size,
            "mean": list(spec.mean),
            "std": list(spec.std),
            "preprocess": self.preprocess_mode,
            "layers": list(self.layers),
            "prefix_tokens": spec.prefix_tokens,
            "postprocess": spec.postprocess,
            "grid": list(self.grid),
            "num_tokens": self.num_tokens,
            "dim": self.dim,
            "dtype": str(self.dtype).removeprefix("torch."),
        }
        if spec.trust_remote_code:  # only when asked: the model ran its publisher's code, not transformers'
            ident["trust_remote_code"] = True
        if mapping := getattr(self.model, "ava_mapping", None):  # weights mapped from a remote-code layout
            ident["mapping"] = mapping
        if self.preprocess_mode == "pad":
            ident["pad_fill"] = list(pp.PAD_FILL)
        else:
            ident["processor_sha256"] = hashlib.sha256(
                json.dumps(self.processor.to_dict(), sort_keys=True, default=str).encode()
            ).hexdigest()
        return ident

    def preprocess_fn(self, *, raw: bool = False) -> functools.partial[torch.Tensor]:
        """The preprocessing of this model as a picklable function of one image: DataLoader workers started with
        spawn or forkserver get this small object, not the whole model (as a bound ``self.preprocess`` would).

        ``raw``: in ``pad`` mode, uint8 pixels that :meth:`forward` normalizes on the model's device (the same
        values); the processor mode has no such split and gives its float32 output either way."""
        if raw and self.preprocess_mode == "pad":
            return functools.partial(pp.pad_pixels, size=self.spec.image_size)
        if self.preprocess_mode == "processor":
            return functools.partial(pp.processor_preprocess, processor=self.processor, size=self.spec.image_size)
        return functools.partial(pp.pad_preprocess, size=self.spec.image_size, mean=self.spec.mean, std=self.spec.std)

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """One image -> float32 [3, S, S], normalized for this model (see ``ava.vfm.preprocess``)."""
        return self.preprocess_fn()(image)

    @torch.no_grad()
    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B, 3, S, S] normalized images -> [B, L, T, D] patch tokens of the chosen layers (model dtype)."""
        size = self.spec.image_size
        if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != (3, size, size):
            raise AvaError(
                f"VFM {self.spec.key!r} takes [B, 3, {size}, {size}] images, got {tuple(pixel_values.shape)}"
            )
        if pixel_values.dtype == torch.uint8:  # from preprocess_fn(raw=True): normalized here, on the device
            pixel_values = pp.normalize_pixels(
                pixel_values.to(self.device, non_blocking=True), self.spec.mean, self.spec.std
            )
        x = pixel_values.to(device=self.device, dtype=self.dtype)
        try:
            if getattr(self.model, "takes_layers", False):  # timm: computes only the chosen intermediates
                return torch.stack([self._tokens(h) for h in self.model(x, self.layers)], dim=1)
            inputs = pp.naflex_inputs(x, self.spec.patch_size) if self._layout == "naflex" else {"pixel_values": x}
            if self._blocks is not None:
                hidden = _run_until(self.model, inputs, self._blocks, self.layers)
                return torch.stack([self._tokens(h) for h in hidden], dim=1)
            out = self.model(**inputs, output_hidden_states=True)
        except (ValueError, AssertionError) as e:  # e.g. a ViT whose position table fixes the input size
            raise AvaError(
                f"VFM {self.spec.key!r} ({type(self.model).__name__}) cannot run on {size}x{size} images: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from e
        hidden = getattr(out, "hidden_states", None)
        if hidden is None:
            raise AvaError(f"VFM {self.spec.key!r} ({type(self.model).__name__}) returned no hidden states")
        return torch.stack([self._tokens(hidden[layer]) for layer in self.layers], dim=1)

    def _tokens(self, h: torch.Tensor) -> torch.Tensor:
        if self._layout == "nhwc":
            h = h.flatten(1, 2)
        gh, gw = self.spec.native_grid
        expected = self.spec.prefix_tokens + gh * gw
        if h.shape[1] != expected:
            raise AvaError(
                f"VFM {self.spec.key!r}: a hidden state has {h.shape[1]} tokens, expected "
                f"{self.spec.prefix_tokens} prefix + {gh}x{gw} patches = {expected}; the prefix count or the "
                f"input size of this spec does not match the model"
            )
        h = h[:, self.spec.prefix_tokens :]
        if self.spec.postprocess:
            oh, ow = parse_pool(self.spec.postprocess)
            grid = h.reshape(h.shape[0], gh, gw, h.shape[-1]).permute(0, 3, 1, 2)
            h = F.adaptive_avg_pool2d(grid.float(), (oh, ow)).to(h.dtype).flatten(2).transpose(1, 2)
        return h


class _Enough(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a forward hook once the deepest chosen block has run: the rest of the model is not computed."""


# transformers classes whose block outputs are their hidden states: checked against the whole model, layer by layer,
# on each class's tiny built-in model in tests/test_vfm_truncate.py (others run whole)
TRUNCATED_CLASSES = (
    "ViTModel",
    "Dinov2Model",
    "DINOv3ViTModel",
    "SiglipVisionModel",
    "Siglip2VisionModel",
    "CLIPVisionModel",
    "MetaClip2VisionModel",
    "Aimv2VisionModel",
    "InternVLVisionModel",
    "RadioModel",
    "Tipsv2VisionModel",
    "DPTModel",
    "SamVisionModel",
)


def _block_list(spec: VFMSpec, model: nn.Module) -> nn.ModuleList | None:
    """The blocks whose outputs are the hidden states after the embeddings (``hidden_states[i + 1]`` is the
    output of block i, the input of block 0 is ``hidden_states[0]``), for the transformers classes where that is
    checked; None for others (they run whole)."""
    cls = type(model)
    if cls.__name__ not in TRUNCATED_CLASSES or not cls.__module__.startswith("transformers."):  # not remote code
        return None
    n = int(getattr(getattr(model, "config", None), "num_hidden_layers", 0) or 0)
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == n and n > 0]
    return lists[0] if len(lists) == 1 else None


def _first_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        return next(v for v in value.values() if isinstance(v, torch.Tensor))
    return next(v for v in value if isinstance(v, torch.Tensor))


def _run_until(
    model: nn.Module, inputs: dict[str, Any], blocks: nn.ModuleList, layers: tuple[int, ...]
) -> list[torch.Tensor]:
    """The hidden states ``layers`` (negative indices) of ``model``, running its blocks only up to the deepest of
    them: forward hooks keep the chosen blocks' outputs, and the deepest one stops the forward (no later block,
    no post-norm, no pooling head; no other hidden state is kept)."""
    wanted = {len(blocks) + 1 + layer for layer in layers}  # indices into hidden_states (0: the embeddings)
    deepest = max(wanted)
    kept: dict[int, torch.Tensor] = {}

    def keep(index: int, value: Any) -> None:
        kept[index] = _first_tensor(value)
        if index == deepest:
            raise _Enough

    handles = []
    if 0 in wanted:
        handles.append(
            blocks[0].register_forward_pre_hook(
                lambda _m, args, kwargs: keep(0, args if args else kwargs), with_kwargs=True
            )
        )
    for i in sorted(w - 1 for w in wanted if w > 0):
        handles.append(blocks[i].register_forward_hook(lambda _m, _args, out, i=i: keep(i + 1, out)))
    try:
        model(**inputs)
    except _Enough:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return [kept[len(blocks) + 1 + layer] for layer in layers]


def _num_hidden(spec: VFMSpec, model: nn.Module) -> int:
    if spec.model_class == "pixels":
        return 1
    if hasattr(model, "num_hidden"):  # timm: one per intermediate, no embedding output
        return int(model.num_hidden)
    config = getattr(model, "config", None)
    fam = FAMILIES.get(spec.model_class)
    n = fam.num_layers(config) if fam is not None and fam.num_layers else getattr(config, "num_hidden_layers", None)
    if n is None:
        raise AvaError(f"cannot tell how many layers VFM {spec.key!r} has (no num_hidden_layers in its config)")
    return int(n) + 1


def load_vfm(
    name: str | VFMSpec,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = None,
    preprocess: str = "pad",
    layers: tuple[int, ...] | None = None,
    trust_remote_code: bool = False,
) -> FrozenVFM:
    """A frozen VFM ready for ``forward``: by registry key, ``key@/dir``, ``hf:<hub-id-or-dir>`` or a spec.

    Weights load through transformers' native classes, safetensors only; remote code runs only when
    ``trust_remote_code`` is passed. ``layers`` default to the spec's (-2, the release's choice).
    """
    from ava.vfm.resolve import resolve_vfm

    trust_remote_code = trust_remote_code or (not isinstance(name, str) and name.trust_remote_code)
    spec = resolve_vfm(name, trust_remote_code=trust_remote_code) if isinstance(name, str) else name
    pp.check_mode(preprocess)
    torch_dtype = resolve_dtype(dtype)
    dev = resolve_device(device)
    processor = None
    if spec.model_class == "pixels":
        model: nn.Module = PixelPatches(spec.patch_size)
        weights, source = "pixels", None
    elif spec.builtin:
        model = build_model(spec, "cpu").to(dev, torch_dtype)
        weights, source = f"random:{spec.seed}:config-sha256:{config_digest(spec)}", None
    else:
        model, spec, weights, source = _load_pretrained(spec, torch_dtype, trust_remote_code)
        model = model.to(dev)
    if preprocess == "processor":
        processor = pp.load_processor(source, spec)
    if spec.model_class == "pixels":
        chosen: tuple[int, ...] = (-1,)
    else:
        chosen = normalize_layers(tuple(layers) if layers else spec.layers, _num_hidden(spec, model), spec.key)
    if spec.model_class == "timm":  # a CNN's stages differ in channels and stride
        from ava.vfm.timm_family import spec_for_layers

        spec = spec_for_layers(spec, model.model, chosen)
    return FrozenVFM(
        spec,
        model,
        weights=weights,
        preprocess=preprocess,
        layers=chosen,
        dtype=torch_dtype,
        source=source,
        processor=processor,
    )


def random_vfm(
    name: str | VFMSpec,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = None,
    seed: int = 0,
    layers: tuple[int, ...] | None = None,
) -> FrozenVFM:
    """The architecture of ``name`` at full size with RANDOM weights (``random_weights`` True), nothing downloaded.

    For speed benchmarks (speed depends on shapes, not weights) and shape checks; ``device="meta"`` allocates
    nothing at all (forward then gives meta tensors of the right shape).
    """
    from ava.vfm.resolve import resolve_vfm

    spec = resolve_vfm(name) if isinstance(name, str) else name
    if spec.config is None:
        raise AvaError(f"VFM {spec.key!r} has no architecture to build with random weights")
    spec = replace(spec, hub_id=None, revision=None, seed=seed)
    torch_dtype = resolve_dtype(dtype)
    if str(device) == "meta":
        model = build_model(spec, "meta").to(torch_dtype)
    else:
        model = build_model(spec, "cpu").to(resolve_device(device), torch_dtype)
    chosen = normalize_layers(tuple(layers) if layers else spec.layers, _num_hidden(spec, model), spec.key)
    weights = f"random:{seed}:config-sha256:{config_digest(spec)}"
    return FrozenVFM(spec, model, weights=weights, preprocess="pad", layers=chosen, dtype=torch_dtype)


def _load_pretrained(spec: VFMSpec, dtype: torch.dtype, trust_remote_code: bool) -> tuple[nn.Module, VFMSpec, str, str]:
    """Weights of ``spec.hub_id`` into the spec's transformers class; refuses partial loads."""
    import transformers

    from ava.vfm.weights import locate

    if spec.provider:  # weights converted here from an installed package, then loaded like any directory
        module, _, func = spec.provider.partition(":")
        where = locate(str(getattr(importlib.import_module(module), func)()), key=spec.key)
    else:
        where = locate(spec.hub_id or "", spec.revision, key=spec.key, gated=spec.gated)
    path = str(where.path)
    if spec.model_class == "timm":
        from ava.vfm.timm_family import TimmBackbone, load_timm

        return TimmBackbone(load_timm(spec, where.path)).to(dtype), spec, where.identity, path
    if trust_remote_code:
        from ava.vfm.remote import load_remote

        if where.hub_id and not list(where.path.glob("*.py")):  # fetched before without its code
            where = locate(spec.hub_id or "", spec.revision, key=spec.key, code=True)
            path = str(where.path)
        return load_remote(spec, path, dtype), replace(spec, trust_remote_code=True), where.identity, path
    if spec.model_class == "RadioModel" and (published := _published_radio(where.path)) is not None:
        from ava.vfm.mapped import load_radio  # the publisher's remote-code layout, mapped: no code runs

        model = load_radio(where.path, published, dtype)  # RADIO-B/L/H share the route: the width comes from it
        return model, replace(_checked_prefix(spec, model), dim=model.config.hidden_size), where.identity, path
    _check_native(path, spec)
    cls = getattr(transformers, spec.model_class)
    fam = FAMILIES.get(spec.model_class)
    try:
        model, missing = _from_pretrained(cls, path, dtype, fam.model_kwargs if fam else {})
    except (RuntimeError, ValueError, OSError) as e:
        raise AvaError(
            f"cannot load {path} as {spec.model_class} for VFM {spec.key!r}: {str(e).splitlines()[0]}"
        ) from e
    if missing:  # a composite checkpoint (e.g. AIMv2 or InternVL with its text side): take its vision tower
        tower = _vision_tower(path, cls, dtype)
        if tower is None:
            raise AvaError(
                f"the weights in {path} do not fit {spec.model_class} ({len(missing)} missing, e.g. "
                f"{', '.join(sorted(missing)[:3])}): this is not a {spec.model_class} checkpoint of VFM {spec.key!r}"
            )
        model = tower
    return model, _checked_prefix(spec, model), where.identity, path


def _published_radio(path: Any) -> dict[str, Any] | None:
    from ava.vfm.mapped import published_radio

    return published_radio(path)


def _checked_prefix(spec: VFMSpec, model: nn.Module) -> VFMSpec:
    """The spec with the prefix-token count of the loaded checkpoint (warning when the registry said otherwise)."""
    fam = FAMILIES.get(spec.model_class)
    actual = fam.prefix(model.config) if fam else spec.prefix_tokens
    if actual != spec.prefix_tokens:
        warnings.warn(
            f"VFM {spec.key!r}: the checkpoint's config has {actual} prefix tokens, the registry says "
            f"{spec.prefix_tokens}; using the checkpoint's",
            stacklevel=4,
        )
        spec = replace(spec, prefix_tokens=actual)
    return spec


def _from_pretrained(cls: Any, path: str, dtype: torch.dtype, kwargs: dict[str, Any]) -> tuple[nn.Module, list[str]]:
    """The model and the weights it lacks (pooler and heads aside: features never use them)."""
    with _quiet_transformers():
        model, info = cls.from_pretrained(
            path, use_safetensors=True, dtype=dtype, output_loading_info=True, trust_remote_code=False, **kwargs
        )
    return model, [k for k in info.get("missing_keys", []) if "pooler" not in k and "head" not in k]


def _vision_tower(path: str, cls: Any, dtype: torch.dtype) -> nn.Module | None:
    """The ``cls`` sub-module of a composite checkpoint loaded whole with AutoModel, when it loads completely."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=False)
    if getattr(config, "vision_config", None) is None:
        return None
    try:
        model, missing = _from_pretrained(transformers.AutoModel, path, dtype, {})
    except (ValueError, OSError):
        return None
    towers = [m for m in model.modules() if type(m) is cls]
    if missing or not towers:
        return None
    return towers[0]


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No "Loading weights" bar or load report from transformers: ava draws its own progress, and checks the
    missing keys itself."""
    from transformers.utils import logging as hf_logging

    enabled, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()  # the load report lists the unused text tower of composite checkpoints
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if enabled:
            hf_logging.enable_progress_bar()


def _check_native(path: str, spec: VFMSpec) -> None:
    """A clear error for checkpoints that need remote code (their model_type is unknown to transformers)."""
    from pathlib import Path

    from ava.vfm.resolve import load_config

    load_config(Path(path), spec.hub_id or path, trust_remote_code=False)
