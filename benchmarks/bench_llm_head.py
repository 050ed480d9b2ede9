"""LLM-head training speed: cached features vs the VFM run online on every batch, same model and data, one run.

Both paths go through the real training code (``ava.heads.llm.train.fit``): the cached path gathers fp16 patch
features resident in memory (on the GPU when they fit); the online path decodes each JPEG in ``--num-workers``
DataLoader workers, preprocesses it with the VFM's own ``preprocess`` and runs the frozen VFM in the loop (the paper
release's way). Each path first runs ``--warmup`` optimizer steps (compilation, kernels, allocator), then a second
``fit`` call times ``--steps`` steps from a fresh optimizer; neither call writes a checkpoint (``checkpoints=False``),
so the timed window holds optimizer steps only, and its rates are read after the loop's last device sync.

MFU: model FLOPs per second over (a) the device's dense bf16 peak from its datasheet (H100 SXM 989 TFLOP/s, PCIe 756,
H200 989, A100 312; none for other devices) and (b) the *measured* dense matmul rate at the same dtype (a square
matmul timed here). Model FLOPs per token: LLM forward 2 N (N = frozen block weights; the vocab-wide output layer
only at supervised positions) + attention 4 L s d, times 2 for training (the forward and the backward pass to the
activations; the frozen base weights get no weight gradients) + LoRA's 6 P_lora (forward, activation and weight
gradients of its A/B matrices: r 128 on 7 linears is ~20% of Qwen2-0.5B's block weights), + the connector's 6 P per
image token; the online path adds the VFM forward (2 N_vfm per patch token + attention). Each row records which
paths ran: ``attention`` (varlen, sdpa-per-sample, sdpa-padded), ``compiled`` (true, false, fell-back) and where the
cached features were held.

    python benchmarks/bench_llm_head.py                                  # CPU: random-vit + tiny-random-qwen2
    python benchmarks/bench_llm_head.py --device cuda                    # real sizes, random weights, bf16:
        # SigLIP-so400m (729 x 1152) + Qwen2-0.5B shapes, LoRA r 128, global batch 16
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))  # bench_cache's environment(), budget

import kernel_profile  # noqa: E402
import results  # noqa: E402
from budget import Budget  # noqa: E402
from llm_graph_replay import BUCKETED_STEPS, GRAPH_REPS, bucketed_graphs, error_line, graph_replay  # noqa: E402

from ava.abilities import REL_DEPTH_ANSWERS, format_options, get_ability
from ava.cache import ExtractConfig, extract
from ava.data.format import DatasetWriter, Sample
from ava.heads.llm.config import LLMHeadConfig

PRESETS = {
    "cpu": dict(
        vfm="random-vit",
        llm="tiny-random-qwen2",
        samples=48,
        batch_size=8,
        steps=4,
        warmup=1,
        lora_r=128,
        dtype="fp32",
        num_workers=0,
        profile_steps=0,
    ),
    "cuda": dict(
        vfm="siglip:random",
        llm="random-qwen2-0.5b",
        samples=384,
        batch_size=16,
        steps=30,
        warmup=4,
        lora_r=128,
        dtype="bf16",
        num_workers=8,
        profile_steps=4,
    ),
}


def make_data(root: Path, n: int, seed: int = 0) -> Path:
    """``n`` rel_depth-style samples with photo-sized JPEGs (decoding is part of the online path's cost)."""
    rng = np.random.default_rng(seed)
    template = get_ability("rel_depth").question_templates[0]
    with DatasetWriter(root, {"source": "bench", "split": {"made_by": "synthetic"}}) as w:
        for i in range(n):
            small = rng.integers(0, 256, size=(30, 40, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(small).resize((640, 480), Image.BILINEAR).save(buf, format="JPEG", quality=90)
            rel = w.add_image_bytes(buf.getvalue(), "jpg")
            q = template.format(a=f"object {i % 7}", b="chair", options=format_options(REL_DEPTH_ANSWERS))
            ans = REL_DEPTH_ANSWERS[i % 2]
            w.add_sample(
                Sample(f"b{i}", "rel_depth", rel, 640, 480, q, ans, {"index": i % 2, "text": ans}, split="train")
            )
    return root


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int) -> float:
    """Measured FLOP/s of a square matmul at ``dtype`` (the MFU denominator)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    reps, start = 10 if device.type == "cuda" else 3, time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _block_params(module: torch.nn.Module, skip: tuple[str, ...], lora: bool = False) -> int:
    """Weights of the linears in ``module`` (names containing ``skip`` left out): the frozen ones, or LoRA's."""
    return sum(
        m.weight.numel()
        for n, m in module.named_modules()
        if isinstance(m, torch.nn.Linear) and not any(s in n for s in skip) and ("lora_" in n) == lora
    )


PEAK_BF16 = (("H100 PCIe", 756e12), ("H100", 989.4e12), ("H200", 989.4e12), ("A100", 312e12))  # dense, datasheets


def datasheet_peak(device: torch.device) -> float | None:
    """The dense bf16 peak of a known GPU (FLOP/s), or None."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16 if key in name), None)


def flops_per_sample(head: Any, seq: float, sup: float, img: int, vfm: Any | None) -> float:
    """Training FLOPs of one sample of mean length ``seq`` with ``sup`` supervised and ``img`` image tokens."""
    cfg = head.base.config
    n_llm = _block_params(head.base.get_decoder(), ())
    d, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    fwd = 2 * n_llm * seq + 4 * layers * seq * seq * d + 2 * vocab * d * sup
    n_lora = _block_params(head.base.get_decoder(), (), lora=True)
    conn = sum(p.numel() for p in head.connector.parameters())
    total = 2 * fwd + 6 * n_lora * seq + 6 * conn * img
    if vfm is not None:
        n_vfm = _block_params(vfm, ())
        vcfg = vfm.model.config if hasattr(vfm, "model") else None
        vl = getattr(vcfg, "num_hidden_layers", 0)
        vd = getattr(vcfg, "hidden_size", 0)
        total += 2 * n_vfm * img + 4 * vl * img * img * vd
    return float(total)


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def compile_phases() -> dict[str, float]:
    """Seconds spent so far in this process by each of torch.compile's timed phases (``torch._dynamo.utils.
    compile_times``: Dynamo's trace, AOT autograd, inductor's lowering, the wait for its kernels' compilation...; the
    phases nest, so they do not add up). Empty where this torch does not say."""
    try:
        from torch._dynamo.utils import compile_times

        names, values = compile_times(repr="csv", aggregate=True)
        return {n: float(v) for n, v in zip(names, values, strict=True)}
    except Exception:  # noqa: BLE001 - a torch without it, or with another format: nothing to say
        return {}


def phases_between(before: dict[str, float], after: dict[str, float], top: int = 12) -> dict[str, float]:
    """The ``top`` phases by the seconds they took between two :func:`compile_phases` snapshots."""
    spent = {n: after[n] - before.get(n, 0.0) for n in after}
    return {n: round(v, 2) for n, v in sorted(spent.items(), key=lambda kv: -kv[1])[:top] if v >= 0.01}


MIN_STEPS = 10  # timed steps a path runs however short its share (fewer only if --steps says so): the steady rate
# needs 8 (4 past the probe fit)


def run_path(
    mode: str,
    args: argparse.Namespace,
    data: Path,
    cache: Path,
    work: Path,
    deadline: float = float("inf"),
    profile_until: float | None = None,
) -> dict[str, Any]:
    """Warm-up steps, then the timed steps: ``--steps``, or as many as fit before ``deadline`` (``time.monotonic``),
    judged from two probe fits timed first (2 and 4 steps: their difference is two steps' time, without a fit's
    start: its DataLoader's workers and first batches, which cut the H200's cached window to 7 steps when one
    2-step probe was the measure). With the probes, the row also has the steady rate: the timed window less the
    4-step probe, over the steps between (``steady_samples_per_s``; ``fit_start_s`` is what a fit's start cost)."""
    from ava.heads.llm.runtime import prepare_training
    from ava.heads.llm.train import fit, resolve_dtype

    device = torch.device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    cfg = LLMHeadConfig(
        ava=["rel_depth"],
        vfm=args.vfm,
        data=str(data),
        cache=str(cache),
        out=str(work / f"run_{mode}"),
        llm=args.llm,
        features=mode,
        batch_size=args.batch_size,
        lora_r=args.lora_r,
        epochs=1000,
        device=args.device,
        dtype=args.dtype,
        num_workers=args.num_workers if mode == "online" else args.cache_workers,
        progress=False,
        gradient_checkpointing=args.gradient_checkpointing,
        stop_after_steps=args.warmup,
    )
    cfg.compile = {"on": True, "off": False}.get(args.compile)  # auto: on with CUDA
    cfg.pack = {"on": True, "off": False}.get(args.pack)  # auto: on
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # peak memory per mode
    prep = prepare_training(cfg, device=device, dtype=dtype)
    kw = dict(
        dist=_single(),
        device=device,
        dtype=dtype,
        epochs=cfg.epochs,
        lr=1e-4,
        batch_size=args.batch_size,
        checkpoints=False,
    )
    t_warm, phases = time.monotonic(), compile_phases()
    warm = fit(prep.head, prep.loop, cfg, Path(cfg.out), **kw)  # compiles; no checkpoint
    warm_wall = time.monotonic() - t_warm
    phases = phases_between(phases, compile_phases())
    steps = args.steps
    probes: list[dict[str, Any]] = []
    plan: dict[str, Any] = {}
    if deadline != float("inf"):  # as many timed steps as the part's time allows (MIN_STEPS at least)
        for n in (2, 4):
            cfg.stop_after_steps = n
            _sync(device)
            probes.append(fit(prep.head, prep.loop, cfg, Path(cfg.out), **kw))
        t2, t4 = (p["seconds"] for p in probes)
        per_step = (t4 - t2) / 2 if t4 > t2 else t4 / 4
        start_s = max(0.0, t2 - 2 * per_step)  # a fit's start: what every fit call pays once
        reserve = 10 + 3 * per_step * args.profile_steps if mode == "cache" and args.profile_steps else 0.0
        if mode == "cache" and args.graph_replay:  # its launched and replayed steps, warm-ups and captures
            reserve += 20 + per_step * (3 * GRAPH_REPS + 4 + BUCKETED_STEPS + 16)
        left = deadline - time.monotonic() - reserve - start_s
        steps = max(min(MIN_STEPS, args.steps), min(args.steps, int(0.85 * left / max(per_step, 1e-6))))
        # how the window was sized (a window of a few steps gives no steady rate)
        plan = {
            "probe_s": [round(t2, 3), round(t4, 3)],
            "per_step_s": round(per_step, 4),
            "start_s": round(start_s, 3),
            "reserve_s": round(reserve, 1),
            "left_s": round(left, 1),
        }
    cfg.stop_after_steps = steps
    _sync(device)
    summary = fit(prep.head, prep.loop, cfg, Path(cfg.out), **kw)  # the timed steps (from step 0 again)
    done = summary["step"] - summary["resumed_from_step"]
    steady: dict[str, Any] = {}
    if probes and done >= 8 and summary["seconds"] > probes[1]["seconds"]:
        per = (summary["seconds"] - probes[1]["seconds"]) / (done - 4)
        per_sample_step = summary["samples_per_s"] * summary["seconds"] / done  # samples a step
        steady = {
            "steady_samples_per_s": per_sample_step / per,
            "steady_s_per_step": per,
            "fit_start_s": max(0.0, summary["seconds"] - done * per),
        }
        waits = [x.get("data_wait_s") for x in (summary, probes[1])]
        if None not in waits:  # the data wait of the steps between, over their time (a fit's first batch left out)
            steady["steady_data_wait_share"] = max(0.0, waits[0] - waits[1]) / (per * (done - 4))
    profile = None
    if mode == "cache" and args.profile_steps:  # what the device ran, for the MFU figure's path
        per_step = summary["seconds"] / max(1, summary["step"] - summary["resumed_from_step"])
        # the profile may run past the part's deadline, into the next part's time (``profile_until``): it is what
        # chooses the MFU work, and a compile warm-up as long as the H200's (88 s) would leave the part none
        until = max(deadline, profile_until or deadline)
        if until - time.monotonic() > 5 + 3 * per_step * args.profile_steps:
            cfg.stop_after_steps = args.profile_steps

            def profiled_fit() -> int:
                done = fit(prep.head, prep.loop, cfg, Path(cfg.out), **kw)
                return int(done["step"] - done["resumed_from_step"])

            profile = kernel_profile.profile_steps(profiled_fit, device)
        else:
            profile = {"error": f"skipped: {until - time.monotonic():.0f} s of the part left"}
    graphs: dict[str, Any] = {}  # the CUDA-graph parts (llm_graph_replay)
    if mode == "cache" and args.graph_replay:  # after the profile: a failed capture must not cost the profile
        until = max(deadline, profile_until or deadline)
        for key, part, kwargs in (
            ("graph_replay", graph_replay, {}),
            ("bucketed_graphs", bucketed_graphs, {"placement": prep.run.get("features_placement")}),
        ):
            try:
                graphs[key] = part(prep.head, prep.loop, args.batch_size, device, dtype, until, **kwargs)
            except Exception as e:  # noqa: BLE001 - the part reports what stopped it; the next parts still run
                graphs[key] = {"error": error_line(e)}
    lengths = [e.length(prep.loop.num_image_tokens) for e in prep.loop.encoded]
    sup = float(np.mean([len(e.answer) for e in prep.loop.encoded]))
    vfm = getattr(prep.loop.featurize, "vfm", None)
    fps = flops_per_sample(prep.head, float(np.mean(lengths)), sup, prep.loop.num_image_tokens, vfm)
    return {
        "mode": mode,
        "samples_per_s": summary["samples_per_s"],
        "tokens_per_s": summary["tokens_per_s"],
        "steps": done,
        "seconds": summary["seconds"],
        **({"window_plan": plan} if plan else {}),
        **steady,
        "data_wait_s": summary.get("data_wait_s"),
        "packed": summary.get("packed"),
        "flops_per_sample": fps,
        "mean_seq_len": float(np.mean(lengths)),
        "compiled": warm.get("compiled") if warm.get("compiled") == "fell-back" else summary.get("compiled"),
        "attention": summary.get("attention"),
        "features_placement": prep.run.get("features_placement"),
        "warmup_s": warm.get("seconds"),
        "warmup_wall_s": round(warm_wall, 2),  # the warm-up fit call whole (compilation included)
        "compile_cache": warm.get("compile_cache"),
        "warmup_compile_phases_s": phases,  # where the warm-up's compilation went (nested phases: no sum)
        # the warm-up fit call's seconds before its first step and after its last (wall = these + warmup_s)
        "warmup_setup_s": _rounded(warm.get("setup_s")),
        "warmup_teardown_s": _rounded(warm.get("teardown_s")),
        "timed_window_checkpoints": 0,
        "num_workers": cfg.num_workers,
        "peak_mem_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
        **({"profile": profile} if profile is not None else {}),
        **graphs,
    }


def _single() -> Any:
    from ava.heads.llm.train import Dist

    return Dist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    for key in ("vfm", "llm", "dtype"):
        p.add_argument(f"--{key}")
    for key in ("samples", "batch_size", "steps", "warmup", "lora_r"):
        p.add_argument(f"--{key.replace('_', '-')}", type=int)
    p.add_argument(
        "--num-workers",
        type=int,
        help="the online path's DataLoader workers (they decode the images); preset: 8 on CUDA",
    )
    p.add_argument(
        "--cache-workers",
        type=int,
        default=LLMHeadConfig.num_workers,
        help="the cached path's DataLoader workers (default: the head's own default, %(default)s: what "
        "`ava head train` runs)",
    )
    p.add_argument(
        "--no-graph-replay",
        dest="graph_replay",
        action="store_false",
        help="skip the cached path's two CUDA-graph parts (one batch's forward + backward launched "
        "against replayed; training from graphs over length buckets: llm_graph_replay.py)",
    )
    p.add_argument(
        "--profile-steps",
        type=int,
        help="the cached path: this many more steps under torch.profiler, "
        "summarized (kernels per step, device busy, time by kernel kind, top kernels); preset: 4 on CUDA, "
        "0 on a CPU",
    )
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile the decoder layers")
    p.add_argument("--pack", choices=("auto", "on", "off"), default="auto", help="packed sequences (no padding)")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    results.json_option(p)
    p.add_argument("--modes", default="cache,online", help="the feature paths to time, in order (cache, online)")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole run: each path its share (timed steps fitted to it), the JSON written after each",
    )
    p.add_argument(
        "--warm-start",
        action="store_true",
        help="also the warm-up of a second run in a fresh process with empty inductor/Triton caches "
        "(what compiling made is loaded from $AVA_HOME, see ava.heads.llm.compiled)",
    )
    p.add_argument("--warm-start-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--proxies-only", action="store_true", help="only the CPU proxies at real shapes")
    p.add_argument("--no-proxies", action="store_true", help="skip the CPU proxies")
    p.add_argument("--data-path-only", action="store_true", help="proxies: only the host data path")
    p.add_argument(
        "--compiled-bytes",
        action="store_true",
        help="proxies: also eager vs torch.compile non-matmul bytes of one real-size decoder layer "
        "(inductor's counter; compiles on the CPU: minutes)",
    )
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.no_proxies:
        proxies(args)
    if args.proxies_only:
        return
    preset = PRESETS["cuda" if args.device.startswith("cuda") else "cpu"]
    for k, v in preset.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    budget = Budget(args.budget)
    rate = float("nan")
    runs = []
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_llm_"))
    try:
        data = work / "data"
        if args.warm_start_child:  # the parent's data and cache, as they are
            pass
        else:
            make_data(data, args.samples)
        extract(
            ExtractConfig(
                vfm=args.vfm,
                data=str(data),
                cache=str(work / "cache"),
                device=args.device,
                codec="fp16",
                dtype="fp32" if args.dtype == "fp32" else "bf16",
                progress=False,
                batch_size=args.batch_size,
            )
        )
        if args.warm_start_child:  # (the --warm-start part's fresh process: its warm-up is the figure)
            r = run_path(
                args.modes.split(",")[0], argparse.Namespace(**{**vars(args), "steps": 1}), data, work / "cache", work
            )
            print(
                "WARM "
                + json.dumps(
                    {
                        k: r[k]
                        for k in (
                            "warmup_s",
                            "warmup_wall_s",
                            "compile_cache",
                            "compiled",
                            "warmup_compile_phases_s",
                            "warmup_setup_s",
                            "warmup_teardown_s",
                        )
                    }
                )
            )
            return
        mm_dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
        rate = matmul_rate(device, mm_dtype, 8192 if device.type == "cuda" else 1024)
        peak = datasheet_peak(device) if args.dtype == "bf16" else None
        runs: list[dict[str, Any]] = []
        modes = args.modes.split(",")
        # each part's weight in what is left: the warm start (a fresh process) half a part; the cached path one and a
        # half with its CUDA-graph parts (what chooses the MFU work), the online path one
        weights = [1.5 if m == "cache" and args.graph_replay else 1.0 for m in modes]
        parts = sum(weights) + (0.5 if args.warm_start else 0)
        for mode, weight in zip(modes, weights, strict=True):
            # the cached path's profile and graph parts may take up to half the next part's share
            until = budget.deadline(min(1.0, (weight + 0.5) / parts)) if mode == "cache" else None
            runs.append(run_path(mode, args, data, work / "cache", work, budget.deadline(weight / parts), until))
            parts -= weight
            r = runs[-1]
            r["mfu"] = r["flops_per_sample"] * r["samples_per_s"] / rate
            r["mfu_of_datasheet_peak"] = r["flops_per_sample"] * r["samples_per_s"] / peak if peak else None
            if "steady_samples_per_s" in r:
                r["steady_mfu"] = r["flops_per_sample"] * r["steady_samples_per_s"] / rate
            print(json.dumps(r), flush=True)  # as it ends: a stage cut off later keeps this line
            report(args, runs, rate, quiet=True)  # the JSON so far
        if args.warm_start:
            runs.append(warm_start(args, data, work, budget))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        if not args.warm_start_child:
            shutil.rmtree(work, ignore_errors=True)
    report(args, runs, rate)


def warm_start(args: argparse.Namespace, data: Path, work: Path, budget: Budget) -> dict[str, Any]:
    """The warm-up of a second run as on a fresh machine: a new process with empty inductor and Triton caches (as a
    new node's /tmp), the same ``$AVA_HOME``, where the first run left what it compiled (ava.heads.llm.compiled)."""
    import os
    import subprocess

    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-2"),
        "TRITON_CACHE_DIR": str(work / "triton-2"),
    }
    argv = [
        sys.executable,
        __file__,
        "--warm-start-child",
        "--work",
        str(work),
        "--no-proxies",
        "--device",
        args.device,
        "--modes",
        args.modes.split(",")[0],
        "--compile",
        args.compile,
        "--pack",
        args.pack,
        "--profile-steps",
        "0",
        "--no-graph-replay",
    ]
    for key in ("vfm", "llm", "dtype", "samples", "batch_size", "warmup", "lora_r", "num_workers"):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    try:
        left = budget.left()  # (no --budget: no limit)
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=max(5.0, left) if left != float("inf") else None
        )
    except subprocess.TimeoutExpired:
        return {"mode": "warm start", "error": f"not done in the {budget.left():.0f} s left"}
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WARM ")), None)
    if line is None:
        return {"mode": "warm start", "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return {"mode": "warm start", **json.loads(line[5:])}


def proxies(args: argparse.Namespace) -> dict[str, Any]:
    """The CPU proxies at real shapes (see ``benchmarks/llm_proxies.py``), printed as one table row."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import llm_proxies

    work = Path(tempfile.mkdtemp(prefix="bench_llm_proxies_"))
    try:
        r = llm_proxies.run(work, data_only=args.data_path_only)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"CPU proxies at real shapes ({platform.processor() or platform.machine()}, torch threads "
        f"{torch.get_num_threads()}, {dt.date.today()}): SigLIP-so400m 729x1152 fp16 cache, Qwen2-0.5B "
        f"architecture (random weights), LoRA r 128 x 7 linears, {r.get('dtype', '-')} autocast, "
        f"{r.get('tokens_per_sample', 0):.0f} tokens/sample"
    )
    print(
        "| host data path ms / 16-sample step (wall) | (CPU time) | one-time resident read s (64 samples) | "
        "features | non-matmul MB / token / layer (fwd+bwd) | host syncs / step |"
    )
    print("|---:|---:|---:|---|---:|---:|")
    bytes_, syncs = r.get("nonmatmul_mb_per_token_per_layer"), r.get("syncs_per_step", "-")
    print(
        f"| {r['host_ms_per_step']:.1f} | {r['host_cpu_ms_per_step']:.1f} | {r['one_time_read_s']:.2f} | "
        f"{r['feature_dtype']} | {'-' if bytes_ is None else f'{bytes_:.3f}'} | {syncs} |"
    )
    gather = r["featurize_cpu_ms_per_step"]
    print(
        f"of the CPU time: loader + collator {r['host_cpu_ms_per_step'] - gather:.1f} ms, featurize (read+decode, or "
        f"the resident gather into a reused buffer: on the device on a GPU) {gather:.1f} ms"
    )
    if "sync_ops" in r:
        top = r["top_ops_mb_per_token_per_layer"]
        print(f"sync ops: {r['sync_ops']}; largest non-matmul traffic (MB/token/layer): {top}")
        if r.get("syncs_per_step_packed") is not None:
            print(f"host syncs / step with packed batches (the loop's default): {r['syncs_per_step_packed']}")
    if args.compiled_bytes and not args.data_path_only:
        import llm_compiled_bytes as cb

        eager, compiled = cb.eager_bytes(), cb.compiled_bytes()
        r["one_layer_eager"], r["one_layer_compiled"] = eager, compiled
        print(
            "one Qwen2-0.5B decoder layer + LoRA r 128, bf16 autocast, 2 x 844 tokens, fwd + bwd: non-matmul MB / "
            "token / layer"
        )
        print(
            "| eager (dispatch counter) | torch.compile (inductor's num_bytes_accessed, extern matmul/attention "
            "kernels apart) | compile + run s |"
        )
        print("|---:|---:|---:|")
        if "error" in compiled:
            print(f"| {eager['mb_per_token']:.3f} | not measured: {compiled['error']} | - |")
        else:
            print(
                f"| {eager['mb_per_token']:.3f} | {compiled['mb_per_token']:.3f} | "
                f"{compiled['compile_and_run_s']:.0f} |"
            )
    if (path := results.json_file(args.json)) is not None:
        path.with_suffix(".proxies.json").write_text(json.dumps(r, indent=2))
    else:
        results.write(args.json, "llm_proxies", proxy_figures(r), [r], None)
    return r


def proxy_figures(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The CPU proxies' figures at real shapes, each held to the GPU run's target it stands in for."""
    gather = r["featurize_cpu_ms_per_step"]
    out = [
        results.figure(
            "host data path, CPU ms per 16-sample step",
            round(r["host_cpu_ms_per_step"], 1),
            "ms",
            target="<= 5 ms",
            note=f"loader + collator {r['host_cpu_ms_per_step'] - gather:.1f} ms; the gather ({gather:.1f} ms here) "
            "is a device op on a GPU",
        )
    ]
    if r.get("nonmatmul_mb_per_token_per_layer") is not None:
        out.append(
            results.figure(
                "non-matmul MB a token a layer, eager",
                round(r["nonmatmul_mb_per_token_per_layer"], 3),
                "MB",
                note="forward + backward, bf16 autocast, op by op",
            )
        )
    if r.get("syncs_per_step") is not None:
        out.append(results.figure("host syncs per training step", r["syncs_per_step"], target="0"))
    compiled = r.get("one_layer_compiled") or {}
    if "mb_per_token" in compiled:
        out.append(
            results.figure(
                "non-matmul MB a token a layer, compiled",
                round(compiled["mb_per_token"], 3),
                "MB",
                target="<= 0.5 MB",
                note="CPU inductor: a proxy for the GPU's compiled layer",
            )
        )
    return out


def graph_line(g: dict[str, Any]) -> str:
    """One line for the CUDA-graph part (``llm_graph_replay.graph_replay``'s dict)."""
    if "launch_ms" not in g:
        return f"CUDA graph part: {g.get('error')}"
    line = (
        f"{g['what']}, {g.get('tokens')} tokens (compiled {g['compiled']}, {g.get('attention')}): launched "
        f"{g['launch_ms']:.1f} ms (the host's launching alone {g['host_ms']:.1f} ms)"
    )
    if "replay_ms" in g:
        return line + (
            f", replayed from a CUDA graph {g['replay_ms']:.1f} ms ({g['replay_over_launch']:.2f} of "
            f"launched; captured in {g['capture_s']} s)"
        )
    return line + f"; capture {g.get('capture')}"


def bucketed_line(b: dict[str, Any], loop_s: float | None) -> str:
    """One line for the bucketed-graphs part (``llm_graph_replay.bucketed_graphs``'s dict), beside the loop's own
    steady step (``loop_s``)."""
    line = (
        f"training steps from CUDA graphs over length buckets ({b.get('graphs', 'graphs')}): {b.get('steps')} "
        f"of {b.get('steps_asked')} steps, {b.get('captures')} captures in {b.get('capture_s')} s, padding "
        f"{100 * (b.get('padding_share') or 0):.1f}% of the tokens"
    )
    if "steady_ms_per_step" in b:
        line += f", steady {b['steady_ms_per_step']:.1f} ms/step over {b['steady_steps']}"
        if loop_s:
            line += f" (the loop's steady step: {1e3 * loop_s:.1f} ms)"
    for key in ("stopped", "error"):
        if key in b:
            line += f"; {key}: {b[key]}"
    return line


def report(args: argparse.Namespace, runs: list[dict[str, Any]], rate: float, quiet: bool = False) -> None:
    """The table (unless ``quiet``) and the JSON of ``runs`` so far (``--json FILE``; ``--json`` alone records the
    figures at the end)."""
    path = results.json_file(args.json)
    if quiet:
        if path:
            from bench_cache import environment

            path.write_text(
                json.dumps({"environment": environment(args.device), "results": runs, "partial": True}, indent=2)
            )
        return
    device = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else platform.processor()
    header = (
        f"device {args.device} ({device or platform.machine()}, torch threads {torch.get_num_threads()}), "
        f"{dt.date.today()}, vfm {args.vfm}, llm {args.llm}, LoRA r {args.lora_r}, {args.dtype}, "
        f"global batch {args.batch_size}, {args.steps} timed steps after {args.warmup} warm-up; "
        f"measured {args.dtype} matmul {rate / 1e12:.3f} TFLOP/s"
    )
    print(header)
    print(
        "| path | samples/s | tokens/s | mean tokens/sample | MFU (measured matmul) | MFU (datasheet) | "
        "waiting for data s | computing s | peak GB | attention | compiled | features |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    for r in runs:
        if "samples_per_s" not in r:  # the warm start: a warm-up only
            continue
        wait = r.get("data_wait_s") or 0.0
        sheet = r.get("mfu_of_datasheet_peak")
        peak = r.get("peak_mem_gb")
        print(
            f"| {r['mode']} | {r['samples_per_s']:.2f} | {r['tokens_per_s']:.0f} | {r['mean_seq_len']:.0f} "
            f"| {100 * r['mfu']:.1f}% | {'-' if sheet is None else f'{100 * sheet:.1f}%'} "
            f"| {wait:.3f} ({100 * wait / r['seconds']:.0f}%) | {r['seconds'] - wait:.3f} "
            f"| {'-' if peak is None else f'{peak:.1f}'} | {r.get('attention')} | {r.get('compiled')} "
            f"| {r.get('features_placement') or r['mode']} |"
        )
    print(
        "waiting for data: the training thread's time getting each step's batches (loader, collator; the online "
        "path's image decode); computing: the rest of the timed window (features to tokens, forward, backward, "
        "update). On CUDA the GPU runs queued work meanwhile, so the wait is an upper bound of GPU idle time."
    )
    for r in runs:
        if "steady_samples_per_s" in r:
            print(
                f"{r['mode']}: steady state (the window less the 4-step probe fit): "
                f"{r['steady_samples_per_s']:.2f} samples/s, {1e3 * r['steady_s_per_step']:.1f} ms/step, MFU "
                f"{100 * r['steady_mfu']:.1f}% (measured matmul), waiting for data "
                f"{100 * r.get('steady_data_wait_share', float('nan')):.1f}% of it; a fit's start cost "
                f"{r['fit_start_s']:.2f} s"
            )
    for r in runs:
        if "warmup_s" in r and "samples_per_s" in r:
            print(
                f"{r['mode']}: warm-up {r['warmup_wall_s']:.1f} s (compiled {r.get('compiled')}, compile cache "
                f"{r.get('compile_cache')})"
            )
        elif r["mode"] == "warm start":
            print(
                f"warm start (a fresh process, empty inductor/Triton caches, $AVA_HOME kept): "
                f"{r.get('warmup_wall_s', r.get('error'))} s, compile cache {r.get('compile_cache')}"
            )
    for r in runs:
        if "profile" in r:
            print(f"{r['mode']}: " + kernel_profile.table(r["profile"]))
    for r in runs:
        if "graph_replay" in r:
            print(f"{r['mode']}: " + graph_line(r["graph_replay"]))
        if "bucketed_graphs" in r:
            print(f"{r['mode']}: " + bucketed_line(r["bucketed_graphs"], r.get("steady_s_per_step")))
    by = {r["mode"]: r for r in runs}
    if {"cache", "online"} <= by.keys():
        print(f"cached / online: {by['cache']['samples_per_s'] / by['online']['samples_per_s']:.2f}x samples/s")
    from bench_cache import environment

    payload = {"header": header, "environment": environment(args.device), "results": runs}
    results.write(args.json, "bench_llm_head", figures(runs, rate, args), runs, payload, device=args.device)


def figures(runs: list[dict[str, Any]], rate: float, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The headline figures of the paths: MFU (window and steady), the data wait, the compile warm-ups and the
    cached / online ratio. The GPU's are held to their targets (MFU >= 40%, data wait <= 2%, warm-up <= 20 s,
    cached >= 1.3x online: the FLOP ratio of SigLIP-so400m's forward beside the LLM step is ~1.38x)."""
    gpu = args.device.startswith("cuda")

    def held(target: str, mode: str = "cache") -> str | None:  # (the targets are the cached path's, on a GPU)
        return target if gpu and mode == "cache" else None

    out = [results.figure("dense matmul, measured", float(f"{rate / 1e12:.4g}"), "TFLOP/s", note=args.dtype)]
    by = {r["mode"]: r for r in runs}
    for mode, name in (("cache", "cached"), ("online", "online")):
        r = by.get(mode)
        if r is None or "samples_per_s" not in r:
            continue
        how = f"{r['samples_per_s']:.1f} samples/s, {r.get('attention')} attention, compiled {r.get('compiled')}"
        out.append(
            results.figure(
                f"LLM head MFU (measured matmul), {name}",
                round(100 * r["mfu"], 1),
                "%",
                target=held(">= 40%", mode),
                note=f"the timed window; {how}",
            )
        )
        if "steady_mfu" in r:
            steady = f"{r['steady_samples_per_s']:.1f} samples/s, {1e3 * r['steady_s_per_step']:.1f} ms a step"
            out.append(
                results.figure(
                    f"LLM head MFU (measured matmul), {name}, steady",
                    round(100 * r["steady_mfu"], 1),
                    "%",
                    target=held(">= 40%", mode),
                    note=steady,
                )
            )
        wait = r.get("data_wait_s") or 0.0
        share = round(100 * wait / r["seconds"], 2)
        out.append(results.figure(f"data wait, {name}", share, "%", target=held("<= 2%", mode)))
        if r.get("steady_data_wait_share") is not None:
            out.append(
                results.figure(
                    f"data wait, {name}, steady steps",
                    round(100 * r["steady_data_wait_share"], 2),
                    "%",
                    target=held("<= 2%", mode),
                )
            )
        if "warmup_s" in r:
            out.append(
                results.figure(
                    f"compile warm-up, {name}",
                    round(r["warmup_s"], 1),
                    "s",
                    target=held("<= 20 s", mode),
                    note=f"the fit's; {r['warmup_wall_s']:.1f} s wall, compile cache {r.get('compile_cache')}",
                )
            )
    if {"cache", "online"} <= by.keys() and "samples_per_s" in by["online"]:
        ratio = by["cache"]["samples_per_s"] / by["online"]["samples_per_s"]
        out.append(results.figure("cached / online samples/s", round(ratio, 2), "x", target=held(">= 1.3x")))
    warm = by.get("warm start", {})
    if warm.get("warmup_wall_s") is not None:
        out.append(
            results.figure(
                "warm-up, next run (artifacts loaded)",
                warm["warmup_wall_s"],
                "s",
                note=f"wall, a fresh process; compile cache {warm.get('compile_cache')}",
            )
        )
    g = by.get("cache", {}).get("graph_replay") or {}
    if "replay_over_launch" in g:
        out.append(results.figure("one step replayed from a CUDA graph / launched", g["replay_over_launch"]))
    return out


if __name__ == "__main__":
    main()
