#!/usr/bin/env python3
"""Throwaway single-node Ceph RADOS Gateway (S3) on loopback, for tests and users.

Ceph 16 has no stand-alone RGW backend, so this boots a minimal cluster: one
monitor, one OSD on ``memstore`` (data in RAM), no cephx, messenger v1 only,
pools of size 1, and ``radosgw`` with the beast frontend on 127.0.0.1.
Everything (conf, keyrings, mon/osd data, logs, pid files, admin sockets)
lives in one directory, so several instances can run side by side and nothing
is written to /etc/ceph or /var/lib/ceph.

Usage::

    python infra/rgw.py install
    python infra/rgw.py start [--dir DIR] [--port PORT] [--lc-debug-interval N]
    python infra/rgw.py env --dir DIR
    python infra/rgw.py stop --dir DIR [--keep]

From Python (e.g. a pytest fixture loading this file with importlib)::

    info = rgw.start(None, None, 10)
    ...
    rgw.stop(info)

Stdlib only (Python 3.11+).
"""

import argparse
import contextlib
import dataclasses
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

HOST = "127.0.0.1"
REGION = "us-east-1"
ACCESS_KEY = "EVSTORETESTACCESSKEY"
SECRET_KEY = "evstore-test-secret-key-do-not-use-in-prod"
S3_UID = "evstore"
INFO_FILE = "rgw.json"
APT_PACKAGES = ("radosgw", "ceph-mon", "ceph-osd")
REQUIRED_BINARIES = (
    "radosgw",
    "radosgw-admin",
    "ceph",
    "ceph-mon",
    "ceph-osd",
    "monmaptool",
    "ceph-authtool",
)

MON_ID = "a"
OSD_ID = "0"
RGW_NAME = "client.rgw.evstore"
# Stop order matters: RGW hangs on shutdown when the OSD or the monitor is gone.
STOP_ORDER = ("rgw", "osd", "mon")
DAEMON_BINARY = {"rgw": "radosgw", "osd": "ceph-osd", "mon": "ceph-mon"}
DAEMON_LOG = {
    "rgw": f"{RGW_NAME}.log",
    "osd": f"osd.{OSD_ID}.log",
    "mon": f"mon.{MON_ID}.log",
}
# Entries start() creates inside DIR (and may remove when reusing a DIR).
OWNED_ENTRIES = (
    "ceph.conf",
    "keyring",
    "monmap",
    INFO_FILE,
    "mon",
    "osd",
    "rgw",
    "run",
    "log",
    "crash",
)


class RgwError(RuntimeError):
    """Installing, starting or stopping the gateway failed."""


@dataclasses.dataclass(frozen=True)
class RgwInfo:
    """How to reach a running gateway and which processes make it up."""

    endpoint: str
    access_key: str
    secret_key: str
    dir: Path
    pids: dict[str, int]
    port: int
    mon_port: int
    fsid: str
    region: str = REGION

    def to_json(self) -> dict[str, object]:
        return {
            "endpoint": self.endpoint,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "dir": str(self.dir),
            "pids": dict(self.pids),
            "port": self.port,
            "mon_port": self.mon_port,
            "fsid": self.fsid,
            "region": self.region,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "RgwInfo":
        pids_raw = data.get("pids", {})
        pids = {str(k): int(str(v)) for k, v in pids_raw.items()} if isinstance(pids_raw, dict) else {}
        return cls(
            endpoint=str(data["endpoint"]),
            access_key=str(data["access_key"]),
            secret_key=str(data["secret_key"]),
            dir=Path(str(data["dir"])),
            pids=pids,
            port=int(str(data.get("port", 0))),
            mon_port=int(str(data.get("mon_port", 0))),
            fsid=str(data.get("fsid", "")),
            region=str(data.get("region", REGION)),
        )

    def env(self) -> dict[str, str]:
        """Environment variables for AWS SDKs and the aws CLI."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }


# --------------------------------------------------------------------------
# install


def missing_binaries() -> list[str]:
    return [b for b in REQUIRED_BINARIES if shutil.which(b) is None]


def install() -> None:
    """apt-get install the Ceph packages unless ``radosgw`` is already there."""
    if shutil.which("radosgw") is not None and not missing_binaries():
        return
    if shutil.which("apt-get") is None:
        raise RgwError("install: apt-get not found; install radosgw, ceph-mon, ceph-osd by hand")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise RgwError("install: must run as root (or with sudo available)")
        prefix = ["sudo", "-E"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = [
        *prefix,
        "apt-get",
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        *APT_PACKAGES,
    ]
    if subprocess.run(cmd, check=False, env=env, stdout=sys.stderr).returncode == 0 and not missing_binaries():
        return
    # Unknown packages or a stale index: refresh once, then try again.
    update = subprocess.run([*prefix, "apt-get", "update", "-q"], check=False, env=env, stdout=sys.stderr)
    if update.returncode != 0:
        raise RgwError(f"install: apt-get update failed (exit {update.returncode})")
    proc = subprocess.run(cmd, check=False, env=env, stdout=sys.stderr)
    if proc.returncode != 0:
        raise RgwError(f"install: apt-get install failed (exit {proc.returncode})")
    still = missing_binaries()
    if still:
        raise RgwError(f"install: still missing after apt-get install: {', '.join(still)}")


# --------------------------------------------------------------------------
# helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def _listens(pid: int, port: int) -> bool:
    """True if process pid owns a TCP socket listening on HOST:port.

    A port picked as free may be taken by another program before our daemon
    binds it; answering on the port is then not proof that *our* daemon does.
    """
    want = f"{socket.htonl(0x7F000001):08X}:{port:04X}"  # 127.0.0.1 in /proc/net/tcp byte order
    inodes = set()
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == want and fields[3] == "0A":  # 0A = LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    except OSError:
        return False
    if not inodes:
        return False
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:
            continue
    return False


def _tail(path: Path, lines: int = 4, width: int = 600) -> str:
    """Last non-empty lines of a file on one line, without Ceph's log prefixes."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    kept = []
    for line in text.splitlines():
        parts = line.split(None, 3)
        # "2024-01-01T00:00:00.000+0000 7f00deadbeef -1 message"
        if len(parts) == 4 and parts[0][:4].isdigit() and "T" in parts[0]:
            line = parts[3]
        line = " ".join(line.split())
        if line:
            kept.append(line[:200])
    return " | ".join(kept[-lines:])[-width:]


def _pid_alive(pid: int) -> bool:
    """True while pid runs (a zombie counts as gone; reaps our own children)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _processes_using(conf: Path) -> dict[int, list[str]]:
    """Live processes whose command line names this conf file."""
    needle = str(conf)
    found: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        args = _cmdline(pid)
        if needle in args and _pid_alive(pid):
            found[pid] = args
    return found


def _role_of(args: Sequence[str]) -> str:
    exe = os.path.basename(args[0]) if args else ""
    for role, binary in DAEMON_BINARY.items():
        if exe == binary:
            return role
    return "other"


class _Booter:
    """One start attempt: owns the daemons it launched until it hands them over."""

    def __init__(
        self,
        root: Path,
        port: int,
        mon_port: int,
        lc_debug_interval: int | None,
        timeout: float,
    ):
        self.root = root
        self.port = port
        self.mon_port = mon_port
        self.lc_debug_interval = lc_debug_interval
        self.deadline = time.monotonic() + timeout
        self.fsid = str(uuid.uuid4())
        self.conf = root / "ceph.conf"
        self.log_dir = root / "log"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = dict(os.environ, CEPH_CONF=str(self.conf))
        for var in ("CEPH_ARGS", "CEPH_KEYRING"):
            self.env.pop(var, None)

    # -- small tools ------------------------------------------------------

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def _run(self, what: str, args: Sequence[str], timeout: float = 60.0) -> str:
        # Right after the monitor starts, a client can send its first command
        # before it has the monmap, with fsid 0000...; the monitor refuses it
        # ("wrong fsid" / "problem getting command descriptions"). Retry those.
        for attempt in range(5):
            limit = max(1.0, min(timeout, self._left()))
            try:
                proc = subprocess.run(
                    list(args),
                    check=False,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=limit,
                    cwd=self.root,
                )
            except subprocess.TimeoutExpired as exc:
                raise RgwError(f"{what}: `{shlex.join(args)}` timed out after {limit:.0f}s") from exc
            if proc.returncode == 0:
                return proc.stdout.decode("utf-8", "replace")
            out = (proc.stderr or proc.stdout).decode("utf-8", "replace")
            if _is_fsid_race(out) and attempt < 4 and self._left() > 1:
                time.sleep(0.2 * (attempt + 1))
                continue
            tail = " | ".join(ln.strip() for ln in out.splitlines() if ln.strip())[-400:]
            raise RgwError(f"{what}: `{shlex.join(args)}` exited {proc.returncode}: {tail}")
        raise AssertionError("unreachable")

    def _launch(self, role: str, args: Sequence[str]) -> None:
        out = (self.log_dir / f"{role}.stdout").open("ab")
        try:
            self.procs[role] = subprocess.Popen(
                list(args),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,  # detached: survives the caller's exit
                close_fds=True,
            )
        finally:
            out.close()

    def _failure(self, role: str, why: str) -> RgwError:
        log = self.log_dir / DAEMON_LOG[role]
        tail = _tail(log) or _tail(self.log_dir / f"{role}.stdout")
        return RgwError(f"{DAEMON_BINARY[role]} {why} (log {log}): {tail or 'no log output'}")

    def _check_alive(self, *roles: str) -> None:
        for role in roles:
            proc = self.procs.get(role)
            if proc is not None and proc.poll() is not None:
                raise self._failure(role, f"exited with code {proc.returncode} during startup")

    def _wait(self, role: str, ready: Callable[[], bool], what: str) -> None:
        delay = 0.02
        while True:
            self._check_alive(*self.procs)
            if ready():
                return
            if self._left() <= 0:
                raise self._failure(role, f"did not become ready ({what}) before the timeout")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    # -- boot steps -------------------------------------------------------

    def write_conf(self) -> None:
        r = self.root
        for sub in ("mon", "osd", "rgw", "run", "log", "crash"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        lc = ""
        if self.lc_debug_interval is not None:
            lc = f"rgw lc debug interval = {int(self.lc_debug_interval)}\n"
        # Several LC workers contend for the same shard locks and then sleep
        # 5 s uninterruptibly, which also delays RGW's shutdown.
        lc += "rgw lc max worker = 1\n"
        self.conf.write_text(
            f"""# generated by infra/rgw.py; throwaway single-node cluster
[global]
fsid = {self.fsid}
mon host = [v1:{HOST}:{self.mon_port}]
mon initial members = {MON_ID}
public addr = {HOST}
cluster addr = {HOST}
ms bind msgr2 = false
ms bind msgr1 = true
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
keyring = {r}/keyring
run dir = {r}/run
crash dir = {r}/crash
log file = {r}/log/$name.log
mon cluster log file = {r}/log/cluster.log
pid file = {r}/run/$name.pid
admin socket = {r}/run/$name.asok
log to stderr = false
err to stderr = true
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
mon max pg per osd = 1000
# pool creation waits for a paxos round (1 s by default): RGW creates ~8 pools
paxos propose interval = 0.01
paxos min wait = 0.01
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
# The OSD's own crush/device-class commands at boot can race its monclient
# and fail with "wrong fsid" (fsid 0000...) under load; place it ourselves.
osd crush update on start = false
osd class update on start = false

[mon]
# fail fast (and let start() pick new ports) if the port was taken meanwhile
ms bind retry count = 1
mon data = {r}/mon/$cluster-$id

[osd]
osd data = {r}/osd/$cluster-$id
osd objectstore = memstore
# a cap on the RAM the objects may take, not an allocation: benchmarks/resume.py at 100,000 messages
# overwrites a 107 MB snapshot object dozens of times (see the gc settings below), and failed with 2 GiB
memstore device bytes = 8589934592

[client]
admin socket =
log file = {r}/log/$name.log

[{RGW_NAME}]
admin socket = {r}/run/$name.asok
rgw data = {r}/rgw
rgw frontends = beast endpoint={HOST}:{self.port} tcp_nodelay=1
rgw dns name = {HOST}
rgw enable usage log = false
# an overwritten or deleted object's data is reclaimed within a minute (the default waits 2 hours,
# and the space of every overwrite stays taken until then)
rgw gc obj min wait = 30
rgw gc processor period = 30
{lc}"""
        )

    def make_mon(self) -> None:
        keyring = self.root / "keyring"
        self._run(
            "ceph-authtool",
            [
                "ceph-authtool",
                "--create-keyring",
                str(keyring),
                "--gen-key",
                "-n",
                "mon.",
                "--cap",
                "mon",
                "allow *",
            ],
        )
        self._run(
            "ceph-authtool",
            [
                "ceph-authtool",
                str(keyring),
                "--gen-key",
                "-n",
                "client.admin",
                "--cap",
                "mon",
                "allow *",
                "--cap",
                "osd",
                "allow *",
                "--cap",
                "mgr",
                "allow *",
            ],
        )
        monmap = self.root / "monmap"
        self._run(
            "monmaptool",
            [
                "monmaptool",
                "--create",
                "--clobber",
                "--fsid",
                self.fsid,
                "--addv",
                MON_ID,
                f"[v1:{HOST}:{self.mon_port}]",
                str(monmap),
            ],
        )
        self._run(
            "ceph-mon --mkfs",
            [
                "ceph-mon",
                "-c",
                str(self.conf),
                "--mkfs",
                "-i",
                MON_ID,
                "--monmap",
                str(monmap),
                "--keyring",
                str(keyring),
            ],
        )
        self._launch("mon", ["ceph-mon", "-c", str(self.conf), "-f", "-i", MON_ID])
        self._wait(
            "mon",
            lambda: _listens(self.procs["mon"].pid, self.mon_port),
            f"listening on {HOST}:{self.mon_port}",
        )

    def make_osd(self) -> None:
        osd_uuid = str(uuid.uuid4())  # must be the same for `osd new` and `--mkfs`
        ceph = ["ceph", "-c", str(self.conf), "--connect-timeout", "30"]
        self._check_alive("mon")
        osd_id = self._run("ceph osd new", [*ceph, "osd", "new", osd_uuid, OSD_ID]).strip()
        if osd_id != OSD_ID:
            raise RgwError(f"ceph osd new: expected osd id {OSD_ID}, got {osd_id!r}")
        self._run("ceph osd crush add", [*ceph, "osd", "crush", "add", f"osd.{OSD_ID}", "1.0", "root=default"])
        (self.root / "osd" / f"ceph-{OSD_ID}").mkdir(parents=True, exist_ok=True)
        self._run(
            "ceph-osd --mkfs",
            [
                "ceph-osd",
                "-c",
                str(self.conf),
                "-i",
                OSD_ID,
                "--mkfs",
                "--osd-uuid",
                osd_uuid,
            ],
        )
        self._launch("osd", ["ceph-osd", "-c", str(self.conf), "-f", "-i", OSD_ID])
        log = self.log_dir / DAEMON_LOG["osd"]
        self._wait("osd", lambda: _log_contains(log, "booting -> active"), "state active")

    def make_rgw(self) -> None:
        self._launch("rgw", ["radosgw", "-c", str(self.conf), "-f", "-n", RGW_NAME])
        pid = self.procs["rgw"].pid
        self._wait("rgw", lambda: _listens(pid, self.port) and _s3_answers(self.port), f"S3 answering on {HOST}:{self.port}")

    def make_user(self) -> None:
        args = [
            "radosgw-admin",
            "-c",
            str(self.conf),
            "-n",
            "client.admin",
            "user",
            "create",
            f"--uid={S3_UID}",
            f"--display-name={S3_UID}",
            f"--access-key={ACCESS_KEY}",
            f"--secret={SECRET_KEY}",
        ]
        self._check_alive(*self.procs)
        self._run("radosgw-admin user create", args)

    def boot(self) -> RgwInfo:
        self.write_conf()
        self.make_mon()
        self.make_osd()
        self.make_rgw()
        self.make_user()
        return RgwInfo(
            endpoint=f"http://{HOST}:{self.port}",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            dir=self.root,
            pids={role: p.pid for role, p in self.procs.items()},
            port=self.port,
            mon_port=self.mon_port,
            fsid=self.fsid,
        )

    def abort(self) -> None:
        live = {r: p.pid for r, p in self.procs.items() if p.poll() is None}
        _terminate(self.conf, live, grace=5.0, owned=frozenset(live.values()))
        for proc in self.procs.values():
            proc.poll()  # reap


def _log_contains(path: Path, needle: str) -> bool:
    try:
        return needle.encode() in path.read_bytes()
    except OSError:
        return False


def _s3_answers(port: int) -> bool:
    conn = http.client.HTTPConnection(HOST, port, timeout=2)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
        return resp.status == 200 and b"ListAllMyBucketsResult" in body
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _terminate(
    conf: Path,
    pids: dict[str, int],
    grace: float = 15.0,
    owned: frozenset[int] = frozenset(),
) -> None:
    """Stop RGW, then the OSD, then the monitor; then anything else on this conf."""
    found = _processes_using(conf)
    by_role: dict[str, set[int]] = {}
    for pid, args in found.items():
        by_role.setdefault(_role_of(args), set()).add(pid)
    for role, pid in pids.items():
        # Trust a recorded pid only if it still runs this instance's daemon
        # (pids get reused), or if we launched it ourselves in this process.
        if pid in found or pid in owned:
            by_role.setdefault(role, set()).add(pid)
    for role in (*STOP_ORDER, "other"):
        # RGW keeps nothing worth flushing, and its shutdown can stall on
        # background threads: do not wait long before SIGKILL.
        _signal_and_wait(by_role.get(role, set()), min(grace, 5.0) if role == "rgw" else grace)


def _signal_and_wait(pids: Iterable[int], grace: float) -> None:
    pending = {p for p in pids if _pid_alive(p)}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in pending:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + wait
        while pending and time.monotonic() < end:
            pending = {p for p in pending if _pid_alive(p)}
            if pending:
                time.sleep(0.05)
        if not pending:
            return
    if pending:
        raise RgwError(f"stop: processes still alive after SIGKILL: {sorted(pending)}")


def _is_fsid_race(text: str) -> bool:
    text = text.lower()
    return "wrong fsid" in text or "problem getting command descriptions" in text


def _is_transient(err: RgwError) -> bool:
    """Failures worth a fresh attempt: a port taken meanwhile, or the fsid race."""
    text = str(err).lower()
    ports = any(m in text for m in ("address already in use", "eaddrinuse", "(98)", "unable to bind"))
    return ports or _is_fsid_race(text)


# --------------------------------------------------------------------------
# public API


def start(
    dir: Path | None = None,
    port: int | None = None,
    lc_debug_interval: int | None = None,
    *,
    timeout: float = 180.0,
) -> RgwInfo:
    """Boot mon + osd + rgw in ``dir`` (default: a new temp dir); return how to reach it.

    The daemons are detached (own session) and keep running after the caller
    exits; call :func:`stop` to end them. Raises :class:`RgwError` on failure,
    with the failing daemon and the tail of its log in the message.
    """
    missing = missing_binaries()
    if missing:
        raise RgwError(f"ceph binaries missing ({', '.join(missing)}); run: python infra/rgw.py install")
    if dir is None:
        root = Path(tempfile.mkdtemp(prefix="evstore-rgw-"))
    else:
        root = Path(dir).absolute()
        root.mkdir(parents=True, exist_ok=True)
        running = _processes_using(root / "ceph.conf")
        if running:
            raise RgwError(f"{root} already has running ceph processes: {sorted(running)}")
        for name in OWNED_ENTRIES:
            _remove(root / name)
    if port is not None and not _port_is_free(port):
        raise RgwError(f"radosgw: port {HOST}:{port} is already in use")
    sock_path = root / "run" / f"{RGW_NAME}.asok"
    if len(str(sock_path)) > 107:
        raise RgwError(f"directory path too long for unix admin sockets: {root}")

    attempts = 3
    for attempt in range(1, attempts + 1):
        rgw_port = port if port is not None else _free_port()
        mon_port = _free_port()
        while mon_port == rgw_port:
            mon_port = _free_port()
        booter = _Booter(root, rgw_port, mon_port, lc_debug_interval, timeout)
        try:
            info = booter.boot()
        except BaseException as exc:
            booter.abort()
            # A port picked as free can be taken by someone else before the
            # daemon binds it, and Ceph has a startup race (see _run): pick
            # new ports and try again.
            if isinstance(exc, RgwError) and _is_transient(exc) and attempt < attempts:
                for name in OWNED_ENTRIES:
                    _remove(root / name)
                continue
            raise
        (root / INFO_FILE).write_text(json.dumps(info.to_json(), indent=2) + "\n")
        return info
    raise AssertionError("unreachable")


def load(dir: Path | str) -> RgwInfo:
    """Read DIR/rgw.json written by :func:`start`."""
    path = Path(dir) / INFO_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise RgwError(f"no {INFO_FILE} in {dir}: not started with infra/rgw.py?") from exc
    if not isinstance(data, dict):
        raise RgwError(f"{path}: not a JSON object")
    return RgwInfo.from_json(data)


def stop(info_or_dir: RgwInfo | Path | str, keep: bool = False) -> None:
    """Stop RGW, then the OSD, then the monitor; remove the dir unless ``keep``."""
    if isinstance(info_or_dir, RgwInfo):
        root, pids = info_or_dir.dir, dict(info_or_dir.pids)
    else:
        root = Path(info_or_dir).absolute()
        try:
            pids = load(root).pids
        except (RgwError, ValueError, KeyError, OSError):
            pids = {}  # half-started instance: find its processes by conf path
    _terminate(root / "ceph.conf", pids)
    if keep or not root.is_dir():
        return
    if {p.name for p in root.iterdir()} <= set(OWNED_ENTRIES):
        shutil.rmtree(root, ignore_errors=True)
    else:  # DIR also holds files that are not ours: remove only what start() made
        for name in OWNED_ENTRIES:
            _remove(root / name)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# --------------------------------------------------------------------------
# CLI


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rgw.py", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install", help="apt-get install radosgw ceph-mon ceph-osd if missing")
    p_start = sub.add_parser("start", help="boot mon+osd+rgw; print JSON connection info")
    p_start.add_argument("--dir", type=Path, default=None, help="state dir (default: new temp dir)")
    p_start.add_argument("--port", type=_positive, default=None, help="S3 port (default: a free one)")
    p_start.add_argument(
        "--lc-debug-interval",
        type=_positive,
        default=None,
        metavar="N",
        help="a lifecycle 'day' lasts N seconds",
    )
    p_start.add_argument("--timeout", type=float, default=180.0, help="boot timeout in seconds")
    p_stop = sub.add_parser("stop", help="stop rgw, osd, mon (in that order)")
    p_stop.add_argument("--dir", type=Path, required=True)
    p_stop.add_argument("--keep", action="store_true", help="do not remove DIR")
    p_env = sub.add_parser("env", help="print shell export lines for AWS SDKs")
    p_env.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)

    try:
        if args.cmd == "install":
            install()
        elif args.cmd == "start":
            info = start(args.dir, args.port, args.lc_debug_interval, timeout=args.timeout)
            print(json.dumps(info.to_json()))
        elif args.cmd == "stop":
            stop(args.dir, keep=args.keep)
        elif args.cmd == "env":
            for key, value in load(args.dir).env().items():
                print(f"export {key}={shlex.quote(value)}")
    except RgwError as exc:
        print(f"rgw.py {args.cmd}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
