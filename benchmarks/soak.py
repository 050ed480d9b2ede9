"""Soak: the cache and run commands over and over while faults arrive at random moments, then nothing may be lost.

    python benchmarks/soak.py --minutes 30 --seed 0 [--json]

Each cycle runs one command as a user would (``ava cache extract`` to a local disk and to an S3-compatible server,
``ava fingerprint``, ``ava sweep --executor local``, ``ava cache push``/``pull``), chosen with the seed, while one
fault chosen with the seed arrives: the command's process group is killed with SIGKILL at a random moment, its
output goes to a small disk (a size-limited tmpfs) that fills up, or the fault-injecting proxy between the client
and the S3 server (:mod:`fault_proxy`) drops connections, stalls, answers 503 or 500 or stops listening for a while.
A command that failed must have said why in one line (an ``error:`` line that is not an internal error); it is
then run again without the fault and must finish (resume). After every cycle the caches it touched verify (``ava
cache verify``'s checks), their content digests equal the fault-free run's, the runs it finished hold the
fault-free run's results bit for bit (scores and every prediction), and no lock, lease, probe or temporary object
is left. The figures (cycles, faults by kind, differences, internal errors, leftovers) are printed, and with
``--json`` recorded through :mod:`results`.

The S3 server is moto's (its HTTP API, as the tests use it); the small disk needs root (``mount -t tmpfs``) and is
skipped, and said, without it. Commands run as processes forked from a server that has ava imported
(:mod:`multiprocessing`'s forkserver), so a cycle costs the command's work, not Python's start-up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_proxy import FaultProxy  # noqa: E402

BUCKET = "ava-soak"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
# what the commands import, imported once by the server the command processes fork from
PRELOAD = [
    *("ava.cli.main", "ava.api", "ava.cache", "ava.cache.transfer", "ava.heads.fingerprint", "ava.heads.knn"),
    *("ava.heads.probe", "ava.metrics", "ava.report", "ava.sweep.local", "ava.vfm", "typer._adapters", "rich.progress"),
    *("torch", "zarr", "s3fs", "aiobotocore.session", "faiss", "matplotlib.pyplot", "colour", "pydantic"),
]
DISK_BYTES = 16 << 20  # the small disk
FAULTS = ("none", "kill", "store", "disk")
STORE_MODES = ("drop", "error", "stall", "refuse")
OPS = ("extract_local", "extract_s3", "fingerprint", "push", "pull", "sweep")
OP_WEIGHTS = (4, 2, 3, 2, 3, 1)  # a sweep's jobs are fresh processes: its cycles are the slowest
# what ava prints for an exception it did not expect, and Python for one nobody caught (a store's own message may say
# "internal error": S3's InternalError is an outage, said as one)
INTERNAL = re.compile(r"^error: internal error: |^Traceback \(most recent call last\)", re.MULTILINE)


def run_cli(argv: list[str], env: dict[str, str], cwd: str, log: str) -> None:
    """A command's process (forked from the preloaded server): its own process group (a kill takes its children
    too: DataLoader workers, a sweep's jobs), output to ``log``."""
    os.setpgid(0, 0)
    os.environ.update(env)
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from ava.cli.main import main

    sys.argv = ["ava", *argv]
    main(argv)


def _first_report(text: str, limit: int = 2000) -> str:
    """The first traceback or internal-error report in a command's output with what printed it (the line before:
    asyncio, a thread, an ignored exception) and what follows (chained exceptions), cut to ``limit`` characters."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if INTERNAL.search(ln))
    report = "\n".join(lines[max(0, at - 1) : at + 80])
    return report if len(report) <= limit else report[: limit // 2] + "\n...\n" + report[-limit // 2 :]


@dataclass
class Outcome:
    rc: int | None
    seconds: float
    last: str
    text: str


@dataclass
class Tally:
    cycles: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    failed_clearly: int = 0
    killed: int = 0
    resumed: int = 0
    differences: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    by_op: dict[str, int] = field(default_factory=dict)


class Soak:
    def __init__(self, work: Path, seed: int, endpoint: str, ops: tuple[str, ...] = OPS) -> None:
        self.work, self.rng = work, random.Random(seed)
        self.direct = endpoint
        self.proxy = FaultProxy(endpoint, seed=seed).start()
        self.env = {**S3_ENV, "AWS_ENDPOINT_URL": self.proxy.url, "AWS_MAX_ATTEMPTS": "2", "COLUMNS": "300"}
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(PRELOAD)
        self.tally = Tally()
        self.ops = ops
        self.data = work / "data"
        self.small = self._mount_small_disk(work / "small")
        self.expected: dict[str, float] = {}  # op -> seconds of its fault-free run (where a kill lands)
        self.ref: dict[str, Any] = {}

    # -- the fixtures ------------------------------------------------------------------------------------------------
    def _mount_small_disk(self, where: Path) -> Path | None:
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(where)], capture_output=True, check=False
        )
        return where if done.returncode == 0 else None

    def close(self) -> None:
        self.proxy.stop()
        if self.small is not None:
            subprocess.run(["umount", str(self.small)], check=False)

    def run(self, argv: list[str], *, kill_after: float | None = None, timeout: float = 600) -> Outcome:
        log = self.work / "logs" / f"{uuid.uuid4().hex[:8]}.log"
        log.parent.mkdir(exist_ok=True)
        t0 = time.monotonic()
        p = self.ctx.Process(target=run_cli, args=(argv, self.env, str(self.work), str(log)))
        p.start()
        try:
            p.join(kill_after if kill_after is not None else timeout)
        except BaseException:  # the soak itself interrupted: the command goes with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            raise
        if p.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL if kill_after is not None else signal.SIGTERM)
            p.join()
        # a killed group's children may outlive the leader for a moment: wait until none is left
        _wait_group_gone(p.pid)
        text = log.read_text(errors="replace") if log.is_file() else ""
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
        log.unlink(missing_ok=True)
        return Outcome(p.exitcode, time.monotonic() - t0, last, text)

    # -- the commands ------------------------------------------------------------------------------------------------
    def argv(self, op: str, target: str, out: str | None = None) -> list[str]:
        given = ["--vfm", "pixels", "--data", str(self.data), "--cache", target]
        if op in ("extract_local", "extract_s3"):  # (--force: a disk too small is met by the writes, not the plan)
            return ["cache", "extract", *given, "--shard-size", "4", "--force", "-q"]
        if op == "fingerprint":
            return ["fingerprint", *given, "--out", str(out), "--head", "knn", "--head", "probe-linear", "-q"]
        if op == "push":
            return ["cache", "push", target, str(out)]
        if op == "pull":
            return ["cache", "pull", target, str(out)]
        if op == "sweep":
            return ["sweep", *given, "--head", "knn", "--out", str(out), "--executor", "local"]
        raise ValueError(op)

    # -- what is checked ---------------------------------------------------------------------------------------------
    def digest(self, cache: str) -> str:
        from ava.cache import content_digest, open_cache, verify_cache

        with self.direct_env():
            report = verify_cache(cache)
            if not report["ok"]:
                raise AssertionError(f"{cache} does not verify: {report['problems'][:3]}")
            return content_digest(open_cache(cache, "pixels").group)

    @contextlib.contextmanager
    def direct_env(self) -> Any:
        """The checks read the S3 server directly, past the proxy."""
        saved = os.environ.get("AWS_ENDPOINT_URL")
        os.environ.update({**S3_ENV, "AWS_ENDPOINT_URL": self.direct})
        try:
            yield
        finally:
            os.environ["AWS_ENDPOINT_URL"] = saved or self.direct

    @staticmethod
    def results(out: Path) -> dict[str, Any]:
        """Per run directory under ``out``: its scores and the bytes of its predictions."""
        found = {}
        for results in sorted(out.rglob("results_test.json")):
            run = results.parent
            scores = json.loads(results.read_text())["abilities"]
            preds = (run / "predictions_test.jsonl").read_bytes()
            found[run.name] = {"scores": {a: r["value"] for a, r in scores.items()}, "predictions": preds}
        return found

    def leftovers(self, root: Path | str) -> list[str]:
        """Temporaries, probe and lease objects under ``root``, and lock files someone still holds."""
        import fcntl

        if isinstance(root, str):
            import s3fs

            with self.direct_env():
                fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
                names = fs.find(root.removeprefix("s3://"))
            return [n for n in names if n.rsplit("/", 1)[-1].startswith((".extract.lease", ".ava-probe"))]
        bad = []
        for here, dirs, files in os.walk(root):
            for name in files + dirs:
                path = Path(here) / name
                if name.endswith((".tmp", ".partial")) or name.startswith(".ava-probe"):
                    bad.append(str(path))
                elif name in (".extract.lock", ".lock"):
                    with open(path) as f:
                        try:
                            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except OSError:
                            bad.append(f"{path} (held)")
        return bad

    # -- one cycle ---------------------------------------------------------------------------------------------------
    def plan(self, i: int) -> tuple[str, str, list[str], Any, Any]:
        """(op, fault, argv, what to check, where the output is) of cycle ``i``."""
        op = self.rng.choices(self.ops, [OP_WEIGHTS[OPS.index(o)] for o in self.ops])[0]
        faults = {
            "extract_local": ("none", "kill", "disk"),
            "extract_s3": ("kill", "store", "store"),
            "fingerprint": ("kill", "disk", "store"),
            "push": ("kill", "store"),
            "pull": ("kill", "store", "disk"),
            "sweep": ("none", "kill"),
        }[op]
        fault = self.rng.choice(faults)
        if fault == "disk" and self.small is None:
            fault = "kill"
        base = self.small if fault == "disk" else self.work / "c"
        assert base is not None
        base.mkdir(exist_ok=True)
        s3 = f"s3://{BUCKET}/c{i}"
        if op == "extract_local":
            out = base / f"ext{i}"
            return op, fault, self.argv(op, str(out)), ("cache", str(out)), out
        if op == "extract_s3":
            return op, fault, self.argv(op, s3), ("cache", s3), s3
        if op == "fingerprint":
            cache = self.ref["s3_cache"] if fault == "store" else self.ref["cache"]
            out = base / f"fp{i}"
            return op, fault, self.argv(op, cache, str(out)), ("runs", out, "fingerprint"), out
        if op == "push":
            return op, fault, self.argv(op, self.ref["cache"], s3), ("cache", s3), s3
        if op == "pull":
            out = base / f"pull{i}"
            return op, fault, self.argv(op, self.ref["s3_cache"], str(out)), ("cache", str(out)), out
        out = self.work / "c" / f"sw{i}"
        return op, fault, self.argv(op, str(out / "cache"), str(out / "runs")), ("runs", out / "runs", "sweep"), out

    def cycle(self, i: int) -> tuple[str, str]:
        """One command under one fault, its rerun if it failed, and the checks; returns (command, fault)."""
        op, fault, argv, check, out = self.plan(i)
        t = self.tally
        t.faults[fault] = t.faults.get(fault, 0) + 1
        t.by_op[op] = t.by_op.get(op, 0) + 1
        timers: list[threading.Timer] = []
        kill_after = None
        filler = None
        if fault == "kill":
            kill_after = self.rng.uniform(0.05, 1.1) * self.expected[op]
        elif fault == "store":
            mode = self.rng.choice(STORE_MODES)
            start = self.rng.uniform(0.0, 0.8) * self.expected[op]
            window = self.rng.uniform(0.5, 3.0)
            p = {"drop": 0.3, "error": 0.6}.get(mode, 1.0)
            status = self.rng.choice((503, 500)) if mode == "error" else 503  # shedding load, or failing
            timers = [
                threading.Timer(start, self.proxy.set, (mode,), {"p": p, "seconds": 1.5, "status": status}),
                threading.Timer(start + window, self.proxy.set, ("pass",)),
            ]
            for tm in timers:
                tm.daemon = True
                tm.start()
        elif fault == "disk":
            assert self.small is not None
            filler = self.small / ".filler"
            free = shutil.disk_usage(self.small).free
            leave = int(self.rng.uniform(0.05, 0.9) * self.ref["bytes"])
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                f.write(b"\0" * max(0, free - leave))
        first = self.run(argv, kill_after=kill_after)
        for tm in timers:
            tm.cancel()
        self.proxy.set("pass")
        if filler is not None:
            filler.unlink(missing_ok=True)
        self._judge(i, op, fault, first)
        if first.rc != 0:
            again = self.run(argv)
            self._judge(i, op, "none", again)
            t.resumed += 1
            if again.rc != 0:
                t.differences.append(f"cycle {i} {op}: did not finish after a {fault} fault: {again.last}")
                return op, fault
        self._check(i, op, check)
        self._clean(out)
        t.cycles += 1
        return op, fault

    def _judge(self, i: int, op: str, fault: str, o: Outcome) -> None:
        t = self.tally
        if INTERNAL.search(o.text):
            t.internal_errors.append(f"cycle {i} {op} ({fault}), exit {o.rc}: {_first_report(o.text)}")
        if o.rc in (0, None):
            return
        if o.rc == -signal.SIGKILL:
            t.killed += 1
        elif o.last.startswith("error:") and not INTERNAL.search(o.last):
            t.failed_clearly += 1
        else:
            t.internal_errors.append(f"cycle {i} {op} ({fault}): exit {o.rc} without one error line: {o.last[:300]}")

    def _check(self, i: int, op: str, check: Any) -> None:
        t = self.tally
        try:
            if check[0] == "cache":
                got = self.digest(check[1])
                if got != self.ref["digest"]:
                    t.differences.append(f"cycle {i} {op}: digest {got[:16]} != {self.ref['digest'][:16]}")
                t.leftovers += self.leftovers(check[1] if check[1].startswith("s3://") else Path(check[1]))
            else:
                runs = self.results(check[1])
                want = self.ref[check[2]]
                if runs != want:
                    t.differences.append(f"cycle {i} {op}: results differ from the fault-free run's ({sorted(runs)})")
                t.leftovers += self.leftovers(check[1])
        except Exception as e:  # noqa: BLE001 - a check that cannot be made is a difference
            t.differences.append(f"cycle {i} {op}: check failed: {type(e).__name__}: {e}")

    def _clean(self, out: Path | str) -> None:
        if isinstance(out, str):
            import s3fs

            with self.direct_env():
                fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
                with contextlib.suppress(FileNotFoundError):
                    fs.rm(out.removeprefix("s3://"), recursive=True)
        else:
            shutil.rmtree(out, ignore_errors=True)

    # -- the fault-free run ------------------------------------------------------------------------------------------
    def reference(self) -> None:
        from ava.api import synthesize

        synthesize(self.data, per_ava=8, size=64, ava=["color", "counting"], seed=0)
        ref = self.work / "ref"
        runs = {
            "extract_local": self.argv("extract_local", str(ref / "cache")),
            "extract_s3": self.argv("extract_s3", f"s3://{BUCKET}/ref"),
            "fingerprint": self.argv("fingerprint", str(ref / "cache"), str(ref / "runs")),
            "push": self.argv("push", str(ref / "cache"), f"s3://{BUCKET}/ref-push"),
            "pull": self.argv("pull", f"s3://{BUCKET}/ref", str(ref / "pulled")),
            "sweep": self.argv("sweep", str(ref / "sweep" / "cache"), str(ref / "sweep" / "runs")),
        }
        for op, argv in runs.items():
            o = self.run(argv)
            if o.rc != 0:
                raise SystemExit(f"the fault-free {op} failed: {o.last}")
            self.expected[op] = o.seconds
        self.ref.update(cache=str(ref / "cache"), s3_cache=f"s3://{BUCKET}/ref")
        self.ref["digest"] = self.digest(self.ref["cache"])
        for other in (f"s3://{BUCKET}/ref", f"s3://{BUCKET}/ref-push", str(ref / "pulled")):
            if self.digest(other) != self.ref["digest"]:
                raise SystemExit(f"the fault-free copy {other} differs from the extracted cache")
        self.ref["bytes"] = sum(p.stat().st_size for p in (ref / "cache").rglob("*") if p.is_file())
        self.ref["fingerprint"] = self.results(ref / "runs")
        self.ref["sweep"] = self.results(ref / "sweep" / "runs")
        if self.small is not None and self.ref["bytes"] * 3 > DISK_BYTES:
            raise SystemExit(f"the cache ({self.ref['bytes']} bytes) does not fit the small disk three times")


def _wait_group_gone(pgid: int, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.05)


def s3_server() -> tuple[subprocess.Popen, str]:
    """moto's S3 server in a process of its own (its Python threads would share this process's lock with the proxy
    and the checks), with the soak's bucket; (the process, its endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    while True:  # up once it accepts a connection
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None:
                raise SystemExit("moto's server did not start (pip install 'moto[server]')") from None
            time.sleep(0.1)
    os.environ.update({**S3_ENV, "AWS_ENDPOINT_URL": endpoint})
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return server, endpoint


def soak(minutes: float, seed: int, work: Path, min_cycles: int = 0, ops: tuple[str, ...] = OPS) -> dict[str, Any]:
    """Run cycles of ``ops`` for ``minutes`` (and at least ``min_cycles``); returns the tally and what the run had."""
    server, endpoint = s3_server()
    s = Soak(work, seed, endpoint, ops)
    try:
        t0 = time.monotonic()
        s.reference()
        ref_s = time.monotonic() - t0
        end = time.monotonic() + minutes * 60
        i = 0
        seen = {"differences": 0, "internal_errors": 0, "leftovers": 0}
        while time.monotonic() < end or s.tally.cycles < min_cycles:
            c0 = time.monotonic()
            op, fault = s.cycle(i)
            i += 1
            for kind, n in seen.items():
                found = getattr(s.tally, kind)
                for problem in found[n:]:
                    print(f"  {kind}: {problem}", flush=True)
                seen[kind] = len(found)
            print(
                f"cycle {i} ({op}, {fault}, {time.monotonic() - c0:.1f} s): {s.tally.cycles} ok, "
                f"{len(s.tally.differences)} differences, {len(s.tally.internal_errors)} internal errors, "
                f"{len(s.tally.leftovers)} leftovers",
                flush=True,
            )
        t = s.tally
        return {
            "cycles": t.cycles,
            "attempted": i,
            "seconds": round(time.monotonic() - t0 - ref_s, 1),
            "faults": t.faults,
            "ops": t.by_op,
            "killed": t.killed,
            "failed_clearly": t.failed_clearly,
            "resumed": t.resumed,
            "differences": t.differences,
            "internal_errors": t.internal_errors,
            "leftovers": t.leftovers,
            "small_disk": s.small is not None,
            "proxy": vars(s.proxy.counts),
        }
    finally:
        s.close()
        server.terminate()
        server.wait()


def main() -> None:
    import results

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-cycles", type=int, default=0, help="run on past --minutes until this many cycles")
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one, removed)")
    ap.add_argument("--ops", default=",".join(OPS), help=f"the commands cycled through (default: all of {OPS})")
    results.json_option(ap)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ava-soak-"))
    load = os.getloadavg()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a TERM, as a Ctrl-C, unmounts and stops the server
    try:
        ops = tuple(o for o in args.ops.split(",") if o)
        if not ops or set(ops) - set(OPS):
            raise SystemExit(f"--ops {args.ops}: name some of {', '.join(OPS)}")
        found = soak(args.minutes, args.seed, work, args.min_cycles, ops)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    found["load_before"] = [round(v, 2) for v in load]
    found["load_after"] = [round(v, 2) for v in os.getloadavg()]
    print(json.dumps(found, indent=1))
    note = f"{args.minutes:g} min, seed {args.seed}, load {found['load_before'][0]} -> {found['load_after'][0]}"
    figures = [
        results.figure("cycles", found["cycles"], "cycles", ">= 200 in 30 min" if args.minutes >= 30 else None, note),
        results.figure("differences", len(found["differences"]), "", "0", "digest or result differences"),
        results.figure("internal_errors", len(found["internal_errors"]), "", "0"),
        results.figure("leftovers", len(found["leftovers"]), "", "0", "locks held, leases, probes, temporaries"),
    ]
    written = results.write(args.json, "soak", figures, [found], found)
    if written is not None:
        print(f"recorded in {written}")
    sys.exit(1 if found["differences"] or found["internal_errors"] or found["leftovers"] else 0)


if __name__ == "__main__":
    main()
