"""The LLM head's compiled decoder layers: one graph serves every layer, and what compiling made is kept under
$AVA_HOME/compile and loaded by the next run (ava.heads.llm.compiled)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ava.heads.llm import compiled
from tests.helpers import REPO, fit_tiny_head, tiny_llm_head


@pytest.mark.slow  # Dynamo's first trace in a process costs seconds
@pytest.mark.parametrize("layers", [2, 5])
def test_every_decoder_layer_runs_one_compiled_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: int
) -> None:
    """Compiling costs one layer's graph (forward and backward), whatever the depth: the layers are the same code
    with other weights, and Dynamo reuses the graph across them (no recompilation per layer). Nothing else is
    compiled (no probe of the toolchain), and the layer is traced once: Dynamo does not start its analysis over
    (it did, in every run, when the layers' Python floats were first made graph inputs)."""
    import logging

    from torch._dynamo.utils import counters

    tr = importlib.import_module("ava.heads.llm.train")
    monkeypatch.setattr(tr, "COMPILE_BACKEND", "aot_eager")  # AOT autograd's graphs, without inductor's codegen
    monkeypatch.setenv("AVA_HOME", str(tmp_path / "home"))
    torch._dynamo.reset()
    counters.clear()
    restarts: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "Restarting analysis" in record.getMessage():
                restarts.append(record.getMessage())

    dynamo_log = logging.getLogger("torch._dynamo.convert_frame")
    handler, level = Seen(), dynamo_log.level
    dynamo_log.addHandler(handler)
    dynamo_log.setLevel(logging.INFO)
    try:
        summary = fit_tiny_head(tiny_llm_head(layers), tmp_path, "run")
    finally:
        dynamo_log.removeHandler(handler)
        dynamo_log.setLevel(level)
    assert summary["compiled"] is True and summary["done"]
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert restarts == []
    assert summary["compile_cache"] in ("none", "saved")  # the aot_eager backend makes nothing to keep


def test_artifacts_are_named_by_what_they_depend_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AVA_HOME", str(tmp_path))
    cpu = torch.device("cpu")
    a = compiled.artifacts_path(tiny_llm_head(2), cpu, torch.float32, "sdpa-per-sample")
    assert a == compiled.artifacts_path(tiny_llm_head(2), cpu, torch.float32, "sdpa-per-sample")
    assert a.parent == tmp_path / "compile" and a.name.startswith(torch.__version__.replace("+", "_"))
    others = {
        compiled.artifacts_path(tiny_llm_head(3), cpu, torch.float32, "sdpa-per-sample"),
        compiled.artifacts_path(tiny_llm_head(2), cpu, torch.bfloat16, "sdpa-per-sample"),
        compiled.artifacts_path(tiny_llm_head(2), cpu, torch.float32, "varlen"),
    }
    assert len(others) == 3 and a not in others


def test_loading_says_what_it_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "artifacts.bin"
    assert compiled.load(path) == ("none" if compiled.available() else "off")
    if compiled.available():
        path.write_bytes(b"not artifacts")
        assert compiled.load(path) == "unreadable"  # compiled from scratch then, and saved anew
    monkeypatch.delattr(torch.compiler, "load_cache_artifacts", raising=False)
    assert compiled.load(path) == "off" and not compiled.save(path)


CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {repo!r})
    import torch
    torch.set_num_threads(1)
    from tests.helpers import fit_tiny_head, tiny_llm_head
    from pathlib import Path
    t = time.perf_counter()
    summary = fit_tiny_head(tiny_llm_head(2), Path(sys.argv[1]), "run")
    print("RESULT " + json.dumps({{"compile_cache": summary["compile_cache"], "loss": summary["final_loss"],
                                   "seconds": time.perf_counter() - t}}))
""")


@pytest.mark.slow
@pytest.mark.skipif(not compiled.available(), reason="this torch cannot save compile artifacts")
def test_a_second_run_on_a_fresh_machine_loads_what_the_first_compiled(tmp_path: Path) -> None:
    """Two processes, each with an empty inductor cache (as on a new node): the first compiles with inductor and
    saves the artifacts under $AVA_HOME, the second loads them, and trains to the same loss."""
    results = []
    for i in range(2):
        env = {**os.environ, "AVA_HOME": str(tmp_path / "home"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"ind{i}")}
        done = subprocess.run(
            [sys.executable, "-c", CHILD.format(repo=str(REPO)), str(tmp_path / f"run{i}")],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results.append(json.loads(done.stdout.split("RESULT ", 1)[1]))
    first, second = results
    assert first["compile_cache"] == "saved" and second["compile_cache"] == "loaded", results
    assert list((tmp_path / "home" / "compile").glob("*.bin"))
    assert second["loss"] == pytest.approx(first["loss"], rel=1e-6)
