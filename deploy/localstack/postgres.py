"""A Postgres server in a project-owned data directory, from installed binaries.

Order of preference: the binaries on the PATH or under /usr/lib/postgresql; when none
are installed and we are root on Debian, ``apt-get install postgresql``; otherwise stop
and say what to install. Postgres refuses to run as root, so as root the server runs as
the ``postgres`` system user that the Debian package creates.
"""

from __future__ import annotations

import logging
import os
import pwd
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psycopg
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_fixed,
)

from firn.errors import StackError

from .private_files import write_private
from .processes import free_port, port_is_open, run, spawn, stop, wait_until
from .tls import ServerCertificate, server_certificate

log = logging.getLogger(__name__)

_START_TIMEOUT = 60.0
DATABASE = "firn"
SUPERUSER = "firn"


STATEMENTS_ENV = "FIRN_POSTGRES_STATEMENTS"
"""Set to 1, the local server loads pg_stat_statements (a bench's catalog-load report:
``bench/fleet.py --statements``); off by default, as it costs every statement a little."""


def _statement_statistics(bindir: Path) -> list[str]:
    """The server options that load pg_stat_statements, when asked for and installed."""
    if os.environ.get(STATEMENTS_ENV) != "1":
        return []
    library = bindir.parent / "lib" / "pg_stat_statements.so"
    if not library.exists():
        raise StackError(f"{STATEMENTS_ENV}=1 needs pg_stat_statements, which is not at {library}")
    return [
        "-c",
        "shared_preload_libraries=pg_stat_statements",
        "-c",
        "pg_stat_statements.track=all",  # the statements inside the catalog functions too
        "-c",
        "track_functions=pl",
    ]


def postgres_bindir() -> Path:
    """The folder holding ``initdb`` and ``postgres``, installing them if we may."""
    found = _find_bindir()
    if found is not None:
        return found
    if os.geteuid() == 0 and Path("/etc/debian_version").exists() and shutil.which("apt-get"):
        log.info("no PostgreSQL binaries found; installing Debian's postgresql package")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update", "-q"], what="apt-get update", env=env)
        run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
            what="apt-get install postgresql",
            env=env,
        )
        found = _find_bindir()
        if found is not None:
            return found
    raise StackError(
        "PostgreSQL server binaries (initdb, postgres) are not installed. Install them "
        "(Debian/Ubuntu: `sudo apt-get install postgresql`; macOS: `brew install "
        "postgresql`) or point FIRN_DATABASE_URL at a running server."
    )


def _find_bindir() -> Path | None:
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(os.path.realpath(on_path)).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def _server_user() -> str | None:
    """The OS user to run the server as: ourselves, or ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise StackError(
            "running as root, but there is no `postgres` system user to run "
            "the server as; install Debian's postgresql package"
        ) from exc
    return "postgres"


def _check_traversable(path: Path, user: str) -> None:
    """Fail early, and clearly, when ``user`` cannot reach ``path`` (e.g. under /root)."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        owner = parent.stat().st_uid
        if not mode & 0o001 and owner != pwd.getpwnam(user).pw_uid:
            raise StackError(
                f"the Postgres data directory {path} is under {parent}, which the "
                f"`{user}` user cannot enter; set FIRN_HOME to a directory outside it"
            )


@dataclass
class PostgresServer:
    """One server on loopback with database and superuser ``firn``. Clients log in
    with a password (SCRAM), made at initdb and kept beside the data directory, and
    speak TLS with a certificate of the stack's own CA, which the URL verifies in full
    (``sslmode=verify-full``). A data directory made before either keeps trusting
    loopback and plain connections (its ``pg_hba.conf`` is its own)."""

    data: Path
    port: int = 0
    standby_of: int | None = None
    """The port of a primary on this host (in a data directory beside this one, so
    they share the superuser's password and the CA): start as its streaming replica,
    made from a base backup of it."""
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return self._dsn(DATABASE)

    @property
    def password_file(self) -> Path:
        return self.data.parent / "superuser.password"

    @property
    def tls_dir(self) -> Path:
        return self.data.parent / "tls"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path:
        name = "postgres" if self.data.name == "data" else f"postgres-{self.data.name}"
        return self.data.parent / f"{name}.log"

    def start(self) -> None:
        bindir = postgres_bindir()
        user = _server_user()
        self.port = self.port or free_port()
        if port_is_open(self.port):
            raise StackError(f"port {self.port} is taken; set FIRN_POSTGRES_PORT to another one")
        self.data.parent.mkdir(parents=True, exist_ok=True)
        if not (self.data / "PG_VERSION").exists():
            if self.standby_of is None:
                self._initdb(bindir, user)
            else:
                self._base_backup(bindir, user, self.standby_of)
        tls = self._certificate(user)
        self._proc = spawn(
            [
                str(bindir / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
                # The catalog's hot rows change many times a second under a fleet's
                # load: look for tables to vacuum every 10 s, not every minute
                # (migration 0016 says when each is due).
                "-c",
                "autovacuum_naptime=10s",
                *_statement_statistics(bindir),
                "-c",
                "ssl=on",
                "-c",
                f"ssl_cert_file={tls.certificate}",
                "-c",
                f"ssl_key_file={tls.key}",
            ],
            log_path=self.log_path,
            user=user,
            env=_server_env(user),
        )
        wait_until(
            self._accepts_connections,
            what="Postgres",
            proc=self._proc,
            log_path=self.log_path,
            timeout=_START_TIMEOUT,
        )
        if self.standby_of is None:
            self._create_database()
        log.info("Postgres is up at 127.0.0.1:%d (pid %d)", self.port, self._proc.pid)

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise StackError("Postgres is not running")
        return self._proc

    def kill(self) -> None:
        """``kill -9`` of the postmaster, as when its machine is gone."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def promote(self) -> None:
        """Make this replica the primary (``pg_promote``), waiting until it is."""
        with psycopg.connect(self._dsn("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_promote(wait => true)")
        self.standby_of = None

    def require_synchronous_standby(self) -> None:
        """A commit returns only once a standby has it (``synchronous_standby_names``):
        what succeeded before a failover is on the promoted replica."""
        with psycopg.connect(self._dsn("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'"
                    ).fetchone()
                    is not None
                ),
                what="a synchronous standby",
                proc=self._running(),
                log_path=self.log_path,
                timeout=30,
            )

    def stop(self) -> None:
        if self._proc is not None:
            # SIGTERM is Postgres's "smart" shutdown; SIGINT is "fast" and does not
            # wait for clients to disconnect, which is what a stack shutdown wants.
            self._proc.send_signal(2)
            stop(self._proc, "Postgres", timeout=30.0)
            self._proc = None

    def _initdb(self, bindir: Path, user: str | None) -> None:
        if self.data.exists():
            shutil.rmtree(self.data)
        self.data.mkdir(parents=True)
        if user is not None:
            pw = pwd.getpwnam(user)
            _check_traversable(self.data.parent, user)
            os.chown(self.data, pw.pw_uid, pw.pw_gid)
            os.chown(self.data.parent, pw.pw_uid, pw.pw_gid)
        password = secrets.token_urlsafe(24)
        write_private(self.password_file, password)
        pwfile = self.data.parent / "initdb.pw"
        write_private(pwfile, password, user)
        try:
            run(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    # The server's own OS user over the socket (none is opened); every
                    # TCP client with a password.
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                what="initdb",
                user=user,
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _base_backup(self, bindir: Path, user: str | None, primary: int) -> None:
        """This data directory as a streaming replica of the primary on ``primary``
        (``pg_basebackup -R``: it starts as a standby that follows the primary)."""
        self.data.mkdir(parents=True, exist_ok=True)
        self.data.chmod(0o700)
        if user is not None:
            pw = pwd.getpwnam(user)
            os.chown(self.data, pw.pw_uid, pw.pw_gid)
        source = (
            f"host=127.0.0.1 port={primary} user={SUPERUSER} sslmode=verify-full "
            f"sslrootcert={self.tls_dir / 'ca.pem'}"
        )
        env = {**_server_env(user), "PGPASSWORD": self.password_file.read_text().strip()}
        run(
            [
                str(bindir / "pg_basebackup"),
                "-d",
                source,
                "-D",
                str(self.data),
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "--no-sync",
            ],
            what="pg_basebackup",
            user=user,
            env=env,
        )

    def _certificate(self, user: str | None) -> ServerCertificate:
        """The server's certificate; its key belongs to the server's OS user (Postgres
        refuses a key others may read)."""
        made = server_certificate(self.tls_dir, "postgres")
        if user is not None:
            pw = pwd.getpwnam(user)
            for path in (self.tls_dir, made.certificate, made.key):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        return made

    def _accepts_connections(self) -> bool:
        if not port_is_open(self.port):
            return False
        try:
            with psycopg.connect(self._dsn("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def _create_database(self) -> None:
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if exists is None:
                conn.execute(f"CREATE DATABASE {DATABASE}")
        connecting = Retrying(
            retry=retry_if_exception_type(psycopg.OperationalError),
            wait=wait_fixed(0.2),
            stop=stop_after_delay(10),
        )
        try:
            connecting(lambda: psycopg.connect(self.url, connect_timeout=2).close())
        except RetryError:
            raise StackError(f"database {DATABASE} did not become reachable") from None

    def _dsn(self, database: str) -> str:
        login = SUPERUSER
        if self.password_file.exists():
            login += ":" + quote(self.password_file.read_text().strip(), safe="")
        ca = quote(str(self.tls_dir / "ca.pem"), safe="")
        return (
            f"postgresql://{login}@127.0.0.1:{self.port}/{database}"
            f"?sslmode=verify-full&sslrootcert={ca}"
        )


def _server_env(user: str | None) -> dict[str, str]:
    """Our environment with the server user's own home: libpq (a replica's WAL
    receiver, pg_basebackup) looks for client certificates under ``$HOME``."""
    env = dict(os.environ)
    if user is not None:
        env["HOME"] = pwd.getpwnam(user).pw_dir
    return env
