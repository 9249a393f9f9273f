# One image for every service of docker-compose.yml: Airflow components and the Spark
# standalone master/workers (started from the pyspark package), with this project installed.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven procps \
 && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    DKMSKS_HOME=/opt/dkmsks \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYTHONUNBUFFERED=1

WORKDIR /opt/dkmsks
COPY requirements.lock pyproject.toml README.md ./
# playwright is only for the browser test: not in the image.
RUN grep -v '^playwright==' requirements.lock > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt "psycopg2-binary==2.9.13"
COPY build/ build/
RUN mvn -B -q -f build/delta-jars.pom.xml dependency:copy-dependencies \
      -DincludeGroupIds=io.delta -DoutputDirectory=/opt/dkmsks/.cache/jars
COPY lib/ lib/
COPY sql/ sql/
COPY spark_apps/ spark_apps/
COPY dags/ dags/
RUN pip install --no-cache-dir --no-deps -e .
