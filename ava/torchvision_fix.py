"""The one place that works around a torchvision that cannot load next to the installed torch.

pip resolves ``torchvision`` for timm (timm imports it unconditionally), and on CPU machines the registry's
torchvision wheel can be a CUDA build whose compiled operators do not load next to a CPU torch. ``import
torchvision`` then fails in its meta registrations with "operator torchvision::nms does not exist"
(pytorch/vision#9085), and with it ``import timm`` and every transformers model class (transformers imports
torchvision whenever it is installed: even ``Qwen2ForCausalLM`` fails to import).

Only torchvision's Python parts are needed here (timm's transforms and layer helpers; no detection operators).
:func:`install` (called when ``ava`` is imported; it imports nothing) puts a finder in front of the import system
that wraps torchvision's own loader: when, and only when, executing ``torchvision/__init__`` fails with that error,
it declares the schemas of the two operators the meta registrations look up (``torchvision::nms``,
``torchvision::qnms``; no implementations, so calling them still fails), runs the package again and warns once.
With no torchvision installed, or one that loads, nothing changes.

No warning is given for the one pairing that is complete for ``ava``: a CPU torch beside the CUDA build of the
torchvision release made for that very torch (its metadata requires ``torch==`` this version). That is what pip
installs on a CPU machine from PyPI, which serves no CPU torchvision (the README's install line: torch 2.13.0 CPU,
torchvision 0.28.0+cu130). Its Python parts are the same as the CPU build's; only the compiled operators (nms,
roi_align, deform_conv2d ..., which neither ``ava`` nor timm's and transformers' code paths it uses call) are
missing, and calling one still fails with torchvision's own error ("Couldn't load custom C++ ops"). Any other
pairing (another release, a torch with CUDA) warns, since its Python parts may not match the torch.
"""

from __future__ import annotations

import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

BROKEN = "operator torchvision::nms does not exist"
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor",
)
_LIBS: list[Any] = []  # torch.library.Library objects must stay alive for their schemas to stay declared
applied = False  # True once the workaround was needed (and the warning given)


class _Loader:  # the importlib Loader protocol (not importlib.abc, whose import costs a quarter second)
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        global applied
        try:
            self.inner.exec_module(module)
        except RuntimeError as e:
            if BROKEN not in str(e):
                raise
            _declare_schemas()
            for name in [m for m in sys.modules if m.startswith("torchvision.")]:
                del sys.modules[name]  # submodules of the failed attempt
            self.inner.exec_module(module)
            applied = True
            if release_made_for_this_torch(getattr(module, "__version__", "")):
                return
            warnings.warn(
                "torchvision's compiled operators do not load next to this torch (a CUDA torchvision beside a "
                "CPU torch, pytorch/vision#9085); ava declared torchvision::nms/qnms without implementations so "
                "that its Python parts (used by timm and transformers) import. Install the torchvision build "
                "that matches your torch to silence this.",
                RuntimeWarning,
                stacklevel=2,
            )


class _Finder:  # the importlib MetaPathFinder protocol
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torchvision":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Put the finder first in ``sys.meta_path`` (once); torchvision, if installed, is imported as usual."""
    if "torchvision" not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def release_made_for_this_torch(version: str) -> bool:
    """Whether torchvision ``version`` is a CUDA build of the release made for the installed CPU torch (its metadata
    requires ``torch==`` exactly this torch's version): the pairing whose only missing part is the compiled
    operators."""
    import torch

    if torch.version.cuda is not None or "+cu" not in version:
        return False
    try:
        from importlib.metadata import PackageNotFoundError, requires
        from importlib.metadata import version as installed

        from packaging.requirements import Requirement
    except ImportError:
        return False
    try:
        if installed("torchvision").split("+")[0] != version.split("+")[0]:  # not the imported package's metadata
            return False
        wanted = [Requirement(r) for r in requires("torchvision") or []]
    except (PackageNotFoundError, ValueError):
        return False
    mine = torch.__version__.split("+")[0]
    return any(r.name == "torch" and not r.marker and str(r.specifier) == f"=={mine}" for r in wanted)


def _declare_schemas() -> None:
    import torch

    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in SCHEMAS:
        try:
            lib.define(schema)
        except RuntimeError:  # already declared (torchvision's library loaded part of its operators)
            continue
    _LIBS.append(lib)
