"""Stage 1 of the GPU run (``benchmarks/gpu.sh run``, <= 30 s on an H100 after imports): what the machine is and
which fast paths the LLM head takes there, before anything long runs.

- the device, the date, and the versions of torch, transformers, peft, zarr... (``bench_cache.environment``);
- PyTorch's varlen attention probed the way training probes it (``ava.heads.llm.packing.varlen_status``: called as the
  installed signature allows, checked against SDPA), then called once at the LLM head's real shapes (16 samples x
  850 tokens packed, 14 query / 2 K/V heads of 64: Qwen2-0.5B), forward and backward, timed;
- one real-size Qwen2-0.5B decoder layer (random weights) with LoRA r 128 on its 7 linears and the mlp2x_gelu
  connector from SigLIP's 1152 features, trained 3 optimizer steps on packed batches through the training loop
  itself (``ava.heads.llm.train.fit``: compiled layers, falling back to eager if the layer fails to compile, no
  checkpoint): which attention ran, whether the layer compiled, the first step (compilation) and the later ones;
- the tests marked ``gpu`` (skipped where there is no CUDA device, so CI never runs them: the device decoder's stream,
  pinned staging, the pinned chunked copy, the host never waiting for the GPU in an extraction's batches, the LLM
  head's and the probes' steps, the LLM head's evaluation, FOCI's heads, the training callback), in a pytest of their
  own, before the decoder layer, which runs only if ``LAYER_S`` are left.

    python benchmarks/gpu_preflight.py --device cuda --json OUT/preflight.json
    python benchmarks/gpu_preflight.py --dry-run --json OUT/preflight.json      # this CPU, small shapes
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

STARTED = time.perf_counter()  # the stage's start, its imports included (gpu.sh's limit counts them)
LAYER_S = 15  # what the decoder layer needs (13.2 s on an H200)

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # bench_cache's environment()

import results  # noqa: E402

REAL = dict(
    hidden=896,
    intermediate=4864,
    heads=14,
    kv_heads=2,
    vocab=151_936,
    vfm_dim=1152,
    image_tokens=729,
    text_tokens=121,
    samples=16,
    lora_r=128,
)
SMALL = dict(
    hidden=64,
    intermediate=128,
    heads=4,
    kv_heads=2,
    vocab=300,
    vfm_dim=48,
    image_tokens=49,
    text_tokens=21,
    samples=16,
    lora_r=8,
)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def varlen_call(device: torch.device, shapes: dict[str, int]) -> dict[str, Any]:
    """The varlen probe's verdict, and one forward + backward at the head's packed shapes where it runs."""
    from ava.heads.llm import packing

    status = packing.varlen_status(device, torch.bfloat16)
    if not status["varlen"]:
        return status
    way = packing.varlen_for(device, torch.bfloat16)
    seq = shapes["image_tokens"] + shapes["text_tokens"]
    n, d = shapes["samples"] * seq, shapes["hidden"] // shapes["heads"]
    q = torch.randn(n, shapes["heads"], d, device=device, dtype=torch.bfloat16, requires_grad=True)
    k, v = (
        torch.randn(n, shapes["kv_heads"], d, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(2)
    )
    cu = torch.arange(0, n + 1, seq, device=device, dtype=torch.int32)
    times = []
    for _ in range(3):  # the first call includes the kernel's setup
        _sync(device)
        t0 = time.perf_counter()
        way(q, k, v, cu, seq, d**-0.5).float().sum().backward()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return {
        **status,
        "tokens": n,
        "fwd_bwd_ms_first": round(1e3 * times[0], 2),
        "fwd_bwd_ms": round(1e3 * min(times[1:]), 2),
    }


def layer_steps(device: torch.device, shapes: dict[str, int], dtype: str, compile_: bool) -> dict[str, Any]:
    """3 optimizer steps of one decoder layer + LoRA + connector on packed batches, through ``fit``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ava.heads.llm.config import LLMHeadConfig
    from ava.heads.llm.data import IndexItems, LoopData
    from ava.heads.llm.devices import Dist, resolve_dtype
    from ava.heads.llm.model import build_head
    from ava.heads.llm.prompt import Encoded
    from ava.heads.llm.train import fit

    torch.manual_seed(0)
    cfg = Qwen2Config(
        hidden_size=shapes["hidden"],
        intermediate_size=shapes["intermediate"],
        num_attention_heads=shapes["heads"],
        num_key_value_heads=shapes["kv_heads"],
        num_hidden_layers=1,
        vocab_size=shapes["vocab"],
        attn_implementation="sdpa",
    )
    amp = resolve_dtype(dtype, device)
    llm = Qwen2ForCausalLM(cfg).to(device, torch.bfloat16 if amp == torch.bfloat16 else torch.float32)
    head = build_head(llm, shapes["vfm_dim"], lora_r=shapes["lora_r"], lora_alpha=2 * shapes["lora_r"], seed=0).to(
        device
    )
    head.connector.float()
    n, text = 3 * shapes["samples"], shapes["text_tokens"]
    encoded = [Encoded(list(range(1, 30)), list(range(30, 30 + text - 32)), [5, 6, 2]) for _ in range(n)]
    feats = torch.randn(n, shapes["image_tokens"], shapes["vfm_dim"], device=device, dtype=torch.float16)
    data = LoopData(IndexItems(n), encoded, shapes["image_tokens"], 0, lambda b: feats.index_select(0, b["index"]))
    loop = LLMHeadConfig(batch_size=shapes["samples"], epochs=1, progress=False, compile=compile_, pack=True)
    with tempfile.TemporaryDirectory() as tmp:
        summary = fit(
            head,
            data,
            loop,
            Path(tmp),
            dist=Dist(),
            device=device,
            dtype=amp,
            epochs=1,
            lr=1e-4,
            batch_size=shapes["samples"],
            checkpoints=False,
        )
        log = [json.loads(line) for line in (Path(tmp) / "train_log.jsonl").read_text().splitlines()]
    # per-step seconds from the log's cumulative rates (samples / samples_per_s = seconds since the loop began)
    ends = [rec["step"] * shapes["samples"] / rec["samples_per_s"] for rec in log if rec["samples_per_s"]]
    steps = [b - a for a, b in zip([0.0, *ends], ends, strict=False)]
    return {
        "attention": summary["attention"],
        "compiled": summary["compiled"],
        "steps": summary["step"],
        "tokens_per_sample": shapes["image_tokens"] + text,
        "first_step_s": round(steps[0], 3) if steps else None,
        "later_step_s": round(min(steps[1:]), 4) if len(steps) > 1 else None,
        "final_loss": summary["final_loss"],
    }


GPU_MARK = "@pytest.mark.gpu"  # in a test file: it holds tests that only a GPU runs


def gpu_tests(seconds: float) -> dict[str, Any]:
    """``pytest -m gpu`` over the test files that mark tests ``gpu``, within ``seconds``: its counts, the tests that
    did not pass, and the end of its output."""
    import os
    import re
    import subprocess

    root = Path(__file__).resolve().parents[1]
    files = sorted(str(f.relative_to(root)) for f in (root / "tests").glob("test_*.py") if GPU_MARK in f.read_text())
    if seconds < 10:
        return {"error": f"skipped: {seconds:.0f} s left", "files": files}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-q",
        "-rfEs",
        "--strict-markers",
        "--durations=40",
        "--durations-min=0.5",
        *files,
    ]
    try:
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # (the image's plugins: startup, nothing used)
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=seconds, env=env)
        text, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:  # (its output is bytes, whatever ``text`` says)
        said = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (e.stdout, e.stderr) if x)
        text, rc = f"{said}\n(timed out after {seconds:.0f} s)", None
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", text)}
    lines = [ln for ln in text.splitlines() if ln.startswith(("FAILED", "ERROR", "SKIPPED"))]
    # each test's seconds (its setup, fixtures included, and its call), to fit the stage's time to them
    timed = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S+)")
    durations = [[float(m[1]), m[2], m[3]] for ln in text.splitlines() if (m := timed.match(ln))]
    tail = [ln for ln in text.strip().splitlines() if not timed.match(ln)][-8:]
    return {"files": files, "exit": rc, **counts, "not_passed": lines[:12], "durations": durations, "tail": tail}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="this CPU at small shapes (the same code paths)")
    ap.add_argument("--compile", choices=("on", "off"), default="on")
    results.json_option(ap, required=True)
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the stage from its start: the gpu tests get what the varlen part leaves (at "
        "most 120 s), the decoder layer what they leave if that is LAYER_S or more",
    )
    args = ap.parse_args()
    from bench_cache import environment

    device = torch.device("cpu" if args.dry_run else args.device)
    shapes = SMALL if args.dry_run else REAL
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "environment": environment(str(device)),
        "shapes": "small (dry run)" if args.dry_run else "real (SigLIP-so400m features, Qwen2-0.5B layer)",
    }

    # the gpu tests before the decoder layer: the layer's steps are timed again, whole, by the llm stage
    def left() -> float:
        return float("inf") if args.budget is None else args.budget - (time.perf_counter() - STARTED)

    def layer() -> dict[str, Any]:  # (the llm stage times the whole model: this layer is the part to give up)
        if left() < LAYER_S:
            return {"error": f"skipped: {left():.0f} s left after the gpu tests (the llm stage times the model)"}
        return layer_steps(device, shapes, "auto", args.compile == "on")

    stages = {
        "varlen": lambda: varlen_call(device, shapes),
        "gpu_tests": lambda: gpu_tests(min(left() - 3, 120.0)),
        "decoder_layer": layer,
    }
    for name, stage in stages.items():
        t = time.perf_counter()
        try:
            out[name] = stage()
        except Exception as e:  # noqa: BLE001 - a preflight reports what failed and goes on
            out[name] = {"error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"}
        out[name]["seconds"] = round(time.perf_counter() - t, 2)
        print(name, json.dumps(out[name]), flush=True)
        out["seconds"] = round(time.perf_counter() - t0, 2)
        if path := results.json_file(args.json):  # after each stage: a stage cut off keeps the others
            path.write_text(json.dumps(out, indent=2) + "\n")
    if results.json_file(args.json) is None:
        results.write(args.json, "gpu_preflight", figures(out), [out], None, device=str(device))


def figures(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The varlen attention call, the GPU tests and the decoder layer's step."""
    found = []
    v = out.get("varlen") or {}
    if "fwd_bwd_ms" in v:
        found.append(
            results.figure(f"varlen attention, {v['tokens']} packed tokens, forward + backward", v["fwd_bwd_ms"], "ms")
        )
    t = out.get("gpu_tests") or {}
    if "passed" in t:
        ran = t.get("passed", 0) + t.get("failed", 0)
        found.append(results.figure("tests marked gpu", t["passed"], f"of {ran} passed", target="all pass"))
    layer = out.get("decoder_layer") or {}
    if layer.get("later_step_s") is not None:
        found.append(
            results.figure(
                "one Qwen2-0.5B decoder layer + LoRA r 128, a later step",
                round(1e3 * layer["later_step_s"], 1),
                "ms",
                note=f"{layer['attention']} attention, compiled {layer['compiled']}",
            )
        )
    return found


if __name__ == "__main__":
    main()
