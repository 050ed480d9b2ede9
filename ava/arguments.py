"""Whether a value has the type a function's or a config's annotation declares, and the check of a public function's
arguments against its annotations.

One reading of the annotations serves both: :func:`ava.config.load_config` refuses a TOML value of the wrong type
with :func:`fits`, and every public function of ``ava`` (:mod:`ava.api`, and what ``ava/__init__`` exports) runs
under :func:`check_arguments`, so ``ava.build_data(coco=3)`` or ``ava.extract(batch_size="8")`` is an
:class:`~ava.errors.AvaError` naming the argument, raised before any work, instead of a TypeError from deep inside.
The annotations are the documentation users read, so what they say is what is enforced.
"""

from __future__ import annotations

import functools
import inspect
import os
import types
import typing
from collections.abc import Callable
from pathlib import PurePath
from typing import Any, TypeVar

from ava.errors import AvaError

F = TypeVar("F", bound=Callable[..., Any])
CHECKED = "__ava_checked__"  # set on a function that runs under check_arguments


class ArgumentError(AvaError, TypeError):
    """A public function was called with an argument of the wrong type (or a name it has no argument for)."""


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type ``hint``: unions, ``None``, ``Literal``, ``list``/``tuple``
    (either one: TOML has arrays only) of an item type, ``dict``, paths (a ``str`` or an ``os.PathLike``), classes.
    A bool is not an integer or a number here, as it is not in a config file. What cannot be checked passes."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, TypeVar | str):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if hint is None or hint is type(None):
        return value is None
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple) or hint in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        item = items[0] if len(items) == 1 or (args and args[-1] is Ellipsis) else Any
        return isinstance(value, list | tuple) and all(fits(v, item) for v in value)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is os.PathLike or origin is os.PathLike or (isinstance(hint, type) and issubclass(hint, PurePath)):
        return isinstance(value, str | os.PathLike)
    if isinstance(origin, type):  # Callable[...], Sequence[...] ...: the container's class
        hint = origin
    if isinstance(hint, type):
        try:
            return isinstance(value, hint)
        except TypeError:  # a Protocol that cannot be checked at run time
            return True
    return True


def type_name(hint: Any) -> str:
    """``hint`` in words, for an error line: "an integer or nothing (leave it out)", "a list of a string"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        names = dict.fromkeys(type_name(a) for a in args)
        if "a path" in names:  # a path is a string or an os.PathLike
            names.pop("a string", None)
        return " or ".join(names)
    if hint is None or hint is type(None):
        return "nothing (leave it out)"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple):
        return f"a list of {type_name(args[0])}" if args else "a list"
    if hint is os.PathLike or origin is os.PathLike or (isinstance(hint, type) and issubclass(hint, PurePath)):
        return "a path"
    named = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a dict"}
    if hint in named:
        return named[hint]
    return getattr(origin or hint, "__name__", str(hint))


def check_fields(cls: type, values: dict[str, Any], where: str = "") -> None:
    """Each of ``values`` a field of the dataclass ``cls`` (a typed config) and of the field's annotated type, or an
    :class:`ArgumentError` that starts with ``where`` and names the field."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - names)
    if unknown:
        raise ArgumentError(f"{where}unknown field(s) {unknown}; known: {sorted(names)}")
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if not fits(value, hints.get(name, Any)):
            raise ArgumentError(f"{where}{name} = {value!r}: expected {type_name(hints[name])}")


def argument_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Each parameter's annotation, evaluated in the function's module (one whose name is imported only for type
    checkers is taken as Any: what cannot be read cannot be enforced)."""
    out = {}
    namespace = dict(getattr(inspect.unwrap(fn), "__globals__", {}))
    for name, p in inspect.signature(fn).parameters.items():
        hint = p.annotation
        if isinstance(hint, str):
            try:
                hint = eval(hint, namespace)  # noqa: S307 - the module's own annotation text
            except Exception:  # noqa: BLE001 - a name under TYPE_CHECKING
                hint = Any
        out[name] = Any if hint is inspect.Parameter.empty else hint
    return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"<{type(value).__name__}>"


def check_arguments(fn: F) -> F:
    """``fn`` with its arguments checked against its annotations on every call: an argument of another type, a name
    ``fn`` has no argument for, or a missing required one is an :class:`ArgumentError` naming it, before ``fn`` runs.
    ``*args``/``**kwargs`` are left to ``fn`` (a config's fields are checked by :func:`ava.config.load_config`).
    Applying it twice is applying it once."""
    if getattr(fn, CHECKED, False):
        return fn
    signature = inspect.signature(fn)
    hints: dict[str, Any] = {}

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not hints:
            hints.update(argument_hints(fn))
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{fn.__name__}(): {e}") from None
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            if not fits(value, hints[name]):
                raise ArgumentError(
                    f"{fn.__name__}({name}={_shown(value)}): expected {type_name(hints[name])}, got "
                    f"{type(value).__name__}"
                )
        return fn(*args, **kwargs)

    setattr(run, CHECKED, True)
    return run  # type: ignore[return-value]


def check_public_functions(namespace: dict[str, Any]) -> None:
    """Put every public function a module defines (``namespace``: its globals; names without a leading ``_``) under
    :func:`check_arguments`."""
    for name, value in list(namespace.items()):
        if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == namespace["__name__"]:
            namespace[name] = check_arguments(value)
