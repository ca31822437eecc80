import json
import os
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".numba_cache"))
# The tests run the kernels through numba and build nothing ahead of time into the user's cache;
# tests/test_aot.py turns the builds on, into a folder of its own.
os.environ["GPUCURATE_AOT"] = "0"
# The CUDA kernels run in numba's CUDA simulator (set before numba is imported; the CPU kernels are not
# affected). On a GPU, benchmarks/gpu_check.py checks the same parity on the device.
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

#: Under CI (``CI=true``, as ``.ci/run`` runs the suite) a skip is a failure: it would hide a test that
#: cannot run because something CI installs is missing or broken. Exempt are tests marked ``gpu`` or
#: ``realdata`` and skips whose reason matches one of these patterns, each with why CI cannot have it.
CI_ALLOWED_SKIPS: dict[str, str] = {}  # none today: CI has no GPU, and those tests are marked gpu
EXEMPT_MARKS = ("gpu", "realdata")


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _skip_exempt(reason: str, marks) -> str | None:
    """Why a skip with ``reason`` of a test with ``marks`` is allowed under CI, or None."""
    for mark in EXEMPT_MARKS:
        if mark in marks:
            return f"marked {mark}"
    for pattern, why in CI_ALLOWED_SKIPS.items():
        if re.search(pattern, reason):
            return why
    return None


def _enforce_skip_policy(report, marks) -> None:
    if not (report.skipped and _under_ci()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if _skip_exempt(reason, marks) is None:
        report.outcome = "failed"
        report.longrepr = (f"skipped under CI=true: {reason}\n(a skip in CI hides a failure: install what the "
                           f"test needs in .ci/run, mark it gpu or realdata, or allow the reason in "
                           f"tests/conftest.py's CI_ALLOWED_SKIPS with why CI cannot have it)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _enforce_skip_policy(outcome.get_result(), {m.name for m in item.iter_markers()})


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped at import (``pytest.importorskip``) falls under the same policy."""
    outcome = yield
    _enforce_skip_policy(outcome.get_result(), {m.name for m in collector.iter_markers()})


def pytest_terminal_summary(terminalreporter):
    """How many tests were skipped, and why, just before the closing line."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons = Counter(_skip_reason(r) for r in skipped)
    terminalreporter.write_sep("-", f"{len(skipped)} skipped, by reason"
                                    + (" (allowed under CI=true)" if _under_ci() else ""))
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:5d}  {reason}")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: the suite also runs without it
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the README's test command): one test process per core, at most 4; each loads numba,
    PyTorch and Dask clusters of its own, so more would cost memory without shortening the slowest tests."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, cores))


def write_jsonl(path: Path, records: list[dict], compress: str | None = None) -> Path:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    if compress == "gz":
        import gzip
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    elif compress == "zst":
        import zstandard
        path = path.with_name(path.name + ".zst")
        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        path.write_bytes(data)
    return path


def read_annotations(out_dir: Path) -> pd.DataFrame:
    """All annotated records of a run, sorted by doc_id."""
    files = sorted((Path(out_dir) / "annotations").glob("part-*.parquet"))
    frames = [pq.read_table(f).to_pandas() for f in files]
    df = pd.concat(frames, ignore_index=True)
    return df.sort_values("doc_id", kind="stable").reset_index(drop=True)


ANNOTATION_COLUMNS = ["doc_id", "dedup_id", "is_canonical", "keep", "drop_stage", "drop_reason", "similarity",
                      "cluster_size", "weight", "exact_group", "fuzzy_group", "semantic_group", "contaminated",
                      "contamination", "contamination_spans", "stripped_text", "redacted_text", "paragraph_text",
                      "paragraph_chars_removed",
                      "substring_spans", "substring_text", "substring_chars_removed", "removed_spans"]


@pytest.fixture(scope="session", autouse=True)
def _semantic_auto_off():
    """``semantic.enabled: null`` turns the stage on when the encoder is installed; the tests of the other
    stages run without it (it would cost minutes of embedding). Semantic tests enable it explicitly."""
    import gpucurate.stages.semantic as stage
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stage, "encoder_available", lambda: False)
        yield


@pytest.fixture(scope="session")
def demo_frame():
    from gpucurate.generators.demo import generate_corpus
    return generate_corpus(n_docs=1500, seed=7)


@pytest.fixture
def quiet_overrides():
    return ["run.progress=false"]


def pytest_collection_modifyitems(config, items):
    if not SHARED_DATA.is_dir():
        skip = pytest.mark.skip(reason=f"{SHARED_DATA} not present")
        for item in items:
            if "realdata" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory):
    """A PostgreSQL 16 + pgvector server on 127.0.0.1 for the session (tests/pg_server.py); skips without
    pgserver/psycopg/pgvector, fails with the server log when they are installed but it does not start."""
    from pg_server import PgServerError, PgServerUnavailable, start_postgres
    try:
        import pgvector.psycopg  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"pgvector sink tests need psycopg 3 and pgvector (pip install -e '.[dev]'): {exc}")
    failure = None
    try:
        dsn, stop = start_postgres(tmp_path_factory.mktemp("pg"))
    except PgServerUnavailable as exc:
        pytest.skip(f"no PostgreSQL for the pgvector sink tests: {exc}")
    except PgServerError as exc:  # installed but broken: fail loudly, never skip
        failure = str(exc)
    if failure is not None:
        pytest.fail(f"PostgreSQL test server did not start: {failure}", pytrace=False)
    yield dsn
    stop()


@pytest.fixture
def db(pg_dsn):
    """A superuser autocommit connection for checking what the sink wrote."""
    import psycopg
    from pgvector.psycopg import register_vector
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)  # embeddings come back as pgvector.Vector
        yield conn
