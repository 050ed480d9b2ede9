"""Bad inputs (run directories, datasets, imports, --vfm names), one table row each, run like
``tests/test_bad_inputs.py``: through ``ava.cli.main.main`` as a user runs it; the exit code, a fragment of the
one-line message, and what must not have happened (code run, a run's files rewritten, images blamed).

What a run directory, a cache or a dataset holds is data: three rows plant code where each loader looks (a
checkpoint's ``auto_map`` named by a run's config.json, a pickle codec in a cache array, an EPS "image" that Pillow
would hand to Ghostscript) and check that its marker file was never written.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import Cli, dataset_with_image, llava_json, llava_record, plant, png_bytes, tree_digest

PAYLOAD = "payload_ran"


@dataclass
class Case:
    id: str
    setup: Callable[[Path, pytest.MonkeyPatch], list[str]]
    code: int
    fragment: str
    check: Callable[[Path], None] | None = None


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic colour set (10 per ability, 64 px) and its `pixels` cache, copied by the rows that need them."""
    from ava.cache import ExtractConfig, extract
    from ava.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("base")
    generate(SynthConfig(out=str(root / "data"), per_ava=10, ava=["color"], size=64, workers=1), progress=False)
    extract(
        ExtractConfig(
            vfm="pixels",
            data=str(root / "data"),
            cache=str(root / "cache"),
            device="cpu",
            progress=False,
            num_workers=0,
        )
    )
    return root


BASE: dict[str, Path] = {}  # set by the test from the module fixture, read by the setups


def knn_run_in(where: Path, mp: pytest.MonkeyPatch) -> Path:
    """A kNN run trained in ``where`` with relative --data data --cache cache --out run, as a user types it."""
    from ava.cli.main import main

    for name in ("data", "cache"):
        shutil.copytree(BASE["root"] / name, where / name)
    mp.chdir(where)
    mp.setattr(
        sys,
        "argv",
        [
            "ava",
            "head",
            "train",
            "--head",
            "knn",
            "--vfm",
            "pixels",
            "--data",
            "data",
            "--cache",
            "cache",
            "--out",
            "run",
            "--k",
            "1",
            "--device",
            "cpu",
        ],
    )
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code in (0, None)
    return where / "run"


def snapshot(run: Path) -> None:
    (run.parent / "before.json").write_text(json.dumps(tree_digest(run)))


def untouched(name: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        run = next(tmp.rglob(name))
        assert tree_digest(run) == json.loads((run.parent / "before.json").read_text()), "the run was rewritten"

    return check


def change_a_test_truth(data: Path) -> None:
    """The same dataset directory with one test sample's answer changed (another dataset, same path)."""
    path = data / "samples" / "color.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    rec = next(r for r in lines if r["split"] == "test")
    rec["truth"]["rgb"] = [(v + 128) % 256 for v in rec["truth"]["rgb"]]
    rec["answer"] = str(rec["truth"]["rgb"])
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


# -- item 4 of the issue: run directories are self-contained -------------------------------------------------------


def eval_from_elsewhere(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    """Trained in A with relative paths; evaluated from B, which has a `data` and a `cache` of its own."""
    run = knn_run_in(tmp / "A", mp)
    for name in ("data", "cache"):
        shutil.copytree(tmp / "A" / name, tmp / "B" / name)
    change_a_test_truth(tmp / "B" / "data")
    mp.chdir(tmp / "B")
    return ["head", "eval", "--run", str(run)]


def scored_on_a(tmp: Path) -> None:
    results = json.loads((tmp / "A" / "run" / "results_test.json").read_text())
    assert results["sample_set"]["dataset"] == str((tmp / "A" / "data").resolve())
    config = json.loads((tmp / "A" / "run" / "config.json").read_text())
    assert config["data"] == str((tmp / "A" / "data").resolve()) and Path(config["cache"]).is_absolute()


def eval_changed_data(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    run = knn_run_in(tmp / "A", mp)
    snapshot(run)
    change_a_test_truth(tmp / "A" / "data")
    return ["head", "eval", "--run", str(run)]


def legacy_run(tmp: Path, mp: pytest.MonkeyPatch) -> Path:
    """A run as ava wrote it before identities: relative paths in config.json, no data_identity in run.json."""
    run = knn_run_in(tmp / "A", mp)
    for name, edit in (
        ("config.json", lambda c: c.update(data="data", cache="cache", out="run")),
        ("run.json", lambda r: r.pop("data_identity") and None),
    ):
        obj = json.loads((run / name).read_text())
        edit(obj)
        (run / name).write_text(json.dumps(obj))
    return run


def eval_legacy_from_elsewhere(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    run = legacy_run(tmp, mp)
    snapshot(run)
    for name in ("data", "cache"):
        shutil.copytree(tmp / "A" / name, tmp / "B" / name)
    change_a_test_truth(tmp / "B" / "data")
    mp.chdir(tmp / "B")
    return ["head", "eval", "--run", str(run)]


# -- item 1: a run directory never runs code --------------------------------------------------------------------


def llm_run_online_remote(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    """An LLM run whose config.json records online features of a checkpoint with its own code, trusted."""
    from ava.heads.llm.config import LLMHeadConfig
    from tests.helpers import make_dataset

    ckpt = plant(tmp)  # its code writes tmp/payload_ran when imported
    data = make_dataset(tmp / "data", n_images=4)
    run = tmp / "run"
    run.mkdir()
    cfg = LLMHeadConfig(
        ava=["color"],
        vfm=f"hf:{ckpt}",
        data=str(data),
        out=str(run),
        features="online",
        trust_remote_code=True,
        device="cpu",
        llm="tiny-random-qwen2",
    )
    (run / "config.json").write_text(json.dumps(cfg.__dict__))
    (run / "run.json").write_text(json.dumps({"head": "llm", "vfm": cfg.vfm, "abilities": ["color"]}))
    return ["head", "eval", "--run", str(run), "--device", "cpu"]


def payload_not_run(tmp: Path) -> None:
    assert not (tmp / PAYLOAD).exists(), "code planted in the checkpoint ran"


def knn_run_flag(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    run = knn_run_in(tmp / "A", mp)
    snapshot(run)
    return ["head", "eval", "--run", str(run), "--trust-remote-code"]


def llm_flag_not_recorded(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    args = llm_run_online_remote(tmp, mp)
    config = json.loads((tmp / "run" / "config.json").read_text())
    config["trust_remote_code"] = False
    (tmp / "run" / "config.json").write_text(json.dumps(config))
    return [*args, "--trust-remote-code"]


# -- the recorded config and run block are checked like a config file --------------------------------------------


def run_file_edit(name: str, edit: Callable[[dict], object]) -> Callable[[Path, pytest.MonkeyPatch], list[str]]:
    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
        run = knn_run_in(tmp / "A", mp)
        obj = json.loads((run / name).read_text())
        replaced = edit(obj)
        (run / name).write_text(json.dumps(obj if replaced is None else replaced))
        snapshot(run)
        return ["head", "eval", "--run", str(run)]

    return setup


# -- a cache holds no code --------------------------------------------------------------------------------------


def pickled_cache(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    """Every array of the run's cache group replaced by a Zarr v2 array whose chunks go through the pickle codec,
    each chunk a pickle that calls os.system to write the marker."""
    import pickle

    run = knn_run_in(tmp / "A", mp)
    snapshot(run)
    marker = tmp / PAYLOAD

    class Payload:
        def __reduce__(self) -> tuple:
            return (__import__("os").system, (f"touch {marker}",))

    blob = pickle.dumps(Payload())
    for meta in (tmp / "A" / "cache").rglob("zarr.json"):
        if json.loads(meta.read_text()).get("node_type") != "array":
            continue
        shape = json.loads(meta.read_text())["shape"]
        meta.unlink()
        zarray = {
            "zarr_format": 2,
            "shape": shape,
            "chunks": shape,
            "dtype": "<f4",
            "fill_value": 0.0,
            "order": "C",
            "filters": None,
            "compressor": {"id": "pickle"},
            "dimension_separator": ".",
        }
        (meta.parent / ".zarray").write_text(json.dumps(zarray))
        (meta.parent / ".".join("0" * len(shape))).write_bytes(blob)
    return ["head", "eval", "--run", str(run)]


# -- a dataset holds no code: no external decoder ----------------------------------------------------------------

EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n0 0 moveto showpage\n%%EOF\n"


def fake_ghostscript(tmp: Path, mp: pytest.MonkeyPatch) -> None:
    """A `gs` that writes the marker: as if the machine had Ghostscript, which Pillow runs to decode EPS."""
    from PIL import EpsImagePlugin

    gs = tmp / "bin" / "gs"
    gs.parent.mkdir()
    gs.write_text(f"#!/bin/sh\ntouch {tmp / PAYLOAD}\nexit 1\n")
    gs.chmod(0o755)
    mp.setattr(EpsImagePlugin, "gs_binary", str(gs))


def dataset_eps_image(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    fake_ghostscript(tmp, mp)
    data = dataset_with_image(tmp, "x")
    (data / "images" / "ab").mkdir()
    (data / "images" / "ab" / "evil.png").write_bytes(EPS)  # the name says png; the bytes are PostScript
    path = data / "samples" / "color.jsonl"
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, "image": "ab/evil.png"}) + "\n")
    return [
        "cache",
        "extract",
        "--vfm",
        "pixels",
        "--data",
        str(data),
        "--cache",
        str(tmp / "c"),
        "--device",
        "cpu",
        "--num-workers",
        "0",
        "-q",
    ]


def import_eps_image(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:

    fake_ghostscript(tmp, mp)
    src = llava_json(tmp, "evil.eps")
    (src / "evil.eps").write_bytes(EPS)
    return ["data", "import", str(src), "--out", str(tmp / "ds"), "-q"]


# -- datasets are checked on read ---------------------------------------------------------------------------------


def dataset_lines(edit: Callable[[list[dict]], list[dict]]) -> Callable[[Path, pytest.MonkeyPatch], list[str]]:
    """The base dataset's colour samples edited, scored with predictions of every test sample."""

    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
        data = tmp / "data"
        shutil.copytree(BASE["root"] / "data", data)
        path = data / "samples" / "color.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        pred = [{"id": r["id"], "ava": "color", "prediction": r["answer"]} for r in lines if r["split"] == "test"]
        path.write_text("".join((json.dumps(r) if not isinstance(r, str) else r) + "\n" for r in edit(lines)))
        (tmp / "pred.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pred))
        return ["score", "--data", str(data), "--pred", str(tmp / "pred.jsonl"), "--out", str(tmp / "scores")]

    return setup


def duplicate_test_sample(lines: list[dict]) -> list[dict]:
    first = next(i for i, r in enumerate(lines) if r["split"] == "test")
    return [*lines, {**lines[first], "answer": "[0, 0, 0]", "truth": {"rgb": [0, 0, 0]}}]


def first_test(field: str, value: object) -> Callable[[list[dict]], list[dict]]:
    def edit(lines: list[dict]) -> list[dict]:
        i = next(i for i, r in enumerate(lines) if r["split"] == "test")
        return [*lines[:i], {**lines[i], field: value}, *lines[i + 1 :]]

    return edit


def nothing_scored(tmp: Path) -> None:
    assert not (tmp / "scores").exists(), "results were written"


def dataset_json_list(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    data = dataset_with_image(tmp, "x")
    (data / "dataset.json").write_text("[1, 2]")
    return ["data", "info", "--data", str(data)]


# -- --vfm names: checkpoint part present, # fields bounded -------------------------------------------------------


def in_checkpoint_dir(vfm: str) -> Callable[[Path, pytest.MonkeyPatch], list[str]]:
    """``--vfm VFM`` run from a directory holding a loadable tiny ViT checkpoint (what an empty ``hf:`` reads)."""

    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
        from transformers import ViTConfig, ViTModel

        data = dataset_with_image(tmp, "x")
        cfg = ViTConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=32,
            patch_size=16,
        )
        ViTModel(cfg, add_pooling_layer=False).save_pretrained(tmp / "here")
        mp.chdir(tmp / "here")
        return [
            "cache",
            "extract",
            "--vfm",
            vfm,
            "--data",
            str(data),
            "--cache",
            str(tmp / "c"),
            "--device",
            "cpu",
            "--num-workers",
            "0",
            "-q",
        ]

    return setup


def extract_vfm(vfm: str) -> Callable[[Path, pytest.MonkeyPatch], list[str]]:
    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
        data = dataset_with_image(tmp, "x")
        return [
            "cache",
            "extract",
            "--vfm",
            vfm,
            "--data",
            str(data),
            "--cache",
            str(tmp / "c"),
            "--device",
            "cpu",
            "--num-workers",
            "0",
            "-q",
        ]

    return setup


def no_cache(tmp: Path) -> None:
    assert not (tmp / "c").exists(), "a cache was written"


def extract_io_error(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    """Reading an image fails with EIO (a bad disk): the run stops and says so; no image is blamed for it."""
    import errno

    from ava.data.format import Dataset

    def failing(self: Dataset, sample: object) -> None:
        raise OSError(errno.EIO, "Input/output error", str(self.root / "images"))

    mp.setattr(Dataset, "load_image", failing)
    return extract_vfm("pixels")(tmp, mp)


# -- imports: one bad row is skipped and named; a bad file is one line --------------------------------------------


def llava_rows(rows: list[object]) -> Callable[[Path, pytest.MonkeyPatch], list[str]]:
    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:

        src = tmp / "src"
        src.mkdir()
        (src / "a.png").write_bytes(png_bytes())
        good = llava_record("a.png", "color", "What color is shown within the red bounding box?", "[200, 30, 30]", "ok")
        (src / "data.json").write_text(json.dumps([good, *[{**good, **r} for r in rows]]))  # type: ignore[dict-item]
        return ["data", "import", str(src), "--out", str(tmp / "ds"), "-q"]

    return setup


def only_ok_imported(tmp: Path) -> None:
    from ava.data.format import Dataset

    assert [s.id for s in Dataset(tmp / "ds").samples("color")] == ["ok"]
    errors = [json.loads(x) for x in (tmp / "ds" / "import_errors.jsonl").read_text().splitlines()]
    assert errors and all(e["file"].endswith("data.json") and e["row"] == 1 for e in errors), errors


def deep_json(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    src = tmp / "src"
    src.mkdir()
    (src / "data.json").write_text("[" * 100_000 + "]" * 100_000)
    return ["data", "import", str(src / "data.json"), "--format", "llava", "--out", str(tmp / "ds"), "-q"]


def deep_jsonl_line(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    return _eval_questions(tmp, ['{"a": ' * 50_000 + "1" + "}" * 50_000])


def _eval_questions(tmp: Path, lines: list[str]) -> list[str]:
    """An eval-format import whose first question is good, followed by ``lines`` as they are."""
    src = tmp / "src"
    src.mkdir()
    (src / "a.png").write_bytes(png_bytes())
    good = {
        "question_id": "ok",
        "image": "a.png",
        "text": "What color is shown within the red bounding box?",
        "answer": "[1, 2, 3]",
        "ava": "color",
    }
    (src / "q.jsonl").write_text("".join(line + "\n" for line in [json.dumps(good), *lines]))
    return ["data", "import", str(src), "--format", "eval", "--out", str(tmp / "ds"), "-q"]


def eval_rows(rows: list[dict]) -> Callable[[Path, pytest.MonkeyPatch], list[str]]:
    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
        good = {
            "question_id": "ok",
            "image": "a.png",
            "text": "What color is shown within the red bounding box?",
            "answer": "[1, 2, 3]",
            "ava": "color",
        }
        return _eval_questions(tmp, [json.dumps({**good, "question_id": f"bad{i}", **r}) for i, r in enumerate(rows)])

    return setup


def only_ok_question(tmp: Path) -> None:
    from ava.data.format import Dataset

    assert [s.id for s in Dataset(tmp / "ds").samples("color")] == ["ok"]
    assert (tmp / "ds" / "import_errors.jsonl").read_text().count("\n") >= 1


IO_LINE = "images: Input/output error"  # the run stops on it; no sample is blamed

CASES = [
    # run directories are self-contained
    Case("eval-from-another-dir", eval_from_elsewhere, 0, "run directory", scored_on_a),
    Case(
        "eval-data-changed",
        eval_changed_data,
        2,
        "was trained on other data: the 'color' samples of data are not those recorded",
        untouched("run"),
    ),
    Case("eval-legacy-run-elsewhere", eval_legacy_from_elsewhere, 2, "was scored on", untouched("run")),
    # a run directory never decides that code runs
    Case(
        "eval-recorded-trust-remote-code", llm_run_online_remote, 2, "records trust_remote_code = true", payload_not_run
    ),
    Case("eval-trust-flag-not-recorded", llm_flag_not_recorded, 2, "--trust-remote-code: ", payload_not_run),
    Case("eval-trust-flag-knn", knn_run_flag, 2, "--trust-remote-code apply to LLM-head runs only", untouched("run")),
    Case(
        "eval-config-not-object",
        run_file_edit("config.json", lambda c: [c]),
        2,
        "config.json: a JSON list",
        untouched("run"),
    ),
    Case(
        "eval-config-negative-lr",
        run_file_edit("config.json", lambda c: c.update(lr=-1.0)),
        2,
        "config.json: lr: must be a finite",
        untouched("run"),
    ),
    Case(
        "eval-config-unknown-field",
        run_file_edit("config.json", lambda c: c.update(evil=1)),
        2,
        "unknown field(s) ['evil']",
        untouched("run"),
    ),
    Case(
        "eval-config-data-number",
        run_file_edit("config.json", lambda c: c.update(data=5)),
        2,
        "data = 5: expected a string",
        untouched("run"),
    ),
    Case(
        "eval-run-json-no-head",
        run_file_edit("run.json", lambda r: r.pop("head") and None),
        2,
        "run.json: head None is not one of",
        untouched("run"),
    ),
    Case(
        "eval-run-json-head-list",
        run_file_edit("run.json", lambda r: r.update(head=["knn"])),
        2,
        "run.json: head ['knn'] is not one of",
        untouched("run"),
    ),
    Case(
        "eval-run-json-abilities-string",
        run_file_edit("run.json", lambda r: r.update(abilities="color")),
        2,
        "'abilities' is 'color', not a list",
        untouched("run"),
    ),
    Case("eval-meta-list", run_file_edit("knn.json", lambda m: list(m)), 2, "knn.json: a JSON list", untouched("run")),
    # caches and datasets hold no code
    Case("cache-pickle-codec", pickled_cache, 2, "cache array cannot be opened", payload_not_run),
    Case("dataset-eps-image", dataset_eps_image, 1, "cannot identify image file", payload_not_run),
    Case(
        "import-eps-image",
        import_eps_image,
        1,
        "evil.eps: cannot decode image (not an image format ava reads",
        payload_not_run,
    ),
    # datasets are checked on read
    Case(
        "dataset-duplicate-id",
        dataset_lines(duplicate_test_sample),
        2,
        "duplicate sample: ava 'color', id",
        nothing_scored,
    ),
    Case(
        "dataset-image-number",
        dataset_lines(first_test("image", 5)),
        2,
        "field 'image' is 5, not a string",
        nothing_scored,
    ),
    Case("dataset-id-number", dataset_lines(first_test("id", 7)), 2, "field 'id' is 7, not a string", nothing_scored),
    Case(
        "dataset-truth-list",
        dataset_lines(first_test("truth", [1])),
        2,
        "field 'truth' is [1], not an object",
        nothing_scored,
    ),
    Case(
        "dataset-line-not-object",
        dataset_lines(lambda ls: [*ls, "[1, 2]"]),
        2,
        "not a JSON object but list",
        nothing_scored,
    ),
    Case(
        "dataset-stray-ava",
        dataset_lines(first_test("ava", "counting")),
        2,
        "says ava 'counting', but this file",
        nothing_scored,
    ),
    Case("dataset-json-list", dataset_json_list, 2, "dataset.json: not an ava dataset (a JSON list", None),
    # --vfm names
    Case("vfm-hf-empty", in_checkpoint_dir("hf:"), 2, "no checkpoint after 'hf:'", no_cache),
    Case("vfm-hf-empty-with-options", in_checkpoint_dir("hf:#size=32"), 2, "no checkpoint after 'hf:'", no_cache),
    Case("vfm-timm-empty", in_checkpoint_dir("timm:"), 2, "no checkpoint after 'timm:'", no_cache),
    Case("vfm-key-at-empty", in_checkpoint_dir("clip@"), 2, "no weights after '@'", no_cache),
    Case("vfm-size-100000", extract_vfm("pixels#size=100000"), 2, "size must be an integer in 1..4096", no_cache),
    Case("vfm-size-unicode-digit", extract_vfm("pixels#size=²"), 2, "bad option 'size=²'", no_cache),
    Case("vfm-size-5000-digits", extract_vfm("pixels#size=" + "9" * 5000), 2, "bad option 'size=9999999999", no_cache),
    Case("vfm-hf-pool-huge", extract_vfm("hf:/nowhere#pool=100000"), 2, "pool must be an integer in 1..512", no_cache),
    Case("extract-io-error", extract_io_error, 1, IO_LINE, None),
    # imports
    Case(
        "llava-ava-number", llava_rows([{"id": "n", "ava": 5}]), 1, "field 'ava' is 5, not a string", only_ok_imported
    ),
    Case(
        "llava-ava-list",
        llava_rows([{"id": "l", "ava": ["color"]}]),
        1,
        "field 'ava' is [\"color\"], not a",
        only_ok_imported,
    ),
    Case("llava-deep-json", deep_json, 2, "data.json: JSON nested too deeply", None),
    Case("eval-deep-jsonl-line", deep_jsonl_line, 1, "line 2: JSON nested too deeply", only_ok_question),
    Case("eval-text-number", eval_rows([{"text": 5}]), 1, "field 'text' is 5, not a string", only_ok_question),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case,
    base: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cli: Cli,
) -> None:
    BASE["root"] = base
    args = case.setup(tmp_path, monkeypatch)
    capsys.readouterr()  # what the setup's own commands printed
    code, output = cli(args)
    flat = " ".join(output.split())
    assert code == case.code, f"exit {code}, expected {case.code}: {output}"
    if case.code:
        assert case.fragment in flat, f"{case.fragment!r} not in: {output}"
    assert "Traceback" not in output and "internal error" not in output, output
    if case.check is not None:
        case.check(tmp_path)


def test_legacy_run_still_evaluates_where_it_was_trained(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    """A run written before identities were recorded evaluates from the directory its relative paths name."""
    BASE["root"] = base
    run = legacy_run(tmp_path, monkeypatch)
    before = json.loads((run / "results_test.json").read_text())["abilities"]
    code, output = cli(["head", "eval", "--run", "run"])
    assert code == 0, output
    assert json.loads((run / "results_test.json").read_text())["abilities"] == before


def test_extraction_never_blames_an_image_for_memory_or_the_disk(tmp_path: Path) -> None:
    """A decode failure is one image's; MemoryError and OSError are not, so they stop the run (item 6)."""
    import errno

    from ava.cache.extraction import _Image, _ImageSet
    from ava.data.format import Dataset

    data = Dataset(dataset_with_image(tmp_path, "x"))

    def preprocess_raising(error: BaseException) -> Callable[[object], object]:
        def preprocess(image: object) -> object:
            raise error

        return preprocess

    stored = next(p for p in (data.root / "images").rglob("*.png"))
    image = _Image(stored.relative_to(data.root / "images").as_posix(), ["color/s0"])
    assert _ImageSet(data, [(0, image)], preprocess_raising(ValueError("bad pixels")))[0][2].endswith("bad pixels")
    for error in (MemoryError(), OSError(errno.EIO, "Input/output error")):
        with pytest.raises(type(error)):
            _ImageSet(data, [(0, image)], preprocess_raising(error))[0]
