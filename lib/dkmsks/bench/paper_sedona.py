"""Apache Sedona's kNN join (``ST_KNN``), the peer a Spark user would reach for: can it run here?

The peer would recompute, each timestamp, the results of the subscriptions the timestamp
affects with Sedona's kNN join and the keyword predicate, beside the naive Spark baseline
(:mod:`~dkmsks.bench.naive_spark`) and the pipeline. Sedona ships one jar per Spark minor
version and Scala version (``org.apache.sedona:sedona-spark-shaded-<spark>_<scala>``); this
module tries the candidate releases once each against the installed pyspark — fetch the jar
with Maven, then start a session with Sedona's SQL extension beside Delta's and run a small
``ST_KNN`` join whose answer is known — and writes what happened to ``OUT/sedona.json`` for
the paper report (``bench/paper_full.sh sedona``).

    python -m dkmsks.bench.paper_sedona --out .cache/bench/paper
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dkmsks.bench.common import REPO, provenance

#: The releases tried, newest first: Spark 4.2 and 4.1 builds of the newest release (1.9.1 on
#: PyPI), then Spark 4.0 builds (the newest Spark line an older release targets).
CANDIDATES: tuple[tuple[str, str], ...] = (
    ("sedona-spark-shaded-4.2_2.13", "1.9.1"), ("sedona-spark-shaded-4.1_2.13", "1.9.1"),
    ("sedona-spark-shaded-4.1_2.13", "1.9.0"), ("sedona-spark-shaded-4.0_2.13", "1.9.0"),
    ("sedona-spark-shaded-4.0_2.13", "1.8.0"),
)
GROUP = "org.apache.sedona"
_PROBE_EXPECTED = [(q, o) for q in range(5) for o in (q, q + 1)]
_JAVA_ERROR = re.compile(r"^(?::\s*)?((?:java|scala|org)\.[\w.$]+(?:Error|Exception)[^\n]*)$", re.M)


def fetch(artifact: str, version: str, jars: Path, timeout: float = 900) -> tuple[Path | None, str]:
    """The jar of ``GROUP:artifact:version`` in ``jars`` (fetched with Maven once), or the
    reason it could not be had. Maven Central's "not found" is final: it is kept beside the jars
    (``<artifact>-<version>.missing``) and not asked again."""
    jar = jars / f"{artifact}-{version}.jar"
    missing = jars / f"{artifact}-{version}.missing"
    if jar.is_file():
        return jar, ""
    if missing.is_file():
        return None, missing.read_text().strip()
    jars.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mvn", "-B", "-q", "dependency:copy", f"-Dartifact={GROUP}:{artifact}:{version}",
                               f"-DoutputDirectory={jars.resolve()}"], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"mvn: {err}"
    if jar.is_file():
        return jar, ""
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "Could not find artifact" in line]
    text = lines[0] if lines else (done.stdout + done.stderr).strip().splitlines()[-1:]
    found = re.search(r"Could not find artifact \S+", str(text))
    if found:
        missing.write_text(found.group(0) + " in Maven Central\n")
        return None, found.group(0) + " in Maven Central"
    return None, str(text)[:300]


def probe(jar: Path) -> list[tuple[int, int]]:
    """Start a session with Delta and Sedona's SQL extension and run the probe's ``ST_KNN``
    join; its rows (raises what Spark raises)."""
    from dkmsks.spark.session import build_session, session_conf
    from dkmsks.warehouse import Warehouse

    warehouse = Warehouse(Path(tempfile.mkdtemp(prefix="sedona-probe-")))
    conf = session_conf(warehouse)
    jars = [j for j in conf.get("spark.jars", "").split(",") if j] + [str(jar)]
    extensions = [e for e in (conf.get("spark.sql.extensions", ""), "org.apache.sedona.sql.SedonaSqlExtensions") if e]
    extra = {"spark.jars": ",".join(jars), "spark.sql.extensions": ",".join(extensions),
             "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
             "spark.kryo.registrator": "org.apache.sedona.core.serde.SedonaKryoRegistrator"}
    if "spark.jars.packages" in conf:
        extra["spark.jars.packages"] = conf["spark.jars.packages"]
    spark = build_session(warehouse, app_name="sedona-probe", extra_conf=extra)
    spark.sql("SELECT id, ST_Point(CAST(id AS DOUBLE), 0.0) AS g FROM range(100)").createOrReplaceTempView("o")
    spark.sql("SELECT id, ST_Point(CAST(id AS DOUBLE) + 0.4, 0.0) AS g FROM range(5)").createOrReplaceTempView("q")
    # Five query points between objects 0..99 on a line, their 2 nearest.
    knn = spark.sql("SELECT q.id AS qid, o.id AS oid FROM q JOIN o ON ST_KNN(q.g, o.g, 2, false) ORDER BY qid, oid")
    return [(int(r.qid), int(r.oid)) for r in knn.collect()]


def try_load(jar: Path, timeout: float = 900) -> tuple[bool, str]:
    """Whether the probe's join runs with ``jar`` and gives the known answer (in a fresh
    interpreter, so each jar gets its own JVM), and the first Java error when not."""
    try:
        done = subprocess.run([sys.executable, "-m", "dkmsks.bench.paper_sedona", "--probe", str(jar)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False, f"the probe did not finish in {timeout:.0f} s"
    if done.returncode == 0 and "PROBE OK" in done.stdout:
        return True, ""
    text = done.stdout + done.stderr
    error = _JAVA_ERROR.search(text)
    if error:
        return False, error.group(1).strip()
    tail = [line for line in text.strip().splitlines() if line.strip()][-1:]
    return False, tail[0][:300] if tail else f"exit {done.returncode}"


def versions() -> dict[str, str]:
    """The installed pyspark's Spark and Scala versions."""
    import pyspark

    scala = sorted(Path(pyspark.__file__).parent.glob("jars/scala-library-*.jar"))
    return {"spark": pyspark.__version__,
            "scala": scala[-1].stem.removeprefix("scala-library-") if scala else "unknown"}


def run(out: Path, jars: Path) -> dict[str, Any]:
    """Try every candidate once; write and return ``out/sedona.json``."""
    tried = []
    for artifact, version in CANDIDATES:
        jar, why = fetch(artifact, version, jars)
        entry: dict[str, Any] = {"artifact": f"{GROUP}:{artifact}", "version": version,
                                 "fetched": jar is not None, "fetch_error": why}
        if jar is not None:
            loads, error = try_load(jar)
            entry.update(loads=loads, load_error=error)
        tried.append(entry)
        print(json.dumps(entry), flush=True)
    rec = {**provenance(spark=True), **versions(), "tried": tried}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sedona.json").write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dkmsks.bench.paper_sedona``: try the candidates (or probe one jar)."""
    q = argparse.ArgumentParser(prog="python -m dkmsks.bench.paper_sedona", description=__doc__)
    q.add_argument("--out", type=Path, default=REPO / ".cache" / "bench" / "paper", help="the paper store's folder")
    q.add_argument("--jars", type=Path, default=REPO / ".cache" / "jars-sedona", help="where fetched jars go")
    q.add_argument("--probe", type=Path, default=None, help=argparse.SUPPRESS)
    args = q.parse_args(argv)
    if args.probe is not None:
        rows = probe(args.probe)
        print("PROBE OK" if rows == _PROBE_EXPECTED else f"PROBE WRONG {rows}")
        return 0 if rows == _PROBE_EXPECTED else 1
    rec = run(args.out, args.jars)
    return 0 if any(t.get("loads") for t in rec["tried"]) else 1


if __name__ == "__main__":
    sys.exit(main())
