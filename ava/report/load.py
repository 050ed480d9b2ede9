"""Reading run directories (layout in :mod:`ava.heads.base`) into one flat record per run.

A report never trusts a run blindly: a missing or malformed ``run.json`` / ``results_<split>.json`` is an
:class:`~ava.errors.AvaError` that names the run directory and the file at fault.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ava.data.split import split_label
from ava.errors import AvaError


@dataclass
class AbilityResult:
    """One ability's score in one run."""

    metric: str
    value: float | None  # None when the run scored no sample of it (n == 0) or the value is not finite
    higher_is_better: bool
    n: int
    n_unparsed: int
    subgroups: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    sample_set: str | None = None  # hash of the scored samples (ids and truths); None: unknown (old file, no records)


@dataclass
class RunResult:
    """What a report needs from one run directory."""

    path: Path
    head: str  # the head as reports label it: "knn", "probe-linear", "llm (tiny-random-qwen2)", ...
    vfm: str
    random_weights: bool  # the run had random weights somewhere (VFM or LLM): its numbers are a control
    vfm_random_weights: bool  # the VFM's weights were random (falls back to random_weights when not said)
    llm_random_weights: bool  # an LLM head's LLM was random (a tiny test model, say)
    synthetic: bool
    split: dict[str, Any]  # {"name": "test", "made_by": "official"|"ava"|"synthetic", ...}
    abilities: dict[str, AbilityResult]
    run: dict[str, Any]
    decode: str | None = None  # an LLM head's decode ("generate" or "score"); None for feature heads
    head_id: str = ""  # stable key of the head in report.json ("knn", "llm:tiny-random-qwen2:generate")
    sample_set_source: str = "none"  # "results" (written by the scorer), "predictions" (recomputed), "none"
    datasets: list[str] = field(default_factory=list)  # where the results say the scored dataset was
    config: dict[str, Any] = field(default_factory=dict)  # the config the results file records (the head's options)
    records_file: Path | None = None  # predictions_<split>.jsonl, the per-sample scores (None: not there)
    _records: dict[str, list[dict[str, Any]]] | None = field(default=None, repr=False)

    @property
    def split_label(self) -> str:
        return split_label(self.split)

    def records(self) -> dict[str, list[dict[str, Any]]]:
        """Per-sample records by ability (``id``, ``score``, ``ok``, ``prediction``, ``parsed``, ``truth``), read
        once from ``records_file``; empty when the run has none."""
        if self._records is None:
            self._records = read_records(self.records_file) if self.records_file else {}
        return self._records


def weights_label(r: RunResult) -> str:
    """What the run's VFM weights are, so a reader sees which extractor has real (published) weights: "random",
    "none (raw pixels)", or "real: <source>" from the run or the VFM registry."""
    if r.vfm_random_weights:
        return "random"
    base = str(r.vfm).partition("#")[0]  # NAME#size=S is NAME at another input size: the same weights
    if base == "pixels":
        return "none (raw pixels)"
    source = r.run.get("weights") or r.run.get("vfm_weights") or r.run.get("hub_id")
    if not source:
        try:
            from ava.vfm import VFMS

            spec = VFMS.get(base)
            source = spec.hub_id or (spec.provider and "an installed package")
        except Exception:  # noqa: BLE001 - a VFM this ava does not know: its weights are still reported as real
            source = None
    return f"real: {source}" if isinstance(source, str) and source else "real"


def _read_json(run_dir: Path, name: str) -> dict[str, Any]:
    path = run_dir / name
    if not path.is_file():
        raise AvaError(f"run {run_dir}: {name} is missing (is this a finished run directory?)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AvaError(f"run {run_dir}: {name} is not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise AvaError(f"run {run_dir}: {name} must hold a JSON object, not {type(data).__name__}")
    return data


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _count(where: str, d: dict[str, Any], name: str) -> int:
    """``d[name]``: a count (a non-negative integer; absent or null is 0)."""
    value = d.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AvaError(f"{where}.{name} must be a count (an integer >= 0), not {value!r}")
    return value


def _subgroups(where: str, subgroups: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """``{group: {bin: {value, n}}}``, each value a finite number or null and each n a count."""
    if not isinstance(subgroups, dict) or not all(isinstance(v, dict) for v in subgroups.values()):
        raise AvaError(f"{where}.subgroups must map group -> {{bin: {{value, n}}}}")
    for group, bins in subgroups.items():
        for b, cell in bins.items():
            at = f"{where}.subgroups.{group}.{b}"
            if not isinstance(cell, dict):
                raise AvaError(f"{at} must be an object {{value, n}}, not {cell!r}")
            _count(at, cell, "n")
            value = cell.get("value")
            if value is not None and _finite(value) is None:
                raise AvaError(f"{at}.value must be a finite number or null, not {value!r}")
    return subgroups


def _ability(run_dir: Path, fname: str, key: str, d: Any) -> AbilityResult:
    where = f"run {run_dir}: {fname}: abilities.{key}"
    if not isinstance(d, dict):
        raise AvaError(f"{where} must be an object")
    for name in ("metric", "value", "higher_is_better"):
        if name not in d:
            raise AvaError(f"{where} has no {name!r}")
    if not isinstance(d["metric"], str) or not d["metric"]:
        raise AvaError(f"{where}.metric must be the metric's name, not {d['metric']!r}")
    if not isinstance(d["higher_is_better"], bool):
        raise AvaError(f"{where}.higher_is_better must be true or false, not {d['higher_is_better']!r}")
    n, n_unparsed = _count(where, d, "n"), _count(where, d, "n_unparsed")
    if n_unparsed > n and "n" in d:
        raise AvaError(f"{where}: n_unparsed {n_unparsed} is more than n {n}")
    value = d["value"]
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise AvaError(f"{where}.value must be a number or null, not {value!r}")
    scored = not ("n" in d and n == 0)
    if scored and value is not None and _finite(value) is None:
        raise AvaError(f"{where}.value must be finite for {n} scored samples, not {value!r}")
    return AbilityResult(
        metric=d["metric"],
        value=_finite(value) if scored else None,
        higher_is_better=d["higher_is_better"],
        n=n,
        n_unparsed=n_unparsed,
        subgroups=_subgroups(where, d.get("subgroups") or {}),
    )


def _llm_name(run: dict[str, Any]) -> str | None:
    llm = run.get("llm")
    name = llm if isinstance(llm, str) else (llm.get("name") or llm.get("key")) if isinstance(llm, dict) else None
    return str(name) if name else None


def head_label(run: dict[str, Any], decode: str | None = None) -> str:
    """Reports group runs by this label; an LLM head is labelled with its LLM, since the LLM changes the head,
    says so when that LLM had random weights, and names its decode ("generate" or "score"), since the two
    decodes of one head are two measurements."""
    head = str(run.get("head") or "?")
    name = _llm_name(run)
    parts = [p for p in (name, "random weights" if name and run.get("llm_random_weights") else None, decode) if p]
    return f"{head} ({', '.join(parts)})" if parts else head


def head_id(run: dict[str, Any], decode: str | None = None) -> str:
    """A stable key for the head: its registry name, then its LLM and decode when it has them."""
    return ":".join(p for p in (str(run.get("head") or "?"), _llm_name(run), decode) if p)


def read_records(path: Path) -> dict[str, list[dict[str, Any]]]:
    """``predictions_<split>.jsonl`` by ability; a malformed line is an error naming the file and line."""
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise AvaError(f"{path}: cannot read ({e})") from e
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise AvaError(f"{path}:{lineno}: not valid JSON ({e})") from e
        if not isinstance(rec, dict) or not {"ava", "id", "score"} <= set(rec):
            raise AvaError(f'{path}:{lineno}: expected a per-sample record with "ava", "id" and "score"')
        if _finite(rec["score"]) is None:
            raise AvaError(f"{path}:{lineno}: score must be a finite number, not {rec['score']!r}")
        out.setdefault(str(rec["ava"]), []).append(rec)
    return out


def _sample_sets(results: dict[str, Any], records_file: Path | None) -> tuple[dict[str, str], str]:
    """Per-ability sample-set hashes from the results file, else recomputed from the per-sample records."""
    from ava.metrics.sample_set import recorded_block, sample_set_hash

    block = recorded_block(results)
    found = {}
    if isinstance(block, dict) and isinstance(block.get("per_ability"), dict):
        found = {str(k): str(v) for k, v in block["per_ability"].items()}
    if set(results.get("abilities") or {}) <= set(found):
        return found, "results"
    if records_file is None:
        return found, "results" if found else "none"
    recs = read_records(records_file)  # an older file, or a merged one that kept only some abilities' hashes
    computed = {a: sample_set_hash((a, str(r["id"]), r.get("truth")) for r in rows) for a, rows in recs.items()}
    return {**computed, **found}, "predictions"


def _dataset_candidates(results: dict[str, Any], run: dict[str, Any]) -> list[str]:
    from ava.metrics.sample_set import recorded_block

    fp = recorded_block(results)
    config = results.get("config") if isinstance(results.get("config"), dict) else {}
    found = [
        fp.get("dataset") if isinstance(fp, dict) else None,
        results.get("dataset"),
        run.get("data"),
        config.get("data"),
    ]
    return [str(c) for c in dict.fromkeys(found) if isinstance(c, str) and c]


def load_run(run_dir: str | Path, split: str = "test") -> RunResult:
    """Read ``RUN/run.json`` and ``RUN/results_<split>.json``; the results' ``run`` block wins where both say."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AvaError(f"run {run_dir}: not a directory")
    fname = f"results_{split}.json"
    run_meta = _read_json(run_dir, "run.json")
    results = _read_json(run_dir, fname)
    run = {**run_meta, **(results.get("run") or {})}
    for name in ("head", "vfm"):
        if not run.get(name):
            raise AvaError(f"run {run_dir}: neither run.json nor {fname} says which {name!r} it is")
    abilities = results.get("abilities")
    if not isinstance(abilities, dict) or not abilities:
        raise AvaError(f"run {run_dir}: {fname} has no 'abilities' object (expected the `ava score` schema)")
    split_info = results.get("split") or run_meta.get("split") or {}
    if not isinstance(split_info, dict):
        raise AvaError(f"run {run_dir}: {fname}: 'split' must be an object")
    split_info = {"name": split, **split_info}
    synthetic = bool(results.get("synthetic", split_info.get("made_by") == "synthetic"))
    decode = results.get("decode") or run.get("decode")
    decode = str(decode) if decode else None
    records_file = run_dir / f"predictions_{split}.jsonl"
    records_file = records_file if records_file.is_file() else None
    prints, source = _sample_sets(results, records_file)
    parsed = {k: _ability(run_dir, fname, k, v) for k, v in abilities.items()}
    for k, a in parsed.items():
        a.sample_set = prints.get(k)
    return RunResult(
        path=run_dir,
        head=head_label(run, decode),
        vfm=str(run["vfm"]),
        random_weights=bool(run.get("random_weights", False)),
        vfm_random_weights=bool(run.get("vfm_random_weights", run.get("random_weights", False))),
        llm_random_weights=bool(run.get("llm_random_weights", False)),
        synthetic=synthetic,
        split=split_info,
        abilities=parsed,
        run=run,
        decode=decode,
        head_id=head_id(run, decode),
        sample_set_source=source,
        records_file=records_file,
        datasets=_dataset_candidates(results, run),
        config=results["config"] if isinstance(results.get("config"), dict) else {},
    )


def load_runs(run_dirs: list[str | Path], split: str = "test") -> list[RunResult]:
    """Load every run; two runs of the same head and VFM are ambiguous in a table, so that is an error."""
    if not run_dirs:
        raise AvaError("no run directories given")
    runs = [load_run(d, split) for d in run_dirs]
    seen: dict[tuple[str, str], Path] = {}
    for r in runs:
        key = (r.head, r.vfm)
        if key in seen:
            raise AvaError(
                f"runs {seen[key]} and {r.path} are both head {r.head!r} on VFM {r.vfm!r}; "
                "a report compares one run per head and VFM: pass only one of them"
            )
        seen[key] = r.path
    return runs
