"""A throwaway PostgreSQL cluster for the tests and scripts/bench_registry.py: Debian's binaries, a temporary data
directory, a unix socket in it and 127.0.0.1 on a free port, trust authentication, run as a non-root user
(PostgreSQL refuses to run as root; as root the cluster runs as ``nobody``)."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "mint"


def find_bin_dir() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian keeps it off PATH), else initdb's on PATH."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2])
                            if p.split("/")[-2].isdigit() else 0, reverse=True):
        if (Path(candidate) / "initdb").is_file():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    root: Path
    bin_dir: Path
    port: int
    run_as: str | None

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def schema_url(self, schema: str) -> str:
        """A URL whose connections keep their tables in ``schema``: one registry per schema."""
        return f"{self.url}?options=-csearch_path%3D{schema}"

    def new_registry(self) -> str:
        """A fresh, empty schema, as the URL of a registry in it."""
        import psycopg

        schema = f"r_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return self.schema_url(schema)

    def stop(self) -> None:
        _run(self, [str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "stop"],
             check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def _run(cluster_or_user, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    user = cluster_or_user.run_as if isinstance(cluster_or_user, Cluster) else cluster_or_user
    command = ["runuser", "-u", user, "--", *args] if user else args
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def start_cluster(*, durable: bool = False) -> Cluster:
    """Start a cluster and wait until it answers. ``durable=False`` turns fsync off (tests); a benchmark that
    compares with SQLite's synchronous=FULL passes ``durable=True``."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise FileNotFoundError("no PostgreSQL installed (initdb not found under /usr/lib/postgresql/*/bin or on "
                                "PATH): apt-get install postgresql")
    run_as = "nobody" if os.getuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="mint-pg-"))   # under /tmp: pytest's own tmp folders are root-only
    if run_as:
        entry = pwd.getpwnam(run_as)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    cluster = Cluster(root, bin_dir, _free_port(), run_as)
    try:
        _run(cluster, [str(bin_dir / "initdb"), "-D", str(root / "data"), "-U", SUPERUSER, "--auth=trust",
                       "-E", "UTF8", "--no-sync"])
        options = f"-k {root} -h 127.0.0.1 -p {cluster.port} -c max_connections=200"
        if not durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        _run(cluster, [str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-o", options, "-l",
                       str(root / "server.log"), "-w", "-t", "60", "start"])
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cluster
