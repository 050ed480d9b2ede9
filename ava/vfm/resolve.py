"""Names -> specs: a registry key or alias, ``key@<hub-id-or-dir>`` (a registered VFM with weights from
elsewhere), ``key:random`` (the full-size architecture with random weights, seed 0: for speed benchmarks, since
speed depends on shapes, not weights), ``hf:<hub-id-or-dir>`` (any transformers vision backbone, facts read from
its config), or ``timm:<model-name-or-dir>`` (any timm model, see :mod:`ava.vfm.timm_family`).

``hf:`` options follow a ``#``: ``hf:/models/beit#prefix=1,size=224,pool=24`` sets the prefix-token count
(needed for classes ``ava`` does not know), the input size, and area-pooling of the patch grid to 24x24.
Any other name takes ``#size=S``: ``effnet-lite0#size=160`` runs the model at 160 px instead of its registered
size (a CNN or the ``pixels`` floor takes any multiple of its stride; a ViT with a fixed position table refuses it
when it runs). The size is part of the name and of the cache identity, so features at different sizes never mix.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.jsonfile import read_json
from ava.vfm.families import BY_CONFIG
from ava.vfm.spec import HALF, IDENTITY_MEAN, IDENTITY_STD, VFMSpec
from ava.vfm.zoo import VFMS

HF_OPTIONS = ("prefix", "size", "pool")
# Bounds of the ``#`` options, checked where they are parsed: an input side beyond MAX_SIZE px (the largest
# published VFM input is 1024) only runs out of memory, image by image; a grid or a prefix past these is no model's.
OPTION_LIMITS = {"prefix": (0, 1024), "size": (1, 4096), "pool": (1, 512)}
_ROUTES = ("hf:", "timm:")  # prefixes naming a checkpoint after them


def resolve_vfm(name: str | VFMSpec, *, trust_remote_code: bool = False) -> VFMSpec:
    """The spec for ``name``: registry key/alias, ``key@source``, ``key:random``, ``hf:<hub-id-or-dir>[#options]``
    or ``timm:<name-or-dir>``. ``trust_remote_code`` lets an ``hf:`` config that needs custom code load it."""
    if isinstance(name, VFMSpec):
        return name
    check_source(name)
    if name.startswith("open_clip:"):
        from ava.vfm.openclip import no_features

        raise no_features(name)
    if name.startswith("hf:"):
        return hf_spec(name[3:], trust_remote_code=trust_remote_code)
    if "#" in name:
        return _sized(name, trust_remote_code)
    if name.startswith("timm:"):
        from ava.vfm.timm_family import timm_spec

        return timm_spec(name[5:])
    if name.endswith(":random"):
        spec = VFMS.get(name.removesuffix(":random"))
        if spec.config is None:
            raise AvaError(f"VFM {spec.key!r} has no architecture to build with random weights")
        return replace(spec, key=f"{spec.key}:random", hub_id=None, revision=None, seed=0, provider=None)
    if "@" in name:
        key, _, source = name.partition("@")
        spec = VFMS.get(key)
        if spec.model_class == "pixels" or spec.config is None:
            raise AvaError(f"VFM {key!r} has no weights to load; use {key!r} without '@{source}'")
        return replace(spec.with_weights(source), key=f"{spec.key}@{source}")
    return VFMS.get(name)


def check_source(name: str) -> None:
    """Refuse a name whose checkpoint part is empty: ``hf:`` (what ``hf:$MODEL_DIR`` becomes when the variable is
    unset would load whatever checkpoint the current directory holds), ``timm:``, ``clip@``, ``hf:#size=224``."""
    if not isinstance(name, str) or not name.strip():
        raise AvaError("--vfm is empty; give a registered key (`ava vfm list`), hf:<hub-id-or-dir> or timm:<name>")
    from ava.vfm.openclip import is_open_clip

    if is_open_clip(name):
        if not name[len("open_clip:") :].strip():
            raise AvaError(
                f"--vfm {name!r}: nothing after 'open_clip:' (an unset variable?); give "
                "open_clip:local-dir:DIR or open_clip:NAME@WEIGHTS_FILE"
            )
        return
    base = name.partition("#")[0]
    route = next((r for r in _ROUTES if base.startswith(r)), None)
    if route is not None and not base[len(route) :].strip():
        raise AvaError(
            f"--vfm {name!r}: no checkpoint after {route!r} (an unset variable?); give a hub id or a "
            f"directory, e.g. '{route}./my-model'"
        )
    if route is None and "@" in base:
        key, _, source = base.partition("@")
        if not key.strip() or not source.strip():
            raise AvaError(
                f"--vfm {name!r}: {'no VFM key before' if not key.strip() else 'no weights after'} '@'; "
                "use KEY@<hub-id-or-dir>, e.g. 'dinov2@./weights'"
            )
    if route is None and base.endswith(":random") and not base.removesuffix(":random").strip():
        raise AvaError(f"--vfm {name!r}: no VFM key before ':random'")
    if "#" in name and not name.partition("#")[2].strip():
        raise AvaError(f"--vfm {name!r}: nothing after '#'; give options such as '#size=224' or drop the '#'")


def _options(text: str, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        # ASCII digits only, and few of them: int() also takes '²' or 5000 digits, then fails or overflows later
        if key not in HF_OPTIONS or not (value.isascii() and value.isdigit()) or len(value) > 6:
            raise AvaError(
                f"bad option {_short(item)!r} in --vfm {_short(name)!r}; options: prefix=N (0..1024), "
                "size=S (1..4096), pool=G (1..512) (e.g. '#prefix=1')"
            )
        low, high = OPTION_LIMITS[key]  # a token count may be 0; an image side or a pooled grid may not
        if not low <= int(value) <= high:
            raise AvaError(f"bad option {item!r} in --vfm {name!r}: {key} must be an integer in {low}..{high}")
        if key in out:
            raise AvaError(f"bad options in --vfm {_short(name)!r}: {key} is given twice")
        out[key] = int(value)
    return out


def _short(text: str, limit: int = 60) -> str:
    """``text`` cut for a message (a 5000-digit value would fill the screen)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _sized(name: str, trust_remote_code: bool) -> VFMSpec:
    """``NAME#size=S``: the spec of ``NAME`` at input size ``S`` (see the module docstring)."""
    base, _, opts = name.partition("#")
    size = _size_option(opts, name)
    spec = resolve_vfm(base, trust_remote_code=trust_remote_code)
    if size % spec.patch_size:
        raise AvaError(
            f"--vfm {name!r}: size {size} is not a multiple of {spec.key}'s patch size (stride) {spec.patch_size}; "
            f"try {max(spec.patch_size, size // spec.patch_size * spec.patch_size)}"
        )
    return replace(spec, key=f"{spec.key}#size={size}", image_size=size, aliases=())


def _size_option(opts: str, name: str) -> int:
    options = _options(opts, name)
    if set(options) != {"size"}:
        raise AvaError(f"bad options in --vfm {name!r}: a registered, key@dir or timm: name takes only '#size=S'")
    return options["size"]


def check_name(name: str) -> str:
    """``name`` with its checkpoint part and ``#options`` checked (no download, no torch): for parse-time
    validation."""
    check_source(name)
    if "#" in name:
        if name.startswith("hf:"):
            _options(name.partition("#")[2], name)
        else:
            _size_option(name.partition("#")[2], name)
    return name


def _first(value: Any) -> int:
    return int(value[0] if isinstance(value, (list, tuple)) else value)


def hf_spec(text: str, *, trust_remote_code: bool = False) -> VFMSpec:
    """A spec for any transformers vision backbone, read from its config and preprocessor config."""
    from ava.vfm.weights import locate

    name = f"hf:{text}"
    source, _, opts = text.partition("#")
    options = _options(opts, name)
    where = locate(source, key=name, config_only=True, code=trust_remote_code)
    if not trust_remote_code:
        from ava.vfm.mapped import published_radio

        if published_radio(where.path) is not None:
            raise AvaError(
                f"{source} is a RADIO checkpoint in its publisher's remote-code format: load it with "
                f"'--vfm radio@{source}' (mapped into transformers' RadioModel; no code runs)"
            )
    config = _vision_config(where.path, source, trust_remote_code)
    fam = BY_CONFIG.get(type(config).__name__)
    remote_class = (getattr(config, "auto_map", None) or {}).get("AutoModel") if trust_remote_code else None
    if remote_class:  # the publisher's class ("modeling_x.XModel", or "repo--modeling_x.XModel")
        model_class = str(remote_class).rpartition(".")[2]
    else:
        model_class = fam.model_class if fam else _model_class_of(config, source)
    if "prefix" in options:
        prefix = options["prefix"]
    elif fam is not None:
        prefix = fam.prefix(config)
    else:
        raise AvaError(
            f"cannot tell how many prefix tokens (CLS, registers) {model_class} puts before its patch tokens; "
            f"say it: --vfm '{name}#prefix=N'"
        )
    mean, std = _normalization(where.path, fam)
    size = options.get("size") or (fam.size_of(config) if fam else _first(getattr(config, "image_size", 0) or 0))
    patch = fam.patch_of(config) if fam else _first(getattr(config, "patch_size", 0) or 0)
    if not size or not patch:
        raise AvaError(f"{source}: its config gives no image_size/patch_size; pass --vfm '{name}#size=S'")
    return VFMSpec(
        key=name,
        model_class=model_class,
        config_class=type(config).__name__,
        hub_id=source,
        image_size=size,
        patch_size=patch,
        dim=fam.dim_of(config) if fam else int(config.hidden_size),
        prefix_tokens=prefix,
        prefix_desc=fam.prefix_desc if fam and "prefix" not in options else f"{prefix} (given)",
        mean=mean,
        std=std,
        config=_config_kwargs(config),
        postprocess=f"pool:{options['pool']}x{options['pool']}" if options.get("pool") else None,
        title=f"{model_class} from {source}",
        seed=None,
        trust_remote_code=trust_remote_code,
        loader="remote" if trust_remote_code else "native",
    )


def _vision_config(path: Path, source: str, trust_remote_code: bool = False) -> Any:
    config = load_config(path, source, trust_remote_code)
    if type(config).__name__ not in BY_CONFIG and getattr(config, "vision_config", None) is not None:
        return config.vision_config  # a CLIP/SigLIP/SAM-style composite: its vision tower
    return config


def needs_remote_code(path: Path) -> bool:
    """True when the checkpoint's config.json maps a class to its own Python code (``auto_map``)."""
    try:
        return bool(read_json(path / "config.json").get("auto_map"))
    except (OSError, ValueError, AttributeError):
        return False


def remote_code_error(source: str, what: str) -> AvaError:
    return AvaError(
        f"{source} is published with its own Python code (config.json 'auto_map'), which ava never runs unless "
        f"asked. {what}: load it through a native route (ava vfm show KEY says which; a converted directory via "
        f"'KEY@/path/to/dir'), or, if you trust that code, pass --trust-remote-code (ava cache extract, ava head "
        f"train and align with online features, ava vfm show take it; it is recorded with the features)"
    )


def load_config(path: Path, source: str, trust_remote_code: bool = False) -> Any:
    """``AutoConfig`` of a checkpoint with ``trust_remote_code`` pinned (False unless asked: never a prompt)."""
    from transformers import AutoConfig

    if needs_remote_code(path) and not trust_remote_code:
        try:  # the native class may know the model_type even when auto_map names custom code
            return AutoConfig.from_pretrained(str(path), trust_remote_code=False)
        except (ValueError, KeyError, OSError) as e:
            raise remote_code_error(source, "Its model type is not native to transformers") from e
    try:
        return AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, OSError) as e:
        raise AvaError(
            f"{source} is not a native transformers checkpoint ({str(e).splitlines()[0]}); convert it first"
        ) from e


def _model_class_of(config: Any, source: str) -> str:
    from transformers import MODEL_MAPPING

    try:
        return MODEL_MAPPING[type(config)].__name__
    except KeyError as e:
        raise AvaError(f"{source}: transformers has no base model for {type(config).__name__}") from e


def _normalization(path: Path, fam: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean/std from the checkpoint's preprocessor_config.json, else the class's usual ones."""
    if fam is not None and fam.internal_norm:
        return IDENTITY_MEAN, IDENTITY_STD
    file = path / "preprocessor_config.json"
    if file.is_file():
        data = read_json(file)
        if data.get("image_mean") and data.get("image_std") and data.get("do_normalize", True):
            return tuple(map(float, data["image_mean"])), tuple(map(float, data["image_std"]))
    return (fam.mean, fam.std) if fam is not None else (HALF, HALF)


def _config_kwargs(config: Any) -> dict[str, Any]:
    data = config.to_dict()
    for key in ("transformers_version", "architectures", "_name_or_path", "model_type", "dtype", "torch_dtype"):
        data.pop(key, None)
    return data
