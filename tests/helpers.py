"""Helpers the tests share, one section per concern: the small datasets they build, the tiny random models they
save with ``save_pretrained``, the child processes they start and kill at known points, the CLI run in this process.

Everything here is plain code (the fixtures are in ``conftest.py``); tests import it as ``from tests.helpers import
...``. Every model here has RANDOM weights."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import random
import re
import socket
import string
import subprocess
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from ava.abilities import (
    ABILITY_KEYS,
    DTD_TEXTURES,
    EMOTIONS,
    INDOOR_DEPTH_BINS,
    ORIENTATION_VIEWS,
    REL_DEPTH_ANSWERS,
    SPATIAL_ANSWERS,
    format_options,
    get_ability,
)
from ava.data.format import Dataset, DatasetWriter, Sample

REPO = Path(__file__).resolve().parent.parent
Cli = Callable[..., tuple[int, str]]  # the ``cli`` fixture: ``cli(args, one_line=False)`` -> (exit code, output)


# -- the command line, run in this process -----------------------------------------------------------------------------


def run_cli(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *, one_line: bool = False
) -> tuple[int, str]:
    """(exit code, what it printed: stdout + stderr) of ``ava ARGS`` through the console entry point (as a user sees
    the errors), with ``COLUMNS=1000`` so that one message is one line; ``one_line``: the output's whitespace runs as
    single spaces. The ``cli`` fixture is this with the test's own capsys and monkeypatch."""
    from ava.cli.main import main

    capsys.readouterr()  # what the test printed before is not the command's
    monkeypatch.setattr(sys, "argv", ["ava", *args])
    monkeypatch.setenv("COLUMNS", "1000")  # one message on one line
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out = capsys.readouterr()
    text = out.out + out.err
    return code, " ".join(text.split()) if one_line else text


# -- the benchmark scripts ---------------------------------------------------------------------------------------------


def benchmark_module(name: str) -> Any:
    """The script ``benchmarks/<name>.py`` imported as a module (benchmarks/ put on sys.path, as the scripts expect:
    they import their siblings by name)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    return importlib.import_module(name)


# -- markdown pages ----------------------------------------------------------------------------------------------------


def heading_anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


# -- feature-cache datasets, extractions, and child processes that extract (killed at known points) --------------------

# A child process that extracts with a given config; argv: data cache vfm hold-after hold-file. With hold-after
# N > 0, the child's forward pass N + 1 creates hold-file and then waits to be killed: a known point (the first N
# batches are through, the next is not), whatever the machine's load.
EXTRACT_SCRIPT = """
import json, sys, time
import torch
torch.set_num_threads(1)
from ava.cache import ExtractConfig, extract, extraction
hold_after, hold_file = int(sys.argv[4]), sys.argv[5]
if hold_after:
    real, calls = extraction._forward, []
    def held(*args, **kwargs):
        calls.append(1)
        if len(calls) > hold_after:
            open(hold_file, "w").close()
            while True:
                time.sleep(60)
        return real(*args, **kwargs)
    extraction._forward = held
summary = extract(ExtractConfig(vfm=sys.argv[3], data=sys.argv[1], cache=sys.argv[2], batch_size=2, shard_size=4,
                                device="cpu", progress=False))
print("SUMMARY " + json.dumps(summary))
"""


def kill_when_held(child: subprocess.Popen, hold_file: Path, ready: Callable[[], bool], timeout: float = 600) -> None:
    """SIGKILL ``child`` once it waits at its hold point (``hold_file`` exists) and ``ready()`` holds (what the
    test needs done before the kill, e.g. the first shard committed by the writer thread). The waiting is polling a
    state that no longer changes once reached, so it needs no timing: ``timeout`` only stops a test whose child
    died or hangs elsewhere."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while not (hold_file.exists() and ready()):
        if child.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"the child ended or hung before its hold point (exit {child.poll()}): "
                f"{child.stderr.read() if child.stderr else ''}"
            )
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def make_dataset(root: Path, n_images: int = 12, *, seed: int = 0, size: tuple[int, int] = (40, 28)) -> Path:
    """``n_images`` random RGB images; ``color`` has one sample per image, ``counting`` reuses the first
    half of the images (so images are shared across abilities), split train/test alternately."""
    rng = np.random.default_rng(seed)
    with DatasetWriter(root, {"source": "cache-test"}) as w:
        rels = []
        for _ in range(n_images):
            pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
            rels.append(w.add_image(Image.fromarray(pixels)))
        for i, rel in enumerate(rels):
            split = "train" if i % 2 == 0 else "test"
            w.add_sample(
                Sample(
                    f"c{i}", "color", rel, size[0], size[1], "What color?", "(1, 2, 3)", {"rgb": [1, 2, 3]}, split=split
                )
            )
        for i, rel in enumerate(rels[: n_images // 2]):
            w.add_sample(
                Sample(
                    f"n{i}",
                    "counting",
                    rel,
                    size[0],
                    size[1],
                    "How many?",
                    "3",
                    {"value": 3},
                    split="train" if i % 2 else "test",
                )
            )
    return root


def corrupt_image(root: Path, sample_id: str, ava: str = "color") -> Path:
    """Overwrite the image file of one sample with garbage; returns its path."""
    ds = Dataset(root)
    sample = next(s for s in ds.samples(ava) if s.id == sample_id)
    path = ds.image_path(sample)
    path.write_bytes(b"this is not a png")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_extract(
    data: Path, cache: Path, vfm: str, *, hold_after: int = 0, hold_file: Path | None = None, **env: str
) -> subprocess.Popen:
    """Run EXTRACT_SCRIPT in a child python (single-threaded) with extra environment variables; ``hold_after`` N:
    its forward pass N + 1 creates ``hold_file`` and waits there to be killed (see :func:`kill_when_held`)."""
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}, **env)
    cmd = [sys.executable, "-c", EXTRACT_SCRIPT, str(data), str(cache), vfm, str(hold_after), str(hold_file or "")]
    return subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def extract_cache(
    data: Path, cache: Path | str, vfm: str, *, batch_size: int = 2, shard_size: int = 4, **kw: Any
) -> dict:
    """``extract`` of ``data`` into ``cache`` with ``vfm`` on the CPU without progress bars, in batches of
    ``batch_size`` and shards of ``shard_size`` rows; ``kw``: any other ExtractConfig field. Returns the summary."""
    from ava.cache import ExtractConfig, extract

    config = ExtractConfig(
        vfm=vfm,
        data=str(data),
        cache=str(cache),
        batch_size=batch_size,
        shard_size=shard_size,
        device="cpu",
        progress=False,
        **kw,
    )
    return extract(config)


def done_rows(cache: Path | str) -> int:
    """Rows committed so far in the first group of ``cache`` (a path or a URL); 0 while the store is being made."""
    from ava.cache.store import CacheGroup, group_keys

    try:
        keys = group_keys(cache)
        return int(CacheGroup.open(cache, keys[0]).done_mask().sum()) if keys else 0
    except Exception:  # the child is still creating the store
        return 0


def online(vfm_name: str, data: Path, shas: list[str], batch_size: int) -> np.ndarray:
    """The forward pass of the same images outside the cache, batched as extraction batches them."""
    from ava.vfm import load_vfm

    vfm = load_vfm(vfm_name, device="cpu")
    ds = Dataset(data)
    paths = {s.image_sha256: s.image for s in ds.samples()}
    outs = []
    for i in range(0, len(shas), batch_size):
        pixels = torch.stack([vfm.preprocess(ds.load_image(paths[s])) for s in shas[i : i + batch_size]])
        outs.append(vfm(pixels)[:, 0].float())
    return torch.cat(outs).numpy()


def objects(url: str) -> dict[str, int]:
    """Every object under ``url`` (relative key -> size), listed through the server."""
    from ava.cache.location import cache_path
    from ava.cache.transfer import _all_files

    return _all_files(cache_path(url))


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (lock files left out): equal digests, nothing changed."""
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


PAGE = 4096  # a tmpfs's size is whole pages


@contextlib.contextmanager
def small_filesystem(where: Path, nbytes: int) -> Iterator[Path]:
    """A tmpfs of ``nbytes`` (rounded up to a page) mounted at ``where`` for the block: a real filesystem that
    fills up (statvfs and ENOSPC from the kernel, nothing mocked). Needs root (CI runs as root); else skipped."""
    where.mkdir(parents=True, exist_ok=True)
    pages = -(-nbytes // PAGE) * PAGE
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={pages}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        pytest.skip(f"a small real filesystem needs `mount -t tmpfs` (root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


# -- a tiny fake AVA-Bench release (parquet layout) with every image kind the importer normalizes ----------------------

EXIF_ORIENTATION = 0x0112


def _save(im: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _gradient(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8), "RGB")


def image_kinds() -> dict[str, bytes]:
    """Encoded test images, one per kind the importer normalizes (and a corrupt one)."""
    rgba = Image.new("RGBA", (10, 8), (200, 10, 10, 255))
    rgba.putpixel((0, 0), (0, 0, 0, 0))  # fully transparent -> white after compositing
    pal_t = Image.new("P", (6, 6), 1)
    pal_t.putpalette([0, 0, 0, 0, 128, 255] + [0] * 762)
    pal_t.putpixel((0, 0), 0)
    pal_t.info["transparency"] = 0
    gray16 = Image.new("I;16", (5, 4))
    gray16.putdata([32896] * 20)  # 128/255 of full scale (clipping would give 255)
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6  # rotate 90 degrees clockwise to display
    mpo_frames = [Image.new("RGB", (12, 9), (250, 0, 0)), Image.new("RGB", (12, 9), (0, 250, 0))]
    jpeg = _save(_gradient(16, 12), "JPEG", quality=90)
    return {
        "jpeg": jpeg,
        "png_rgb": _save(_gradient(9, 7, 1), "PNG"),
        "mpo": _save(mpo_frames[0], "MPO", save_all=True, append_images=mpo_frames[1:]),
        "palette": _save(Image.new("P", (6, 5), 3), "PNG"),
        "palette_alpha": _save(pal_t, "PNG", transparency=0),
        "gray": _save(Image.new("L", (7, 7), 90), "PNG"),
        "gray16": _save(gray16, "PNG"),
        "la": _save(Image.new("LA", (4, 4), (0, 0)), "PNG"),
        "rgba": _save(rgba, "PNG"),
        "cmyk": _save(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), "JPEG"),
        "exif_rotated": _save(_gradient(40, 20, 2), "JPEG", exif=exif.tobytes()),
        "corrupt": jpeg[:40] + b"\x00garbage" * 4,
    }


def conv(question: str, answer: str) -> list[dict[str, str]]:
    """A LLaVA conversation: the question after an image tag, then the answer."""
    return [{"from": "human", "value": f"<image>\n{question}"}, {"from": "gpt", "value": answer}]


def llava_record(image: str, ava: str, question: str, answer: str, rid: str = "r0") -> dict:
    """One record of a LLaVA-style JSON file."""
    return {"id": rid, "image": image, "ava": ava, "conversations": conv(question, answer)}


def llava_json(tmp: Path, image: str) -> Path:
    """``tmp/src/data.json``: one colour record whose image is ``image``; returns ``tmp/src``."""
    src = tmp / "src"
    src.mkdir(exist_ok=True)
    record = llava_record(image, "color", "What color is shown within the red bounding box?", "[1, 2, 3]")
    (src / "data.json").write_text(json.dumps([record]))
    return src


def png_bytes(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (8, 8)) -> bytes:
    """A PNG of one colour."""
    return _save(Image.new("RGB", size, color), "PNG")


def dataset_with_image(tmp: Path, image: str) -> Path:
    """A one-sample dataset whose sample's ``image`` field is ``image`` (as a hostile dataset could have it)."""
    root = tmp / "data"
    with DatasetWriter(root, {"source": "test"}) as w:
        rel = w.add_image_bytes(png_bytes(), "png")
        w.add_sample(
            Sample(
                id="s0",
                ava="color",
                image=rel,
                width=8,
                height=8,
                question="What color is shown?",
                answer="[200, 30, 30]",
                truth={"rgb": [200, 30, 30]},
                split="train",
            )
        )
    path = root / "samples" / "color.jsonl"
    rec = json.loads(path.read_text())
    rec["image"] = image
    path.write_text(json.dumps(rec) + "\n")
    return root


def _orientation_q(obj: str) -> str:
    return f"What is the orientation of the {obj} in the image? Choose one from below: " + format_options(
        ORIENTATION_VIEWS
    )


def _depth_q(obj: str) -> str:
    return (
        f"Based on the image, estimate how far the closest point of the {obj} (highlighted by a red box) is from "
        f"the camera in meters. Select the best option: {format_options(INDOOR_DEPTH_BINS, 'letter')}."
    )


def release_rows() -> dict[str, list[dict[str, Any]]]:
    """Rows per config. Counting carries every image kind; two rows share one image (dedup)."""
    imgs = image_kinds()
    counting = []
    for i, (kind, data) in enumerate(imgs.items()):
        q = "How many apples are there in the image?"
        counting.append({"id": f"cnt/{kind}", "kind": kind, "data": data, "q": q, "a": str(i + 1)})
    counting.append(
        {
            "id": "cnt/shared",
            "kind": "jpeg",
            "data": imgs["jpeg"],
            "q": "How many pears are there in the image?",
            "a": "seven",
        }
    )
    counting.append({"id": "cnt/malformed", "kind": "png_rgb", "data": imgs["png_rgb"], "conv": [{"from": "human"}]})
    orientation = [
        {
            "id": f"ori{i}",
            "kind": "png",
            "data": _save(_gradient(8, 8, 10 + i), "PNG"),
            "q": _orientation_q("car"),
            "a": ORIENTATION_VIEWS[i % 3] if i % 2 else f"{i % 3 + 1}. {ORIENTATION_VIEWS[i % 3]}",
        }
        for i in range(6)
    ]
    depth = [
        {
            "id": f"dep{i}",
            "kind": "png",
            "data": _save(_gradient(8, 8, 20 + i), "PNG"),
            "q": _depth_q("chair"),
            "a": "B" if i % 2 else "2-3",
        }
        for i in range(4)
    ]
    localization = [
        {
            "id": "loc_px",
            "kind": "png",
            "data": _save(_gradient(100, 50, 30), "PNG"),
            "q": "Provide bounding box coordinate for dog.",
            "a": "[10, 5, 50, 25]",
        },
        {
            "id": "loc_norm",
            "kind": "png",
            "data": _save(_gradient(20, 20, 31), "PNG"),
            "q": "Provide bounding box coordinate for cat.",
            "a": "[0.6, 0.7, 0.1, 0.2]",
        },
    ]
    color = [
        {
            "id": "col0",
            "kind": "png",
            "data": _save(_gradient(8, 8, 40), "PNG"),
            "q": "What color is shown within the red bounding box?",
            "a": "(12, 200, 3)",
        },
        {
            "id": "col_bad",
            "kind": "png",
            "data": _save(_gradient(8, 8, 41), "PNG"),
            "q": "What color is shown within the red bounding box?",
            "a": "reddish",
        },
    ]
    ocr = [
        {
            "id": "ocr0",
            "kind": "png",
            "data": _save(_gradient(8, 8, 50), "PNG"),
            "q": "What is written in the red bounding box in the image?",
            "a": "STOP here",
        }
    ]
    bogus = [{"id": "b0", "kind": "png", "data": imgs["png_rgb"], "q": "Why?", "a": "because"}]
    return {
        "Counting": counting,
        "Orientation": orientation,
        "Absolute_depth": depth,
        "Localization": localization,
        "Color": color,
        "OCR": ocr,
        "Bogus": bogus,
    }


def write_release(root: Path, *, split_column: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Write ``root/train/<Config>/train-00000-of-00001.parquet`` for each config; returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = release_rows()
    for config, items in rows.items():
        table = pa.table(
            {
                "id": [r["id"] for r in items],
                "image": [{"bytes": r["data"], "path": f"{r['id'].replace('/', '_')}.{r['kind']}"} for r in items],
                "conversations": [r.get("conv") or conv(r["q"], r["a"]) for r in items],
                "source": [f"src-{config.lower()}" for _ in items],
                "difficulty": [i % 3 for i in range(len(items))],
                **({"split": ["test" if i % 4 == 0 else "train" for i in range(len(items))]} if split_column else {}),
            }
        )
        path = root / "train" / config / "train-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=4)
    return rows


# -- one hand-made sample per ability (two variants each), and a tiny dataset built from them --------------------------

WIDTH, HEIGHT = 20, 10  # non-square, so pixel boxes normalize x and y differently

_OPTIONS: dict[str, list[str]] = {
    "fine_grained": ["Black-footed Albatross", "Laysan Albatross", "Sooty Albatross"],
    "abs_depth": list(INDOOR_DEPTH_BINS),
    "rel_depth": list(REL_DEPTH_ANSWERS),
    "orientation": list(ORIENTATION_VIEWS),
    "recognition": ["cat", "dog", "car"],
    "action": ["running", "jumping rope", "jumping"],
    "texture": list(DTD_TEXTURES),
    "spatial": list(SPATIAL_ANSWERS),
    "scene": ["kitchen", "bedroom", "beach"],
    "emotion": list(EMOTIONS),
}
# (variant 0, variant 1) truths per non-option ability, and option indices per option ability
_TRUTHS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "localization": ({"box": [0.1, 0.2, 0.55, 0.8]}, {"box": [0.5, 0.5, 0.9, 0.7]}),
    "counting": ({"value": 7}, {"value": 25}),
    "ocr": ({"text": "EXIT 12"}, {"text": "Welcome to the grand hotel"}),
    "color": ({"rgb": [12, 200, 3]}, {"rgb": [250, 250, 250]}),
}
_INDEX = {
    "fine_grained": (1, 0),
    "abs_depth": (2, 0),
    "rel_depth": (1, 0),
    "orientation": (1, 8),
    "recognition": (2, 0),
    "action": (1, 2),
    "texture": (30, 0),
    "spatial": (1, 2),
    "scene": (0, 2),
    "emotion": (4, 0),
}


def make_sample(key: str, variant: int = 0, *, image: str = "00/00.png", split: str | None = "test") -> Sample:
    ability = get_ability(key)
    options = _OPTIONS.get(key)
    meta: dict[str, Any] = {"source": f"src{variant}"}
    if options is not None:
        index = _INDEX[key][variant]
        truth: dict[str, Any] = {"index": index, "text": options[index]}
        if key == "abs_depth":
            lo, hi = options[index].split("-")
            truth = {"index": index, "bin": [float(lo), float(hi)]}
            meta["scene_type"] = "indoor"
        answer = options[index]
    else:
        truth = _TRUTHS[key][variant]
        answer = str(next(iter(truth.values())))
    question = ability.question_templates[0].format(
        object="thing", a="cup", b="plate", family="bird", options=format_options(options or [], ability.option_style)
    )
    return Sample(
        id=f"{key}-{variant}",
        ava=key,
        image=image,
        width=WIDTH,
        height=HEIGHT,
        question=question,
        answer=answer,
        truth=truth,
        options=options,
        split=split,
        meta=meta,
    )


def make_sample_dataset(root: Path, keys: list[str], *, info: dict[str, Any] | None = None) -> Path:
    """A dataset with two test samples per ability and one train sample (variant 0 copy) per ability."""
    info = info if info is not None else {"split": {"made_by": "ava", "test_frac": 0.2, "seed": 0}}
    with DatasetWriter(root, info=info) as writer:
        rel = writer.add_image(Image.new("RGB", (WIDTH, HEIGHT), (90, 30, 200)))
        for key in keys:
            for variant in (0, 1):
                writer.add_sample(make_sample(key, variant, image=rel))
            train = make_sample(key, 0, image=rel, split="train")
            train.id = f"{key}-train"
            writer.add_sample(train)
    return root


# -- hand-made datasets whose features carry the answer, an in-memory feature cache, the `pixels` suite ----------------

# one ability per answer kind (option, integer, depth bin, box, rgb, text)
ONE_PER_ANSWER_KIND = ("localization", "counting", "abs_depth", "color", "spatial", "scene", "ocr")
POOL = ("apple", "boat", "cat", "dog", "egg", "fish", "goat", "hat", "ink", "jar", "kite", "lamp")
CHARS = "abcde"


class FakeCache:
    """The FeatureCache interface over a dict of arrays [L, T, D] keyed by image sha256."""

    def __init__(
        self,
        rows: dict[str, np.ndarray],
        layers: tuple[int, ...] = (-1,),
        key: str = "fake0001",
        random_weights: bool = False,
    ) -> None:
        self.rows, self.layers, self.key, self.random_weights = rows, layers, key, random_weights
        first = next(iter(rows.values()))
        self.num_tokens, self.dim = first.shape[1], first.shape[2]
        self.identity = {"key": "fake"}

    def has(self, sha: str) -> bool:
        return sha in self.rows

    def read(self, shas: list[str], layer: int | None = None) -> np.ndarray:
        i = self.layers.index(self.layers[0] if layer is None else layer)
        return np.stack([self.rows[s][i] for s in shas]).astype(np.float32)

    def read_pooled(self, shas: list[str], layer: int | None = None) -> np.ndarray:
        return self.read(shas, layer).mean(1)


def _truth(key: str, rng: np.random.Generator) -> tuple[dict, list[str] | None, np.ndarray | str]:
    """A random truth, the question's options, and the answer as a signal to embed (vector or text)."""
    ability = get_ability(key)
    kind = ability.answer_kind
    if kind == "option":
        if ability.fixed_options:
            options = list(ability.fixed_options)
        else:
            options = list(rng.choice(POOL, size=5, replace=False))
        i = int(rng.integers(len(options)))
        code = POOL.index(options[i]) if options[i] in POOL else i
        return {"index": i, "text": options[i]}, options, np.eye(12)[code % 12] * 3
    if kind == "integer":
        n = int(rng.integers(1, 11))
        return {"value": n}, None, np.array([np.log(n)] * 2)
    if kind == "depth_bin":
        i = int(rng.integers(len(INDOOR_DEPTH_BINS)))
        lo, hi = (float(v) for v in INDOOR_DEPTH_BINS[i].split("-"))
        return {"index": i, "bin": [lo, hi]}, list(INDOOR_DEPTH_BINS), np.array([i / 2.0] * 2)
    if kind == "box":
        x1, y1 = rng.uniform(0, 0.5, 2)
        w, h = rng.uniform(0.2, 0.5, 2)
        box = [float(x1), float(y1), float(x1 + w), float(y1 + h)]
        return {"box": box}, None, np.array(box) * 4
    if kind == "rgb":
        rgb = [int(v) for v in rng.integers(0, 256, 3)]
        return {"rgb": rgb}, None, np.array(rgb) / 64.0
    text = "".join(rng.choice(list(CHARS), size=int(rng.integers(2, 5))))
    return {"text": text}, None, text


def _tokens(signal: np.ndarray | str, tokens: int, dim: int, rng: np.random.Generator, noise: float) -> np.ndarray:
    x = rng.normal(0, noise, (tokens, dim))
    if isinstance(signal, str):  # token t holds character t (one-hot), the rest hold a "no text" marker
        for t in range(tokens):
            x[t, CHARS.index(signal[t]) if t < len(signal) else len(CHARS)] += 3.0
    elif len(signal) == 12:  # a class: one-hot
        x[:, :12] += signal
    else:  # a regression target s as (s, 4 - s): it changes the direction, which cosine kNN sees
        x[:, : 2 * len(signal)] += np.concatenate([signal, 4 - signal])
    return x.astype(np.float32)


def distinct_image(n: int) -> Image.Image:
    """A 4 x 4 image unique to ``n`` (< 2**24): colour (n % 256, n // 256 % 256, 7), and from n = 65536 on one more
    pixel holding n // 65536 (the images of smaller n are unchanged)."""
    image = Image.new("RGB", (4, 4), (n % 256, n // 256 % 256, 7))
    if n >= 65536:
        image.putpixel((3, 3), (n // 65536 % 256, 7, 7))
    return image


def handmade(
    root: Path,
    abilities: tuple[str, ...] = ABILITY_KEYS,
    n: int | dict[str, int] = 60,
    tokens: int = 6,
    dim: int = 16,
    noise: float = 0.3,
    seed: int = 0,
    layers: int = 1,
) -> tuple[Path, FakeCache]:
    """A dataset (80/20 split) whose features encode each sample's answer, and a FakeCache holding them; ``n``
    samples per ability (or per ability as given), every sample with an image of its own."""
    rng = np.random.default_rng(seed)
    rows: dict[str, np.ndarray] = {}
    with DatasetWriter(root, info={"source": "handmade", "synthetic": True, "split": {"made_by": "synthetic"}}) as w:
        for key in abilities:
            count = n[key] if isinstance(n, dict) else n
            for i in range(count):
                truth, options, signal = _truth(key, rng)
                rel = w.add_image(distinct_image(len(rows)))
                sha = Path(rel).name.split(".")[0]
                rows[sha] = np.stack([_tokens(signal, tokens, dim, rng, noise) for _ in range(layers)])
                split = "train" if i < int(0.8 * count) else "test"
                answer = str(truth.get("text", truth))
                w.add_sample(
                    Sample(
                        id=f"{key}-{i}",
                        ava=key,
                        image=rel,
                        width=4,
                        height=4,
                        question="q?",
                        answer=answer,
                        truth=truth,
                        options=options,
                        split=split,
                    )
                )
    layer_ids = tuple(range(-layers, 0))
    return root, FakeCache(rows, layers=layer_ids)


def positional(root: Path, n: int = 100, dim: int = 8, noise: float = 0.3, seed: int = 0) -> tuple[Path, FakeCache]:
    """A spatial dataset whose answer is only *where* a marker sits: 16 tokens on a 4 x 4 grid, answer i puts the
    same marker vector on a random token of quadrant i. The mean over tokens is the same for every answer (chance
    for a mean probe); grid cells (``grid2``: one per quadrant, ``grid4``: one per token) separate them."""

    rng = np.random.default_rng(seed)
    marker = np.zeros(dim)
    marker[:2] = 3.0
    rows: dict[str, np.ndarray] = {}
    options = list(SPATIAL_ANSWERS)
    with DatasetWriter(root, info={"source": "positional", "synthetic": True, "split": {"made_by": "synthetic"}}) as w:
        for i in range(n):
            answer = i % len(options)
            x = rng.normal(0, noise, (4, 4, dim))
            row, col = 2 * (answer // 2) + rng.integers(2), 2 * (answer % 2) + rng.integers(2)
            x[row, col] += marker
            x = x.reshape(16, dim)
            rel = w.add_image(Image.new("RGB", (4, 4), (i % 256, i // 256, 9)))
            rows[Path(rel).name.split(".")[0]] = x[None].astype(np.float32)
            w.add_sample(
                Sample(
                    id=f"pos-{i}",
                    ava="spatial",
                    image=rel,
                    width=4,
                    height=4,
                    question="q?",
                    answer=options[answer],
                    truth={"index": answer, "text": options[answer]},
                    options=options,
                    split="train" if i < int(0.8 * n) else "test",
                )
            )
    return root, FakeCache(rows, key="fakepos1")


# colour (inside a red box: found by the attentive probe), counting and spatial (answers in where things are:
# the linear probe's and kNN's grid-cell views), scene and depth (classes differ in overall colour)
PIXEL_ABILITIES = ("color", "counting", "spatial", "scene", "abs_depth")


def make_pixel_suite(base: Path, per_ava: int = 200) -> tuple[Path, Path]:
    """(dataset, cache): synthetic sets of PIXEL_ABILITIES under ``base``, extracted with the `pixels` VFM (the
    ``pixel_suite`` fixture builds it once per session)."""
    from ava.cache import ExtractConfig, extract
    from ava.synth import SynthConfig, generate

    data, cache = base / "synth", base / "cache"
    generate(SynthConfig(out=str(data), per_ava=per_ava, ava=list(PIXEL_ABILITIES), size=224, seed=0), progress=False)
    extract(ExtractConfig(vfm="pixels", data=str(data), cache=str(cache), layers=(-1,), device="cpu", progress=False))
    return data, cache


def majority_baseline(data: Path, ava: str, split: str = "test") -> float:
    """The metric of the majority answer of train (choice), or the train median (counts, colour)."""
    from ava.abilities.parsers import format_reply
    from ava.heads.targets import mean_score, option_text, question_options

    ds = Dataset(data)
    ability = get_ability(ava)
    train, test = ds.samples(ava, split="train"), ds.samples(ava, split=split)
    kind = ability.answer_kind
    if kind == "option":
        texts = [option_text(ability, s) for s in train]
        top = max(sorted(set(texts)), key=texts.count)
        replies = [
            format_reply(ability, question_options(ability, s).index(top), options=question_options(ability, s))
            for s in test
        ]
    elif kind == "integer":
        replies = [format_reply(ability, int(np.median([s.truth["value"] for s in train])))] * len(test)
    elif kind == "rgb":
        replies = [format_reply(ability, tuple(np.median([s.truth["rgb"] for s in train], axis=0)))] * len(test)
    elif kind == "box":
        replies = [format_reply(ability, tuple(np.median([s.truth["box"] for s in train], axis=0)))] * len(test)
    else:  # depth bins and texts: the most frequent answer
        answers = [str(s.truth.get("text", s.truth.get("bin"))) for s in train]
        top = max(sorted(set(answers)), key=answers.count)
        value = top if kind == "text" else float(np.mean(json.loads(top)))
        replies = [format_reply(ability, value, options=s.options) for s in test]
    return mean_score(ability, test, replies)


# -- a tiny timm ViT (random init, the model a user trains) and the small synthetic suite ------------------------------

SUITE_ABILITIES = ("color", "counting", "ocr", "spatial")


def tiny_vit(seed: int = 0, drop: float = 0.0) -> torch.nn.Module:
    """A 2-block, 64-wide timm ViT at 64 px with 8 px patches (64 patch tokens + CLS), random weights of ``seed``."""
    import timm

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return timm.create_model(
            "vit_tiny_patch16_224",
            pretrained=False,
            img_size=64,
            patch_size=8,
            embed_dim=64,
            depth=2,
            num_heads=2,
            num_classes=4,
            drop_rate=drop,
        )


def tiny_vfm(model: torch.nn.Module, **kw):
    from ava.vfm.module import vfm_from_module

    args = {
        "name": "tiny-vit",
        "size": 64,
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "output": "blocks.1",
        "prefix_tokens": 1,
        **kw,
    }
    return vfm_from_module(model, **args)


def make_small_suite(out: Path, per_ava: int = 20, abilities: tuple[str, ...] = SUITE_ABILITIES) -> Path:
    """The synthetic suite of ``abilities`` x ``per_ava`` at 64 px in ``out`` (the ``small_suite`` fixture builds each
    shape once per session)."""
    from ava.synth import SynthConfig, generate

    generate(SynthConfig(out=str(out), per_ava=per_ava, ava=list(abilities), size=64, seed=0), progress=False)
    return out


# -- tiny image-text models, VLMs and a choice dataset with many classes (the distractor miners, zero-shot) ------------

SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]


def char_tokenizer(extra: list[str] | None = None, eos: bool = True):
    """A fast tokenizer over single characters (BPE without merges), [BOS] ... [EOS] around every text (``eos``
    False: [BOS] only, as a generation prompt wants)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if not c.isspace()]
    vocab = {t: i for i, t in enumerate([*SPECIALS, *(extra or []), *chars])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A [EOS]" if eos else "[BOS] $A",
        special_tokens=[("[BOS]", vocab["[BOS]"]), ("[EOS]", vocab["[EOS]"])],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        additional_special_tokens=extra or None,
    )
    return fast, vocab


def save_tiny_image_text(path: Path, kind: str = "clip", seed: int = 0) -> Path:
    """A tiny random CLIPModel, SiglipModel or Tipsv2Model (``kind`` clip, siglip, tipsv2) with its tokenizer and
    image processor in ``path``."""
    import transformers as T

    tok, vocab = char_tokenizer()
    text = {
        "vocab_size": len(vocab),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
    }
    # the tiny-clip / tiny-siglip registry shapes (56 px, patch 14, 2 layers), so ``tiny-clip@DIR`` extracts too
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": 56,
        "patch_size": 14,
    }
    torch.manual_seed(seed)
    if kind == "clip":
        model = T.CLIPModel(T.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
        proc = T.CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    elif kind == "siglip":
        model = T.SiglipModel(T.SiglipConfig(text_config=text, vision_config=vision))
        proc = T.SiglipImageProcessor(size={"height": 56, "width": 56})
    else:  # TIPSv2
        text = {k: v for k, v in text.items() if not k.endswith("token_id")}
        model = T.Tipsv2Model(T.Tipsv2Config(text_config=text, vision_config=vision))
        proc = T.CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    model.save_pretrained(path)
    tok.save_pretrained(path)
    proc.save_pretrained(path)
    return path


COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 200, 30),
    "blue": (30, 30, 220),
    "yellow": (230, 220, 30),
    "purple": (150, 30, 180),
    "orange": (240, 140, 20),
    "cyan": (30, 210, 210),
    "grey": (128, 128, 128),
}


def make_choice_data(root: Path, per_class: int = 5, seed: int = 0) -> Path:
    """A split ``recognition`` dataset: 8 colour classes (a filled square of the class colour), every question
    listing all 8 options; 1 in 5 samples per class is test. Plus a ``counting`` ability (not a choice)."""
    rng = random.Random(seed)
    ability = get_ability("recognition")
    classes = list(COLOURS)
    with DatasetWriter(
        root, info={"source": "foci test fixture", "synthetic": True, "split": {"made_by": "synthetic", "seed": seed}}
    ) as w:
        for ci, name in enumerate(classes):
            for j in range(per_class):
                im = Image.new("RGB", (40, 40), (rng.randint(0, 60),) * 3)
                s = rng.randint(14, 30)
                x, y = rng.randint(0, 40 - s), rng.randint(0, 40 - s)
                ImageDraw.Draw(im).rectangle([x, y, x + s, y + s], fill=COLOURS[name])
                rel = w.add_image(im)
                opts = classes[:]
                rng.shuffle(opts)
                q = ability.question_templates[0].format(options=format_options(opts))
                w.add_sample(
                    Sample(
                        id=f"r{ci}-{j}",
                        ava="recognition",
                        image=rel,
                        width=40,
                        height=40,
                        question=q,
                        answer=name,
                        truth={"index": opts.index(name), "text": name},
                        options=opts,
                        split="test" if j % 5 == 4 else "train",
                    )
                )
                w.add_sample(
                    Sample(
                        id=f"c{ci}-{j}",
                        ava="counting",
                        image=rel,
                        width=40,
                        height=40,
                        question="How many squares are there in the image?",
                        answer="1",
                        truth={"value": 1},
                        split="test" if j % 5 == 4 else "train",
                    )
                )
    return root


def make_photo_choice_data(
    root: Path, n_images: int = 40, seed: int = 0, boxes: bool = True, only_in_test: str = "cyan"
) -> Path:
    """A ``recognition`` dataset of "photos" holding two objects each, as ``ava data build`` writes it: 64 x 32
    images, a filled square of a colour class in the left half and one of another class in the right half, one
    question per object with its box (``meta.box``, normalized; ``boxes`` False: none, the whole photo), the
    photo's classes (``meta.image_classes``) and its origin. Objects of ``only_in_test`` are all in the test
    split. Every question lists all 8 options."""
    rng = random.Random(seed)
    ability = get_ability("recognition")
    classes = list(COLOURS)
    with DatasetWriter(
        root,
        info={
            "source": "foci photo fixture",
            "synthetic": True,
            "split": {"made_by": "synthetic", "seed": seed},
            "build": {"classes": {"recognition": classes}},
        },
    ) as w:
        for i in range(n_images):
            pair = rng.sample(classes, 2)
            im = Image.new("RGB", (64, 32), (rng.randint(0, 40),) * 3)
            draw = ImageDraw.Draw(im)
            halves = [(0, 0, 32, 32), (32, 0, 64, 32)]
            for (x0, y0, x1, y1), name in zip(halves, pair, strict=True):
                draw.rectangle([x0 + 2, y0 + 2, x1 - 3, y1 - 3], fill=COLOURS[name])
            rel = w.add_image(im)
            for k, ((x0, y0, x1, y1), name) in enumerate(zip(halves, pair, strict=True)):
                opts = classes[:]
                rng.shuffle(opts)
                q = ability.question_templates[0].format(options=format_options(opts))
                meta: dict[str, Any] = {
                    "image_classes": sorted(pair),
                    "origin": {"file": f"photo_{i}.png", "image_id": i, "annotations": [k]},
                }
                if boxes:
                    meta["box"] = [x0 / 64, y0 / 32, x1 / 64, y1 / 32]
                split = "test" if name == only_in_test or i % 5 == 4 else "train"
                w.add_sample(
                    Sample(
                        id=f"p{i}-{k}",
                        ava="recognition",
                        image=rel,
                        width=64,
                        height=32,
                        question=q,
                        answer=name,
                        truth={"index": opts.index(name), "text": name},
                        options=opts,
                        split=split,
                        meta=meta,
                    )
                )
    return root


LLAVA_TEMPLATE = (
    "{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}{% if c['type'] == 'image' %}<image>\n"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %} {% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def save_tiny_vlm(path: Path, kind: str = "llava", seed: int = 0) -> Path:
    """A tiny random LlavaForConditionalGeneration or Qwen2VLForConditionalGeneration with its processor (character
    tokenizer, image processor, chat template) in ``path``."""
    import transformers as T

    torch.manual_seed(seed)
    text = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
    }
    if kind == "llava":
        tok, vocab = char_tokenizer(extra=["<image>"], eos=False)
        vision = {
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
        }
        model = T.LlavaForConditionalGeneration(
            T.LlavaConfig(
                vision_config=vision,
                text_config={"model_type": "llama", "vocab_size": len(vocab), **text},
                image_token_id=vocab["<image>"],
            )
        )
        images = T.CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
        proc = T.LlavaProcessor(
            image_processor=images,
            tokenizer=tok,
            patch_size=14,
            num_additional_image_tokens=1,
            vision_feature_select_strategy="default",
            chat_template=LLAVA_TEMPLATE,
        )
    else:
        tok, vocab = char_tokenizer(
            extra=["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"], eos=False
        )
        rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}
        vision = {
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        }
        model = T.Qwen2VLForConditionalGeneration(
            T.Qwen2VLConfig(
                text_config={"vocab_size": len(vocab), **text, "rope_parameters": rope},
                vision_config=vision,
                image_token_id=vocab["<|image_pad|>"],
                video_token_id=vocab["<|video_pad|>"],
                vision_start_token_id=vocab["<|vision_start|>"],
                vision_end_token_id=vocab["<|vision_end|>"],
            )
        )
        pixels = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}
        proc = T.Qwen2VLProcessor(
            image_processor=T.Qwen2VLImageProcessor(**pixels),
            tokenizer=tok,
            video_processor=T.Qwen2VLVideoProcessor(**pixels),
            chat_template=QWEN_TEMPLATE,
        )
    model.save_pretrained(path)
    proc.save_pretrained(path)
    return path


def save_tiny_text_llm(path: Path) -> Path:
    """A tiny random LlamaForCausalLM and its tokenizer: a checkpoint whose processor takes no images."""
    import transformers as T

    tok, vocab = char_tokenizer(eos=False)
    T.LlamaForCausalLM(
        T.LlamaConfig(
            vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
        )
    ).save_pretrained(path)
    tok.save_pretrained(path)
    return path


# -- the LLM head: a learnable 2-option set (rel_depth form), its cache, a tiny LLM ------------------------------------

LLM_VFM = "tiny-siglip"  # the VFM of the LLM-head tests
LLM = "tiny-random-qwen2"


def _rel_depth_image(rng: random.Random, nearer: str) -> Image.Image:
    im = Image.new("RGB", (56, 56), (128, 128, 128))
    d = ImageDraw.Draw(im)
    big, small = rng.randint(22, 28), rng.randint(6, 9)
    sizes = {"red": big if nearer == "red" else small, "blue": big if nearer == "blue" else small}
    left_first = rng.random() < 0.5
    for colour, x0 in (("red", 2 if left_first else 30), ("blue", 30 if left_first else 2)):
        s = sizes[colour]
        y0 = rng.randint(2, 54 - s)
        d.rectangle([x0, y0, x0 + s, y0 + s], fill=(220, 20, 20) if colour == "red" else (20, 20, 220))
    return im


def make_rel_depth(root: Path, n: int = 48, seed: int = 0) -> Path:
    """A split rel_depth dataset of ``n`` samples (2 of every 8 are test), balanced red/blue in both splits."""
    rng = random.Random(seed)
    ability = get_ability("rel_depth")
    template = ability.question_templates[0]
    with DatasetWriter(
        root,
        info={"source": "llm-head test fixture", "synthetic": True, "split": {"made_by": "synthetic", "seed": seed}},
    ) as w:
        for i in range(n):
            nearer = REL_DEPTH_ANSWERS[i % 2]
            rel = w.add_image(_rel_depth_image(rng, nearer))
            question = template.format(a="cup", b="box", options=format_options(REL_DEPTH_ANSWERS))
            w.add_sample(
                Sample(
                    id=f"s{i:03d}",
                    ava="rel_depth",
                    image=rel,
                    width=56,
                    height=56,
                    question=question,
                    answer=nearer,
                    truth={"index": i % 2, "text": nearer},
                    split="test" if i % 8 in (3, 6) else "train",
                )
            )
    return root


def make_cache(data: Path, cache: Path, vfm: str = LLM_VFM) -> Path:
    """The fp16 feature cache of ``data`` with ``vfm``."""
    from ava.cache import ExtractConfig, extract

    extract(ExtractConfig(vfm=vfm, data=str(data), cache=str(cache), progress=False, device="cpu", codec="fp16"))
    return cache


# A question and a reference answer of every ability, in the shapes the release uses (for the label-mask test).
_ANSWERS = {
    "option": "front right",
    "integer": "12",
    "depth_bin": "2-3",
    "box": "[0.120, 0.300, 0.550, 0.800]",
    "rgb": "(12, 200, 3)",
    "text": "Hello World 42",
}


def example(ability_key: str) -> tuple[str, str]:
    """(question, answer) of ``ability_key`` built from its own template."""
    ability = get_ability(ability_key)
    options = list(ability.fixed_options) or ["alpha", "beta", "gamma"]
    if ability.answer_kind == "depth_bin":
        options = ["1-2", "2-3", "3-4"]
    fields = {"object": "red car", "a": "cup", "b": "box", "family": "bird"}
    question = ability.question_templates[0].format(options=format_options(options, ability.option_style), **fields)
    answer = options[1] if ability.answer_kind == "option" else _ANSWERS[ability.answer_kind]
    return question, answer


# -- report run directories scored through the real scorer on a tiny synthetic suite -----------------------------------

REPORT_ABILITIES = ("localization", "counting", "spatial", "emotion")
REPORT_VFMS = {"good": 0.85, "noisy": 0.45, "mute": None}  # share of samples answered with the truth; None: unparsable


def make_report_dataset(root: Path, per_ava: int = 50) -> Path:
    """The synthetic suite of REPORT_ABILITIES in ``root/data``."""
    from ava.synth import SynthConfig, generate

    data = root / "data"
    generate(SynthConfig(out=str(data), per_ava=per_ava, ava=list(REPORT_ABILITIES), seed=0, size=64), progress=False)
    return data


def _reply(ability, sample, right: bool, rng: np.random.Generator) -> str:
    from ava.abilities.parsers import format_reply, sample_options, truth_value

    if right:
        return format_reply(ability, truth_value(ability, sample), options=sample.options)
    if ability.answer_kind == "box":
        x, y = rng.uniform(0, 0.5, 2)
        return format_reply(ability, [x, y, x + 0.3, y + 0.3])
    if ability.answer_kind == "integer":
        return str(int(rng.integers(1, 41)))
    opts = sample_options(ability, sample.options)
    return opts[int(rng.integers(len(opts)))]


def write_scored_run(
    data: Path,
    root: Path,
    head: str,
    vfm: str,
    right: float | None,
    *,
    seed: int = 0,
    abilities: tuple[str, ...] = REPORT_ABILITIES,
    extra: dict | None = None,
) -> Path:
    """A run directory as a head writes it: run.json, results_test.json, predictions_test.jsonl."""
    from ava.metrics.scoring import score_predictions, write_results

    dataset = Dataset(data)
    rng = np.random.default_rng(seed)
    predictions = {}
    for key in abilities:
        ability = get_ability(key)
        samples = dataset.samples(key, split="test")
        for s in samples:
            if right is None:
                predictions[s.key] = "I cannot tell."
            else:
                predictions[s.key] = _reply(ability, s, bool(rng.random() < right), rng)
    run = {
        "head": head,
        "vfm": vfm,
        "abilities": list(abilities),
        "random_weights": vfm == "mute",
        "llm": None,
        **(extra or {}),
    }
    out = root / f"{head}-{vfm}"
    out.mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({**run, "split": dataset.split_info}))
    report = score_predictions(
        dataset, predictions, abilities=list(abilities), split="test", run=run, config={"data": str(data)}
    )
    write_results(report, out, "test")
    return out


# -- report run directories written in the results schema (no scorer: the values are given) ---------------------------

RUN_METRICS = {  # ability: (metric, higher_is_better)
    "counting": ("mae_gt", False),
    "spatial": ("accuracy", True),
    "ocr": ("anls", True),
    "color": ("ciede2000", False),
}
# head -> vfm -> ability -> value
RUN_VALUES = {
    "knn": {
        "big": {"counting": 0.10, "spatial": 0.95, "ocr": 0.60, "color": 4.0},
        "small": {"counting": 0.30, "spatial": 0.80, "ocr": 0.60, "color": 9.0},
        "random": {"counting": 0.90, "spatial": 0.30, "ocr": 0.05, "color": 30.0},
    },
    "probe-linear": {
        "big": {"counting": 0.20, "spatial": 0.70, "ocr": 0.50, "color": 6.0},
        "small": {"counting": 0.15, "spatial": 0.90, "ocr": 0.40, "color": 6.0},
        "random": {"counting": 0.80, "spatial": 0.25, "ocr": 0.01, "color": 25.0},
    },
}
RUN_SAMPLES = 40


def sample_scores(metric: str, value: float, n: int = RUN_SAMPLES, seed: int = 0) -> list[float]:
    """``n`` per-sample scores whose mean is exactly ``value`` (0/1 for accuracy, spread around it otherwise)."""
    rng = np.random.default_rng(seed)
    if metric == "accuracy":
        k = round(value * n)
        scores = [1.0] * k + [0.0] * (n - k)
    else:
        z = np.linspace(-1, 1, n)
        scores = list(value * (1 + 0.5 * z))
    return [float(x) for x in rng.permutation(scores)]


def write_records(run: Path, abilities: dict[str, dict], *, n: int = RUN_SAMPLES, id_prefix: str = "s") -> list[dict]:
    """predictions_test.jsonl of ``run``: ``n`` records per ability whose scores' mean is its value."""
    records = []
    for ab, block in abilities.items():
        for i, score in enumerate(sample_scores(block["metric"], block["value"], n, seed=zlib.crc32(ab.encode()))):
            records.append(
                {
                    "id": f"{id_prefix}{i:02d}",
                    "ava": ab,
                    "split": "test",
                    "prediction": str(score),
                    "parsed": None,
                    "truth": {"k": i},
                    "score": score,
                    "ok": True,
                }
            )
    (run / "predictions_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def write_run(
    root: Path,
    head: str,
    vfm: str,
    values: dict[str, float],
    *,
    random_weights: bool = False,
    extra: dict | None = None,
    n: int = RUN_SAMPLES,
    id_prefix: str = "s",
    fingerprint: bool = True,
    records: bool = True,
) -> Path:
    """A run directory in the results schema with ``values`` per ability (RUN_METRICS' metrics): run.json,
    results_test.json and (``records``) predictions_test.jsonl with per-sample scores whose means are the values."""
    run = root / f"{head}-{vfm}"
    run.mkdir(parents=True)
    block = {
        "head": head,
        "vfm": vfm,
        "abilities": sorted(values),
        "random_weights": random_weights,
        "llm": None,
        "cache_key": f"key-{vfm}",
        **(extra or {}),
    }
    split = {"name": "test", "made_by": "synthetic", "test_frac": 0.2, "seed": 0}
    (run / "run.json").write_text(json.dumps({**block, "split": split}))
    abilities = {}
    for ab, value in values.items():
        metric, hib = RUN_METRICS[ab]
        abilities[ab] = {
            "metric": metric,
            "value": value,
            "higher_is_better": hib,
            "n": n,
            "n_unparsed": 0,
            "subgroups": {},
        }
    abilities["counting"]["subgroups"] = {
        "count_range": {
            "<=5": {"value": values["counting"] / 2, "n": 25},
            "6-10": {"value": values["counting"], "n": 15},
        }
    }
    abilities["ocr"]["subgroups"] = {"text_length": {"1-5": {"value": values["ocr"], "n": 40}}}
    abilities["ocr"]["n_unparsed"] = 3 if vfm == "random" else 0
    results = {
        "schema_version": 1,
        "ava_version": "0.1.0",
        "abilities": abilities,
        "split": split,
        "synthetic": True,
        "run": block,
        "config": {},
        "provenance": {},
    }
    recs = write_records(run, abilities, n=n, id_prefix=id_prefix) if records else []
    if fingerprint:
        from ava.metrics.sample_set import sample_set_block

        results["sample_set"] = sample_set_block(recs)
    (run / "results_test.json").write_text(json.dumps(results))
    return run


# -- the LLM head's fast paths: a tiny head, short prompts, varlen kernel stand-ins (SDPA on the CPU) -----------------

T, D = 5, 12  # the tiny LLM head's feature tokens and width
VARLEN_CALLS: list[dict] = []  # the arguments each varlen stand-in below was called with


def varlen_reference(q, k, v, cu, causal, scale):
    """Per-sample SDPA over [N, H, d] rows (K/V heads repeated to the query heads)."""
    parts = []
    bounds = cu.tolist()
    for a, b in zip(bounds, bounds[1:], strict=False):
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))
        if ks.shape[0] != qs.shape[0]:
            ks, vs = (t.repeat_interleave(qs.shape[0] // t.shape[0], 0) for t in (ks, vs))
        parts.append(
            torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale).transpose(0, 1)
        )
    return torch.cat(parts)


def varlen_2_10(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
    VARLEN_CALLS.append({"is_causal": is_causal})
    return varlen_reference(query, key, value, cu_seq_q, is_causal, None)


def varlen_2_11(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    VARLEN_CALLS.append({"scale": scale, "window_size": window_size})
    return varlen_reference(query, key, value, cu_seq_q, window_size == (-1, 0), scale)


def varlen_2_13(
    query,
    key,
    value,
    cu_seq_q,
    cu_seq_k,
    max_q,
    max_k,
    *,
    return_aux=None,
    scale=None,
    window_size=(-1, -1),
    enable_gqa=False,
    seqused_k=None,
    block_table=None,
    num_splits=None,
):
    VARLEN_CALLS.append({"scale": scale, "window_size": window_size, "enable_gqa": enable_gqa})
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise RuntimeError("grouped K/V heads need enable_gqa=True")
    return varlen_reference(query, key, value, cu_seq_q, window_size == (-1, 0), scale)


def varlen_no_groups(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    """A kernel that refuses grouped K/V heads as they are (the probe then repeats them)."""
    if key.shape[1] != query.shape[1]:
        raise RuntimeError("number of heads in key/value must equal the query's")
    return varlen_reference(query, key, value, cu_seq_q, window_size == (-1, 0), scale)


def varlen_wrong(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    """Runs, but attends across samples: the probe must not take it."""
    whole = torch.tensor([0, query.shape[0]], dtype=torch.int32)
    return varlen_reference(query, key, value, whole, window_size == (-1, 0), scale)


def tiny_llm_head(layers: int = 2, dtype: torch.dtype = torch.float32):
    """The LLM head (connector + LoRA) over a tiny random Qwen2 of ``layers`` layers (grouped K/V heads, SDPA)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ava.heads.llm.model import build_head

    torch.manual_seed(0)
    cfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=layers,
        vocab_size=300,
        attn_implementation="sdpa",
    )
    return build_head(Qwen2ForCausalLM(cfg).to(dtype), D, lora_r=8, seed=0)


def encoded_prompts() -> list:
    """Three encoded prompts of different lengths (prompt, question, answer token ids)."""
    from ava.heads.llm.prompt import Encoded

    return [
        Encoded([1, 2], [3, 4, 5, 6], [7, 8, 2]),
        Encoded([1, 2], [3, 9], [10, 2]),
        Encoded([1, 2], [3, 4, 5, 6, 11, 12, 13], [14, 15, 16, 2]),
    ]


def fit_tiny_head(head: Any, tmp_path: Path, name: str, *, epochs: int = 1, compile: bool = True) -> dict:
    """``epochs`` of ``head`` on :func:`encoded_prompts` over seeded fp16 features (its decoder layers compiled or
    not), into ``tmp_path/name``; returns fit's summary."""
    from ava.heads.llm.config import LLMHeadConfig
    from ava.heads.llm.data import IndexItems, LoopData
    from ava.heads.llm.devices import Dist

    tr = importlib.import_module("ava.heads.llm.train")
    feats = torch.randn(3, T, D, generator=torch.Generator().manual_seed(3)).half()
    data = LoopData(IndexItems(3), encoded_prompts(), T, 0, lambda b: feats.index_select(0, b["index"]))
    cfg = LLMHeadConfig(batch_size=1, epochs=epochs, progress=False, compile=compile)
    return tr.fit(
        head,
        data,
        cfg,
        tmp_path / name,
        dist=Dist(),
        device=torch.device("cpu"),
        dtype=torch.float32,
        epochs=epochs,
        lr=1e-3,
        batch_size=1,
    )


# -- planted payloads: checkpoint code and pickles that must never run ------------------------------------------------

_EVIL_CONFIG_PY = """
from transformers import ViTConfig

open({marker!r}, "a").write("config code ran\\n")


class EvilConfig(ViTConfig):
    model_type = "evil_vit"
"""
_EVIL_MODEL_PY = """
from transformers import ViTModel

from .configuration_evil import EvilConfig

open({marker!r}, "a").write("model code ran\\n")


class EvilModel(ViTModel):
    config_class = EvilConfig
"""


def plant(root: Path) -> Path:
    """A tiny ViT checkpoint whose config.json points at custom code that writes ``root/payload_ran``."""
    from transformers import ViTConfig, ViTModel

    marker = root / "payload_ran"
    ckpt = root / "ckpt"
    cfg = ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=16
    )
    ViTModel(cfg, add_pooling_layer=False).save_pretrained(ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config.update(
        model_type="evil_vit",
        architectures=["EvilModel"],
        auto_map={"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"},
    )
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "configuration_evil.py").write_text(_EVIL_CONFIG_PY.format(marker=str(marker)))
    (ckpt / "modeling_evil.py").write_text(_EVIL_MODEL_PY.format(marker=str(marker)))
    return ckpt


class _Payload:
    """Unpickling this writes a marker file: the proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "pwned"))


def plant_pickle(path: Path, marker: Path) -> None:
    """A pickle at ``path`` whose unpickling writes ``marker``."""
    import pickle

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"model": _Payload(marker)}))


# -- where the host waits for the GPU (CUDA's sync debug mode) ---------------------------------------------------------


@contextlib.contextmanager
def noted_waits(waits: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    """Within: every call that waits for the GPU (``torch.cuda.set_sync_debug_mode("warn")``) appended to ``waits``
    as (thread name, message); the mode and the warnings' display restored after."""
    shown = warnings.showwarning

    def note(message, category, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if "synchronizing" in str(message).lower():
            waits.append((threading.current_thread().name, str(message).splitlines()[0]))
            return None
        return shown(message, category, *args, **kwargs)

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = note
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield waits
        finally:
            torch.cuda.set_sync_debug_mode("default")


def waits_after_the_first(fn: Callable[..., Any], calls: list[str], waits: list[tuple[str, str]]) -> Callable[..., Any]:
    """``fn`` wrapped to note each call's thread in ``calls`` and, from the second call on (the first starts the
    kernels and the allocator), every wait for the GPU it makes in ``waits`` (:func:`noted_waits`)."""

    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        with noted_waits(waits) if calls else contextlib.nullcontext():
            try:
                return fn(*args, **kwargs)
            finally:
                calls.append(threading.current_thread().name)

    return wrapped


# -- run directories with chosen scores, for comparisons with published results (the paper's table, results
#    folders): per-sample scores that average exactly to each chosen value ------------------------------------------
PUBLISHED_N = 400  # samples per ability: accuracies are multiples of 1/400
AVA_SPLIT = {"name": "test", "made_by": "ava", "test_frac": 0.2, "seed": 0}
SYNTHETIC_SPLIT = {"name": "test", "made_by": "synthetic", "test_frac": 0.2, "seed": 0}


def published_scores(metric: str, value: float, n: int = PUBLISHED_N, seed: int = 0) -> list[float]:
    """``n`` per-sample scores whose mean is ``value`` (0/1 for accuracy, spread around it otherwise)."""
    rng = np.random.default_rng(seed)
    if metric == "accuracy":
        k = round(value * n)
        assert abs(k / n - value) < 1e-12, f"accuracy {value} is not a multiple of 1/{n}"
        out = [1.0] * k + [0.0] * (n - k)
    else:
        out = list(value * (1 + 0.5 * np.linspace(-1, 1, n)))
    return [float(x) for x in rng.permutation(out)]


def write_published_run(
    root: Path,
    vfm: str,
    values: dict[str, float],
    *,
    head: str = "llm",
    llm: str | None = "qwen2-0.5b",
    decode: str | None = "generate",
    split: dict[str, Any] | None = None,
    synthetic: bool = False,
    identity: str = "data-a",
    config: dict[str, Any] | None = None,
    n: int = PUBLISHED_N,
    name: str | None = None,
    random_weights: bool = False,
) -> Path:
    """A finished run of ``vfm`` under ``head`` with the given scores (ava's units). ``identity`` names the data it
    was trained and scored on: runs with the same identity share data digests and sample sets."""
    from ava.abilities import ABILITIES
    from ava.metrics.sample_set import sample_set_block

    run = root / (name or f"{head}-{vfm}")
    run.mkdir(parents=True)
    split = split or (SYNTHETIC_SPLIT if synthetic else AVA_SPLIT)
    block = {
        "head": head,
        "vfm": vfm,
        "abilities": list(values),
        "random_weights": random_weights,
        "vfm_random_weights": random_weights,
        "llm": llm if head == "llm" else None,
        "llm_random_weights": False,
        "dtype": "bfloat16",
        "init": None,
        "data_identity": {
            "dataset": f"/data/{identity}",
            "algorithm": "per ability: sha256 over the sorted JSON lines of its sample records",
            "per_ability": {ab: f"{identity}-{ab}" for ab in values},
        },
    }
    (run / "run.json").write_text(json.dumps({**block, "split": split}))
    abilities, records = {}, []
    for ab, value in values.items():
        a = ABILITIES.get(ab)
        abilities[ab] = {
            "metric": a.metric,
            "value": value,
            "higher_is_better": a.higher_is_better,
            "n": n,
            "n_unparsed": 0,
            "subgroups": {},
        }
        for i, s in enumerate(published_scores(a.metric, value, n, seed=zlib.crc32(f"{vfm}{ab}".encode()))):
            records.append({"id": f"{identity}-{i:04d}", "ava": ab, "split": "test", "truth": {"k": i}, "score": s})
    (run / "predictions_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    results = {
        "schema_version": 1,
        "ava_version": "0.1.0",
        "abilities": abilities,
        "split": split,
        "synthetic": synthetic,
        "run": block,
        "decode": decode if head == "llm" else None,
        "config": {"data": f"/data/{identity}", **(config or {})},
        "provenance": {"ava_version": "0.1.0"},
        "sample_set": sample_set_block(records),
    }
    (run / "results_test.json").write_text(json.dumps(results))
    return run


def main_streams(args: list[str], capsys: Any) -> tuple[int, str, str]:
    """``ava ARGS`` through the command's own main (its one-line errors): exit code, stdout, stderr (whitespace
    collapsed)."""
    import pytest

    from ava.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), " ".join(out.split()), " ".join(err.split())


# -- a local sweep's jobs: tiny processes that record what they were given, a described GPU machine, SLURM -------------
# Each job records, in one shared events file, when it starts and ends, the GPUs and CPU threads it was given
# (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, its CPU affinity), and waits for a known point (another job's start, a file
# the test writes) instead of sleeping. gpu_inventory writes the file AVA_GPU_INVENTORY points at, in the format of
# nvidia-smi --query-gpu=index,name,memory.total,memory.free,uuid --format=csv,noheader,nounits.

WAIT_S = 60.0  # how long a recording job waits for its known point before it fails (a barrier would make it wait)

RECORDER = """
import os, signal, sys, time
events, name, wait_for, hold, fail = sys.argv[1:6]
def mark(what):
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0)))) if hasattr(os, "sched_getaffinity") else "-"
    env = [os.environ.get(v, "-") for v in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")]
    more = [os.environ.get(v, "-") for v in ("AVA_PROGRESS_FILE", "LOCAL_RANK")]
    line = " ".join([what, name, *env, cpus, *more, str(os.getpid())])
    fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (line + "\\n").encode())
    os.close(fd)
mark("start")
print("job", name, "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
deadline = time.monotonic() + float(os.environ.get("WAIT_S", "60"))
def seen(line):
    try:
        return any(l.startswith(line + " ") for l in open(events).read().splitlines())
    except FileNotFoundError:
        return False
while wait_for != "-" and not seen(wait_for):
    if time.monotonic() > deadline:
        print("error: waited for", wait_for, "in vain"); sys.exit(3)
    time.sleep(0.01)
while hold != "-" and not os.path.exists(hold):
    if time.monotonic() > deadline:
        print("error: waited for", hold, "in vain"); sys.exit(3)
    time.sleep(0.01)
if fail == "SIGKILL":
    os.kill(os.getpid(), signal.SIGKILL)
if fail != "-":
    print("error:", fail); sys.exit(2)
mark("end")
"""


def recorder(events: Path, name: str, *, wait_for: str | None = None, hold: Path | None = None, fail: str = "") -> list:
    """A job command: record its start, wait for ``wait_for`` (an events line such as ``start train-b``) and for
    the file ``hold``, fail with ``error: FAIL`` when given (``SIGKILL``: be killed), else record its end. A script
    file (not ``-c``), so that torchrun can start it too."""
    script = events.parent / "recorder.py"
    if not script.is_file():
        script.write_text(RECORDER)
    args = [str(events), name, wait_for or "-", str(hold) if hold else "-", fail or "-"]
    return [sys.executable, str(script), *args]


def events(path: Path) -> list[dict[str, str]]:
    """The events file as rows: what (start/end), job, gpus, threads, cpus, progress file; in the order written."""
    if not path.is_file():
        return []
    keys = ("what", "job", "gpus", "threads", "cpus", "progress", "rank", "pid")
    return [dict(zip(keys, line.split(" "), strict=False)) for line in path.read_text().splitlines() if line]


def when(rows: list[dict[str, str]], what: str, job: str) -> int:
    """The position of an event (its order among all events)."""
    return next(i for i, r in enumerate(rows) if r["what"] == what and r["job"] == job)


def gpu_inventory(
    path: Path, free_gb: list[float], total_gb: float = 80.0, name: str = "NVIDIA H100 80GB HBM3"
) -> Path:
    """A machine of ``len(free_gb)`` GPUs as ``nvidia-smi`` lists them (memory in MiB)."""
    lines = [
        f"{i}, {name}, {int(total_gb * 1024)}, {int(free * 1024)}, GPU-{i:08d}-fake-uuid"
        for i, free in enumerate(free_gb)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_for_line(path: Path, text: str, timeout: float = WAIT_S) -> str:
    """Wait until ``path`` holds a line containing ``text`` (a known point another process reaches); its content."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace") if path.is_file() else ""
        if any(text in line for line in content.splitlines()):
            return content
        time.sleep(0.02)
    raise AssertionError(f"{path} never said {text!r}; it says:\n" + (path.read_text() if path.is_file() else ""))


def pid_gone(pid: int, timeout: float = WAIT_S) -> None:
    """Wait until process ``pid`` has ended (a zombie its new parent has not reaped yet has ended)."""
    from ava.sweep.child import alive

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still runs")


def slurm_up() -> bool:
    """Whether a SLURM cluster answers here (``bash .ci/slurm-up.sh`` starts a one-node one)."""
    import shutil
    import subprocess

    if shutil.which("sinfo") is None:
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and bool(out.stdout.strip())
