"""Cache-integrity bad inputs, one table row each, through the real CLI entry point (as in
``tests/test_bad_inputs.py``): a damaged feature cache (a deleted, empty, truncated or padded shard, a shard whose
index lists no chunk for a row, a flipped byte, a garbage done chunk, a deleted zarr.json, a cache that is a file)
met by ``ava fingerprint``, ``ava cache verify``/``info``/``ls`` or ``ava cache extract``; and a full disk while a
kNN index or probe weights are written. Each gives one line naming the file or array (and rows) and what to do,
never a traceback, never scores computed from fill values.

Then the repair route end to end (``verify --repair`` + ``extract`` gives back the undamaged cache byte for byte),
a fingerprint resumed after a full disk (same predictions as an undisturbed one), and a real full disk on a tmpfs
(skipped where it cannot be mounted).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import Cli, run_cli, small_filesystem

SHARD = 16  # rows per shard of the cache below: rows 16-31 (shard 1) are counting images


Clean = tuple[Path, Path, str]  # (data, cache, group key) of the undamaged cache
Setup = Callable[[Path, Clean, pytest.MonkeyPatch], list[str]]  # plants the input under tmp, returns the command


@dataclass
class Case:
    id: str
    setup: Setup
    code: int
    fragments: tuple[str, ...]
    check: Callable[[Path], None] | None = None


# -- a small real cache ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Clean:
    """(data, cache, group key): the synthetic colour and counting sets (40 each), extracted with `pixels` in shards
    of 16 rows; the counting images are rows 0-39."""
    from ava.cache import ExtractConfig, extract, open_cache
    from ava.data.format import Dataset
    from ava.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("cache27")
    data, cache = root / "data", root / "cache"
    generate(SynthConfig(out=str(data), per_ava=40, ava=["color", "counting"], size=224, seed=0), progress=False)
    extract(
        ExtractConfig(
            vfm="pixels", data=str(data), cache=str(cache), layers=(-1,), device="cpu", progress=False, shard_size=SHARD
        )
    )
    group = open_cache(cache, "pixels").group
    index = group.index()
    assert sorted(index[s.image_sha256] for s in Dataset(data).samples("counting")) == list(range(40))
    return data, cache, group.key


def _copy(clean: Clean, tmp: Path) -> tuple[Path, Path, Path]:
    """(data, cache copy, its group folder)."""
    shutil.copytree(clean[1], tmp / "cache")
    return clean[0], tmp / "cache", tmp / "cache" / clean[2]


def shard_file(group: Path, array: str, shard: int) -> Path:
    tail = "/0/0" if array.startswith("features/") else ("/0" if array.startswith("pooled/") else "")
    return group / array / f"c/{shard}{tail}"


def views(group: Path) -> list[str]:
    return sorted(p.name for p in (group / "pooled" / "-1").iterdir() if p.is_dir())


def flip_byte(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))


def drop_chunk_from_index(path: Path, chunk: int) -> None:
    """Mark one chunk of a shard 'not stored' in its index (with a valid CRC): the shard reads that row as zeros."""
    import google_crc32c

    raw = bytearray(path.read_bytes())
    n = 16 * SHARD + 4
    entries = np.frombuffer(bytes(raw[-n:-4]), dtype="<u8").copy().reshape(-1, 2)
    entries[chunk] = 2**64 - 1
    body = entries.tobytes()
    raw[-n:] = body + np.uint32(google_crc32c.value(body)).tobytes()
    path.write_bytes(bytes(raw))


def fingerprint(data: Path, cache: Path, tmp: Path, head: str, ava: str = "counting") -> list[str]:
    return [
        "fingerprint",
        "--vfm",
        "pixels",
        "--data",
        str(data),
        "--cache",
        str(cache),
        "--out",
        str(tmp / "runs"),
        "--head",
        head,
        "--ava",
        ava,
        "--device",
        "cpu",
        "-q",
    ]


def nothing_scored(tmp: Path) -> None:
    found = list((tmp / "runs").rglob("results_*.json")) if (tmp / "runs").exists() else []
    assert not found, f"scores were written from a damaged cache: {found}"


# -- damaged caches -------------------------------------------------------------------------------------------------
def pooled_shard_deleted() -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        data, cache, group = _copy(clean, tmp)
        for view in views(group):
            shard_file(group, f"pooled/-1/{view}", 1).unlink()
        return fingerprint(data, cache, tmp, "knn")

    return setup


def view_flipped() -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        data, cache, group = _copy(clean, tmp)
        for view in views(group):
            flip_byte(shard_file(group, f"pooled/-1/{view}", 1), 40)
        return fingerprint(data, cache, tmp, "knn")

    return setup


def token_shard(damage: Callable[[Path], None], head: str = "probe-attn") -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        data, cache, group = _copy(clean, tmp)
        damage(shard_file(group, "features/-1", 1))
        return fingerprint(data, cache, tmp, head)

    return setup


def truncate_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def pad(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0" * 100)


def done_garbage(command: str) -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        data, cache, group = _copy(clean, tmp)
        shard_file(group, "done", 0).write_bytes(b"\x00garbage\xff" * 3)
        return fingerprint(data, cache, tmp, "knn") if command == "fingerprint" else ["cache", "ls", str(cache)]

    return setup


def metadata_deleted(which: str, command: str = "fingerprint") -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        data, cache, group = _copy(clean, tmp)
        (cache / which.replace("GROUP", clean[2]) / "zarr.json").unlink()
        return (
            fingerprint(data, cache, tmp, "probe-attn")
            if command == "fingerprint"
            else ["cache", command, str(cache), "-q"]
        )

    return setup


def cache_is_a_file() -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        (tmp / "cache").write_text("not a cache")
        return fingerprint(clean[0], tmp / "cache", tmp, "knn")

    return setup


def verify_after(array: str, damage: Callable[[Path], None], command: str = "verify") -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        _, cache, group = _copy(clean, tmp)
        damage(shard_file(group, array, 1))
        return ["cache", command, str(cache), "-q"] if command == "verify" else ["cache", command, str(cache)]

    return setup


def extract_keeping_missing_rows() -> Setup:
    """A token shard deleted while its rows stay done, and one row of it marked not done: extract recomputes that
    row and must keep the others, which are not on disk (rewriting them would store zeros as done rows)."""

    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        import zarr

        data, cache, group = _copy(clean, tmp)
        shard_file(group, "features/-1", 1).unlink()
        zarr.open_array(str(group / "done"), mode="r+")[20] = False
        return [
            "cache",
            "extract",
            "--vfm",
            "pixels",
            "--data",
            str(data),
            "--cache",
            str(cache),
            "--layers",
            "-1",
            "--device",
            "cpu",
            "--shard-size",
            str(SHARD),
            "-q",
        ]

    return setup


# -- a full disk while run files are written --------------------------------------------------------------------------
class _FullFile:
    """A file on a disk that fills up: half of what is written lands, then ENOSPC (as write(2) does)."""

    def __init__(self, f: object) -> None:
        self.f = f

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()  # type: ignore[attr-defined]

    def write(self, data: bytes) -> int:
        view = memoryview(data).cast("B")
        self.f.write(view[: len(view) // 2])  # type: ignore[attr-defined]
        self.f.flush()  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def full_disk_for(mp: pytest.MonkeyPatch, fragment: str) -> None:
    """Writes through ``os.fdopen`` (``atomic_write_bytes``'s) to files whose name holds ``fragment`` fail with
    ENOSPC, half-way through."""
    real_open, real_fdopen = os.open, os.fdopen
    paths: dict[int, str] = {}

    def opened(path: object, *args: object, **kwargs: object) -> int:
        fd = real_open(path, *args, **kwargs)  # type: ignore[arg-type]
        paths[fd] = os.fspath(path)  # type: ignore[arg-type]
        return fd

    def fdopen(fd: int, *args: object, **kwargs: object) -> object:
        f = real_fdopen(fd, *args, **kwargs)  # type: ignore[arg-type]
        if fragment in Path(paths.get(fd, "")).name:
            return _FullFile(f)
        return f

    mp.setattr(os, "open", opened)
    mp.setattr(os, "fdopen", fdopen)


def no_partial_files(run: str, suffix: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        folder = tmp / "runs" / run
        assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")], "a temporary was left"
        assert not [p for p in folder.rglob(f"*{suffix}")], f"a partial {suffix} was left"

    return check


def disk_full(head: str, fragment: str) -> Setup:
    def setup(tmp: Path, clean: Clean, mp: pytest.MonkeyPatch) -> list[str]:
        full_disk_for(mp, fragment)
        return fingerprint(clean[0], clean[1], tmp, head)

    return setup


MARKED = "row(s) 16-31 are marked done but have no usable data"
REPAIR = "`ava cache verify --repair {tmp}/cache`, then `ava cache extract --vfm pixels"
CASES = [
    Case(
        "fingerprint-pooled-shard-deleted",
        pooled_shard_deleted(),
        2,
        ("array pooled/-1/", MARKED, "file c/1/0 is missing", REPAIR),
        nothing_scored,
    ),
    Case(
        "fingerprint-token-shard-deleted",
        token_shard(Path.unlink),
        2,
        ("array features/-1", MARKED, "file c/1/0/0 is missing", REPAIR),
        nothing_scored,
    ),
    Case(
        "fingerprint-token-shard-empty",
        token_shard(lambda p: p.write_bytes(b"")),
        2,
        ("array features/-1", MARKED, "file c/1/0/0 is truncated (0 bytes)", REPAIR),
        nothing_scored,
    ),
    Case(
        "fingerprint-token-shard-truncated",
        token_shard(truncate_half),
        2,
        ("array features/-1", MARKED, "fails its checksum (truncated or overwritten)", REPAIR),
        nothing_scored,
    ),
    Case(
        "fingerprint-token-shard-wrong-size",
        token_shard(pad),
        2,
        ("array features/-1", MARKED, "fails its checksum", REPAIR),
        nothing_scored,
    ),
    Case(
        "fingerprint-done-without-data",
        token_shard(lambda p: drop_chunk_from_index(p, 4)),
        2,
        (
            "array features/-1",
            "row(s) 20 are marked done but have no usable data",
            "its index lists no chunk for row(s) 20",
            REPAIR,
        ),
        nothing_scored,
    ),
    Case(
        "fingerprint-flipped-byte",
        token_shard(lambda p: flip_byte(p, 40)),
        2,
        ("array features/-1", "row(s) 16 cannot be read, the data is damaged", "checksum", REPAIR),
        nothing_scored,
    ),
    Case(
        "fingerprint-flipped-byte-view",
        view_flipped(),
        2,
        ("array pooled/-1/", "row(s) 16-31 cannot be read, the data is damaged", "checksum", REPAIR),
        nothing_scored,
    ),
    Case(
        "fingerprint-done-garbage",
        done_garbage("fingerprint"),
        2,
        ("array done", "row(s) 0-15 cannot be read, the data is damaged", REPAIR),
        nothing_scored,
    ),
    Case("ls-done-garbage", done_garbage("ls"), 2, ("array done", "row(s) 0-15 cannot be read", REPAIR)),
    Case(
        "array-zarr-json-deleted",
        metadata_deleted("GROUP/features/-1"),
        2,
        ("features/-1: cache array is missing (no zarr.json)", "extract again"),
        nothing_scored,
    ),
    Case(
        "group-zarr-json-deleted",
        metadata_deleted("GROUP"),
        2,
        (
            "no features of vfm 'pixels' (groups: none); folder(s) {key} of",
            "hold a cache group whose zarr.json is missing: `ava cache extract` of its VFM rebuilds it",
        ),
        nothing_scored,
    ),
    Case(
        "verify-group-zarr-json-deleted",
        metadata_deleted("GROUP", "verify"),
        1,
        ("{key}: folder of a cache group without its zarr.json",),
    ),
    Case("root-zarr-json-deleted", metadata_deleted("."), 2, ("holds no feature cache",), nothing_scored),
    Case("cache-is-a-file", cache_is_a_file(), 2, ("cache holds no feature cache",), nothing_scored),
    Case(
        "verify-pooled-shard-deleted",
        verify_after("pooled/-1/mean", Path.unlink),
        1,
        (
            "array pooled/-1/mean: shard 1 (rows 16-31) cannot be read: file c/1/0 is missing, though row(s) 16-31 "
            "are marked done",
        ),
    ),
    Case(
        "verify-token-shard-deleted",
        verify_after("features/-1", Path.unlink),
        1,
        (
            "array features/-1: shard 1 (rows 16-31) cannot be read: file c/1/0/0 is missing, though row(s) 16-31 "
            "are marked done",
        ),
    ),
    Case(
        "verify-token-shard-empty",
        verify_after("features/-1", lambda p: p.write_bytes(b"")),
        1,
        ("array features/-1: shard 1 (rows 16-31) cannot be read: file c/1/0/0 is truncated (0 bytes)",),
    ),
    Case(
        "verify-done-without-data",
        verify_after("features/-1", lambda p: drop_chunk_from_index(p, 4)),
        1,
        ("array features/-1: shard 1 (rows 16-31): its index lists no chunk for row(s) 20",),
    ),
    Case(
        "info-token-shard-deleted",
        verify_after("features/-1", Path.unlink, "info"),
        2,
        ("array features/-1", MARKED, REPAIR),
    ),
    Case(
        "extract-keeps-missing-rows",
        extract_keeping_missing_rows(),
        2,
        ("array features/-1", "row(s) 16-19, 21-31 are marked done but have no usable data", REPAIR),
    ),
    Case(
        "disk-full-knn-index",
        disk_full("knn", ".faiss"),
        2,
        ("knn-pixels/knn/counting.faiss: no space left on device (ENOSPC)", "run the same command again"),
        no_partial_files("knn-pixels", ".faiss"),
    ),
    Case(
        "disk-full-probe-weights",
        disk_full("probe-linear", "probe.safetensors"),
        2,
        ("probe-linear-pixels/probe.safetensors: no space left on device (ENOSPC)",),
        no_partial_files("probe-linear-pixels", "probe.safetensors"),
    ),
    Case(
        "disk-full-ability-record",
        disk_full("probe-linear", "counting.safetensors"),
        2,
        ("abilities/counting.safetensors: no space left on device (ENOSPC)",),
        no_partial_files("probe-linear-pixels", "counting.safetensors"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_cache_input(case: Case, clean: Clean, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    args = case.setup(tmp_path, clean, monkeypatch)
    code, output = cli(args)
    monkeypatch.undo()  # the full-disk stand-ins end with the command
    assert code == case.code, f"exit {code}, expected {case.code}: {output}"
    for fragment in case.fragments:
        fragment = fragment.replace("{tmp}", str(tmp_path)).replace("{key}", clean[2])
        assert fragment in output, f"{fragment!r} not in: {output}"
    assert "Traceback" not in output and "internal error" not in output and "Task was destroyed" not in output
    if case.code == 2:  # one line: the error (verify's report lists one line per problem, checked above)
        assert output.strip().count("\n") == 0, output
    if case.check is not None:
        case.check(tmp_path)


# -- the repair route, end to end ---------------------------------------------------------------------------------
def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def test_verify_repair_then_extract_gives_the_undamaged_cache_back(
    clean: Clean,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Every kind of damage at once; verify names each with its rows, --repair marks exactly those rows, and extract
    recomputes only them: every file of the group is then byte-identical to the undamaged cache's."""
    data, cache, group = _copy(clean, tmp_path)
    for view in views(group):
        shard_file(group, f"pooled/-1/{view}", 0).unlink()  # rows 0-15
    shard_file(group, "features/-1", 1).unlink()  # rows 16-31
    shard_file(group, "features/-1", 2).write_bytes(b"")  # rows 32-47
    drop_chunk_from_index(shard_file(group, "features/-1", 3), 2)  # row 50
    flip_byte(shard_file(group, "features/-1", 4), 40)  # row 64
    code, output = cli(["cache", "verify", str(cache), "-q", "--repair"])
    assert code == 1
    for line in (
        "array pooled/-1/mean: shard 0 (rows 0-15) cannot be read: file c/0/0 is missing",
        "array features/-1: shard 1 (rows 16-31) cannot be read: file c/1/0/0 is missing",
        "array features/-1: shard 2 (rows 32-47) cannot be read: file c/2/0/0 is truncated (0 bytes)",
        "array features/-1: shard 3 (rows 48-63): its index lists no chunk for row(s) 50",
        "array features/-1: row(s) 64 fail their checksum",
        "50 row(s) marked for re-extraction",
    ):
        assert line in " ".join(output.split()), f"{line!r} not in: {output}"
    code, output = cli(
        [
            "cache",
            "extract",
            "--vfm",
            "pixels",
            "--data",
            str(data),
            "--cache",
            str(cache),
            "--layers",
            "-1",
            "--device",
            "cpu",
            "--shard-size",
            str(SHARD),
            "-q",
        ]
    )
    assert code == 0 and "50 extracted" in output, output
    assert cli(["cache", "verify", str(cache), "-q"])[0] == 0
    assert _files(cache) == _files(clean[1])


def test_reads_list_each_array_once(clean: Clean, monkeypatch: pytest.MonkeyPatch) -> None:
    """The existence check costs one walk of an array's folder per process, not a stat per chunk per read."""
    import ava.cache.chunks as chunks
    from ava.cache import open_cache

    walks: list[Path] = []
    real = chunks._walk
    monkeypatch.setattr(chunks, "_walk", lambda folder: walks.append(folder) or real(folder))
    cache = open_cache(clean[1], "pixels")
    shas = cache.group.rows()
    for start in range(0, 80, 8):
        cache.read(shas[start : start + 8])
        cache.read_view(shas[start : start + 8], None, "mean")
    assert sorted(p.relative_to(cache.group.path).as_posix() for p in walks) == ["features/-1", "pooled/-1/mean"]


# -- a full disk: nothing already written is lost, and a re-run completes identically ------------------------------
def _predictions(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.rglob("predictions_*.jsonl"))}


@pytest.mark.slow
def test_fingerprint_resumes_after_a_full_disk(
    clean: Clean,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cli: Cli,
) -> None:
    data, cache = clean[0], clean[1]
    args = [
        "fingerprint",
        "--vfm",
        "pixels",
        "--data",
        str(data),
        "--cache",
        str(cache),
        "--head",
        "knn",
        "--head",
        "probe-linear",
        "--ava",
        "color,counting",
        "--device",
        "cpu",
        "-q",
        "--jobs",
        "1",
    ]
    assert cli([*args, "--out", str(tmp_path / "ref")])[0] == 0
    with monkeypatch.context() as mp:
        full_disk_for(mp, "counting.faiss")  # colour is recorded, then the disk fills
        code, output = run_cli([*args, "--out", str(tmp_path / "runs")], capsys, mp)
    assert code == 2 and "knn-pixels/knn/counting.faiss: no space left on device" in output, output
    record = tmp_path / "runs" / "knn-pixels" / "abilities" / "color.json"
    kept = record.read_bytes()
    code, output = cli([*args, "--out", str(tmp_path / "runs")])
    assert code == 0, output
    assert record.read_bytes() == kept  # the colour record was kept, not redone
    for head in ("knn-pixels", "probe-linear-pixels"):
        assert _predictions(tmp_path / "runs" / head) == _predictions(tmp_path / "ref" / head)
    ref_index = tmp_path / "ref" / "knn-pixels" / "knn"
    assert _files(tmp_path / "runs" / "knn-pixels" / "knn") == _files(ref_index)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Path:
    """A 64 KiB tmpfs (needs root or CAP_SYS_ADMIN: skipped elsewhere), unmounted at the end."""
    with small_filesystem(tmp_path / "tiny", 64 * 1024) as mount:
        yield mount


def test_a_real_full_disk_is_named_and_a_rerun_writes_the_same_bytes(tiny_disk: Path, tmp_path: Path) -> None:
    import torch

    from ava.heads.ability_runs import save_tensors
    from ava.heads.knn.train import _write_index
    from ava.heads.rundir import DiskFullError

    x = np.random.default_rng(0).random((1000, 64), dtype=np.float32)  # a 256 kB index
    weights = {"w": torch.arange(100_000, dtype=torch.float32)}  # 400 kB
    with pytest.raises(DiskFullError, match=r"tiny/knn/color\.faiss: no space left on device \(ENOSPC\)"):
        _write_index(tiny_disk, "color", x)
    with pytest.raises(DiskFullError, match=r"tiny/probe\.safetensors: no space left on device \(ENOSPC\)"):
        save_tensors(tiny_disk / "probe.safetensors", weights)
    assert [p for p in tiny_disk.rglob("*") if p.is_file()] == []  # no partial file, no temporary
    subprocess.run(["mount", "-o", "remount,size=2m", str(tiny_disk)], check=True)  # space frees
    _write_index(tiny_disk, "color", x)
    save_tensors(tiny_disk / "probe.safetensors", weights)
    _write_index(tmp_path / "ref", "color", x)
    save_tensors(tmp_path / "ref" / "probe.safetensors", weights)
    assert _files(tiny_disk) == _files(tmp_path / "ref")
