"""Optional dependencies: which extra of ``ava-bench`` brings each one, and the one line said when one is missing.

A workflow that needs an optional package (``ava data build``'s masks need pycocotools, a ``s3://`` cache needs
s3fs, ``--executor slurm`` needs submitit ...) calls :func:`require` before it writes anything, so a missing
package is one line naming the extra and the install command that adds it, never an "internal error" and never a
half-written output. :func:`missing_message` gives the same line for an import that fails later anyway (the CLI's
last resort, :func:`ava.errors.describe`).

:data:`EXTRAS` must match ``[project.optional-dependencies]`` in ``pyproject.toml`` (``tests/test_extras.py`` checks
it); it maps each extra to (import name, distribution name) pairs, since the two differ (``skimage`` is
``scikit-image``). Nothing here imports the optional packages themselves (``importlib.util.find_spec`` only).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ava.errors import AvaError

DISTRIBUTION = "ava-bench"
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "build": (("pycocotools", "pycocotools"), ("skimage", "scikit-image"), ("inflect", "inflect")),
    "s3": (("s3fs", "s3fs"),),
    "slurm": (("submitit", "submitit"),),
    "openclip": (("open_clip", "open_clip_torch"),),
    "lightning": (("lightning", "lightning"),),
}


class MissingDependency(AvaError, ImportError):
    """An optional package a workflow needs is not installed (the message names its extra)."""


def _checkout() -> Path | None:
    """The source checkout ``ava`` runs from (an editable install, as the README's), or None for an installed
    wheel."""
    root = Path(__file__).resolve().parent.parent
    project = root / "pyproject.toml"
    try:
        return root if f'name = "{DISTRIBUTION}"' in project.read_text(encoding="utf-8") else None
    except OSError:
        return None


def install_line(extra: str) -> str:
    """The command that adds ``extra``: from the checkout ``ava`` runs from, with its constraints file (so pip keeps
    the installed torch), else from the package index."""
    root = _checkout()
    if root is None:
        return f"pip install '{DISTRIBUTION}[{extra}]'"
    here = root == Path.cwd().resolve()
    where = "." if here else str(root)
    constraints = ".ci/constraints.txt" if here else os.path.join(where, ".ci", "constraints.txt")
    if not Path(root, ".ci", "constraints.txt").is_file():
        return f'pip install -e "{where}[{extra}]"'
    return f'pip install -c {constraints} -e "{where}[{extra}]"'


def extra_of(module: str) -> tuple[str, str] | None:
    """(extra, distribution) that installs the top-level module ``module``; None for a module of no extra."""
    top = module.split(".")[0]
    for extra, pairs in EXTRAS.items():
        for name, dist in pairs:
            if name == top:
                return extra, dist
    return None


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingDependency` naming ``what`` (a command or feature), the missing packages and the install
    line, unless every package of ``extra`` can be imported."""
    missing = [dist for name, dist in EXTRAS[extra] if not _importable(name)]
    if missing:
        raise MissingDependency(
            f"{what} needs {' and '.join(missing)}, from the {extra} extra, which is not "
            f"installed: {install_line(extra)}"
        )


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken install, or a module that set no __spec__
        return False


def missing_message(e: BaseException) -> str | None:
    """The one line for a ``ModuleNotFoundError`` of a package some extra installs; None for any other error."""
    name = getattr(e, "name", None)
    if not isinstance(e, ModuleNotFoundError) or not name or (found := extra_of(name)) is None:
        return None
    extra, dist = found
    return f"this needs {dist}, from the {extra} extra, which is not installed: {install_line(extra)}"
