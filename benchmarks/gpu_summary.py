"""The headline figures of one ``gpu.sh run``, against their targets, as one markdown table (what the device
call's reply shows last: the tool returns the end of its output).

Reads ``OUT``'s four JSONs (and the stages' exits); a figure a stage did not report is given as ``-`` with the reason
where the JSON has one. Standard library only (the GPU image's Python, before or without the wheels).

    python3 benchmarks/gpu_summary.py OUT [STAGES.jsonl]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _f(x: Any, fmt: str = ".3g", unit: str = "") -> str:
    return "-" if not isinstance(x, (int, float)) else f"{x:{fmt}}{unit}"


def _pct(x: Any) -> str:
    return "-" if not isinstance(x, (int, float)) else f"{100 * x:.1f}%"


def rows(out: Path, stages: Path | None = None) -> list[tuple[str, str, str]]:
    """(figure, measured, target) rows."""
    table: list[tuple[str, str, str]] = []
    if stages is not None and stages.is_file():
        ran = [json.loads(x) for x in stages.read_text().splitlines() if x.strip()]
        said = ", ".join(
            f"{s['stage']} " + ("skipped" if s.get("skipped") else f"exit {s.get('exit')} in {s.get('seconds')} s")
            for s in ran
        )
        whole = sum(1 for s in ran if s.get("exit") == 0)
        table.append(("stages that report", f"{whole} of {len(ran)} exit 0: {said}", "4 of 4, <= 9 min"))

    pre = _load(out / "preflight.json")
    tests = pre.get("gpu_tests") or {}
    failed = [x for x in tests.get("not_passed", []) if not x.startswith("SKIPPED")]
    said = (
        f"{tests.get('passed', 0)} passed, {tests.get('failed', 0)} failed, {tests.get('skipped', 0)} skipped"
        + (f" ({tests['error']})" if "error" in tests else "")
        + (f"; {'; '.join(failed)[:300]}" if failed else "")
    )
    table.append(("tests marked gpu (preflight)", said if tests else "-", "all pass"))

    cache = _load(out / "cache.json")
    row = next((r for r in cache.get("rows", []) if "extract_over_forward" in r), {})
    if row:
        forward, workers = row.get("forward_img_s"), row.get("workers_extract_img_s")
        table.append(
            (
                "extraction / forward",
                f"{_f(row.get('extract_over_forward'))} ({row.get('decoder', '-')}), "
                f"steady {_f(row.get('steady_over_forward'))}; the workers' decode "
                f"{_f(workers / forward if workers and forward else None)}; forward {_f(forward, '.0f')} img/s",
                ">= 0.8",
            )
        )
        table.append(
            (
                "nvJPEG rows far from the workers'",
                f"{_pct(row.get('device_rows_off'))} (rel RMS {row.get('device_vs_workers_rel_rms', '-')})",
                "0",
            )
        )
        table.append(
            (
                "decoding the workers could sustain",
                f"{_f(row.get('decode_capacity_img_s'), '.0f', ' img/s')}"
                f" ({_f(row.get('decode_cpu_ms_per_img'), '.1f')} CPU ms an image)",
                "> forward",
            )
        )
    else:
        table.append(("extraction / forward", "-", ">= 0.8"))

    llm = _load(out / "llm.json")
    by = {r.get("mode"): r for r in llm.get("results", [])}
    c = by.get("cache", {})
    table.append(
        (
            "LLM head MFU (measured matmul)",
            f"{_pct(c.get('mfu'))} window, {_pct(c.get('steady_mfu'))} steady"
            f" ({_f((c.get('steady_s_per_step') or 0) * 1e3 or None, '.1f', ' ms')} a step), data wait "
            f"{_pct(c.get('steady_data_wait_share'))}",
            ">= 40%, wait <= 2%",
        )
    )
    phases = sorted((c.get("warmup_compile_phases_s") or {}).items(), key=lambda kv: -kv[1])[:3]
    table.append(
        (
            "compile warm-up, a fresh machine",
            f"{_f(c.get('warmup_s'), '.1f', ' s')} fit, "
            f"{_f(c.get('warmup_wall_s'), '.1f', ' s')} wall (setup {_f(c.get('warmup_setup_s'))}, teardown "
            f"{_f(c.get('warmup_teardown_s'))})" + "".join(f"; {k} {v:.1f}" for k, v in phases),
            "<= 20 s",
        )
    )
    warm = by.get("warm start", {})
    table.append(
        (
            "warm-up, next run (artifacts loaded)",
            f"{_f(warm.get('warmup_wall_s'), '.1f', ' s')} ({warm.get('compile_cache', warm.get('error', '-'))})",
            "-",
        )
    )
    g = c.get("graph_replay") or {}
    table.append(
        (
            "one step replayed from a CUDA graph / launched",
            f"{_f(g.get('replay_over_launch'), '.2f')} ({_f(g.get('replay_ms'), '.1f')} / "
            f"{_f(g.get('launch_ms'), '.1f')} ms; capture {g.get('capture', g.get('error', '-'))})",
            "small: graphs pay",
        )
    )
    b = c.get("bucketed_graphs") or {}
    loop_ms = (c.get("steady_s_per_step") or 0) * 1e3 or None
    table.append(
        (
            "training from bucket graphs, steady step",
            f"{_f(b.get('steady_ms_per_step'), '.1f', ' ms')} "
            f"against the loop's {_f(loop_ms, '.1f', ' ms')}; padding {_pct(b.get('padding_share'))}, "
            f"{b.get('captures', '-')} captures"
            + (f"; {b['error']}" if "error" in b else "")
            + (f"; {b['graphs']}" if "graphs" in b else ""),
            "below the loop's",
        )
    )
    o = by.get("online", {})
    table.append(("LLM head, online path MFU", f"{_pct(o.get('mfu'))} ({_pct(o.get('steady_mfu'))} steady)", "-"))

    fp = _load(out / "fingerprint.json")
    fprows = fp.get("rows", [])
    steps = ", ".join(
        f"{100 * r['scale']:g}%: {r['scaled_by_steps_s']:.0f} s"
        for r in fprows
        if r.get("mode") == "fingerprint" and "scaled_by_steps_s" in r
    )
    check = fp.get("scaling_check") or {}
    zarr = next((r for r in fprows if r.get("mode") == "fingerprint (zarr)"), {})
    est = next((r for r in fprows if r.get("mode") == "estimate with reads at real size"), {})
    table.append(
        (
            "fingerprint at real size, one GPU",
            f"by steps {steps or '-'} (scaling holds: "
            f"{check.get('holds', '-')}, ratio {_f(check.get('ratio'), '.2f')}); from Zarr "
            f"{_f(zarr.get('scaled_by_steps_s_with_zarr_reads'), '.0f', ' s')}, two heads "
            f"{_f(zarr.get('scaled_by_steps_s_two_jobs'), '.0f', ' s')}; reads at real size "
            f"{_f(est.get('scaled_s'), '.0f', ' s')}, two heads {_f(est.get('scaled_s_two_jobs'), '.0f', ' s')}",
            "<= 300 s",
        )
    )
    return table


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    table = rows(out, Path(sys.argv[2]) if len(sys.argv) > 2 else out / "stages.jsonl")
    print("| figure | measured | target |\n|---|---|---|")
    for figure, measured, target in table:
        print(f"| {figure} | {measured} | {target} |")


if __name__ == "__main__":
    main()
