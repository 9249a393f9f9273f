#!/usr/bin/env bash
# The jars a Spark session needs for a warehouse on S3 (dkmsks.spark.s3), into one folder:
#
#   build/s3-jars.sh DIR
#
# Hadoop's S3A connector and the AWS SDK v2 modules it calls (build/s3-jars.pom.xml; only the
# groups pyspark does not ship), and the LogStore that commits by create-if-absent
# (build/logstore, compiled here: needs Maven and a JDK 17). scripts/bootstrap.sh runs it into
# .cache/jars-s3, the project's Dockerfile into the image's.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
mvn -B -q -f "$here/s3-jars.pom.xml" dependency:copy-dependencies \
  -DincludeGroupIds=org.apache.hadoop,software.amazon.awssdk,software.amazon.eventstream,org.reactivestreams,software.amazon.s3.analyticsaccelerator \
  -DoutputDirectory="$out"
mvn -B -q -f "$here/logstore/pom.xml" package
cp "$here/logstore/target/dkmsks-logstore-1.jar" "$out/"
