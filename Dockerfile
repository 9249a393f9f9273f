# One image for every dkmsks service of docker-compose.yml: the Airflow components, the Spark
# standalone master and workers (started from the pyspark package) and follow mode. (The object
# store is an image of its own, docker/objectstore/.)
#
# FROM dkmsks-base:bookworm, made from Debian's packages by docker/build-base.sh (no image
# registry is needed; python:3.11-slim and friends are never pulled). The layout mirrors a
# checkout after scripts/bootstrap.sh: the venv in /opt/dkmsks/.venv, Delta's jars in
# /opt/dkmsks/.cache/jars, the S3A jars and the project's LogStore in /opt/dkmsks/.cache/jars-s3,
# the project installed editable, so the DAGs' and the Spark session's defaults
# (DKMSKS_HOME/.venv, DKMSKS_HOME/.cache/jars, .cache/jars-s3) hold inside the container unchanged.
ARG BASE_IMAGE=dkmsks-base:bookworm

# The stages that download (Maven Central, PyPI) trust the extra CA certificates in
# docker/extra-ca/*.crt, for a network whose HTTPS goes through a TLS-inspecting proxy (as on
# the machine of docs/deployment.md). They stay in these stages: the runtime image below starts
# again from the base and copies only the venv and the jars.
FROM ${BASE_IMAGE} AS fetch
COPY docker/extra-ca/ /usr/local/share/ca-certificates/dkmsks-extra/
# Also rewrites Java's trust store (ca-certificates-java), which Maven uses.
RUN update-ca-certificates > /dev/null

# Delta's jars resolved from Maven Central by the project's pom; Maven and its repository stay
# out of the runtime image.
FROM fetch AS delta-jars
RUN apt-get update \
 && apt-get install -y maven \
 && rm -rf /var/lib/apt/lists/*
COPY build/delta-jars.pom.xml /build/delta-jars.pom.xml
RUN mvn -B -q -f /build/delta-jars.pom.xml dependency:copy-dependencies \
      -DincludeGroupIds=io.delta -DoutputDirectory=/jars

# For a warehouse on S3 (dkmsks.spark.s3): Hadoop's S3A connector, the AWS SDK modules it calls
# and the LogStore that commits by create-if-absent, made by the same script as
# scripts/bootstrap.sh's .cache/jars-s3; the LogStore is compiled, hence the JDK (this stage only).
FROM delta-jars AS s3-jars
RUN apt-get update \
 && apt-get install -y openjdk-17-jdk-headless \
 && rm -rf /var/lib/apt/lists/*
COPY build/s3-jars.sh build/s3-jars.pom.xml /build/
COPY build/logstore/ /build/logstore/
RUN /build/s3-jars.sh /jars-s3

# The venv with requirements.lock, at the path it keeps in the runtime image. Debian's Python is
# "externally managed" (PEP 668), hence a venv. playwright drives the browser test only.
FROM fetch AS venv
COPY requirements.lock /tmp/requirements.lock
RUN python3.11 -m venv /opt/dkmsks/.venv \
 && grep -v '^playwright==' /tmp/requirements.lock > /tmp/requirements.txt \
 && /opt/dkmsks/.venv/bin/pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt
# What only the containers need: Airflow 3 talks to PostgreSQL through psycopg2 and, for its
# async sessions, asyncpg ("No module named 'asyncpg'" at `airflow db migrate` otherwise);
# setuptools and wheel let the runtime stage install the project without build isolation,
# i.e. without the network.
RUN /opt/dkmsks/.venv/bin/pip install --no-cache-dir --disable-pip-version-check \
      "psycopg2-binary==2.9.13" "asyncpg==0.32.0" "setuptools==84.2.1" "wheel==0.48.0"

FROM ${BASE_IMAGE}
ENV DKMSKS_HOME=/opt/dkmsks \
    DKMSKS_JARS_DIR=/opt/dkmsks/.cache/jars \
    DKMSKS_S3_JARS_DIR=/opt/dkmsks/.cache/jars-s3 \
    DKMSKS_LOCAL_DIR=/var/lib/dkmsks/local \
    VIRTUAL_ENV=/opt/dkmsks/.venv \
    PATH=/opt/dkmsks/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYSPARK_PYTHON=/opt/dkmsks/.venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/dkmsks/.venv/bin/python

# The services run as an unprivileged user. Named volumes mounted on the folders created here
# start with their owner, so Airflow's home and Spark's scratch are writable. The warehouse is
# on the object store; each container's own process files for it (status, spool, caches:
# dkmsks.warehouse.local_home) go to DKMSKS_LOCAL_DIR, and the store's credentials are mounted
# read-only at /etc/dkmsks/objectstore (docker-compose.yml).
RUN groupadd --gid 50000 dkmsks \
 && useradd --uid 50000 --gid 50000 --create-home --home-dir /home/dkmsks --shell /bin/bash dkmsks \
 && install -d -o dkmsks -g dkmsks /opt/airflow /var/lib/dkmsks/spark-work /var/lib/dkmsks/local \
 && install -d -o dkmsks -g dkmsks -m 700 /etc/dkmsks/objectstore

WORKDIR /opt/dkmsks
COPY --from=venv /opt/dkmsks/.venv/ .venv/
COPY --from=delta-jars /jars/ .cache/jars/
COPY --from=s3-jars /jars-s3/ .cache/jars-s3/
COPY pyproject.toml README.md ./
COPY lib/ lib/
COPY sql/ sql/
COPY spark_apps/ spark_apps/
COPY dags/ dags/
COPY conf/ conf/
RUN .venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation -e . \
 && .venv/bin/python -m compileall -q lib dags spark_apps

COPY docker/spark-conf/ /etc/dkmsks/spark-conf/
# numba's compiled worker kernels (lib/dkmsks/core/kernel/): cached where the runtime user
# can write (lib/ is root's), and compiled once here so no container pays the ~10 s at its
# first timestamp (on a machine with another CPU they compile once per container instead).
ENV SPARK_WORKER_DIR=/var/lib/dkmsks/spark-work \
    SPARK_CONF_DIR=/etc/dkmsks/spark-conf \
    NUMBA_CACHE_DIR=/var/cache/dkmsks/numba
RUN install -d -o dkmsks -g dkmsks /var/cache/dkmsks/numba
USER dkmsks
RUN .venv/bin/python -c "from dkmsks.core.warm import warm_up; warm_up()"
# tini as PID 1 passes SIGTERM on to the service and reaps the processes Spark forks.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["dkm", "--help"]
