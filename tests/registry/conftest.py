"""The registry's tests run on both backends: every test that takes ``ws`` runs once on the workspace's SQLite
file and once on a fresh schema of a throwaway PostgreSQL cluster (one per session). With no PostgreSQL
installed, or no psycopg, the PostgreSQL half skips and says why; ``@pytest.mark.sqlite_only`` marks a test of
SQLite's own file (its pragmas, a damaged file, a pre-v1 database), or a slow one of files and models that the
backend does not touch."""
from __future__ import annotations

import pytest

from tests.registry.pgcluster import start_cluster

BACKENDS = ("sqlite", "postgresql")


def pytest_configure(config):
    config.addinivalue_line("markers", "sqlite_only: runs on the SQLite backend only (SQLite's own file, or files "
                                       "the backend does not touch)")


def pytest_generate_tests(metafunc):
    if "registry_backend" in metafunc.fixturenames:
        only_sqlite = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("registry_backend", ["sqlite"] if only_sqlite else list(BACKENDS), indirect=True)


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL cluster for the session, or a skip that says why there is none."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("PostgreSQL half skipped: psycopg is not installed (pip install 'mint[postgres]')")
    try:
        cluster = start_cluster()
    except FileNotFoundError as exc:
        pytest.skip(f"PostgreSQL half skipped: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def registry_backend(request):
    """None for the workspace's SQLite file, else the URL of an empty registry on PostgreSQL."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("pg_cluster").new_registry()


@pytest.fixture
def pg_registry(pg_cluster):
    """The URL of an empty registry on PostgreSQL (for the tests that only PostgreSQL has: the shared lock,
    migration)."""
    return pg_cluster.new_registry()


@pytest.fixture
def ws(tmp_path, monkeypatch, registry_backend):
    """The workspace of tests/conftest.py, its registry on the backend this run of the test is for."""
    from mint.workspace import workspace

    home = tmp_path / "home"
    monkeypatch.setenv("MINT_HOME", str(home))
    if registry_backend is None:
        monkeypatch.delenv("MINT_REGISTRY_URL", raising=False)
    else:
        monkeypatch.setenv("MINT_REGISTRY_URL", registry_backend)
    monkeypatch.chdir(tmp_path)
    return workspace(home)
