#!/usr/bin/env bash
# The README's main job, end to end on local Spark with embedded defaults and the real data:
# generate a workload with the paper's protocol, then `dkm run` (ingest -> partition ->
# every timestamp -> summary), then query the results with Spark SQL.
# Sizes can be overridden: DEMO_O_INIT, DEMO_SUBSCRIPTIONS, DEMO_TIMESTAMPS, DEMO_WORKERS; the
# folder of its workload and warehouse: DEMO_WORKDIR (.cache/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export SPARK_LOCAL_IP=127.0.0.1
DATA="${DKMSKS_DATA_DIR:-../shared/data}/wof_simplegeo_us/objects.tsv.gz"
if [ ! -f "$DATA" ]; then
  echo "demo: the real data file $DATA is absent; put the shared data folder beside the repository" >&2
  echo "      (../shared/data) or set DKMSKS_DATA_DIR" >&2
  exit 2
fi
WORK=${DEMO_WORKDIR:-.cache/demo}
O_INIT=${DEMO_O_INIT:-100000}
SUBS=${DEMO_SUBSCRIPTIONS:-20000}
TS=${DEMO_TIMESTAMPS:-10}
M=${DEMO_WORKERS:-20}
tag="o${O_INIT}-s${SUBS}-t${TS}"
if [ ! -f "$WORK/workload-$tag/events.tsv.gz" ]; then
  .venv/bin/dkm generate --source "$DATA" --out "$WORK/workload-$tag" \
    --o-init "$O_INIT" --subscriptions "$SUBS" --timestamps "$TS"
fi
.venv/bin/dkm run --objects "$WORK/workload-$tag/objects.tsv.gz" --events "$WORK/workload-$tag/events.tsv.gz" \
  --warehouse "$WORK/warehouse-$tag" --method dkm --workers "$M"
echo
echo "Three subscriptions' current results (dkm sql over the knn_results view):"
.venv/bin/dkm sql --warehouse "$WORK/warehouse-$tag" --limit 15 \
  "SELECT sub_id, rank, object_id, round(distance, 5) AS distance, object_keywords FROM knn_results WHERE sub_id IN (SELECT sub_id FROM knn_current ORDER BY sub_id LIMIT 3) ORDER BY sub_id, rank" \
  2> >(grep -v -E "WARN|log4j|setLogLevel" >&2)
