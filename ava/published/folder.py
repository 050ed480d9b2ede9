"""Results folders: fingerprints published as files, read by another user's ``ava report --published DIR``.

Layout (what ``ava results export RUNS --out DIR`` writes; DIR may be a local folder or an fsspec URL)::

    DIR/index.json                      # format, title, ava version, and one line per entry with its sha256
    DIR/README.md                       # the card: who exported what, on which data, and how to compare
    DIR/<head id>/<vfm>.json            # one entry per VFM and head

An entry holds per ability the metric, direction, value (ava's units: accuracy and ANLS as fractions), n, unparsed
replies, the 95% bootstrap interval and the scored samples' hash; and the run's identity: the data identity per
ability (a digest of the ability's sample records), split, synthetic or not, random weights, the head (its id
names the LLM and the decode), the run's config, its results file digest and the package versions.

Reading trusts nothing: the index must list every entry file with its size and SHA-256 (a truncated or edited file is
refused by name), an entry file not listed is refused (planted or left over), paths must stay inside the folder, JSON
is strict (no NaN), every value must be a finite number in its metric's range or null, and a count must be an
integer; only JSON is parsed, nothing in a folder runs. Any fault is one :class:`PublishedError` naming the file and
field, raised before a report writes anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

from ava.errors import AvaError
from ava.published.model import METRIC_RANGES, Cell, Column, Entry, PublishedError, Source, check_value

FORMAT = "ava-results"
ENTRY_FORMAT = "ava-results-entry"
FORMAT_VERSION = 1
INDEX = "index.json"
README = "README.md"
MAX_BYTES = 16 << 20  # an entry or index larger than this is not a results file
_NAME = re.compile(r"^[A-Za-z0-9_.=+-]{1,120}$")
MAX_TEXT = 300  # titles and labels are cut to this, on one line


def file_part(name: str) -> str:
    """A head id or VFM name as a file name part (``llm:qwen2-0.5b:generate`` -> ``llm_qwen2-0.5b_generate``)."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", name).strip("_.") or "x"


def entry_file(vfm: str, head_id: str) -> str:
    return f"{file_part(head_id)}/{file_part(vfm)}.json"


def _text(where: str, value: Any, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise PublishedError(f"{where} must be a non-empty string, not {value!r}")
    return " ".join(value.split())[:MAX_TEXT]


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PublishedError(f"{where} must be true or false, not {value!r}")
    return value


def _count(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PublishedError(f"{where} must be a count (an integer >= 0), not {value!r}")
    return value


def _object(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PublishedError(f"{where} must be an object, not {type(value).__name__}")
    return value


def _strict_json(where: str, data: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise PublishedError(f"{where}: {name} is not a number in a results file")

    try:
        return json.loads(data.decode("utf-8"), parse_constant=refuse)
    except UnicodeDecodeError as e:
        raise PublishedError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        at = f"line {e.lineno}, column {e.colno}"
        raise PublishedError(f"{where}: not valid JSON ({e.msg}: {at}), truncated?") from None
    except RecursionError:
        raise PublishedError(f"{where}: JSON nested too deeply") from None


def _interval(where: str, value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(not isinstance(v, bool) and isinstance(v, int | float) for v in value)
        and value[0] <= value[1]
    )
    if not ok:
        raise PublishedError(f"{where} must be [low, high] (two numbers, low <= high) or null, not {value!r}")
    return float(value[0]), float(value[1])


def _ability(where: str, key: str, d: Any) -> tuple[Column, Cell]:
    from ava.abilities import ABILITIES

    d = _object(where, d)
    metric = _text(f"{where}.metric", d.get("metric"))
    if metric not in METRIC_RANGES:
        raise PublishedError(f"{where}.metric {metric!r} is not a metric of ava ({', '.join(METRIC_RANGES)})")
    hib = _bool(f"{where}.higher_is_better", d.get("higher_is_better"))
    try:
        ability = ABILITIES.get(key)
    except AvaError:
        ability = None  # a plugin's ability this ava does not have: kept as published
    if ability is not None and (ability.metric != metric or ability.higher_is_better != hib):
        raise PublishedError(f"{where}: ava scores {key} with {ability.metric}, the entry says {metric}")
    n = _count(f"{where}.n", d.get("n"))
    unparsed = _count(f"{where}.n_unparsed", d.get("n_unparsed", 0))
    if unparsed > n:
        raise PublishedError(f"{where}: n_unparsed {unparsed} is more than n {n}")
    if "value" not in d:
        raise PublishedError(f"{where} has no value (null for an ability not scored)")
    value = check_value(f"{where}.value", metric, d["value"])
    if (value is None) != (n == 0):
        raise PublishedError(f"{where}: value {d['value']!r} with n {n} (a score needs samples; no samples, no score)")
    sample_set = d.get("sample_set")
    if sample_set is not None and not isinstance(sample_set, str):
        raise PublishedError(f"{where}.sample_set must be a hash (a string) or null")
    cell = Cell(value, value, None, n, unparsed, _interval(f"{where}.interval", d.get("interval")), sample_set)
    return Column(key, metric, hib), cell


def parse_entry(where: str, data: Any) -> tuple[Entry, dict[str, Column]]:
    """One entry file's content, checked field by field (errors name ``where`` and the field)."""
    data = _object(where, data)
    if data.get("format") != ENTRY_FORMAT or data.get("format_version") != FORMAT_VERSION:
        raise PublishedError(
            f"{where}: not an {ENTRY_FORMAT} file of version {FORMAT_VERSION} "
            f"(format {data.get('format')!r}, version {data.get('format_version')!r})"
        )
    abilities = _object(f"{where}.abilities", data.get("abilities"))
    if not abilities:
        raise PublishedError(f"{where}.abilities is empty")
    columns, cells = {}, {}
    for key, d in abilities.items():
        columns[key], cells[key] = _ability(f"{where}.abilities.{key}", key, d)
    identity = data.get("data_identity")
    per_ability: dict[str, str] = {}
    if identity is not None:
        block = _object(f"{where}.data_identity", identity)
        per = _object(f"{where}.data_identity.per_ability", block.get("per_ability"))
        for k, v in per.items():
            per_ability[str(k)] = _text(f"{where}.data_identity.per_ability.{k}", v)
    split = _object(f"{where}.split", data.get("split") or {})
    vfm = _text(f"{where}.vfm", data.get("vfm"))
    entry = Entry(
        vfm=vfm,
        name=vfm,
        head=_text(f"{where}.head", data.get("head")),
        head_id=_text(f"{where}.head_id", data.get("head_id")),
        head_label=_text(f"{where}.head_label", data.get("head_label")),
        cells=cells,
        random_weights=_bool(f"{where}.vfm_random_weights", data.get("vfm_random_weights"))
        or _bool(f"{where}.llm_random_weights", data.get("llm_random_weights")),
        synthetic=_bool(f"{where}.synthetic", data.get("synthetic")),
        split={str(k): v for k, v in split.items() if isinstance(v, str | int | float | bool) or v is None},
        data_identity=per_ability,
        details={
            "weights": _text(f"{where}.weights", data.get("weights"), required=False),
            "decode": _text(f"{where}.decode", data.get("decode"), required=False) or None,
            "split_label": _text(f"{where}.split_label", data.get("split_label"), required=False),
            "run": data.get("run") if isinstance(data.get("run"), dict) else {},
            "versions": data.get("versions") if isinstance(data.get("versions"), dict) else {},
            "interval": data.get("interval") if isinstance(data.get("interval"), dict) else {},
        },
    )
    return entry, columns


# -- reading -----------------------------------------------------------------------------------------------------
def _folder(location: str, option: str) -> Any:
    from ava.cache.location import cache_path, probe

    path = cache_path(location, option=option)
    probe(path, write=False, option=option)
    return path


def _read_bytes(path: Any, where: str, expect: int | None = None) -> bytes:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise PublishedError(f"{where}: missing") from None
    if size > MAX_BYTES:
        raise PublishedError(f"{where}: {size} bytes, more than a results file holds ({MAX_BYTES})")
    if expect is not None and size != expect:
        raise PublishedError(f"{where}: {size} bytes, the index says {expect} (truncated or changed since export)")
    return path.read_bytes()


def _index(root: Any, where: str) -> dict[str, Any]:
    index_path = root / INDEX
    if not index_path.is_file():
        what = f"no {INDEX} (not a results folder `ava results export` wrote)" if root.exists() else "no such folder"
        raise PublishedError(f"{where}: {what}")
    index = _object(f"{where}/{INDEX}", _strict_json(f"{where}/{INDEX}", _read_bytes(index_path, f"{where}/{INDEX}")))
    if index.get("format") != FORMAT or index.get("format_version") != FORMAT_VERSION:
        raise PublishedError(
            f"{where}/{INDEX}: not an {FORMAT} index of version {FORMAT_VERSION} "
            f"(format {index.get('format')!r}, version {index.get('format_version')!r})"
        )
    if not isinstance(index.get("entries"), list) or not index["entries"]:
        raise PublishedError(f"{where}/{INDEX}: entries must be a non-empty list")
    return index


def _listed(where: str, i: int, line: Any) -> tuple[str, str, int]:
    at = f"{where}/{INDEX}: entries[{i}]"
    line = _object(at, line)
    rel = line.get("file")
    parts = rel.split("/") if isinstance(rel, str) else []
    if len(parts) != 2 or not all(_NAME.match(p) and p not in (".", "..") for p in parts) or not rel.endswith(".json"):
        raise PublishedError(f"{at}.file must be <head>/<vfm>.json inside the folder, not {rel!r}")
    digest = line.get("sha256")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise PublishedError(f"{at}.sha256 must be a SHA-256 hex digest")
    return rel, digest, _count(f"{at}.bytes", line.get("bytes"))


def read_folder(location: str, *, option: str = "--published") -> Source:
    """A results folder (local path or fsspec URL) as a :class:`Source`; every fault is a :class:`PublishedError`."""
    from ava.cache.location import list_sizes

    root = _folder(str(location), option)
    where = f"{option} {location}"
    index = _index(root, where)
    listed: dict[str, tuple[str, int]] = {}
    for i, line in enumerate(index["entries"]):
        rel, digest, size = _listed(where, i, line)
        if rel in listed:
            raise PublishedError(f"{where}/{INDEX}: {rel} is listed twice")
        listed[rel] = (digest, size)
    planted = sorted(f for f in list_sizes(root) if f.endswith(".json") and f != INDEX and f not in listed)
    if planted:
        raise PublishedError(f"{where}: {planted[0]} is not listed in {INDEX} (planted, or left by another export?)")
    entries, columns, seen = [], {}, {}
    for rel, (digest, size) in listed.items():
        at = f"{where}/{rel}"
        data = _read_bytes(root / rel, at, size)
        if hashlib.sha256(data).hexdigest() != digest:
            raise PublishedError(f"{at}: its SHA-256 differs from the one in {INDEX} (changed since export)")
        entry, cols = parse_entry(at, _strict_json(at, data))
        if rel != entry_file(entry.vfm, entry.head_id):
            right = entry_file(entry.vfm, entry.head_id)
            raise PublishedError(f"{at}: holds {entry.vfm} under {entry.head_id}, which belongs in {right}")
        key = (entry.vfm, entry.head_id)
        if key in seen:
            raise PublishedError(f"{at}: a second entry of {entry.vfm} under {entry.head_id} (first: {seen[key]})")
        seen[key] = rel
        for ab, col in cols.items():
            seen_col = columns.get(ab, col)
            if (seen_col.metric, seen_col.higher_is_better) != (col.metric, col.higher_is_better):
                raise PublishedError(f"{at}: {ab} is scored with {col.metric} here, {columns[ab].metric} elsewhere")
            columns.setdefault(ab, col)
        entries.append(entry)
    from ava.abilities import ABILITIES

    order = [a for a in ABILITIES if a in columns] + sorted(a for a in columns if a not in ABILITIES)
    return Source(
        kind="folder",
        location=str(root),
        title=_text(f"{where}/{INDEX}.title", index.get("title"), required=False) or f"results folder {location}",
        provenance={
            "exported": _text(f"{where}/{INDEX}.created", index.get("created"), required=False),
            "ava_version": _text(f"{where}/{INDEX}.ava_version", index.get("ava_version"), required=False),
        },
        columns={a: columns[a] for a in order},
        entries=entries,
        split_public=True,
        split_text="as each entry records",
    )


# -- writing -----------------------------------------------------------------------------------------------------
def _dumps(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _readme(index: dict[str, Any], entries: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"# {index['title']}",
        "",
        f"Ability fingerprints exported by ava {index.get('ava_version')} on {index.get('created')} "
        f"(`ava results export`): {len(entries)} entries, one file per VFM and head.",
        "",
        "| VFM | head | abilities | data | split | random weights | file |",
        "|---|---|---|---|---|---|---|",
    ]
    for rel, e in entries.items():
        rand = [w for w, flag in (("VFM", e.get("vfm_random_weights")), ("LLM", e.get("llm_random_weights"))) if flag]
        lines.append(
            f"| {e.get('vfm', rel)} | {e.get('head_label', '?')} | {len(e.get('abilities') or {})} | "
            f"{'synthetic' if e.get('synthetic') else 'real'} | {e.get('split_label') or '?'} | "
            f"{' + '.join(rand) or 'no'} | `{rel}` |"
        )
    lines += [
        "",
        "Values are in ava's units (accuracy, ANLS and MAE/GT as fractions, GIoU from -1 to 1, CIEDE2000 in delta E), "
        "each with n and a 95% percentile bootstrap interval over the test samples. Each entry records the data "
        "identity per ability (a SHA-256 over the ability's sample records: ids, splits, images by content, "
        "questions, truths) and the scored samples' hash: runs on the same data have the same digests.",
        "",
        "Compare your runs with these without re-running them:",
        "",
        "    ava report RUNS... --published <this folder or its URL> --out report/",
        "",
        "A run is comparable with an entry when its head (registry name, LLM, decode) and its data identity are the "
        "same; otherwise the report ranks them together under a banner that says what differs.",
        "",
    ]
    return "\n".join(lines)


def write_folder(
    entries: list[dict[str, Any]], out: str, *, title: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Write (or add to) the results folder ``out`` (a path or fsspec URL): each entry file, then ``index.json``
    listing all of them with their digests, then ``README.md``. An entry already in the folder (same VFM and head)
    is refused unless ``force``. Returns the index written."""
    from ava.cache.location import cache_path, probe, write_text_atomic

    root = cache_path(out, option="--out")
    probe(root, write=True, option="--out")
    where = f"--out {out}"
    old: dict[str, dict[str, Any]] = {}
    if (root / INDEX).is_file():
        index = _index(root, where)
        old = {rel: line for i, line in enumerate(index["entries"]) for rel in [_listed(where, i, line)[0]]}
        title = title or index.get("title")
    elif root.exists() and any(True for _ in root.iterdir()):
        raise PublishedError(f"{where}: exists and is not a results folder (no {INDEX}); choose an empty or new folder")
    files: dict[str, bytes] = {}
    for e in entries:
        parse_entry(f"entry {e.get('vfm')!r} under {e.get('head_id')!r}", json.loads(_dumps(e)))  # what readers check
        rel = entry_file(e["vfm"], e["head_id"])
        if rel in files:
            raise PublishedError(f"two runs of {e['vfm']} under head {e['head_id']}: export one of them")
        if rel in old and not force:
            raise PublishedError(f"{where}: already holds {rel}; give --force to replace it")
        files[rel] = _dumps(e)
    if hasattr(root, "mkdir"):
        root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        path = root / rel
        if hasattr(path.parent, "mkdir"):
            path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, data.decode("utf-8"))
    lines = {**old}
    for rel, data in files.items():
        e = json.loads(data)
        lines[rel] = {
            "file": rel,
            "vfm": e["vfm"],
            "head_id": e["head_id"],
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
        }
    from ava import __version__

    index = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "title": " ".join(str(title or "Ability fingerprints").split())[:MAX_TEXT],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "ava_version": __version__,
        "entries": [lines[k] for k in sorted(lines)],
    }
    write_text_atomic(root / INDEX, _dumps(index).decode("utf-8"))
    shown = {rel: json.loads(files[rel]) if rel in files else _entry_for_card(root, rel) for rel in sorted(lines)}
    write_text_atomic(root / README, _readme(index, shown))
    return index


def _entry_for_card(root: Any, rel: str) -> dict[str, Any]:
    """An entry already in the folder, as the card lists it (its fields as written; not re-checked here)."""
    try:
        data = json.loads((root / rel).read_bytes())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
