"""Delta tables on S3 written by Spark and delta-rs at once (issue 61): with dkmsks's LogStore
(``dkmsks.delta.ConditionalS3LogStore``, set by :func:`dkmsks.spark.s3.s3a_conf`) every writer's
every commit is kept and the versions are contiguous, and the LogStore itself never replaces a
commit file. Runs against a private object store (the ``objectstore`` fixture).

Spark runs in a process of its own, started like the delta-rs writers with ``spawn`` (delta-rs
panics in forked children): its JVM must start with the store's settings in its environment (the
credentials are read there, never from a Spark setting), and a JVM started earlier by this test
process (the ``spark`` fixture) has no S3 jars.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import sys
import time
import traceback
import uuid
from urllib.parse import urlsplit

import pytest

from conftest import missing_prerequisite
from dkmsks.spark.s3 import LOGSTORE_CLASS, s3_jars

pytestmark = pytest.mark.spark

SPARK_COMMITS = 20
RS_WRITERS = 2
RS_COMMITS = 30
#: delta-rs and the local store: plain HTTP allowed; endpoint, region and credentials from the env.
RS_OPTIONS = {"AWS_ALLOW_HTTP": "true"}
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION")


def _report_failure(results, name: str) -> None:
    results.put((name, {"error": traceback.format_exc()}))


def rs_writer(uri: str, name: str, progress, go, results) -> None:
    """``RS_COMMITS`` one-row appends (``seq`` 0, 1, ...), spread over the Spark writer's run:
    commit k waits for Spark's commit ``k * SPARK_COMMITS // RS_COMMITS``, then a random pause."""
    try:
        import pyarrow as pa
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        pace = random.Random(name)
        table = DeltaTable(uri, storage_options=RS_OPTIONS)
        go.wait()
        for k in range(RS_COMMITS):
            while progress.value < k * SPARK_COMMITS // RS_COMMITS:
                time.sleep(0.01)
            time.sleep(pace.uniform(0, 0.5))
            rows = pa.table({"writer": [name], "seq": pa.array([k], pa.int64())})
            write_deltalake(table, rows, mode="append",
                            commit_properties=CommitProperties(max_commit_retries=1000))
        results.put((name, {"commits": RS_COMMITS}))
    except BaseException:
        _report_failure(results, name)


def spark_writer(uri: str, scratch: str, local: str, progress, ready, go, results) -> None:
    """A session with the project's settings (:func:`~dkmsks.spark.session.session_conf`) plus
    the S3 settings and jars; ``SPARK_COMMITS`` appends racing the delta-rs writers, then the
    LogStore probed directly on ``scratch`` (a prefix of its own)."""
    try:
        from pyspark.sql import SparkSession

        from dkmsks.spark.s3 import s3_jars, s3a_conf
        from dkmsks.spark.session import delta_jars, session_conf
        from dkmsks.warehouse import Warehouse

        # build_session's settings, without its catalog of the warehouse's tables (none here,
        # and filling it took 10 s of the start-up); the environment's credentials reach the
        # JVM this starts.
        conf = session_conf(Warehouse(local), master="local[2]", shuffle_partitions=2)
        conf |= s3a_conf() | {"spark.jars": ",".join(str(j) for j in delta_jars() + s3_jars())}
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", conf["spark.driver.bindAddress"])
        builder = SparkSession.builder.appName("dkmsks-s3-logstore")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        jvm = spark._jvm
        hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
        delegate = log.store().getDelegate(jvm.org.apache.hadoop.fs.Path(f"{uri}/_delta_log/0.json"))
        out = {"logstore": delegate.logStoreImpl().getClass().getName()}
        spark.read.format("delta").load(uri).count()  # the first job's start-up, before the race
        fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(uri), hadoop_conf)
        stats = jvm.org.apache.hadoop.fs.statistics.IOStatisticsSupport.retrieveIOStatistics(fs)

        def failed_puts() -> int:
            return int(stats.counters().get("object_put_request.failures") or 0)

        before = failed_puts()
        ready.set()
        go.wait()
        for k in range(SPARK_COMMITS):
            rows = spark.createDataFrame([("spark", k)], "writer string, seq long")
            rows.write.format("delta").mode("append").save(uri)
            progress.value = k + 1
        # Every refused PUT of the race was a commit file another writer had created first.
        out["refused"] = failed_puts() - before
        out["spark_rows"] = {r["writer"]: r["count"] for r in
                             spark.read.format("delta").load(uri).groupBy("writer").count().collect()}
        out["probe"] = probe_logstore(spark, hadoop_conf, scratch, local)
        spark.stop()
        results.put(("spark", out))
    except BaseException:
        _report_failure(results, "spark")


def probe_logstore(spark, hadoop_conf, scratch: str, local: str) -> dict[str, object]:
    """Version 0 of a log written through the LogStore directly: first, then again with the same
    text (a retried PUT of the same commit), then with another writer's; and a local path."""
    jvm = spark._jvm
    store = jvm.dkmsks.delta.ConditionalS3LogStore(hadoop_conf)

    def write(path: str, *lines: str) -> str:
        actions = jvm.java.util.ArrayList()
        for line in lines:
            actions.add(line)
        try:
            store.write(jvm.org.apache.hadoop.fs.Path(path), actions.iterator(), False, hadoop_conf)
            return "ok"
        except Exception as error:  # py4j's, or pyspark's own for a few Java classes (_origin)
            cause = getattr(error, "java_exception", None) or error._origin
            return f"{cause.getClass().getName()}: {cause.getMessage()}"

    def read(path: str) -> list[str]:
        lines = store.read(jvm.org.apache.hadoop.fs.Path(path), hadoop_conf)
        try:
            return [lines.next() for _ in iter(lines.hasNext, False)]
        finally:
            lines.close()

    commit = f"{scratch}/_delta_log/00000000000000000000.json"
    ours, theirs = '{"commitInfo":{"writer":"first"}}', '{"commitInfo":{"writer":"second"}}'
    local_commit = f"file://{local}/_delta_log/00000000000000000000.json"
    os.makedirs(f"{local}/_delta_log", exist_ok=True)
    return {
        "first": write(commit, ours),
        "same_again": write(commit, ours),
        "another": write(commit, theirs),
        "stored": read(commit),
        "local": write(local_commit, ours),
        "local_written": os.path.exists(local_commit.removeprefix("file://")),
    }


@pytest.fixture(scope="module")
def race(objectstore, tmp_path_factory):
    """One table on the store, created by delta-rs, appended to by Spark and two delta-rs
    processes at once; the writers' reports, the table's rows per writer (read by delta-rs) and
    the versions of its commit files (listed by pyarrow)."""
    if not any(j.name.startswith("dkmsks-logstore") for j in s3_jars()):
        missing_prerequisite("the S3 jars and LogStore are not built (.cache/jars-s3): run scripts/bootstrap.sh")
    import pyarrow as pa
    import pyarrow.fs as pafs
    from deltalake import DeltaTable, write_deltalake

    bucket = urlsplit(objectstore["DKMSKS_WAREHOUSE"]).netloc
    run = f"s3://{bucket}/tests/logstore-{uuid.uuid4().hex[:12]}"
    uri, scratch = f"{run}/table", f"{run}/probe"
    with pytest.MonkeyPatch.context() as env:
        for key in AWS_KEYS:  # the spawned writers inherit them; nothing else is passed
            env.setenv(key, objectstore[key])
        empty = pa.table({"writer": pa.array([], pa.string()), "seq": pa.array([], pa.int64())})
        write_deltalake(uri, empty, storage_options=RS_OPTIONS)

        spawn = mp.get_context("spawn")
        progress, ready, go, results = spawn.Value("q", 0), spawn.Event(), spawn.Event(), spawn.Queue()
        local = str(tmp_path_factory.mktemp("s3-logstore-local"))
        writers = [spawn.Process(target=spark_writer, args=(uri, scratch, local, progress, ready, go, results))]
        writers += [spawn.Process(target=rs_writer, args=(uri, f"rs{i}", progress, go, results))
                    for i in range(RS_WRITERS)]
        for process in writers:
            process.start()
        reports: dict[str, dict] = {}
        try:
            deadline = time.monotonic() + 240
            while not ready.is_set() and time.monotonic() < deadline and results.empty():
                time.sleep(0.1)
            go.set()
            while len(reports) < len(writers):
                try:
                    name, report = results.get(timeout=max(1.0, deadline - time.monotonic()))
                except queue.Empty:
                    pytest.fail(f"writers still silent after 240 s: only {sorted(reports)} reported", pytrace=False)
                if "error" in report:
                    pytest.fail(f"writer {name} failed:\n{report['error']}", pytrace=False)
                reports[name] = report
        finally:
            for process in writers:
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()

        table = DeltaTable(uri, storage_options=RS_OPTIONS)
        rows = table.to_pyarrow_table().to_pylist()
        endpoint = urlsplit(objectstore["AWS_ENDPOINT_URL"])
        store = pafs.S3FileSystem(access_key=objectstore["AWS_ACCESS_KEY_ID"],
                                  secret_key=objectstore["AWS_SECRET_ACCESS_KEY"],
                                  endpoint_override=endpoint.netloc, scheme=endpoint.scheme,
                                  region=objectstore["AWS_REGION"])
        listed = store.get_file_info(pafs.FileSelector(f"{uri.removeprefix('s3://')}/_delta_log"))
    seqs: dict[str, list[int]] = {}
    for row in rows:
        seqs.setdefault(row["writer"], []).append(row["seq"])
    versions = sorted(int(f.base_name.split(".")[0]) for f in listed if f.base_name.endswith(".json"))
    return {"reports": reports, "seqs": {w: sorted(s) for w, s in seqs.items()}, "versions": versions,
            "version": table.version()}


def test_spark_commits_through_the_conditional_logstore(race):
    assert race["reports"]["spark"]["logstore"] == LOGSTORE_CLASS


def test_concurrent_spark_and_delta_rs_writers_lose_no_commit(race):
    expected = {"spark": list(range(SPARK_COMMITS))} | {f"rs{i}": list(range(RS_COMMITS)) for i in range(RS_WRITERS)}
    assert race["seqs"] == expected  # every writer's every row, none twice
    assert race["reports"]["spark"]["spark_rows"] == {w: len(s) for w, s in expected.items()}
    commits = SPARK_COMMITS + RS_WRITERS * RS_COMMITS
    assert race["version"] == commits  # version 0 created the table
    assert race["versions"] == list(range(commits + 1))  # contiguous: no version skipped or replaced
    # The race was real: Spark lost the create of a commit file at least once and retried.
    assert race["reports"]["spark"]["refused"] >= 1


def test_the_logstore_never_replaces_a_commit(race):
    probe = race["reports"]["spark"]["probe"]
    assert probe["first"] == "ok"
    assert probe["same_again"] == "ok"  # the same text: a retried PUT of this commit, which did land
    assert probe["another"].startswith("java.nio.file.FileAlreadyExistsException")
    assert probe["stored"] == ['{"commitInfo":{"writer":"first"}}']


def test_the_logstore_refuses_a_filesystem_without_conditional_create(race):
    probe = race["reports"]["spark"]["probe"]
    assert probe["local"].startswith("java.lang.UnsupportedOperationException")
    assert "fs.s3a.create.conditional.enabled" in probe["local"]
    assert not probe["local_written"]


def test_a_driver_without_s3a_says_which_jars_it_lacks_in_one_line(spark):
    """A driver started without the S3 jars (spark-submit without them on --jars; this
    process's session, made for a warehouse folder) fails at the session with one line naming
    the fix, not at its first table with a Py4J stack trace."""
    from dkmsks.spark.session import require_s3a

    with pytest.raises(FileNotFoundError) as missing:
        require_s3a(spark)
    message = str(missing.value)
    assert "cannot load org.apache.hadoop.fs.s3a.S3AFileSystem" in message and "--jars" in message, message
    assert "\n" not in message
