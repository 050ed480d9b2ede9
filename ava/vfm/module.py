"""Any in-memory model as a VFM: :func:`vfm_from_module` wraps a ``torch.nn.Module`` (or a callable
``images -> tokens``) behind the contract of :class:`~ava.vfm.model.FrozenVFM`, so the cache extraction
(``extract(config, vfm=...)``), the in-memory fingerprint (:mod:`ava.heads.memory`) and the training callbacks
(:mod:`ava.callbacks`) take it like a registered VFM.

What the cache key needs is stated by the caller, never guessed: the input size, mean/std and padding rule, which
output or layer gives the tokens, how many prefix tokens to drop, and an identity (a name plus a version, or a hash
of the weights). The output's shape is checked on one image when the VFM is made.

The wrapped module is not frozen: it may be the model being trained. Every forward runs in eval mode under
``torch.no_grad`` with autocast off (unless ``autocast`` is asked), and puts the module's mode back afterwards;
``requires_grad`` is never touched. With ``dtype="bf16"`` the forward runs on a bf16 copy of the weights, swapped in
for the forward and out again (:class:`CastWeights`); the module's own tensors are never written.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from torch import nn

from ava.errors import AvaError
from ava.vfm import preprocess as pp

IDENTITY_FORMAT = "module-1"
_AUTOCAST = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16}
_DTYPES = _AUTOCAST  # the same names: None (the module's own dtype), "bf16", "fp16"


class CastWeights:
    """The floating-point parameters and buffers of a module, cast to ``dtype``, swapped into it for a forward.

    Inside :meth:`swapped` every floating tensor of the module is a ``dtype`` copy (``tensor.data`` is reassigned,
    as ``nn.Module.to`` once did); on leaving, each gets its own storage back, so the weights, their version counters
    and the optimizer's references are as before. The copies are made for each forward, or once for all forwards
    inside :meth:`held` (an evaluation: the weights do not change meanwhile; as a guard they are cast again if a
    version counter moved)."""

    def __init__(self, module: nn.Module, dtype: torch.dtype) -> None:
        self.module, self.dtype = module, dtype
        self._key: tuple | None = None
        self._copies: list[torch.Tensor] = []
        self._holding = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Forwards inside the block share one cast of the weights, dropped on leaving it."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding:
                self._copies, self._key = [], None

    def _tensors(self) -> list[torch.Tensor]:
        seen: set[int] = set()
        out = []
        for t in [*self.module.parameters(), *self.module.buffers()]:
            if t.is_floating_point() and t.dtype != self.dtype and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        tensors = self._tensors()
        key = tuple((id(t), t._version, t.data_ptr(), t.dtype) for t in tensors)
        copies = self._copies if key == self._key else [t.detach().to(self.dtype) for t in tensors]
        if self._holding:
            self._copies, self._key = copies, key
        own = [t.data for t in tensors]
        try:
            for t, c in zip(tensors, copies, strict=True):
                t.data = c
            yield
        finally:
            for t, o in zip(tensors, own, strict=True):
                t.data = o


@dataclass(frozen=True)
class ModuleSpec:
    """The facts of an in-memory VFM (the fields ``FrozenVFM.spec`` offers that readers use)."""

    key: str  # the user-given name
    version: str | None
    image_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    pad: bool
    prefix_tokens: int
    num_tokens: int
    dim: int
    grid: tuple[int, int]
    output: str  # "module", "layer:<name>" or "callable"
    random_weights: bool = False

    def facts(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "version": self.version,
            "image_size": self.image_size,
            "mean": list(self.mean),
            "std": list(self.std),
            "pad": self.pad,
            "prefix_tokens": self.prefix_tokens,
            "num_tokens": self.num_tokens,
            "dim": self.dim,
            "grid": list(self.grid),
            "output": self.output,
            "random_weights": self.random_weights,
        }


def stretch_preprocess(image: Image.Image, size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """``pad=False``: resize (bicubic) to ``size`` x ``size`` without padding (non-square images are stretched)."""
    image = image.convert("RGB")
    if image.size != (size, size):
        image = image.resize((size, size), Image.Resampling.BICUBIC)
    return pp.to_normalized_tensor(image, mean, std)


def weights_sha256(module: nn.Module) -> str:
    """SHA-256 over the module's ``state_dict``: each entry's name, dtype, shape and bytes, in order."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


@contextlib.contextmanager
def eval_mode(module: nn.Module | None) -> Iterator[None]:
    """``module`` and its children in eval mode inside the block, each put back to its own mode afterwards."""
    if module is None:
        yield
        return
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode


class _Enough(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by the forward hook of the chosen layer: nothing after it is computed."""


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "last_hidden_state") and isinstance(value.last_hidden_state, torch.Tensor):
        return value.last_hidden_state
    if isinstance(value, tuple | list) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    return None


class ModuleVFM:
    """An in-memory model behind the FrozenVFM contract: ``vfm(pixels [B, 3, S, S]) -> [B, 1, T, D]`` float32.

    Not an ``nn.Module`` on purpose: the wrapped model stays the caller's (``vfm.eval()`` does not change it, and it
    is not registered as anyone's child). Made by :func:`vfm_from_module`."""

    layers: tuple[int, ...] = (-1,)
    preprocess_mode = "pad"

    def __init__(
        self,
        spec: ModuleSpec,
        module: nn.Module | None,
        fn: Callable[[torch.Tensor], Any],
        device: torch.device,
        weights_hash: bool,
        autocast: str | None,
        dtype: str | None = None,
    ) -> None:
        self.spec = spec
        self.module = module
        self._fn = fn
        self._device = device
        self.weights_hash = weights_hash
        self.autocast = autocast
        self.compute_dtype = dtype
        self._cast = CastWeights(module, _DTYPES[dtype]) if dtype is not None and module is not None else None
        self.num_tokens, self.dim, self.grid = spec.num_tokens, spec.dim, spec.grid
        self.random_weights = spec.random_weights
        self.dtype = torch.float32  # what forward returns
        self.preprocess_mode = "pad" if spec.pad else "stretch"

    def __repr__(self) -> str:
        return (
            f"ModuleVFM({self.spec.key!r}, version={self.spec.version!r}, size={self.spec.image_size}, "
            f"tokens={self.num_tokens}x{self.dim})"
        )

    # FrozenVFM's nn.Module calls that extraction makes: the wrapped model is never put in eval mode for good
    def eval(self) -> ModuleVFM:
        return self

    def train(self, mode: bool = True) -> ModuleVFM:
        return self

    @property
    def device(self) -> torch.device:
        return self._device

    def identity(self) -> dict[str, Any]:
        """What defines the features (the cache key is derived from it): the user-given name and version and/or the
        SHA-256 of the weights as they are now, the preprocessing, the output, prefix tokens and shapes."""
        spec = self.spec
        ident: dict[str, Any] = {
            "format": IDENTITY_FORMAT,
            "model_class": "module",
            "name": spec.key,
            "version": spec.version,
            "weights": f"sha256:{weights_sha256(self.module)}" if self.weights_hash and self.module else None,
            "random_weights": spec.random_weights,
            "image_size": spec.image_size,
            "mean": list(spec.mean),
            "std": list(spec.std),
            "preprocess": self.preprocess_mode,
            "output": spec.output,
            "layers": list(self.layers),
            "prefix_tokens": spec.prefix_tokens,
            "grid": list(spec.grid),
            "num_tokens": spec.num_tokens,
            "dim": spec.dim,
            "dtype": "float32",
            "autocast": self.autocast,
        }
        if self.compute_dtype is not None:  # absent when off, so identities (and cache keys) made before stay valid
            ident["compute_dtype"] = self.compute_dtype
        if spec.pad:
            ident["pad_fill"] = list(pp.PAD_FILL)
        return ident

    def preprocess_fn(self) -> functools.partial[torch.Tensor]:
        """One image -> float32 [3, S, S], as a picklable function (DataLoader workers get no model)."""
        fn = pp.pad_preprocess if self.spec.pad else stretch_preprocess
        return functools.partial(fn, size=self.spec.image_size, mean=self.spec.mean, std=self.spec.std)

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        return self.preprocess_fn()(image)

    def tokens(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B, 3, S, S] -> the output's [B, T', D] tokens, prefix included (eval mode, no grad, mode restored)."""
        dtype = _AUTOCAST[self.autocast]
        autocast = (
            torch.autocast(self._device.type, dtype=dtype)
            if dtype is not None
            else torch.autocast(self._device.type, enabled=False)
        )
        cast = self._cast.swapped() if self._cast is not None else contextlib.nullcontext()
        with torch.no_grad(), eval_mode(self.module), autocast, cast:
            x = pixel_values.to(self._device)
            if self.module is not None:
                for p in self.module.parameters():
                    if p.is_floating_point():
                        x = x.to(p.dtype)
                    break
            out = self._fn(x)
        return out

    def held(self) -> contextlib.AbstractContextManager[None]:
        """A block of forwards while the weights do not change (one evaluation): with ``dtype=`` the weights are cast
        once for all of them, and the copy is dropped on leaving."""
        return self._cast.held() if self._cast is not None else contextlib.nullcontext()

    def __call__(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B, 3, S, S] normalized images -> [B, 1, T, D] float32 patch tokens (prefix tokens dropped)."""
        size = self.spec.image_size
        if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != (3, size, size):
            raise AvaError(
                f"VFM {self.spec.key!r} takes [B, 3, {size}, {size}] images, got {tuple(pixel_values.shape)}"
            )
        out = _checked(self.tokens(pixel_values), self.spec.key, len(pixel_values))
        expected = self.spec.prefix_tokens + self.num_tokens
        if tuple(out.shape[1:]) != (expected, self.dim):
            raise AvaError(
                f"VFM {self.spec.key!r} returned {tuple(out.shape)} tokens, expected [B, {expected}, "
                f"{self.dim}] as on its first image"
            )
        return out[:, self.spec.prefix_tokens :].float().unsqueeze(1)

    forward = __call__


def _checked(out: Any, name: str, batch: int) -> torch.Tensor:
    """``out`` as a [batch, tokens, dim] tensor, else one AvaError saying what was seen."""
    t = _first_tensor(out)
    if t is None:
        raise AvaError(
            f"VFM {name!r}: the output is a {type(out).__name__}, not a [batch, tokens, dim] tensor; pass "
            "output= (a layer name or a callable images -> [batch, tokens, dim])"
        )
    from ava.vfm.feature_check import refuse_complex

    refuse_complex(t, name)  # before the float cast below would drop the imaginary part
    if t.ndim != 3 or t.shape[0] != batch:
        raise AvaError(
            f"VFM {name!r}: the output has shape {tuple(t.shape)} for {batch} image(s), not [batch, "
            "tokens, dim]; pass output= (a layer name or a callable images -> [batch, tokens, dim]) "
            "whose result is one"
        )
    return t


def _layer_fn(module: nn.Module, layer: str) -> Callable[[torch.Tensor], Any]:
    """A function running ``module`` up to its sub-module ``layer`` and returning that sub-module's output."""
    try:
        target = module.get_submodule(layer)
    except AttributeError:
        names = [n for n, _ in module.named_modules() if n][:8]
        raise AvaError(f"output={layer!r}: the module has no sub-module {layer!r} (e.g. {', '.join(names)})") from None

    def run(x: torch.Tensor) -> Any:
        kept: list[Any] = []

        def hook(_m: nn.Module, _args: Any, out: Any) -> None:
            kept.append(out)
            raise _Enough

        handle = target.register_forward_hook(hook)
        try:
            module(x)
        except _Enough:
            pass
        finally:
            handle.remove()
        if not kept:
            raise AvaError(f"output={layer!r}: the module's forward did not run its sub-module {layer!r}")
        return kept[0]

    return run


def _module_of(fn: Any) -> nn.Module | None:
    """The module whose weights a callable uses: itself, or the owner of a bound method (``model.forward_features``)."""
    if isinstance(fn, nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, nn.Module) else None


def vfm_from_module(
    module: nn.Module | Callable[[torch.Tensor], Any],
    *,
    name: str,
    version: str | None = None,
    weights_hash: bool | None = None,
    size: int,
    mean: tuple[float, float, float] | list[float],
    std: tuple[float, float, float] | list[float],
    pad: bool = True,
    output: str | Callable[[torch.Tensor], Any] | None = None,
    prefix_tokens: int = 0,
    device: str | torch.device | None = None,
    random_weights: bool = False,
    autocast: str | None = None,
    dtype: str | None = None,
) -> ModuleVFM:
    """Any in-memory model as a VFM the cache and the heads take (the contract of ``FrozenVFM``).

    - ``module``: an ``nn.Module`` whose forward returns ``[batch, tokens, dim]`` (a tensor, or an output with
      ``last_hidden_state``, or a tuple whose first item is that tensor), or any callable ``images -> tokens``.
    - ``output``: how to get the tokens instead of calling ``module``: the dotted name of a sub-module (e.g.
      ``"blocks.10"``; its forward output is taken and nothing after it runs), or a callable ``images -> tokens``.
    - ``name`` (required) and ``version``: the identity. Without a version the weights are hashed (SHA-256 of the
      ``state_dict`` at extraction time); ``weights_hash=True`` hashes them with a version too. Caches of different
      checkpoints never mix: the identity is part of the cache key.
    - ``size``, ``mean``, ``std``, ``pad``: the preprocessing: each image is padded to a square with ava's pad colour
      RGB(124, 120, 111) (``pad=False``: stretched), resized (bicubic) to ``size`` and normalized.
    - ``prefix_tokens``: tokens dropped from the front of the output (CLS, registers).
    - ``device``: where images go (default: the module's parameters' device, else the CPU).
    - ``autocast``: ``"bf16"`` or ``"fp16"`` runs the forward under ``torch.autocast`` (faster on CPUs with bf16
      units; part of the identity); default off (autocast is switched off during the forward).
    - ``dtype``: ``"bf16"`` or ``"fp16"`` runs the forward on a copy of the weights in that dtype, activations
      included (part of the identity). On a CPU with AMX it is ~2x faster than bf16 autocast, which keeps the
      residual stream in float32 and casts every linear's input; the features differ from fp32 (and from autocast)
      by bf16's rounding. The copy is made per forward, or once per evaluation inside :meth:`ModuleVFM.held` (as the
      in-memory fingerprint and the training callbacks do).

    The output is checked on one image here: a shape that is not ``[batch, tokens, dim]`` is one AvaError naming it.
    """
    if not isinstance(name, str) or not name.strip():
        raise AvaError(
            "vfm_from_module: name= is required (with version= or the weights' hash, it is the identity "
            "the feature cache keys on)"
        )
    if version is not None and (not isinstance(version, str) or not version.strip()):
        raise AvaError(f"vfm_from_module: version={version!r} must be a non-empty string (or None: hash the weights)")
    if not callable(module):
        raise AvaError(f"vfm_from_module: the model is a {type(module).__name__}, not an nn.Module or a callable")
    if not isinstance(size, int) or size < 1:
        raise AvaError(f"vfm_from_module: size={size!r} must be a positive int (the input side in pixels)")
    mean_t, std_t = _triple(mean, "mean"), _triple(std, "std")
    if any(s <= 0 for s in std_t):
        raise AvaError(f"vfm_from_module: std={list(std_t)} must be > 0")
    if not isinstance(prefix_tokens, int) or prefix_tokens < 0:
        raise AvaError(f"vfm_from_module: prefix_tokens={prefix_tokens!r} must be an int >= 0")
    if autocast not in _AUTOCAST:
        raise AvaError(f"vfm_from_module: autocast={autocast!r}; use None, 'bf16' or 'fp16'")
    if dtype not in _DTYPES:
        raise AvaError(f"vfm_from_module: dtype={dtype!r}; use None, 'bf16' or 'fp16'")
    if dtype is not None and autocast is not None:
        raise AvaError(
            f"vfm_from_module: autocast={autocast!r} and dtype={dtype!r}: give one (dtype casts the "
            "weights, autocast casts each operation's inputs)"
        )
    owner = _module_of(module)
    hashed = (version is None) if weights_hash is None else bool(weights_hash)
    if version is None and not hashed:
        raise AvaError(f"vfm_from_module({name!r}): no identity: give version= or leave weights_hash on")
    if hashed and owner is None:
        raise AvaError(f"vfm_from_module({name!r}): a plain callable has no weights to hash; give version=")
    if dtype is not None and owner is None:
        raise AvaError(
            f"vfm_from_module({name!r}): dtype={dtype!r} casts a module's weights; a plain callable has "
            "none (cast inside it, or pass the nn.Module)"
        )
    fn, kind = _output_fn(module, owner, output)
    dev = _device(owner, device)
    spec = ModuleSpec(
        key=name,
        version=version,
        image_size=size,
        mean=mean_t,
        std=std_t,
        pad=pad,
        prefix_tokens=prefix_tokens,
        num_tokens=0,
        dim=0,
        grid=(0, 0),
        output=kind,
        random_weights=random_weights,
    )
    vfm = ModuleVFM(spec, owner, fn, dev, hashed, autocast, dtype)
    return _probed(vfm)


def _triple(values: Any, what: str) -> tuple[float, float, float]:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        out = ()
    if len(out) != 3:
        raise AvaError(f"vfm_from_module: {what}={values!r} must be 3 numbers (R, G, B)")
    return out  # type: ignore[return-value]


def _output_fn(module: Any, owner: nn.Module | None, output: Any) -> tuple[Callable[[torch.Tensor], Any], str]:
    if output is None:
        return module, "module" if isinstance(module, nn.Module) else "callable"
    if isinstance(output, str):
        if owner is None:
            raise AvaError(f"output={output!r} names a layer, but the model is not an nn.Module")
        return _layer_fn(owner, output), f"layer:{output}"
    if callable(output):
        return output, "callable"
    raise AvaError(f"output={output!r}: use a sub-module name, a callable images -> tokens, or None")


def _device(owner: nn.Module | None, device: str | torch.device | None) -> torch.device:
    if device is not None:
        from ava.vfm.model import resolve_device

        return resolve_device(device)
    if owner is not None:
        for t in owner.parameters():
            return t.device
    return torch.device("cpu")


def _probed(vfm: ModuleVFM) -> ModuleVFM:
    """Run one image (ava's pad colour) through the model: the token count and width are read from it, a wrong shape
    is refused here. Mode and every RNG state are put back (the model may be in the middle of training)."""
    from dataclasses import replace

    from ava.training_state import preserved_training_state

    spec = vfm.spec
    image = Image.new("RGB", (spec.image_size, spec.image_size), pp.PAD_FILL)
    with preserved_training_state(vfm.module):
        try:
            out = vfm.tokens(vfm.preprocess(image).unsqueeze(0))
        except AvaError:
            raise
        except Exception as e:  # the user's model failed on a well-formed image: name it, keep the cause
            raise AvaError(
                f"VFM {spec.key!r} failed on a {spec.image_size}x{spec.image_size} image: "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ) from e
    t = _checked(out, spec.key, 1)
    tokens = t.shape[1] - spec.prefix_tokens
    if tokens < 1:
        raise AvaError(
            f"VFM {spec.key!r}: the output has shape {tuple(t.shape)}, i.e. {t.shape[1]} token(s), but "
            f"prefix_tokens={spec.prefix_tokens} drops them all"
        )
    side = int(round(tokens**0.5))
    grid = (side, side) if side * side == tokens else (1, tokens)
    vfm.spec = replace(spec, num_tokens=tokens, dim=int(t.shape[2]), grid=grid)
    vfm.num_tokens, vfm.dim, vfm.grid = tokens, int(t.shape[2]), grid
    return vfm
