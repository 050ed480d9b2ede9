"""Shared CLI options: --threads and its default, numeric validation at parse time, list options, help text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ava import threads as th
from ava.cli.main import app
from ava.cli.params import split_list
from tests.helpers import Cli

runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})


# -- threads ---------------------------------------------------------------------------------------------------
def _v2(root: Path, rel: str, cpu_max: str, parent_max: str | None = None) -> Path:
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    here = root / rel.lstrip("/")
    here.mkdir(parents=True, exist_ok=True)
    (here / "cpu.max").write_text(cpu_max + "\n")
    if parent_max is not None:
        (here.parent / "cpu.max").write_text(parent_max + "\n")
    proc = root.parent / "proc_cgroup"
    proc.write_text(f"0::{rel}\n")
    return proc


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    proc = _v2(root, "/box/job", "150000 100000")
    assert th.cgroup_cpu_quota(root, proc) == 1.5
    proc = _v2(root, "/box/job", "max 100000", parent_max="100000 100000")  # the parent's quota binds
    assert th.cgroup_cpu_quota(root, proc) == 1.0


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "cpu" / "job").mkdir(parents=True)
    (root / "cpu" / "job" / "cpu.cfs_quota_us").write_text("250000\n")
    (root / "cpu" / "job" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("4:memory:/x\n3:cpu,cpuacct:/job\n")
    assert th.cgroup_cpu_quota(root, proc) == 2.5
    (root / "cpu" / "job" / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert th.cgroup_cpu_quota(root, proc) is None


def test_usable_cpus_is_affinity_capped_by_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(th, "_affinity_cpus", lambda: 8)
    root = tmp_path / "cg"
    proc = _v2(root, "/job", "250000 100000")
    assert th.usable_cpus(root, proc) == 3  # 2.5 CPUs of quota: 3 threads
    assert th.usable_cpus(tmp_path / "none", tmp_path / "none") == 8


def test_idle_cpus_from_proc_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    samples = iter(["cpu 100 0 100 800 0 0 0 0 0 0\n", "cpu 150 0 150 900 0 0 0 0 0 0\n"])
    monkeypatch.setattr(th.os, "cpu_count", lambda: 2)
    monkeypatch.setattr("time.sleep", lambda s: stat.write_text(next(samples)))
    stat.write_text(next(samples))
    assert th.idle_cpus(proc_stat=stat) == pytest.approx(1.0)  # 100 idle of 200 jiffies on 2 CPUs


def test_default_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(th, "usable_cpus", lambda *a: 4)
    monkeypatch.setattr(th, "idle_cpus", lambda *a, **k: None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert th.default_threads() == 4
    monkeypatch.setattr(th, "idle_cpus", lambda *a, **k: 1.2)  # three CPUs busy with other work
    assert th.default_threads() == 1
    assert th.default_threads(busy_aware=False) == 4
    monkeypatch.setattr(th, "idle_cpus", lambda *a, **k: None)
    assert th.default_threads(num_workers=3) == 1
    assert th.default_threads(num_workers=9) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert th.default_threads(num_workers=3) == 3  # the user's setting wins
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert th.default_threads() == 4


def test_apply_threads_sets_torch_and_provenance_records_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from ava.provenance import provenance

    before = torch.get_num_threads()
    try:
        chosen = th.apply_threads(1)
        assert chosen["threads"] == 1 and torch.get_num_threads() == 1
        assert provenance()["threads"]["intra_op"] == 1
    finally:
        torch.set_num_threads(before)


# -- lists -----------------------------------------------------------------------------------------------------
def test_split_list() -> None:
    assert split_list(["counting,color", " spatial "]) == ["counting", "color", "spatial"]
    assert split_list([]) is None and split_list(None) is None


# -- numeric options refused at parse time, naming the option -------------------------------------------------
HEAD = ["head", "train", "--vfm", "pixels", "--data", "nowhere", "--cache", "nowhere", "--out", "nowhere"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (HEAD + ["--epochs", "-3"], "--epochs"),
        (HEAD + ["--epochs", "0"], "--epochs"),
        (HEAD + ["--lr", "-1"], "--lr"),
        (HEAD + ["--lr", "nan"], "--lr"),
        (HEAD + ["--lr", "inf"], "--lr"),
        (HEAD + ["--batch-size", "0"], "--batch-size"),
        (HEAD + ["--max-train", "-5"], "--max-train"),
        (HEAD + ["--num-workers", "-1"], "--num-workers"),
        (HEAD + ["--head", "knn", "--k", "0"], "--k"),
        (HEAD + ["--head", "knn", "--k", "1,x"], "--k"),
        (HEAD + ["--head", "knn", "--pools", "grid999"], "--pools"),
        (HEAD + ["--head", "knn", "--pools", "mean,max"], "--pools"),
        (HEAD + ["--threads", "0"], "--threads"),
        (["cache", "extract", "--vfm", "pixels", "--data", "x", "--cache", "y", "--batch-size", "-2"], "--batch-size"),
        (["cache", "extract", "--vfm", "pixels", "--data", "x", "--cache", "y", "--shard-size", "0"], "--shard-size"),
        (["demo", "--per-ava", "0"], "--per-ava"),
        (["head", "align", "--epochs", "-2"], "--epochs"),
        (["cache", "extract", "--vfm", "hf:/nowhere#size=0", "--data", "x", "--cache", "y"], "--vfm"),
        (["head", "train", "--vfm", "hf:/nowhere#prefix=-1", "--data", "x", "--cache", "y", "--out", "z"], "--vfm"),
        (["data", "split", "--data", "x", "--test-frac", "1.5"], "--test-frac"),
        (["data", "info", "x", "--data", "y"], "--data"),
    ],
)
def test_bad_numbers_refused_at_parse_time(args: list[str], option: str, tmp_path: Path) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"'{option}'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("head", "option"), [("knn", "--epochs"), ("knn", "--lr"), ("probe-attn", "--pools"), ("llm", "--k")]
)
def test_options_a_head_does_not_use_are_refused(head: str, option: str) -> None:
    result = runner.invoke(app, HEAD + ["--head", head, option, "mean" if option == "--pools" else "3"])
    assert result.exit_code != 0
    assert option in str(result.exception or result.output)


def test_eval_refuses_llm_options_for_other_heads(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"head": "knn"}')
    result = runner.invoke(app, ["head", "eval", "--run", str(tmp_path), "--decode", "score"])
    assert result.exit_code != 0 and "--decode" in str(result.exception)
    result = runner.invoke(app, ["head", "eval", "--run", str(tmp_path), "--decode", "bogus"])
    assert result.exit_code != 0 and "bogus" in str(result.exception)


def test_missing_required_named_before_work(tmp_path: Path) -> None:
    result = runner.invoke(app, ["head", "train", "--head", "knn", "--data", "x", "--cache", "y", "--out", "z"])
    assert result.exit_code != 0
    assert "--vfm" in str(result.exception)
    assert "no features" not in str(result.exception)


def test_config_file_values_checked(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    for body, fragment in (('epochs = "ten"', "epochs = 'ten'"), ("lr = -1.0", "lr"), ('pools = ["grid999"]', "pools")):
        cfg.write_text(body + "\n")
        result = runner.invoke(app, HEAD + ["--head", "probe-linear", "--config", str(cfg)])
        assert result.exit_code != 0
        message = str(result.exception)
        assert str(cfg) in message and fragment in message, message


# -- help ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["head", "train"], ["data", "split"], ["cache", "info"], ["report"], []])
def test_help_has_no_bool_metavar_or_brace_usage(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert "<bool>" not in result.output
    usage = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert not re.search(r"\{\w+\}", usage), usage


def test_head_train_help_groups_options_per_head() -> None:
    out = runner.invoke(app, ["head", "train", "--help"]).output
    for panel in ("LLM head", "kNN head", "Resources"):
        assert panel in out
    assert "--threads" in out


def test_score_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    pred = tmp_path / "predictions_test.jsonl"
    pred.write_text("")
    result = runner.invoke(app, ["score", "--data", str(tmp_path), "--pred", str(pred)])
    assert result.exit_code != 0 and "would be overwritten" in str(result.exception)
    assert pred.read_text() == ""


@pytest.mark.parametrize(
    ("doc", "help_text"),
    [
        ("One sentence cut\n    in two by the docstring.", "One sentence cut in two by the docstring."),
        (
            "First.\n\n    Second paragraph,\n    two lines.\n    Example: ava x --y\n    z",
            "First.\n\nSecond paragraph, two lines.\n\nExample: ava x --y z",
        ),
        ("Items:\n- one\n- two", "Items:\n\n- one\n\n- two"),
    ],
)
def test_help_text_is_whole_sentences(doc: str, help_text: str) -> None:
    from ava.cli.params import whole_sentences

    assert whole_sentences(doc) == help_text


def test_no_command_help_breaks_a_sentence(cli: Cli) -> None:
    import typer.main

    from ava.cli.main import app
    from ava.cli.params import rewrap_help

    def walk(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    for path, command in walk(rewrap_help(typer.main.get_command(app)), ["ava"]):
        for paragraph in (command.help or "").split("\n\n"):
            assert "\n" not in paragraph, f"{' '.join(path)}: {paragraph!r}"
    code, output = cli(["--help"])  # COLUMNS=1000: one row per command
    row = next(line for line in output.splitlines() if "│ fingerprint" in line)
    assert "each ability's features read once and shared by the three heads" in row, row
