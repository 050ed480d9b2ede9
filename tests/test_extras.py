"""Optional dependencies: a missing one is one line naming its extra and the install line, said before anything is
written (never an "internal error"); the extras table matches pyproject.toml."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from ava.cli.main import main
from ava.extras import EXTRAS, MissingDependency, install_line, missing_message, require

ROOT = Path(__file__).resolve().parent.parent


def test_the_extras_table_matches_pyproject():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, pairs in EXTRAS.items():
        names = {
            r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
            for r in declared[extra]
        }
        assert {dist.lower() for _, dist in pairs} == names, extra


def test_the_install_line_of_a_checkout_keeps_the_constraints(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert install_line("build") == 'pip install -c .ci/constraints.txt -e ".[build]"'
    monkeypatch.chdir(ROOT / "docs")
    assert install_line("s3") == f'pip install -c {ROOT}/.ci/constraints.txt -e "{ROOT}[s3]"'


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for m in modules:  # None in sys.modules: `import m` fails, find_spec says it is not there
        monkeypatch.setitem(sys.modules, m, None)


def _data(tmp: Path) -> Path:
    (tmp / "data").mkdir()
    return tmp / "data"


# (what hides, the command, the extra named, the output that must not appear)
CASES = [
    (("pycocotools",), lambda t: ["data", "synth-sources", "--out", str(t / "src")], "build", "src"),
    (
        ("skimage",),
        lambda t: ["data", "build", "--coco", str(t / "a.json"), "--images", str(t), "--out", str(t / "built")],
        "build",
        "built",
    ),
    (
        ("submitit",),
        lambda t: [
            "sweep",
            "--vfm",
            "pixels",
            "--head",
            "knn",
            "--data",
            str(_data(t)),
            "--cache",
            str(t / "c"),
            "--out",
            str(t / "runs"),
            "--executor",
            "slurm",
        ],
        "slurm",
        "runs",
    ),
]


@pytest.mark.parametrize(("hidden", "args", "extra", "output"), CASES, ids=["synth-sources", "build", "sweep-slurm"])
def test_a_missing_optional_package_is_one_line_naming_its_extra_and_nothing_is_written(
    tmp_path, monkeypatch, capsys, hidden, args, extra, output
):
    _hide(monkeypatch, *hidden)
    with pytest.raises(SystemExit) as e:
        main(args(tmp_path))
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert f"from the {extra} extra" in err and f"[{extra}]" in err and "internal error" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / output).exists()


def test_a_late_import_of_an_extras_package_is_named_not_an_internal_error(tmp_path, monkeypatch, capsys):
    import ava.api

    def late(*args, **kwargs):
        raise ModuleNotFoundError("No module named 's3fs'", name="s3fs")

    monkeypatch.setattr(ava.api, "synth_sources", late)
    with pytest.raises(SystemExit):
        main(["data", "synth-sources", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert "needs s3fs, from the s3 extra" in err and "internal error" not in err


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (ModuleNotFoundError("x", name="pycocotools.mask"), "pycocotools, from the build extra"),
        (ModuleNotFoundError("x", name="open_clip"), "open_clip_torch, from the openclip extra"),
        (ModuleNotFoundError("x", name="numpy_not_an_extra"), None),  # not an extra's: a bug, keeps its traceback
        (ImportError("x"), None),
    ],
)
def test_missing_message(error, said):
    message = missing_message(error)
    assert (message is None) if said is None else (said in message)


def test_require_names_every_missing_package(monkeypatch):
    _hide(monkeypatch, "pycocotools", "skimage")
    with pytest.raises(MissingDependency, match=r"^`x` needs pycocotools and scikit-image, from the build extra"):
        require("build", "`x`")
