"""Build (once) a JVM class-data-sharing archive of the classes a Spark + Delta driver loads.

The test suite starts ~100 short-lived Spark drivers; loading and verifying Spark's classes is
most of each start. A dynamic AppCDS archive (JDK 13+, JEP 350) maps them from one file
instead: measured here, session start + first Delta statements 13.1 -> 7.8 s per driver.

    python scripts/jvm_class_archive.py   # prints the archive's path (building it if needed)

The archive is keyed by the JDK build, the jar files on the driver's class path and the JVM
flags, so a change of any of them builds a new one (``.cache/cds/``). It is an optimisation
only: a JVM that cannot use an archive says so and runs without it. scripts/test.sh adds
``-XX:SharedArchiveFile=<path>`` to ``DKMSKS_DRIVER_JAVA_OPTS``; real runs do not use it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _key(flags: str) -> str:
    import pyspark

    from dkmsks.spark.session import delta_jars

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")) + delta_jars()
    digest = hashlib.sha256("\n".join([java, flags, *(f"{j.name}:{j.stat().st_size}" for j in jars)]).encode())
    return digest.hexdigest()[:16]


def _warm_up(warehouse: Path) -> None:
    """What the suite's drivers do: Delta DDL, MERGE, time travel, SQL, pandas UDFs."""
    import pandas as pd

    from dkmsks.spark.session import build_session, stop_session_and_jvm
    from dkmsks.warehouse import Warehouse

    spark = build_session(Warehouse(warehouse), app_name="dkmsks-class-archive")
    spark.sql("CREATE TABLE a (id BIGINT, kw ARRAY<STRING>, t BIGINT) USING delta")
    spark.sql("INSERT INTO a VALUES (1, array('x', 'y'), 0), (2, array('y'), 1)")
    src = spark.createDataFrame(pd.DataFrame({"id": [2, 3], "kw": [["z"], ["x"]], "t": [1, 2]}))
    src.createOrReplaceTempView("src")
    spark.sql("MERGE INTO a USING src ON a.id = src.id WHEN NOT MATCHED THEN INSERT *")
    df = spark.table("a").localCheckpoint(eager=True)
    df.mapInPandas(lambda it: (b.assign(t=b.t + 1) for b in it), df.schema).collect()
    spark.sql("SELECT id, t, row_number() OVER (PARTITION BY t ORDER BY id) FROM a").collect()
    spark.read.option("versionAsOf", 0).table("a").count()
    spark.sql("DESCRIBE HISTORY a").collect()
    stop_session_and_jvm(spark)  # the archive is written when the JVM exits


def main() -> int:
    """Build the class-data-sharing archive when it is absent; print its path."""
    flags = os.environ.get("DKMSKS_DRIVER_JAVA_OPTS", "")
    folder = REPO / ".cache" / "cds"
    archive = folder / f"spark-{_key(flags)}.jsa"
    if not archive.exists():
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("spark-*.jsa"):
            old.unlink()
        dumping = folder / f"{archive.name}.part"
        os.environ["DKMSKS_DRIVER_JAVA_OPTS"] = f"{flags} -XX:ArchiveClassesAtExit={dumping}"
        with tempfile.TemporaryDirectory() as tmp:
            _warm_up(Path(tmp) / "warehouse")
        if not dumping.exists():
            print(f"jvm_class_archive: the JVM wrote no archive to {dumping}", file=sys.stderr)
            return 1
        dumping.rename(archive)
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
