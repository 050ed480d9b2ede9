"""Bad inputs, one table row each: the CLI's exit code, a fragment of its message, and what
must not have happened (a payload read, a file deleted, code run).

Each row's ``setup`` plants the input under ``tmp_path`` and returns the command line; the command runs
through ``ava.cli.main.main`` (the console entry point, so errors are reported exactly as a user sees them);
``check`` then asserts the damage that must not have happened.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from ava.data.format import Dataset
from tests.helpers import Cli, dataset_with_image, llava_json, llava_record, plant, png_bytes, tree_digest

SECRET = b"TOP-SECRET-PAYLOAD"


@dataclass
class Case:
    id: str
    item: int  # the group of bad inputs (the numbered sections below)
    setup: Callable[[Path], list[str]]
    code: int
    fragment: str
    check: Callable[[Path], None] | None = None


# -- planting helpers ------------------------------------------------------------------------------


def secret_file(tmp: Path) -> Path:
    """A file outside every root that nothing may read; a valid PNG that ends in SECRET, so a reader that
    took it would store or copy it without complaint."""
    path = tmp / "outside" / "secret.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes((1, 2, 3)) + SECRET)
    return path


def no_secret_under(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            assert SECRET not in p.read_bytes(), f"{p} holds the secret"


def no_images_stored(out: Path) -> None:
    stored = [p for p in (out / "images").rglob("*") if p.is_file()] if (out / "images").exists() else []
    assert not stored, f"images were stored: {stored}"
    no_secret_under(out)


# -- item 3: paths from data stay inside their roots -----------------------------------------------


def export_absolute(tmp: Path) -> list[str]:
    data = dataset_with_image(tmp, str(secret_file(tmp)))
    return ["data", "export", str(data), "--out", str(tmp / "exp")]


def export_dotdot(tmp: Path) -> list[str]:
    secret_file(tmp)
    data = dataset_with_image(tmp, "../../outside/secret.png")
    return ["data", "export", str(data), "--out", str(tmp / "exp")]


def export_symlink(tmp: Path) -> list[str]:
    data = dataset_with_image(tmp, "ab/link.png")
    (data / "images" / "ab").mkdir(parents=True, exist_ok=True)
    (data / "images" / "ab" / "link.png").symlink_to(secret_file(tmp))
    return ["data", "export", str(data), "--out", str(tmp / "exp")]


def export_planted_dest_symlink(tmp: Path) -> list[str]:
    """A symlink already in the export folder, where an image will be written: the write must not follow it."""
    data = dataset_with_image(tmp, "x")  # replaced below by the real image path
    path = data / "samples" / "color.jsonl"
    rec = json.loads(path.read_text())
    rec["image"] = next(p for p in (data / "images").rglob("*.png")).relative_to(data / "images").as_posix()
    path.write_text(json.dumps(rec) + "\n")
    victim = tmp / "outside" / "victim.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("keep me")
    (tmp / "exp" / "Color" / "images").mkdir(parents=True)
    (tmp / "exp" / "Color" / "images" / "s0.png").symlink_to(victim)
    return ["data", "export", str(data), "--out", str(tmp / "exp")]


def import_absolute(tmp: Path) -> list[str]:
    return ["data", "import", str(llava_json(tmp, str(secret_file(tmp)))), "--out", str(tmp / "ds"), "-q"]


def import_dotdot(tmp: Path) -> list[str]:
    secret_file(tmp)
    return ["data", "import", str(llava_json(tmp, "../outside/secret.png")), "--out", str(tmp / "ds"), "-q"]


def import_symlink(tmp: Path) -> list[str]:
    src = llava_json(tmp, "Color/images/link.png")
    (src / "Color" / "images").mkdir(parents=True)
    (src / "Color" / "images" / "link.png").symlink_to(secret_file(tmp))
    return ["data", "import", str(src), "--out", str(tmp / "ds"), "-q"]


def import_device(tmp: Path) -> list[str]:
    """A symlink to /dev/zero: read unchecked, it streams zeros until memory runs out (4.3 GB seen)."""
    src = llava_json(tmp, "zero.png")
    (src / "zero.png").symlink_to("/dev/zero")
    return ["data", "import", str(src), "--out", str(tmp / "ds"), "-q"]


def import_hf_absolute(tmp: Path) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    conv = json.dumps(
        [
            {"from": "human", "value": "<image>\nWhat color is shown within the red bounding box?"},
            {"from": "gpt", "value": "[1, 2, 3]"},
        ]
    )
    table = pa.table({"id": ["r0"], "image": [{"bytes": None, "path": str(secret_file(tmp))}], "conversations": [conv]})
    path = tmp / "hf" / "train" / "Color" / "train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    return ["data", "import", str(tmp / "hf"), "--out", str(tmp / "ds"), "-q"]


def captions_dotdot(tmp: Path) -> list[str]:
    secret_file(tmp)
    (tmp / "imgs").mkdir()
    conv = [{"from": "human", "value": "<image>\nDescribe."}, {"from": "gpt", "value": "a red square"}]
    (tmp / "caps.json").write_text(json.dumps([{"id": "c0", "image": "../outside/secret.png", "conversations": conv}]))
    return ["head", "import-captions", str(tmp / "caps.json"), "--images", str(tmp / "imgs"), "--out", str(tmp / "cap")]


def extract_ability_name(tmp: Path) -> list[str]:
    data = dataset_with_image(tmp, "x")
    (tmp / "outside").mkdir()
    (tmp / "outside" / "evil.jsonl").write_text("{}\n")
    return [
        "cache",
        "extract",
        "--vfm",
        "tiny-siglip",
        "--data",
        str(data),
        "--cache",
        str(tmp / "c"),
        "--ava",
        "../../outside/evil",
        "--device",
        "cpu",
    ]


# -- item 4: --overwrite deletes only an ava dataset -----------------------------------------------


def synth_over_foreign(tmp: Path) -> list[str]:
    out = tmp / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    return [
        "data",
        "synth",
        "--out",
        str(out),
        "--per-ava",
        "1",
        "--ava",
        "color",
        "--size",
        "64",
        "--workers",
        "1",
        "--overwrite",
    ]


def synth_over_dataset_with_extra(tmp: Path) -> list[str]:
    out = dataset_with_image(tmp, "x")
    (out / "thesis.tex").write_text("years of work")
    return [
        "data",
        "synth",
        "--out",
        str(out),
        "--per-ava",
        "1",
        "--ava",
        "color",
        "--size",
        "64",
        "--workers",
        "1",
        "--overwrite",
    ]


def synth_over_file(tmp: Path) -> list[str]:
    (tmp / "notes.txt").write_text("years of work")
    return ["data", "synth", "--out", str(tmp / "notes.txt"), "--per-ava", "1", "--size", "64", "--overwrite"]


def thesis_kept(tmp: Path) -> None:
    kept = list(tmp.rglob("thesis.tex")) + list(tmp.glob("notes.txt"))
    assert kept and all(p.read_text() == "years of work" for p in kept)


# -- item 9: synth size bounded, a dead worker fails the command ----------------------------------


def synth_huge_size(tmp: Path) -> list[str]:
    return ["data", "synth", "--out", str(tmp / "s"), "--per-ava", "1", "--ava", "color", "--size", "100000"]


def killing_render(task: tuple) -> None:  # replaces render_sample in the workers of synth_worker_killed
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def synth_worker_killed(tmp: Path) -> list[str]:
    gen = importlib.import_module("ava.synth.generate")  # the package's `generate` attribute is the function
    gen.render_sample = killing_render  # restored by the test's monkeypatch
    return [
        "data",
        "synth",
        "--out",
        str(tmp / "s"),
        "--per-ava",
        "4",
        "--ava",
        "color",
        "--size",
        "64",
        "--workers",
        "2",
    ]


def nothing_at(name: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        assert not (tmp / name).exists() and not list(tmp.glob(f".{name}.*"))

    return check


# -- item 5: a run directory belongs to one run ----------------------------------------------------

FAKE_CACHES: dict[str, object] = {}  # cache path -> FakeCache, opened by run_cli's stand-in for open_cache


def knn_run(tmp: Path) -> tuple[Path, Path]:
    """(data, run): a finished kNN run of VFM 'fake' on a hand-made dataset whose cache is a FakeCache."""
    from ava.heads.knn import KNNConfig
    from ava.heads.knn.train import train
    from tests.helpers import handmade

    data, cache = handmade(tmp / "data", abilities=("color", "spatial"), n=20)
    FAKE_CACHES[str(tmp / "fake-cache")] = cache
    run = tmp / "run"
    train(KNNConfig(vfm="fake", data=str(data), cache=str(tmp / "fake-cache"), out=str(run), k=[1], progress=False))
    (tmp / "before.json").write_text(json.dumps(tree_digest(run)))
    return data, run


def run_untouched(tmp: Path) -> None:
    assert tree_digest(tmp / "run") == json.loads((tmp / "before.json").read_text())


def train_args(tmp: Path, data: Path, head: str = "knn", vfm: str = "fake", *extra: str) -> list[str]:
    return [
        "head",
        "train",
        "--head",
        head,
        "--vfm",
        vfm,
        "--data",
        str(data),
        "--cache",
        str(tmp / "fake-cache"),
        "--out",
        str(tmp / "run"),
        "--k",
        "1",
        "--no-eval-after",
        *extra,
    ]


def run_other_vfm(tmp: Path) -> list[str]:
    data, _ = knn_run(tmp)
    return train_args(tmp, data, "knn", "other")


def run_other_head(tmp: Path) -> list[str]:
    data, _ = knn_run(tmp)
    return [a for a in train_args(tmp, data, "probe-linear") if a not in ("--k", "1")]


def run_other_abilities(tmp: Path) -> list[str]:
    data, _ = knn_run(tmp)
    return train_args(tmp, data, "knn", "fake", "--ava", "color")


def run_locked(tmp: Path) -> list[str]:
    from ava.locking import JobLock

    data, _ = knn_run(tmp)
    FAKE_CACHES["lock"] = JobLock(tmp / "run" / ".lock", "held by the test")  # another training holds it
    return train_args(tmp, data, "knn", "other")


def run_not_a_run(tmp: Path) -> list[str]:
    data, _ = knn_run(tmp)
    for p in (tmp / "run").iterdir():
        if p.is_file():
            p.unlink()
    (tmp / "run" / "notes.txt").write_text("years of work")
    (tmp / "before.json").write_text(json.dumps(tree_digest(tmp / "run")))
    return train_args(tmp, data, "knn", "other", "--force")


def run_forced(tmp: Path) -> list[str]:
    data, _ = knn_run(tmp)
    return train_args(tmp, data, "knn", "fake", "--ava", "color", "--force")


def knn_nan_features(tmp: Path) -> list[str]:
    """Item 11 (the extract helper's): a sample whose cached features hold NaN stops training, named."""
    import numpy as np

    from tests.helpers import handmade

    data, cache = handmade(tmp / "data", abilities=("color",), n=20)
    FAKE_CACHES[str(tmp / "fake-cache")] = cache
    first = Dataset(data).samples("color", split="train")[0]
    cache.rows[first.image_sha256][0, 0, 0] = np.nan
    return train_args(tmp, data, "knn", "fake")


def run_replaced(tmp: Path) -> None:
    meta = json.loads((tmp / "run" / "knn.json").read_text())
    assert list(meta) == ["color"] and not (tmp / ".run.new").exists()


# -- item 12: images, counts, caption ids ---------------------------------------------------------

LOC_QUESTION = "Provide bounding box coordinate for the square."


def import_exif_box(tmp: Path) -> list[str]:
    """A JPEG stored sideways (EXIF orientation 6) with a white square; its box is given in the file's frame."""
    import numpy as np

    src = tmp / "src"
    src.mkdir()
    raw = np.zeros((40, 80, 3), np.uint8)  # file frame: 80 wide, 40 high
    raw[8:24, 8:32] = 255  # x 8..32, y 8..24
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(raw).save(src / "sq.jpg", quality=95, exif=exif.tobytes())
    box = "[0.1, 0.2, 0.4, 0.6]"  # 8/80, 8/40, 32/80, 24/40
    (src / "data.json").write_text(json.dumps([llava_record("sq.jpg", "localization", LOC_QUESTION, box)]))
    return ["data", "import", str(src), "--out", str(tmp / "ds"), "-q"]


def box_on_the_square(tmp: Path) -> None:
    import numpy as np

    ds = Dataset(tmp / "ds")
    (s,) = ds.samples("localization")
    pixels = np.asarray(ds.load_image(s).convert("L")) > 128
    ys, xs = np.nonzero(pixels)
    h, w = pixels.shape
    found = [xs.min() / w, ys.min() / h, (xs.max() + 1) / w, (ys.max() + 1) / h]
    assert (w, h) == (40, 80) and s.meta["exif_orientation"] == 6
    assert np.allclose(s.truth["box"], found, atol=0.03), (s.truth["box"], found)


def import_dark_16bit(tmp: Path) -> list[str]:
    """A 16-bit grayscale PNG whose values are all small: it is nearly black, whatever its range."""
    import numpy as np

    src = tmp / "src"
    src.mkdir()
    Image.fromarray(np.full((8, 8), 200, np.uint16)).save(src / "dark.png")
    question = "What color is shown within the red bounding box?"
    (src / "data.json").write_text(json.dumps([llava_record("dark.png", "color", question, "[1, 1, 1]")]))
    return ["data", "import", str(src), "--out", str(tmp / "ds"), "-q"]


def stored_dark(tmp: Path) -> None:
    ds = Dataset(tmp / "ds")
    (s,) = ds.samples("color")
    assert ds.load_image(s).getpixel((0, 0)) == (1, 1, 1)  # 200 / 65535 * 255, not 200 / 200 * 255


def import_absurd_count(tmp: Path) -> list[str]:
    src = tmp / "src"
    src.mkdir()
    (src / "a.png").write_bytes(png_bytes())
    question = "How many squares are there in the image?"
    rows = [llava_record("a.png", "counting", question, "1e23"), llava_record("a.png", "counting", question, "4", "r1")]
    (src / "data.json").write_text(json.dumps(rows))
    return ["data", "import", str(src), "--out", str(tmp / "ds"), "-q"]


def only_sane_count(tmp: Path) -> None:
    assert [s.truth["value"] for s in Dataset(tmp / "ds").samples("counting")] == [4]


def captions_duplicate_id(tmp: Path) -> list[str]:
    (tmp / "imgs").mkdir()
    (tmp / "imgs" / "a.png").write_bytes(png_bytes())
    conv = [{"from": "human", "value": "<image>\nDescribe."}, {"from": "gpt", "value": "a red square"}]
    pairs = [{"id": "p1", "image": "a.png", "conversations": conv}] * 2
    (tmp / "caps.json").write_text(json.dumps(pairs))
    return ["head", "import-captions", str(tmp / "caps.json"), "--images", str(tmp / "imgs"), "--out", str(tmp / "cap")]


# -- item 2: no checkpoint code runs unless asked ----------------------------------------


def remote_code_checkpoint(tmp: Path) -> list[str]:
    """A checkpoint whose config maps to its own Python files, which write ``payload_ran`` when imported."""
    from tests.helpers import make_dataset

    ckpt = plant(tmp)
    data = make_dataset(tmp / "data", n_images=2)
    return [
        "cache",
        "extract",
        "--vfm",
        f"hf:{ckpt}",
        "--data",
        str(data),
        "--cache",
        str(tmp / "cache"),
        "--device",
        "cpu",
        "-q",
    ]


def payload_not_run(tmp: Path) -> None:
    assert not (tmp / "payload_ran").exists(), "the planted checkpoint code ran"


# -- items 10 and 13: numbers checked at parse time; OS and format errors in one line ------


def head_train(tmp: Path, head: str, *extra: str) -> list[str]:
    return [
        "head",
        "train",
        "--head",
        head,
        "--vfm",
        "pixels",
        "--data",
        str(tmp / "x"),
        "--cache",
        str(tmp / "y"),
        "--out",
        str(tmp / "z"),
        *extra,
    ]


def nothing_written(tmp: Path) -> None:
    assert sorted(p.name for p in tmp.iterdir()) == [], list(tmp.iterdir())


def parse_time(head: str, *extra: str) -> Callable[[Path], list[str]]:
    return lambda tmp: head_train(tmp, head, *extra)


def hf_bad_size(tmp: Path) -> list[str]:
    data = dataset_with_image(tmp, "x")
    return ["cache", "extract", "--vfm", f"hf:{tmp}#size=-5", "--data", str(data), "--cache", str(tmp / "c")]


def config_wrong_type(tmp: Path) -> list[str]:
    (tmp / "c.toml").write_text('epochs = "ten"\n')
    return [*head_train(tmp, "probe-linear"), "--config", str(tmp / "c.toml")]


def file_where_dir_expected(tmp: Path) -> list[str]:
    (tmp / "file").write_text("x")
    return ["data", "synth", "--out", str(tmp / "file" / "ds"), "--per-ava", "2", "--ava", "color", "--size", "64"]


def run_json_bad_utf8(tmp: Path) -> list[str]:
    (tmp / "run").mkdir()
    (tmp / "run" / "run.json").write_bytes(b"\xff{")
    return ["head", "eval", "--run", str(tmp / "run")]


def truncated_weights(tmp: Path) -> list[str]:
    _, run = knn_run(tmp)
    path = run / "knn.safetensors"
    path.write_bytes(path.read_bytes()[:20])
    return ["head", "eval", "--run", str(run)]


def corrupt_zarr_json(tmp: Path) -> list[str]:
    (tmp / "cache").mkdir()
    (tmp / "cache" / "zarr.json").write_text('{"zarr_format": 3, "node_')
    return ["cache", "ls", str(tmp / "cache")]


CASES = [
    Case("export-absolute-image", 3, export_absolute, 2, "is absolute", lambda t: no_secret_under(t / "exp")),
    Case("export-dotdot-image", 3, export_dotdot, 2, "leads outside", lambda t: no_secret_under(t / "exp")),
    Case("export-symlink-out", 3, export_symlink, 2, "leads outside", lambda t: no_secret_under(t / "exp")),
    Case(
        "export-dest-symlink",
        3,
        export_planted_dest_symlink,
        2,
        "leads outside",
        lambda t: (t / "outside" / "victim.txt").read_text() == "keep me" or pytest.fail("victim overwritten"),
    ),
    Case("import-absolute-path", 3, import_absolute, 1, "is absolute", lambda t: no_images_stored(t / "ds")),
    Case("import-dotdot-path", 3, import_dotdot, 1, "leads outside", lambda t: no_images_stored(t / "ds")),
    Case("import-symlink-out", 3, import_symlink, 1, "leads outside", lambda t: no_images_stored(t / "ds")),
    Case("import-dev-zero", 3, import_device, 1, "leads outside", lambda t: no_images_stored(t / "ds")),
    Case("import-hf-absolute", 3, import_hf_absolute, 1, "is absolute", lambda t: no_images_stored(t / "ds")),
    Case("captions-dotdot", 3, captions_dotdot, 2, "leads outside", lambda t: no_secret_under(t / "cap")),
    Case("extract-ava-name", 3, extract_ability_name, 2, "not a plain name", None),
    Case("synth-overwrite-foreign", 4, synth_over_foreign, 2, "not an ava dataset", thesis_kept),
    Case("synth-overwrite-extra-file", 4, synth_over_dataset_with_extra, 2, "thesis.tex", thesis_kept),
    Case("synth-overwrite-file", 4, synth_over_file, 2, "not a directory", thesis_kept),
    Case("synth-size-huge", 9, synth_huge_size, 2, "--size 100000", nothing_at("s")),
    Case("synth-worker-killed", 9, synth_worker_killed, 2, "worker process died", nothing_at("s")),
    Case("run-other-vfm", 5, run_other_vfm, 2, "vfm ('fake' -> 'other')", run_untouched),
    Case("run-other-head", 5, run_other_head, 2, "head ('knn' -> 'probe-linear')", run_untouched),
    Case("run-other-abilities", 5, run_other_abilities, 2, "ava (None -> ['color'])", run_untouched),
    Case("run-locked", 5, run_locked, 2, "another training is writing", run_untouched),
    Case("run-not-a-run-force", 5, run_not_a_run, 2, "holds no ava run", run_untouched),
    Case("run-force-replaces", 5, run_forced, 0, "run directory", run_replaced),
    Case(
        "knn-nan-features",
        11,
        knn_nan_features,
        2,
        "hold NaN or inf",
        lambda t: not (t / "run" / "knn.json").exists() or pytest.fail("a kNN run was written"),
    ),
    Case("import-exif-box", 12, import_exif_box, 0, "imported", box_on_the_square),
    Case("import-16bit-dark", 12, import_dark_16bit, 0, "imported", stored_dark),
    Case("import-count-1e23", 12, import_absurd_count, 1, "not a count in 1..10000", only_sane_count),
    Case("remote-code-refused", 2, remote_code_checkpoint, 2, "published with its own Python code", payload_not_run),
    Case("probe-epochs-negative", 10, parse_time("probe-linear", "--epochs", "-3"), 2, "'--epochs'", nothing_written),
    Case("llm-epochs-negative", 10, parse_time("llm", "--epochs", "-2"), 2, "'--epochs'", nothing_written),
    Case("epochs-zero", 10, parse_time("llm", "--epochs", "0"), 2, "integer >= 1, not 0", nothing_written),
    Case("lr-negative", 10, parse_time("probe-linear", "--lr", "-1"), 2, "'--lr': must be a finite", nothing_written),
    Case("lr-nan", 10, parse_time("probe-linear", "--lr", "nan"), 2, "'--lr'", nothing_written),
    Case("batch-size-zero", 10, parse_time("llm", "--batch-size", "0"), 2, "'--batch-size'", nothing_written),
    Case("max-train-negative", 10, parse_time("knn", "--max-train", "-5"), 2, "'--max-train'", nothing_written),
    Case("knn-k-zero", 10, parse_time("knn", "--k", "0"), 2, "'--k'", nothing_written),
    Case("pools-grid999", 10, parse_time("knn", "--pools", "grid999"), 2, "not 'grid999'", nothing_written),
    Case("num-workers-negative", 10, parse_time("llm", "--num-workers", "-1"), 2, "'--num-workers'", nothing_written),
    Case("hf-size-negative", 10, hf_bad_size, 2, "bad option 'size=-5'", nothing_at("c")),
    Case("config-wrong-type", 10, config_wrong_type, 2, "epochs = 'ten'", None),
    Case("file-where-dir-expected", 13, file_where_dir_expected, 2, "file is a file, not a directory", None),
    Case("run-json-bad-utf8", 13, run_json_bad_utf8, 1, "not valid utf-8", None),
    Case("truncated-safetensors", 13, truncated_weights, 1, "knn.safetensors", None),
    Case("corrupt-zarr-json", 13, corrupt_zarr_json, 1, "not valid JSON", None),
    Case(
        "captions-duplicate-id",
        12,
        captions_duplicate_id,
        2,
        "'p1' is used by pairs 0 and 1",
        lambda t: not (t / "cap").exists() or pytest.fail("captions written"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    gen = importlib.import_module("ava.synth.generate")
    monkeypatch.setattr(gen, "render_sample", gen.render_sample)  # restored after rows that replace it
    import ava.cache

    real_open = ava.cache.open_cache
    monkeypatch.setattr(
        ava.cache, "open_cache", lambda path, *a, **k: FAKE_CACHES.get(str(path)) or real_open(path, *a, **k)
    )
    args = case.setup(tmp_path)
    code, output = cli(args)
    flat = " ".join(output.split())
    assert code == case.code, f"exit {code}, expected {case.code}: {output}"
    assert case.fragment in flat, f"{case.fragment!r} not in: {output}"
    assert "Traceback" not in output
    if case.check is not None:
        case.check(tmp_path)
    lock = FAKE_CACHES.pop("lock", None)
    if lock is not None:
        lock.close()  # type: ignore[attr-defined]


# -- the path helper itself ------------------------------------------------------------------------


def test_read_confined_refuses_fifo_and_oversize(tmp_path: Path) -> None:
    from ava.data.paths import PathError, read_confined

    os.mkfifo(tmp_path / "pipe.png")  # opened for reading, a FIFO would block forever
    with pytest.raises(PathError, match="not a regular file"):
        read_confined(tmp_path, "pipe.png")
    (tmp_path / "big.png").write_bytes(b"x" * 100)
    with pytest.raises(PathError, match="over the limit"):
        read_confined(tmp_path, "big.png", max_bytes=99)
    assert read_confined(tmp_path, "big.png", max_bytes=100) == b"x" * 100
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "in.png").symlink_to(tmp_path / "big.png")  # a symlink that stays inside is fine
    assert read_confined(tmp_path, "d/in.png") == b"x" * 100


def test_dataset_image_path_confined(tmp_path: Path) -> None:
    from ava.data.format import DatasetError

    data = dataset_with_image(tmp_path, "/etc/passwd")
    with pytest.raises(DatasetError, match="s0.*absolute"):
        Dataset(data).load_image(Dataset(data).samples("color")[0])
