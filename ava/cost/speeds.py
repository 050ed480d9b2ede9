"""How fast a device runs each kind of work a sweep does: the speed table.

Figures per device kind (``nvidia-h100``, ``nvidia-h200``, ``cpu``) ship in ``speeds.json`` beside this module,
each with the date it was measured, its source and how it was derived from what was measured (a figure a device
was not measured for says which device it is borrowed from). ``--calibrate`` measures this machine's own
(:mod:`ava.cost.calibrate`) and keeps them under ``$AVA_HOME/speeds/<kind>-<host>.json``; they take precedence over
the table for that device kind on that host.

The figures, all in seconds, bytes and FLOP:

- ``job_start_s``: a job's process start, imports and device set-up;
- ``extract_start_s``: an extraction's own work beyond that and its images (scanning the data, making the cache
  group, starting its decode workers and writers, its checks at the end);
- ``forward_flops_per_s``: a VFM's forward pass (at the device's default extraction dtype), FLOP taken as
  2 x parameters x tokens per image; a calibrated VFM's own seconds per image replace it;
- ``prep_s_per_mpix``: decoding and preprocessing an image, per megapixel read (the stored image) and written (the
  VFM's input), all of a job's decode workers together; a calibrated VFM's own seconds per image replace it;
- ``extract_efficiency``: an extraction's images per second over those of the slower of its forward and its
  preprocessing (the rest: waiting, copying, writing);
- ``write_bytes_per_s``: compressing and writing cache bytes (0: never what an extraction waits for);
- ``read_bytes_per_s``: a head job reading features from the cache;
- ``matmul_flops_per_s``: float32 matrix products (the kNN search, a probe step's arithmetic);
- ``probe_linear_step_s``, ``probe_attn_step_s``: the least one optimizer step of the linear probe's stacked grid
  and of the attentive probe takes (their launches and optimizer; the arithmetic beyond is counted by FLOP);
- ``ability_s``: a head job's fixed work per ability (reading, picking, scoring, writing the record);
- ``sample_s``: a head job's work per sample outside its fit (placing features, predicting, scoring);
- ``llm_tokens_per_s``: LLM-head training tokens per second at Qwen2-0.5B with LoRA r 128 (scaled by the LLM's
  parameters for another);
- ``llm_warmup_s``: the LLM head's start (compiling its decoder layers).
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from ava.errors import AvaError

TABLE = "speeds.json"
CPU = "cpu"


class CostError(AvaError):
    """An estimate that cannot be made: a device kind with no figures, a calibration file that does not parse."""


@dataclass
class Speeds:
    """One device kind's figures (see the module's docstring), where they come from, and per-VFM calibrations."""

    kind: str
    job_start_s: float
    extract_start_s: float
    forward_flops_per_s: float
    prep_s_per_mpix: float
    extract_efficiency: float
    write_bytes_per_s: float
    read_bytes_per_s: float
    matmul_flops_per_s: float
    probe_linear_step_s: float
    probe_attn_step_s: float
    ability_s: float
    sample_s: float
    llm_tokens_per_s: float
    llm_warmup_s: float
    threads: int = 0  # a CPU's figures: the threads they were measured with (a job given fewer computes slower)
    cores: int = 0  # a CPU's figures: the machine's CPUs
    concurrency: dict[int, float] = field(default_factory=dict)  # N jobs at once -> how much longer each takes
    source: str = ""  # "the speed table's KIND figures", or "calibrated on HOST at DATE (over ...)"
    vfm_forward_s: dict[str, float] = field(default_factory=dict)  # VFM -> measured seconds per image
    vfm_load_s: dict[str, float] = field(default_factory=dict)  # VFM -> measured seconds to load it
    vfm_prep_s: dict[str, float] = field(default_factory=dict)  # VFM -> measured preprocessing seconds per image

    @property
    def on_cpu(self) -> bool:
        """On a CPU the forward, preprocessing and writing share the cores (their times add); on a GPU they
        overlap (the slowest sets the pace)."""
        return self.kind == CPU or self.kind.startswith("cpu-")

    def figures(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in FIGURES}

    def stretch(self, jobs: int, threads: int | None = None) -> tuple[float, bool]:
        """How much longer each of ``jobs`` CPU jobs at once takes than one alone, and whether that was measured
        (``concurrency``: a job's start timed alone and N at once, each pinned to its share of the CPUs; between 1
        and a measured N, in proportion). Not measured: the CPUs shared evenly, ``jobs x threads / cores`` (at
        least 1). 1 on a GPU."""
        if not self.on_cpu or jobs <= 1:
            return 1.0, True
        if jobs in self.concurrency:
            return max(1.0, self.concurrency[jobs]), True
        above = [n for n in self.concurrency if n > jobs]
        if above:
            n = min(above)
            return 1.0 + (max(1.0, self.concurrency[n]) - 1.0) * (jobs - 1) / (n - 1), True
        return max(1.0, jobs * (threads or 1) / max(1, self.cores or 1)), False

    def slower(self, threads: int | None) -> float:
        """How much slower a job's computing is on ``threads`` CPU threads than these figures were measured with
        (1 on a GPU, or with as many threads)."""
        if not self.on_cpu or not threads or not self.threads:
            return 1.0
        return max(1.0, self.threads / threads)


ABOUT = ("threads", "cores", "concurrency")  # how the figures were measured, not figures
FIGURES = [f.name for f in fields(Speeds) if f.type in ("float", float) and f.name not in ABOUT]


def table() -> dict[str, Any]:
    """The shipped speed table (``speeds.json``)."""
    return json.loads(resources.files("ava.cost").joinpath(TABLE).read_text(encoding="utf-8"))


def kinds() -> list[str]:
    """The device kinds the table has figures for."""
    return sorted(table()["devices"])


def from_table(kind: str) -> Speeds:
    """The table's figures for ``kind``; refused, naming the kinds there are, when it has none."""
    devices = table()["devices"]
    if kind not in devices:
        raise CostError(
            f"no speed figures for device kind {kind!r} (the table has {', '.join(sorted(devices))}); "
            "--calibrate measures this machine's"
        )
    entry = devices[kind]["figures"]
    values = {name: float(entry[name]["value"]) for name in FIGURES}
    about = {k: devices[kind].get(k, 0) for k in ("threads", "cores")}
    about["concurrency"] = {int(k): float(v) for k, v in (devices[kind].get("concurrency") or {}).items()}
    return Speeds(kind=kind, source=f"the speed table's {kind} figures", **about, **values)


def calibration_path(kind: str, home: Path | None = None, host: str | None = None) -> Path:
    from ava.home import ava_home

    return (home or ava_home()) / "speeds" / f"{kind}-{host or socket.gethostname()}.json"


def load_calibration(kind: str, home: Path | None = None) -> dict[str, Any] | None:
    """This host's calibration of ``kind`` (the file :func:`save_calibration` wrote), or None."""
    path = calibration_path(kind, home)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("figures"), dict):
            raise ValueError("no figures")
    except (OSError, ValueError) as e:
        raise CostError(f"{path}: not a speed calibration ({e}); remove it or calibrate again") from None
    return data


def save_calibration(kind: str, figures: dict[str, float], vfms: dict[str, dict[str, float]], **about: Any) -> Path:
    """Keep a calibration (figures measured here, and per VFM its seconds per image and to load), merged with the
    VFMs calibrated before on this host."""
    from ava.data.format import atomic_write_text

    path = calibration_path(kind)
    before = load_calibration(kind) or {}
    data = {
        "kind": kind,
        "host": socket.gethostname(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        **about,
        "concurrency": {**before.get("concurrency", {}), **(about.get("concurrency") or {})},
        "figures": {**before.get("figures", {}), **figures},
        "vfm": {**before.get("vfm", {}), **vfms},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1))
    return path


def speeds_for(kind: str, *, calibrated: bool = True) -> Speeds:
    """The figures an estimate for ``kind`` uses: the table's, with this host's calibration of that kind over them
    (when there is one, and ``calibrated``)."""
    cal = load_calibration(kind) if calibrated else None
    if kind not in table()["devices"] and cal is None:
        base = from_table(kind)  # refused, naming the kinds
    elif kind in table()["devices"]:
        base = from_table(kind)
    else:  # a kind only calibrated here: the CPU table's figures where the calibration has none
        base = from_table(CPU)
        base.kind = kind
    if cal is None:
        return base
    for name, value in cal["figures"].items():
        if name in FIGURES:
            setattr(base, name, float(value))
    base.threads = int(cal.get("threads") or base.threads)
    base.cores = int(cal.get("cores") or base.cores)
    base.concurrency = {**base.concurrency, **{int(k): float(v) for k, v in (cal.get("concurrency") or {}).items()}}
    vfms = cal.get("vfm", {})
    base.vfm_forward_s = {k: float(v["forward_s"]) for k, v in vfms.items() if "forward_s" in v}
    base.vfm_load_s = {k: float(v["load_s"]) for k, v in vfms.items() if "load_s" in v}
    base.vfm_prep_s = {k: float(v["prep_s"]) for k, v in vfms.items() if "prep_s" in v}
    base.source = f"calibrated on {cal.get('host')} at {cal.get('date')} (over the {base.source})"
    return base
