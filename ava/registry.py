"""One registry mechanism for everything pluggable: abilities, VFMs, heads, LLMs, metrics, codecs.

Entries may be registered eagerly (an object) or lazily (a ``"module:attr"`` string resolved on first
``get``), so listing names never imports torch or faiss.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator
from typing import Generic, TypeVar

from ava.errors import AvaError

T = TypeVar("T")


class RegistryError(AvaError, KeyError):
    """Unknown or duplicate registry name; the message is meant for the user."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, obj: T | str, aliases: tuple[str, ...] = ()) -> T | str:
        for key in (name, *aliases):
            if key in self._entries or key in self._aliases:
                raise RegistryError(f"{self.kind} {key!r} is already registered")
        self._entries[name] = obj
        for alias in aliases:
            self._aliases[alias] = name
        return obj

    def canonical(self, name: str) -> str:
        """The registered name for ``name`` or one of its aliases; raises with suggestions otherwise."""
        if name in self._entries:
            return name
        if name in self._aliases:
            return self._aliases[name]
        lowered = name.lower().replace("-", "_")
        for key in (*self._entries, *self._aliases):
            if key.lower().replace("-", "_") == lowered:
                return self._aliases.get(key, key)
        close = difflib.get_close_matches(name, [*self._entries, *self._aliases], n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise RegistryError(f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(self._entries)}")

    def get(self, name: str) -> T:
        key = self.canonical(name)
        obj = self._entries[key]
        if isinstance(obj, str):
            module, _, attr = obj.partition(":")
            obj = getattr(importlib.import_module(module), attr)
            self._entries[key] = obj
        return obj  # type: ignore[return-value]

    def names(self) -> list[str]:
        return list(self._entries)

    def aliases_of(self, name: str) -> list[str]:
        return [a for a, n in self._aliases.items() if n == name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._aliases)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
