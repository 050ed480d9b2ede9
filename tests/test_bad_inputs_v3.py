"""The last classes of unhandled input, one table row each, through the CLI entry point: JSON nested deeper than
Python's parser goes in every kind of file a user hands ava (data import, build sources, the dataset's own files,
predictions, report inputs, run and cache metadata, a model's config), a cache URL whose filesystem cannot hold a
cache, a choice question whose truth is outside its option list, and a checkpoint that is not weights-only given to
the open_clip route. Each is one ``error:`` line naming the file, sample or protocol and the cause, exit code 2 (or
1 where a verify lists the problem), never an internal error; nothing is written for it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

DEEP_LIST = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000
TOO_DEEP = "JSON nested too deeply to read (over"


@dataclass
class Fixture:
    data: Path  # a split dataset: color (no options) and recognition (choice questions)
    cache: Path  # its pixels features
    run: Path  # a knn run on them


@dataclass
class Case:
    id: str
    setup: Callable[[Fixture, Path], list[str]]  # plants the input under a fresh folder, returns the command
    fragments: tuple[str, ...]
    code: int = 2


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    from ava.api import extract, fingerprint, synthesize

    root = tmp_path_factory.mktemp("v3")
    data = synthesize(root / "data", per_ava=8, size=64, ava=["color", "recognition"]).path
    extract("pixels", data, root / "cache", device="cpu", shard_size=8)
    found = fingerprint("pixels", data, root / "cache", root / "runs", heads="knn", device="cpu")
    return Fixture(data, root / "cache", found.run_dirs["knn"])


def _copy(src: Path, tmp: Path) -> Path:
    shutil.copytree(src, tmp / src.name)
    return tmp / src.name


def _sample(fx: Fixture, tmp: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of the dataset whose fourth recognition sample is changed by ``edit``."""
    data = _copy(fx.data, tmp)
    path = data / "samples" / "recognition.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[3])
    edit(record)
    lines[3] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    return data


def _options(data: Path, tmp: Path) -> list[str]:
    """``ava data options`` of ``data`` (random wrong classes, 3 options) into ``tmp/o``."""
    return ["data", "options", "--data", str(data), "--out", str(tmp / "o"), "--miner", "random", "--k", "3"]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _group(cache: Path) -> Path:
    return next(p for p in cache.iterdir() if p.is_dir())


CASES = [
    # -- JSON nested too deeply, in each kind of file
    Case(
        "json-import-llava",
        lambda fx, t: ["data", "import", str(_write(t / "x.json", DEEP_LIST)), "-o", str(t / "o"), "--format", "llava"],
        ("x.json: " + TOO_DEEP,),
    ),
    Case(
        "json-build-coco",
        lambda fx, t: [
            "data",
            "build",
            "-o",
            str(t / "o"),
            "--coco",
            str(_write(t / "coco.json", DEEP_OBJECT)),
            "--images",
            str(t),
        ],
        ("coco.json: " + TOO_DEEP,),
    ),
    Case(
        "json-build-text",
        lambda fx, t: [
            "data",
            "build",
            "-o",
            str(t / "o"),
            "--text",
            str(_write(t / "text.json", DEEP_LIST)),
            "--images",
            str(t),
        ],
        ("text.json: " + TOO_DEEP,),
    ),
    Case(
        "json-dataset-json",
        lambda fx, t: ["data", "info", str(_write(_copy(fx.data, t) / "dataset.json", DEEP_LIST).parent)],
        ("dataset.json: " + TOO_DEEP,),
    ),
    Case(
        "json-predictions",
        lambda fx, t: [
            "score",
            "--data",
            str(fx.data),
            "--pred",
            str(_write(t / "p.jsonl", DEEP_LIST + "\n")),
            "-o",
            str(t / "s"),
        ],
        ("p.jsonl:1: " + TOO_DEEP,),
    ),
    Case(
        "json-report-results",
        lambda fx, t: [
            "report",
            str(_write(_copy(fx.run, t) / "results_test.json", DEEP_LIST).parent),
            "-o",
            str(t / "r"),
        ],
        ("results_test.json: " + TOO_DEEP,),
    ),
    Case(
        "json-run-json",
        lambda fx, t: ["head", "eval", "--run", str(_write(_copy(fx.run, t) / "run.json", DEEP_LIST).parent)],
        ("run.json: " + TOO_DEEP,),
    ),
    Case(
        "json-cache-zarr-json",
        lambda fx, t: ["cache", "ls", str(_write(_group(_copy(fx.cache, t)) / "zarr.json", DEEP_OBJECT).parents[1])],
        ("zarr.json: " + TOO_DEEP,),
        code=1,
    ),
    Case(
        "json-model-config",
        lambda fx, t: [
            "cache",
            "extract",
            "--vfm",
            f"hf:{_write(t / 'vit' / 'config.json', DEEP_OBJECT).parent}",
            "--data",
            str(fx.data),
            "--cache",
            str(t / "c"),
        ],
        ("config.json: " + TOO_DEEP,),
        code=1,
    ),
    # -- cache URLs whose filesystem cannot hold a cache
    *[
        Case(
            f"protocol-{url.split(':')[0]}",
            lambda fx, t, url=url: ["cache", "extract", "--vfm", "pixels", "--data", str(fx.data), "--cache", url],
            (f"--cache {url}: a feature cache cannot live on {url.split(':')[0]}://: {lacks}",),
        )
        for url, lacks in [
            ("ftp://host/c", "it writes a file as it streams in"),
            ("http://host/c", "it is read-only"),
            ("memory://c", "it lives in one process's memory"),
            ("dir://c", "it wraps another filesystem"),
        ]
    ],
    Case(
        "protocol-push-sftp",
        lambda fx, t: ["cache", "push", str(fx.cache), "sftp://host/c"],
        ("a feature cache cannot live on sftp://",),
    ),
    # -- a choice question's truth outside its option list
    Case(
        "truth-index-out-of-range",
        lambda fx, t: _options(_sample(fx, t, lambda r: r["truth"].update(index=99)), t),
        ("recognition.jsonl:4: malformed sample (sample recognition/", "truth index 99 is not an option of its list"),
    ),
    Case(
        "truth-index-negative",
        lambda fx, t: ["data", "info", str(_sample(fx, t, lambda r: r.update(truth={"index": -1})))],
        ("truth index -1 is not an option of its list",),
    ),
    Case(
        "truth-text-in-no-option",
        lambda fx, t: _options(_sample(fx, t, lambda r: r.update(truth={"text": "zebra"})), t),
        ("malformed sample (sample recognition/", "truth text 'zebra' is in none of its options"),
    ),
    Case(
        "truth-text-not-the-indexed-option",
        lambda fx, t: [
            "score",
            "--data",
            str(_sample(fx, t, lambda r: r["truth"].update(index=0, text="zebra"))),
            "--pred",
            str(fx.run / "predictions_test.jsonl"),
            "-o",
            str(t / "s"),
        ],
        ("truth text 'zebra' is not option 0 of its list",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_line_naming_the_input(
    case: Case, fx: Fixture, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ava.cli.main import main

    monkeypatch.setenv("COLUMNS", "400")
    argv = case.setup(fx, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr()
    lines = [ln for ln in (out.err + out.out).splitlines() if ln.strip()]
    error = [ln for ln in lines if ln.startswith("error:")]
    assert e.value.code == case.code and len(error) == 1, out
    assert "internal error" not in error[0] and "Traceback" not in out.err, error[0]
    for fragment in case.fragments:
        assert fragment in error[0], error[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_a_pickle_given_to_the_open_clip_route_is_refused_before_it_runs(tmp_path: Path) -> None:
    open_clip = pytest.importorskip("open_clip")
    import torch

    from ava.errors import AvaError
    from ava.vfm.image_text import load_image_text

    class Planted:
        def __reduce__(self) -> tuple:
            return (os.mkdir, (str(tmp_path / "ran"),))

    torch.save({"visual.proj": Planted()}, tmp_path / "planted.pt")
    config = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "head_width": 32, "patch_size": 8},
        "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
    (tmp_path / "ava-v3-openclip.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path / "ava-v3-openclip.json")
    with pytest.raises(AvaError, match=r"planted.pt refused: not a weights-only checkpoint .*nothing from it ran"):
        load_image_text(f"open_clip:ava-v3-openclip@{tmp_path / 'planted.pt'}")
    assert not (tmp_path / "ran").exists()
