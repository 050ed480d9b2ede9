"""Every public function of ``ava`` and ``ava.api``, found by enumerating the modules (a function added later is
covered without touching this file), called with each of its arguments given a value of a type no annotation
accepts: each call is an :class:`ava.AvaError` naming that argument, raised before the function does anything.
Then the two calls the bad-input matrix named (``build_data(coco=3)``, ``train_head(..., k="x")``) and unknown
keyword options of the functions that take ``**options``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

import ava
import ava.api
from ava.arguments import argument_hints, fits
from ava.errors import AvaError


class Wrong:
    """An instance of a class no annotation names: of the wrong type for every argument not typed ``Any``."""

    def __repr__(self) -> str:
        return "Wrong()"


def public_functions() -> dict[str, Any]:
    """name -> function: what ``ava`` exports (its lazy table) and every public function ``ava.api`` defines."""
    found = {}
    for name in ava.__all__:
        value = getattr(ava, name)
        if callable(value) and not isinstance(value, type):
            found[f"ava.{name}"] = value
    for name, value in vars(ava.api).items():
        if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == "ava.api":
            found[f"ava.api.{name}"] = value
    return found


# a value of each annotated type, to fill the arguments a call needs besides the one under test
FILLERS: list[Any] = ["x", 1, 0.5, True, None, ["x"], [1], (1, 2, 3), {}, Path("x"), (0.5, 0.5, 0.5), len]


def _filler(hint: Any) -> Any:
    return next((v for v in FILLERS if fits(v, hint)), "x")


def cases() -> list[tuple[str, str]]:
    out = []
    for label, fn in public_functions().items():
        for name, p in inspect.signature(fn).parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or argument_hints(fn)[name] is Any:
                continue
            out.append((label, name))
    return out


def _call(fn: Any, wrong: str, value: Any) -> None:
    hints, args, kwargs = argument_hints(fn), [], {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        given = value if name == wrong else (_filler(hints[name]) if p.default is p.empty else p.default)
        if name != wrong and p.default is not p.empty:
            continue
        if p.kind == p.POSITIONAL_ONLY:
            args.append(given)
        else:
            kwargs[name] = given
    fn(*args, **kwargs)


def test_every_public_function_is_found() -> None:
    names = set(public_functions())
    assert {"ava.extract", "ava.fingerprint", "ava.train_head", "ava.vfm_from_module", "ava.api.build_data"} <= names
    assert len(cases()) > 100  # every annotated argument of every function


@pytest.mark.parametrize(("label", "argument"), cases())
def test_a_wrong_type_is_an_ava_error_naming_the_argument(
    label: str, argument: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a function that ran anyway would write here, not into the checkout
    fn = public_functions()[label]
    with pytest.raises(AvaError, match=rf"\({argument}=Wrong\(\)\): expected .*, got Wrong$"):
        _call(fn, argument, Wrong())
    assert not any(tmp_path.iterdir()), f"{label} wrote something before refusing {argument}"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ava.api.build_data("out", coco=3), r"^build_data: coco = 3: expected a path or nothing"),
        (lambda: ava.api.build_data("out", seed="0"), r"^build_data: seed = '0': expected an integer"),
        (lambda: ava.api.build_data("out", not_an_option=1), r"^build_data: unknown field\(s\) \['not_an_option'\]"),
        (lambda: ava.train_head("knn", k="x"), r"^k = \['x'\]: expected a list of an integer"),
        (lambda: ava.train_head("knn", epochs=1.5), r"does not use --epochs"),
        (lambda: ava.train_head("probe-linear", epochs="3"), r"^epochs = '3': expected an integer"),
        (lambda: ava.train_head("knn", not_an_option=1), r"has no option --not-an-option"),
        (lambda: ava.api.extract_config(vfm="pixels", not_an_option=1), r"unknown config field\(s\)"),
        (lambda: ava.extract("pixels", "data", "cache", batch_size="8"), r"^extract\(batch_size='8'\)"),
        (lambda: ava.extract(3.5, "data", "cache"), r"^vfm=3.5 \(float\): give a VFM name"),
        (lambda: ava.fingerprint("pixels", data="d", cache="c", not_an_option=1), r"unexpected option\(s\)"),
        (lambda: ava.synthesize("out", unknown=1), r"^synthesize\(\): got an unexpected keyword argument"),
        (lambda: ava.split_data(), r"^split_data\(\): missing a required argument: 'data'"),
    ],
)
def test_named_bad_calls(call: Any, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AvaError, match=message):
        call()
    assert not any(tmp_path.iterdir())
