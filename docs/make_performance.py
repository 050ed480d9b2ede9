"""Render ``docs/performance.md`` from the results files ``benchmarks/results/*.json`` (written by the benchmark
scripts' ``--json``, see ``benchmarks/results.py``): a table per device with each figure's latest value (a later
date wins), its target, the date and the command that measured it.

    python docs/make_performance.py            # write the page
    python docs/make_performance.py --check    # exit 1 when the page differs from what it would write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"
FILES = ROOT / "benchmarks" / "results"  # the committed results (not AVA_BENCH_RESULTS, a run's own folder)
sys.path.insert(0, str(ROOT / "benchmarks"))

import results  # noqa: E402  (benchmarks/results.py: the files' one writer, and their schema)

INTRO = """# Performance

The current figures of `ava`'s benchmarks, one table per device: each figure's latest value, the target the project
holds it to, the date it was measured and the command that measured it. The page is rendered from the results files
under `benchmarks/results/` (one JSON file per device, date and torch version, with each script's full table of
rows) by `python docs/make_performance.py`; a benchmark script's `--json` records a new run there (see
[benchmarks/README.md](../benchmarks/README.md) for what each script measures). Do not edit this page by hand.

- **GPU figures** use the real sizes of the paper's models (SigLIP-so400m at 384 px, 729 x 1152 features;
  Qwen2-0.5B with LoRA r 128) at random weights: speed depends on shapes, not weights. The 14-ability fingerprint
  at the benchmark's real size (226.7K samples) is an estimate scaled from a run at a few percent of it, and says so.
- **CPU figures** are from 2-core virtual machines shared with other jobs: a timing is meaningful beside the other
  figures of its run (ratios measured side by side in one run, with the load said), not as an absolute. A CPU figure
  that stands in for a GPU's (a host's share, a compiled layer's bytes) says so in its note.
- A value `a-b` is the range over the runs its note counts; `not measured` marks a figure its run did not reach.
"""


def load(root: Path = FILES) -> list[dict[str, Any]]:
    """Every results file under ``root``, oldest date first; a file that does not follow the schema is refused, by
    name."""
    files = []
    for path in sorted(root.glob("*.json")):
        data = json.loads(path.read_text())
        if errors := results.schema_errors(data):
            raise SystemExit(f"{path}: {'; '.join(errors)}")
        files.append(data)
    return sorted(files, key=lambda d: d["date"])


def latest(files: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """device slug -> {"device", "figures": key -> figure with its file's date and torch}: each figure's latest."""
    out: dict[str, dict[str, Any]] = {}
    for data in files:  # oldest first: a later date replaces
        dev = out.setdefault(data["device"]["slug"], {"figures": {}})
        dev["device"] = data["device"]
        for key, f in data["figures"].items():
            dev["figures"][key] = {**f, "date": data["date"], "torch": data["torch"]}
    return out


def _value(f: dict[str, Any]) -> str:
    v, unit = f["value"], f["unit"] or ""
    if v is None:
        return "not measured"
    text = repr(v) if isinstance(v, float) else str(v)  # (as measured: 78.0, not 78)
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("%", "x") or unit.startswith("x ") else f"{text} {unit}"


def _cell(text: Any) -> str:
    return "-" if text in (None, "") else str(text).replace("|", "\\|").replace("\n", " ")


def device_table(dev: dict[str, Any]) -> str:
    d, figures = dev["device"], dev["figures"]
    dates = sorted({f["date"] for f in figures.values()})
    torch = ", ".join(sorted({f["torch"] for f in figures.values()}))
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    what = f"{d['cores']} cores, " if d.get("cores") else ""
    lines = [
        f"## {d['name']}",
        "",
        f"`{d['slug']}`: {what}torch {torch}, measured {span}.",
        "",
        "| figure | value | target | note | date | command |",
        "|---|---|---|---|---|---|",
    ]
    for _, f in sorted(figures.items(), key=lambda kv: (kv[1]["target"] is None, kv[0])):  # held to a target first
        lines.append(
            f"| {_cell(f['figure'])} | {_cell(_value(f))} | {_cell(f['target'])} | {_cell(f.get('note'))} "
            f"| {f['date']} | `{_cell(f['command'])}` |"
        )
    return "\n".join(lines) + "\n"


SCALE_INTRO = """## How each stage grows with the samples

`benchmarks/bench_scale.py` runs the pipeline through the CLI at several sizes of the synthetic suite (the total
over the 14 abilities), each stage in its own process, with `--vfm pixels#size=64` (raw pixels: the VFM costs next
to nothing, so what is timed is `ava`'s own work). A cell is the stage's wall seconds and peak resident memory (the
largest process of the stage); a growth column is the stage's time and memory at a size over the size before,
against the samples' growth. The target is linear growth within 1.25x: a stage above it is marked **over**, with
its cause. See [scale-out.md](scale-out.md#dataset-size-what-each-stage-costs) for what each stage's cost depends
on.
"""


def scale_rows(files: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """device slug -> the latest ``bench_scale`` rows of that device, with the file's date and the run's command."""
    out: dict[str, dict[str, Any]] = {}
    for data in files:  # oldest first: a later date replaces
        rows = (data.get("rows") or {}).get("bench_scale")
        if rows:
            commands = [f["command"] for f in data["figures"].values() if f["benchmark"] == "bench_scale"]
            out[data["device"]["slug"]] = {
                "device": data["device"],
                "date": data["date"],
                "rows": rows,
                "command": commands[0] if commands else None,
            }
    return out


def _growth_cell(row: dict[str, Any]) -> str:
    if "time_x" not in row:
        return "-"
    over = " **over**" if row.get("over") else ""
    return f"{row['time_x']}x / {row['memory_x']}x (limit {row['limit_x']}x){over}"


def scale_table(run: dict[str, Any]) -> str:
    """One device's bench_scale run: a row per stage, a column per size and per step between sizes."""
    rows, d = run["rows"], run["device"]
    sizes = sorted({r["samples"] for r in rows})
    steps = [f"{a:,} -> {b:,}: time / memory" for a, b in zip(sizes, sizes[1:], strict=False)]
    lines = [
        f"### {d['name']}",
        "",
        f"`{d['slug']}`, measured {run['date']}: `{_cell(run['command'])}`.",
        "",
        "| stage | " + " | ".join([*(f"{n:,} samples" for n in sizes), *steps]) + " |",
        "|---" * (1 + len(sizes) + len(steps)) + "|",
    ]
    causes = []
    for stage in dict.fromkeys(r["stage"] for r in rows):
        at = {r["samples"]: r for r in rows if r["stage"] == stage}
        cells = [f"{at[n]['wall_s']} s, {at[n]['peak_rss_mb']:.0f} MB" if n in at else "-" for n in sizes]
        grown = [_growth_cell(at[b]) if b in at else "-" for b in sizes[1:]]
        lines.append(f"| `{stage}` | " + " | ".join([*cells, *grown]) + " |")
        causes += [f"- `{stage}`, {n:,} samples: {_cell(r['cause'])}" for n, r in at.items() if r.get("over")]
    return "\n".join([*lines, *([""] + causes if causes else [])]) + "\n"


def render(root: Path = FILES) -> str:
    """The page: the introduction, then the GPUs' tables and the CPUs'; in each, the figures held to a target
    first, by script and name; then how each stage grows with the samples, per device that ran it."""
    files = load(root)
    devices = latest(files)
    order = sorted(devices, key=lambda s: (devices[s]["device"]["kind"] == "cpu", s))
    scale = scale_rows(files)
    tail = [SCALE_INTRO, *(scale_table(scale[s]) for s in sorted(scale))] if scale else []
    return "\n".join([INTRO, *(device_table(devices[s]) for s in order), *tail])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when docs/performance.md differs from its render")
    args = p.parse_args()
    page = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != page:
            print(f"{PAGE} is out of date: run python docs/make_performance.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
