"""One registry mechanism for everything pluggable: abilities, VFMs, heads, LLMs, metrics, codecs.

Entries may be registered eagerly (an object) or lazily (a ``"module:attr"`` string resolved on first
``get``), so listing names never imports torch or faiss.

Plugins: a registry made with :class:`Plugins` also takes entries from an installed package's entry points
(``importlib.metadata``; groups ``ava.vfms``, ``ava.heads``, ``ava.abilities``). They are discovered lazily, the
first time the registry is listed or a name is not found among the built-ins, so a plugin's code runs only
because the user installed its package, and only when it is needed; entry points are the only source (nothing
is ever imported from a dataset, cache or run directory). An entry point gives an object of the registry's type,
a list of them, or a callable returning either. A plugin that fails to load, gives something else, or names an
entry already registered is recorded in :attr:`Registry.plugin_errors` (listed by ``ava vfm list``) and named in
the error when the user asks for it; the other entries stay usable.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ava.errors import AvaError

T = TypeVar("T")


class RegistryError(AvaError, KeyError):
    """Unknown or duplicate registry name; the message is meant for the user."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Plugins:
    """Where a registry's plugins come from and what an entry point must give.

    ``group`` is the entry-point group; an entry point gives an instance of ``cls`` (or a list of them, or a
    callable returning either), registered under ``name(obj)`` with ``aliases(obj)``.
    """

    group: str
    cls: type
    name: Callable[[Any], str]
    aliases: Callable[[Any], tuple[str, ...]] = field(default=lambda obj: ())


@dataclass(frozen=True)
class PluginError:
    """A plugin that could not be used: its entry point, its package and why (one line)."""

    entry_point: str
    package: str
    message: str

    def __str__(self) -> str:
        return f"plugin {self.entry_point!r} (package {self.package}): {self.message}"


def _package(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown package"
    return f"{dist.metadata['Name'] or dist.name} {dist.version}".strip()


def _in_working_directory(ep: Any) -> bool:
    """Whether the entry point's distribution sits in the current directory (``python -m ava`` puts it on
    ``sys.path``): a ``*.dist-info`` there may have come with a dataset, cache or run directory."""
    import os
    from pathlib import Path

    dist = getattr(ep, "dist", None)
    try:
        where = Path(os.fspath(dist.locate_file(""))).resolve()
        return where == Path.cwd().resolve()
    except (AttributeError, OSError, TypeError, ValueError):
        return False


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or "no message"
    return f"{type(e).__name__}: {text}"


class Registry(Generic[T]):
    def __init__(self, kind: str, plugins: Plugins | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        self._aliases: dict[str, str] = {}
        self.plugins = plugins
        self._discovered = plugins is None
        self._origin: dict[str, str] = {}  # plugin entry -> the package it came from
        self.plugin_errors: list[PluginError] = []

    def register(self, name: str, obj: T | str, aliases: tuple[str, ...] = ()) -> T | str:
        for key in (name, *aliases):
            if key in self._entries or key in self._aliases:
                raise RegistryError(f"{self.kind} {key!r} is already registered")
        self._entries[name] = obj
        for alias in aliases:
            self._aliases[alias] = name
        return obj

    # -- plugins -------------------------------------------------------------------------------------------------
    def discover(self) -> None:
        """Load the plugins of this registry's entry-point group (once); failures go to :attr:`plugin_errors`."""
        if self._discovered or self.plugins is None:
            return
        self._discovered = True  # set first: a plugin may look up a built-in while it loads
        from importlib.metadata import entry_points

        for ep in sorted(entry_points(group=self.plugins.group), key=lambda e: e.name):
            if _in_working_directory(ep):
                self.plugin_errors.append(
                    PluginError(
                        ep.name,
                        _package(ep),
                        (
                            "not loaded: its package lies in the current directory, not in an installed "
                            "environment (ava loads plugins only from installed packages, never from a dataset, "
                            "cache or run directory)"
                        ),
                    )
                )
                continue
            self._load_plugin(ep)

    def _load_plugin(self, ep: Any) -> None:
        package = _package(ep)

        def fail(message: str) -> None:
            self.plugin_errors.append(PluginError(ep.name, package, message))

        try:
            value = ep.load()
            if callable(value) and not isinstance(value, self.plugins.cls):
                value = value()
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a broken plugin (even one calling sys.exit) is
            # reported and skipped, never ends the command; Ctrl-C (KeyboardInterrupt) still does
            fail(f"failed to load ({ep.value}): {_one_line(e)}")
            return
        items = list(value) if isinstance(value, list | tuple) else [value]
        for obj in items:
            if not isinstance(obj, self.plugins.cls):
                fail(
                    f"gave a {type(obj).__name__}, not a {self.plugins.cls.__name__} (entry point {ep.value}, group "
                    f"{self.plugins.group})"
                )
                continue
            name = self.plugins.name(obj)
            try:
                self.register(name, obj, aliases=tuple(self.plugins.aliases(obj)))
            except RegistryError as e:
                where = f"from {self._origin[name]}" if name in self._origin else "built in"
                fail(f"{e} ({where}), so the plugin's is ignored")
                continue
            self._origin[name] = package

    def package_of(self, name: str) -> str | None:
        """The package (distribution and version) a plugin entry came from; None for a built-in one."""
        return self._origin.get(self.canonical(name))

    def forget_plugins(self) -> None:
        """Drop every plugin entry and error, so the next listing or miss discovers them again (tests, reloads)."""
        for name in self._origin:
            self._entries.pop(name, None)
            for alias in [a for a, n in self._aliases.items() if n == name]:
                del self._aliases[alias]
        self._origin.clear()
        self.plugin_errors.clear()
        self._discovered = self.plugins is None

    def _failed_plugins(self) -> str:
        """The plugins that failed, as the end of an "unknown name" message; "" if none did."""
        if self.plugin_errors:
            failed = ", ".join(repr(e.entry_point) for e in self.plugin_errors)
            return f" ({len(self.plugin_errors)} plugin(s) failed: {failed}; see `ava vfm list`)"
        return ""

    def canonical(self, name: str) -> str:
        """The registered name for ``name`` or one of its aliases; raises with suggestions otherwise."""
        found = self._find(name)
        if found is None and not self._discovered:
            self.discover()
            found = self._find(name)
        if found is not None:
            return found
        failed = [str(e) for e in self.plugin_errors if e.entry_point == name]
        if failed:  # the user asks for a plugin that could not be used: say why, in its words
            raise RegistryError(f"{self.kind} {name!r} is not available: {'; '.join(failed)}")
        close = difflib.get_close_matches(name, [*self._entries, *self._aliases], n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise RegistryError(
            f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(self._entries)}{self._failed_plugins()}"
        )

    def _find(self, name: str) -> str | None:
        if name in self._entries:
            return name
        if name in self._aliases:
            return self._aliases[name]
        lowered = name.lower().replace("-", "_")
        for key in (*self._entries, *self._aliases):
            if key.lower().replace("-", "_") == lowered:
                return self._aliases.get(key, key)
        return None

    def get(self, name: str) -> T:
        key = self.canonical(name)
        obj = self._entries[key]
        if isinstance(obj, str):
            module, _, attr = obj.partition(":")
            obj = getattr(importlib.import_module(module), attr)
            self._entries[key] = obj
        return obj  # type: ignore[return-value]

    def names(self, plugins: bool = True) -> list[str]:
        """Every registered name; ``plugins=False``: the built-in ones only, without looking for plugins."""
        if plugins:
            self.discover()
        return [n for n in self._entries if plugins or n not in self._origin]

    def aliases_of(self, name: str) -> list[str]:
        return [a for a, n in self._aliases.items() if n == name]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self._entries and name not in self._aliases:
            self.discover()
        return name in self._entries or name in self._aliases

    def __iter__(self) -> Iterator[str]:
        self.discover()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.discover()
        return len(self._entries)
