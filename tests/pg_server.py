"""A throwaway PostgreSQL 16 + pgvector server for tests, from the binaries the ``pgserver`` wheel ships.

``start_postgres(tmp_dir)`` runs ``initdb`` and ``postgres`` from ``pgserver/pginstall`` on 127.0.0.1 with a
free TCP port (no unix socket), trust authentication, a temporary data directory and durability off
(fsync=off: test data only), and returns ``(dsn, stop)``. ``stop()`` shuts the server down and removes
every file it made; it is idempotent and also registered with ``atexit``.

PostgreSQL refuses to run as root, and CI runs as root. pgserver's own Python API copes with root by
creating a login user and chmod-ing every parent folder of its install (``/root`` included) world-readable,
and it listens on a unix socket only; so this helper drives the binaries itself:

* as root, the binaries run as the system user ``gpucurate-pg`` (created with ``useradd --system`` when
  missing; ``nobody`` when it cannot be created), through ``subprocess``'s ``user``/``group``/``extra_groups``;
  otherwise as the current user;
* when that user cannot reach the installed binaries (a venv under ``/root``, mode 700), the
  ``pginstall`` tree and the ``pgserver.libs`` folder its RPATH points at are copied into the server's
  temporary folder;
* when the user cannot reach ``tmp_dir`` (pytest's ``/tmp/pytest-of-root`` is mode 700), the server's
  folder is made in the system temp folder instead;
* ``setpriv --pdeathsig INT`` (where available) makes the postmaster shut down when the test process
  dies without calling ``stop()``.

``PgServerUnavailable`` means pgserver is not installed (tests skip); ``PgServerError`` means it is
installed but the server did not start (tests fail; the message ends with the server log's tail).
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

SERVICE_USER = "gpucurate-pg"
START_TIMEOUT_S = 60.0


class PgServerUnavailable(RuntimeError):
    """pgserver (the PostgreSQL binaries) is not installed."""


class PgServerError(RuntimeError):
    """pgserver is installed but the server could not be set up or started."""


def find_pginstall() -> Path:
    """The ``pginstall`` folder of the pgserver wheel, found without importing pgserver (its import creates
    runtime folders and warns about XDG_RUNTIME_DIR)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise PgServerUnavailable("pgserver is not installed (pip install pgserver)")
    root = Path(list(spec.submodule_search_locations)[0]) / "pginstall"
    for rel in ("bin/initdb", "bin/postgres"):
        if not (root / rel).is_file():
            raise PgServerUnavailable(f"pgserver is installed but {root / rel} is missing")
    if not (root / "share/postgresql/extension/vector.control").is_file():
        raise PgServerUnavailable(f"pgserver at {root} ships no pgvector extension")
    return root


def _service_account() -> tuple[int, int] | None:
    """(uid, gid) to run the binaries as, or None to run them as the current user (not root)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        nologin = next((s for s in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false") if os.path.exists(s)),
                       None)
        cmd = ["useradd", "--system", "--no-create-home", "--user-group"]
        if nologin:
            cmd += ["--shell", nologin]
        try:
            subprocess.run(cmd + [SERVICE_USER], check=False, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            pass
        try:  # another process may have created it concurrently; either way look it up again
            entry = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            try:
                entry = pwd.getpwnam("nobody")
            except KeyError:
                raise PgServerError(f"running as root, and neither user {SERVICE_USER!r} could be created "
                                    "(useradd) nor user 'nobody' exists; PostgreSQL refuses to run as root")
    return entry.pw_uid, entry.pw_gid


class _Runner:
    """Runs commands as the service account (when root) in a clean environment."""

    def __init__(self, account: tuple[int, int] | None, cwd: Path):
        self.account = account
        self.cwd = cwd
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C", TZ="UTC")
        if account is not None:
            env.update(HOME=str(cwd), USER=SERVICE_USER, LOGNAME=SERVICE_USER)
        self.env = env

    def kwargs(self) -> dict:
        kw: dict = dict(cwd=str(self.cwd), env=self.env, stdin=subprocess.DEVNULL)
        if self.account is not None:
            kw.update(user=self.account[0], group=self.account[1], extra_groups=[])
        return kw

    def run(self, cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **self.kwargs())

    def can_use(self, install: Path) -> bool:
        """Whether the account can execute the binaries (and load their libraries) and read the extension."""
        try:
            for exe in ("postgres", "initdb"):
                if self.run([str(install / "bin" / exe), "--version"], timeout=30).returncode != 0:
                    return False
            control = install / "share/postgresql/extension/vector.control"
            return self.run(["test", "-r", str(control)], timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    def can_enter(self, folder: Path) -> bool:
        try:
            return self.run(["test", "-x", str(folder), "-a", "-r", str(folder)], timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


def _copy_install(install: Path, dest: Path) -> Path:
    """Copy pginstall (without headers) and the sibling ``pgserver.libs`` (the binaries' RPATH is
    ``$ORIGIN/../../../pgserver.libs``) into ``dest``, keeping that layout, world-readable."""
    target = dest / "pgserver" / "pginstall"
    target.mkdir(parents=True)
    for part in ("bin", "lib", "share"):
        shutil.copytree(install / part, target / part, symlinks=True)
    libs = install.parent.parent / "pgserver.libs"
    if libs.is_dir():
        shutil.copytree(libs, dest / "pgserver.libs", symlinks=True)
    for folder, dirs, files in os.walk(dest):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444 | (0o111 if os.stat(path).st_mode & 0o100 else 0))
    return target


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig INT --``: the postmaster gets SIGINT (fast shutdown) if this process dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []
    try:
        ok = subprocess.run([setpriv, "--pdeathsig", "INT", "--", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [setpriv, "--pdeathsig", "INT", "--"] if ok.returncode == 0 else []


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no server log: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"


class PostgresProcess:
    """One running server; use ``start_postgres``."""

    def __init__(self, tmp_dir: Path | str):
        self.install = find_pginstall()
        self.account = _service_account()
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.work = self._make_workdir(Path(tmp_dir))
        self.log_path = self.work / "postgres.log"
        self.data = self.work / "data"
        self._stopped = False
        atexit.register(self.stop)

    def _make_workdir(self, tmp_dir: Path) -> Path:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        for parent in (tmp_dir, Path(tempfile.gettempdir())):
            work = Path(tempfile.mkdtemp(prefix="gpucurate-pg-", dir=parent))
            os.chmod(work, 0o755)
            if self.account is None or _Runner(self.account, Path("/")).can_enter(work):
                return work
            shutil.rmtree(work, ignore_errors=True)
        raise PgServerError(f"user {SERVICE_USER} (uid {self.account[0]}) can enter neither {tmp_dir} nor "
                            f"{tempfile.gettempdir()}")

    def start(self) -> str:
        runner = _Runner(self.account, self.work)
        install = self.install
        if not runner.can_use(install):
            install = _copy_install(install, self.work / "dist")
            if not runner.can_use(install):
                raise PgServerError(f"uid {os.getuid() if self.account is None else self.account[0]} cannot run "
                                    f"the PostgreSQL binaries even from a copy in {install}")
        self.data.mkdir(mode=0o700)
        if self.account is not None:
            os.chown(self.data, *self.account)
            self.log_path.touch()
            os.chown(self.log_path, *self.account)
        init = runner.run([str(install / "bin/initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                           "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions"])
        if init.returncode != 0:
            raise PgServerError(f"initdb failed (rc {init.returncode}):\n{init.stdout[-3000:]}\n{init.stderr[-3000:]}")

        prefix = _pdeathsig_prefix()
        for attempt in range(3):  # another process may take the free port between probe and bind
            self.port = _free_port()
            cmd = prefix + [str(install / "bin/postgres"), "-D", str(self.data),
                            "-c", "listen_addresses=127.0.0.1", "-c", f"port={self.port}",
                            "-c", "unix_socket_directories=",  # TCP only
                            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                            "-c", "max_connections=30", "-c", "shared_buffers=64MB",
                            "-c", "logging_collector=off", "-c", "log_min_messages=warning"]
            with open(self.log_path, "ab") as log:
                # own session: a Ctrl-C in the terminal is for pytest, which then calls stop()
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                             **runner.kwargs())
            dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
            if self._wait_ready(dsn):
                return dsn
            if "could not bind" in _tail(self.log_path, 20) and attempt < 2:
                continue
            break
        raise PgServerError(f"PostgreSQL did not start (port {self.port}, rc {self.proc.poll()}); "
                            f"tail of the server log:\n{_tail(self.log_path)}")

    def _wait_ready(self, dsn: str) -> bool:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with psycopg.connect(dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                time.sleep(0.1)
        self._terminate()
        return False

    def _terminate(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        # SIGINT = fast shutdown; SIGQUIT = immediate; SIGKILL last
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGQUIT, 10), (signal.SIGKILL, 10)):
            try:
                proc.send_signal(sig)
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                return

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._terminate()
        shutil.rmtree(self.work, ignore_errors=True)


def start_postgres(tmp_dir) -> tuple[str, Callable[[], None]]:
    """Start a server; return ``(dsn, stop)``. Raises ``PgServerUnavailable`` (pgserver missing) or
    ``PgServerError`` (start failed; the message carries the server log's tail)."""
    server = PostgresProcess(Path(tmp_dir))
    try:
        dsn = server.start()
    except BaseException:
        server.stop()
        raise
    return dsn, server.stop
