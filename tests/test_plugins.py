"""Plugins through entry points: real distributions (a ``*.dist-info`` directory with ``entry_points.txt`` on a
``sys.path`` entry, which is what ``importlib.metadata`` reads for an installed package) plus their modules.

One package registers a working VFM (the ``pixels`` floor under a new name), a head and an ability; one raises on
import; one registers a name that already exists; one gives something that is not a VFMSpec.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ava.abilities import ABILITIES
from ava.cli.main import app
from ava.heads import HEADS
from ava.registry import Plugins, Registry, RegistryError
from ava.vfm import VFMS
from tests.helpers import make_dataset

GOOD = '''
from dataclasses import replace

from ava.vfm import VFMS


def vfms():
    """Two VFMs: the pixels floor under a plugin's name (with an alias), at two sizes."""
    base = VFMS.get("pixels")
    return [replace(base, key="plugin-pixels", aliases=("pp",), title="pixels, from a plugin"),
            replace(base, key="plugin-pixels-32", aliases=(), image_size=32)]


def heads():
    from ava.heads import HEADS

    return replace(HEADS.get("knn"), name="plugin-knn", description="kNN, from a plugin")


def ability():
    from ava.abilities import ABILITIES

    return replace(ABILITIES.get("color"), key="plugin-color", config_name="PluginColor")
'''
PLUGINS = {
    # distribution name: (module source, entry_points.txt)
    "ava-good-plugin": (
        GOOD,
        "[ava.vfms]\nplugin-pixels = ava_good_plugin:vfms\n\n[ava.heads]\nplugin-knn = "
        "ava_good_plugin:heads\n\n[ava.abilities]\nplugin-color = ava_good_plugin:ability\n",
    ),
    "ava-broken-plugin": (
        "raise RuntimeError('cannot find my weights')\n",
        "[ava.vfms]\nbroken-vfm = ava_broken_plugin:SPEC\n",
    ),
    "ava-dup-plugin": (
        "from dataclasses import replace\nfrom ava.vfm import VFMS\n"
        "SPEC = replace(VFMS.get('random-vit'), key='pixels', aliases=())\n",
        "[ava.vfms]\ndup = ava_dup_plugin:SPEC\n",
    ),
    "ava-wrong-plugin": ("SPEC = {'key': 'not-a-spec'}\n", "[ava.vfms]\nwrong = ava_wrong_plugin:SPEC\n"),
    # a plugin that ends the process as it is imported, or when its entry point is called
    "ava-exit-plugin": ("import sys\nsys.exit(3)\n", "[ava.vfms]\nexits = ava_exit_plugin:SPEC\n"),
    "ava-exitcall-plugin": (
        "def vfms():\n    raise SystemExit('no GPU here')\n",
        "[ava.vfms]\nexits-later = ava_exitcall_plugin:vfms\n",
    ),
}


def install(site: Path, name: str, module: str, entry_points: str) -> None:
    """What `pip install` leaves for a pure-Python package: the module and its dist-info directory."""
    mod = name.replace("-", "_")
    (site / f"{mod}.py").write_text(textwrap.dedent(module))
    info = site / f"{mod}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    (info / "RECORD").write_text("")


def _forget() -> None:
    for reg in (VFMS, HEADS, ABILITIES):
        reg.forget_plugins()
    for name in [m for m in sys.modules if m.startswith("ava_") and m.endswith("_plugin")]:
        del sys.modules[name]


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    for name, (module, eps) in PLUGINS.items():
        install(site, name, module, eps)
    _forget()
    monkeypatch.syspath_prepend(str(site))  # also invalidates the import caches
    yield site
    _forget()


def test_vfm_list_shows_plugins_with_their_package_and_reports_broken_ones(plugins: Path) -> None:
    result = CliRunner().invoke(app, ["vfm", "list"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "plugin-pixels" in out and "plugin-pixels-32" in out
    assert "(plugin from ava-good-plugin 0.1)" in out
    assert "siglip2" in out and "random-vit" in out  # the built-ins are still all there
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 5, result.stderr
    text = "\n".join(warnings)
    assert (
        "plugin 'broken-vfm' (package ava-broken-plugin 0.1): failed to load (ava_broken_plugin:SPEC): "
        "RuntimeError: cannot find my weights" in text
    )
    assert (
        "plugin 'dup' (package ava-dup-plugin 0.1): VFM 'pixels' is already registered (built in), so the "
        "plugin's is ignored" in text
    )
    assert "plugin 'wrong' (package ava-wrong-plugin 0.1): gave a dict, not a VFMSpec" in text
    assert "plugin 'exits' (package ava-exit-plugin 0.1): failed to load (ava_exit_plugin:SPEC): SystemExit: 3" in text
    assert (
        "plugin 'exits-later' (package ava-exitcall-plugin 0.1): failed to load (ava_exitcall_plugin:vfms): "
        "SystemExit: no GPU here" in text
    )
    assert VFMS.get("pixels").model_class == "pixels"  # the duplicate did not replace the built-in


def test_vfm_list_json_names_the_package(plugins: Path) -> None:
    result = CliRunner().invoke(app, ["vfm", "list", "--json"])
    assert result.exit_code == 0
    rows = {r["key"]: r for r in json.loads(result.stdout)}
    assert rows["plugin-pixels"]["package"] == "ava-good-plugin 0.1"
    assert rows["plugin-pixels-32"]["image_size"] == 32
    assert rows["pixels"]["package"] is None


def test_asking_for_a_broken_plugin_names_it(plugins: Path) -> None:
    result = CliRunner().invoke(app, ["vfm", "show", "broken-vfm"])
    assert result.exit_code != 0
    assert isinstance(result.exception, RegistryError)
    message = str(result.exception)
    assert message.startswith(
        "VFM 'broken-vfm' is not available: plugin 'broken-vfm' (package ava-broken-plugin "
        "0.1): failed to load (ava_broken_plugin:SPEC)"
    )
    assert "RuntimeError: cannot find my weights" in message and "\n" not in message


def test_an_unknown_name_mentions_the_plugins_that_failed(plugins: Path) -> None:
    with pytest.raises(RegistryError) as info:
        VFMS.get("no-such-vfm")
    assert str(info.value).endswith(
        "(5 plugin(s) failed: 'broken-vfm', 'dup', 'exits', 'exits-later', 'wrong'; see `ava vfm list`)"
    )


def test_plugin_vfm_is_found_by_name_and_alias_and_extracts(plugins: Path, tmp_path: Path) -> None:
    assert VFMS.get("pp").key == "plugin-pixels"
    assert VFMS.package_of("plugin-pixels") == "ava-good-plugin 0.1" and VFMS.package_of("pixels") is None
    data = make_dataset(tmp_path / "data", n_images=6)
    args = [
        "cache",
        "extract",
        "--vfm",
        "plugin-pixels-32",
        "--data",
        str(data),
        "--cache",
        str(tmp_path / "cache"),
        "--device",
        "cpu",
        "--quiet",
        "--threads",
        "1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "plugin-pixels-32 ->" in result.stdout and "6 extracted" in result.stdout
    from ava.cache import open_cache

    cache = open_cache(tmp_path / "cache", "plugin-pixels-32")
    assert cache.group.spec["vfm"] == "plugin-pixels-32"


def test_plugin_head_and_ability_register_through_the_same_registry(plugins: Path) -> None:
    assert HEADS.get("plugin-knn").description == "kNN, from a plugin"
    assert HEADS.package_of("plugin-knn") == "ava-good-plugin 0.1"
    assert ABILITIES.get("PluginColor").key == "plugin-color"
    result = CliRunner().invoke(app, ["head", "list"])
    assert result.exit_code == 0 and "plugin-knn" in result.stdout
    assert "(plugin from ava-good-plugin 0.1)" in " ".join(result.stdout.replace("│", " ").split())


def test_plugins_are_discovered_only_when_listed_or_missed(plugins: Path) -> None:
    assert VFMS.get("pixels")  # a built-in name: no discovery
    assert "ava_good_plugin" not in sys.modules and "ava_broken_plugin" not in sys.modules
    assert "siglip2" in VFMS
    assert "ava_good_plugin" not in sys.modules
    assert "plugin-pixels" in VFMS.names()
    assert "ava_good_plugin" in sys.modules


def test_a_registry_without_plugins_never_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    def boom(**kw: object) -> None:
        raise AssertionError("looked for entry points")

    monkeypatch.setattr(importlib.metadata, "entry_points", boom)
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1)
    assert reg.names() == ["a"] and "b" not in reg
    with pytest.raises(RegistryError, match="unknown thing 'b'"):
        reg.get("b")


def test_a_plugin_registry_takes_lists_and_callables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site2"
    site.mkdir()
    install(
        site,
        "ava-numbers",
        "ONE = 1\ndef many():\n    return [2, 3]\n",
        "[ava.test-numbers]\none = ava_numbers:ONE\nmany = ava_numbers:many\n",
    )
    monkeypatch.syspath_prepend(str(site))
    reg: Registry[int] = Registry("number", Plugins("ava.test-numbers", int, name=lambda n: f"n{n}"))
    assert sorted(reg.names()) == ["n1", "n2", "n3"]
    assert reg.get("n3") == 3 and reg.package_of("n1") == "ava-numbers 0.1"
    assert not reg.plugin_errors


def test_a_package_in_the_working_directory_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m ava` puts the current directory on sys.path: a dist-info lying there (say, in a downloaded
    dataset or run directory) is named, never imported."""
    here = tmp_path / "downloaded-run"
    here.mkdir()
    install(here, "ava-stowaway", "raise SystemExit('imported!')\n", "[ava.vfms]\nstowaway = ava_stowaway:SPEC\n")
    _forget()
    monkeypatch.chdir(here)
    monkeypatch.syspath_prepend(str(here))
    try:
        assert "stowaway" not in VFMS.names() and "ava_stowaway" not in sys.modules
        (problem,) = [e for e in VFMS.plugin_errors if e.entry_point == "stowaway"]
        assert str(problem).startswith(
            "plugin 'stowaway' (package ava-stowaway 0.1): not loaded: its package lies in the current directory"
        )
    finally:
        _forget()
