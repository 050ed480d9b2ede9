"""Frozen vision foundation models: the registry (:data:`VFMS`), name resolution and loading.

``load_vfm(name)`` returns a :class:`~ava.vfm.model.FrozenVFM` whose ``forward`` gives patch tokens
``[B, L, T, D]`` and whose ``identity()`` is what the feature cache keys on. Importing this package does not
import torch; ``load_vfm`` and ``FrozenVFM`` do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ava.vfm.preprocess import pad_to_square
from ava.vfm.resolve import resolve_vfm
from ava.vfm.spec import VFMSpec
from ava.vfm.zoo import VFMS

if TYPE_CHECKING:
    import torch

    from ava.vfm.model import FrozenVFM

__all__ = [
    "VFMS",
    "FrozenVFM",
    "VFMSpec",
    "load_vfm",
    "pad_to_square",
    "param_count",
    "resolve_vfm",
    "vfm_facts",
    "list_vfms",
]


def load_vfm(
    name: str | VFMSpec,
    *,
    device: str = "cpu",
    dtype: torch.dtype | str | None = None,
    preprocess: str = "pad",
    layers: tuple[int, ...] | None = None,
    trust_remote_code: bool = False,
) -> FrozenVFM:
    """A frozen VFM ready for ``forward`` (see :func:`ava.vfm.model.load_vfm`); dtype defaults to float32."""
    from ava.vfm.model import load_vfm as _load

    return _load(
        name, device=device, dtype=dtype, preprocess=preprocess, layers=layers, trust_remote_code=trust_remote_code
    )


def random_vfm(
    name: str | VFMSpec,
    *,
    device: str = "cpu",
    dtype: torch.dtype | str | None = None,
    seed: int = 0,
    layers: tuple[int, ...] | None = None,
) -> FrozenVFM:
    """A registered architecture at full size with random weights (benchmarks, shape checks; "meta": no memory)."""
    from ava.vfm.model import random_vfm as _random

    return _random(name, device=device, dtype=dtype, seed=seed, layers=layers)


def param_count(spec: VFMSpec) -> int:
    """Parameters of the architecture, counted on the meta device (nothing downloaded)."""
    from ava.vfm.model import param_count as _count

    return _count(spec)


def vfm_facts(name: str | VFMSpec, *, trust_remote_code: bool = False) -> dict[str, Any]:
    """All facts of a VFM (``ava vfm show``), with its parameter count computed on the meta device."""
    spec = resolve_vfm(name, trust_remote_code=trust_remote_code)
    facts = spec.facts()
    if spec.params is not None:  # declared (checked against the meta build by the tests)
        facts["params"] = spec.params
    elif spec.loader == "remote":  # its class is the publisher's code: not built here
        facts["params"] = None
    else:
        facts["params"] = param_count(spec) if spec.config is not None or spec.model_class == "pixels" else None
    return facts


def list_vfms() -> list[dict[str, Any]]:
    """The facts of every registered VFM (``ava vfm list``) with their declared parameter counts (checked against
    the meta-device build by the tests) and ``package``: the installed package a plugin VFM comes from (None: built
    in). Listing imports neither torch nor transformers (a plugin imports what its own module imports); plugins
    that failed are in ``VFMS.plugin_errors``."""
    return [
        {**VFMS.get(name).facts(), "params": VFMS.get(name).params, "package": VFMS.package_of(name)}
        for name in VFMS.names()
    ]


def __getattr__(name: str) -> Any:
    if name == "FrozenVFM":
        from ava.vfm.model import FrozenVFM

        return FrozenVFM
    raise AttributeError(name)
