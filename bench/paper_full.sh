#!/usr/bin/env bash
# The full `dkm bench paper` run behind docs/paper-reproduction.md, split into resumable steps
# (each step skips the points already in .cache/bench/paper/results-*.jsonl). Every step runs
# the code of a snapshot of HEAD (git archive; its commit in COMMIT, which the points record),
# so that edits in the working tree cannot change the code under measurement mid-run. The
# machine has 2 cores shared with other work: run the steps one after another.
# Usage: [RUNS=3] [SWEEPS=...] [DATASETS=...] bench/paper_full.sh {a|b|c|d|report|sweep-report|sedona}
#   a: on Place, all four methods (KOP, SOP, DkM-SKS, PS²Stream) and the paper-estimate
#      variants: Tables 2-3 at the default setting (|O_init| = 1M, |S| = 1M, m = 20, k_max = 10;
#      10 timestamps), then Figure 7 (|S| = 100k, 100 timestamps), then PS²Stream alone at the
#      default setting over 100 timestamps
#   b: the same on the Twitter stand-in
#   c: the Spark pipeline points (default setting and the m sweep)
#   d: the sweeps (Figures 8-10; |S| = 100k for the m and k_max sweeps) on both data sets, all
#      four methods; a sweep's value at the Figure 7 setting (m = 20, k_max = 10, |S| = 100k) is
#      the Figure 7 run cut to 10 timestamps, so d measures Figure 7 too (skipped when a or b did);
#      SWEEPS=fig9 (say) runs only those sweeps, DATASETS=place only that data set
#   report: plots and docs/paper-reproduction.md from what was measured; a section none of whose
#      points is in the store keeps its last measured version from the report's git history,
#      marked as older with its commit and dates (the report fails when there is none)
#   sedona: tries Apache Sedona's releases for this Spark (ST_KNN, the Spark user's peer) once
#      each and records what happened for the report (.cache/bench/paper/sedona.json)
#   sweep-report: docs/paper-$SWEEPS.md (and its plots) from the points of SWEEPS on DATASETS
#      only, for a sweep re-run on its own with d
# RUNS (default 1) repeats every engine point; the report takes per-timestamp medians.
set -euo pipefail
cd "$(dirname "$0")/.."
DKM="$PWD/.venv/bin/dkm"
OUT=.cache/bench/paper  # relative: every step runs from the top of the repository
COMMON=(--runs "${RUNS:-1}" --out "$OUT" --t-table 10 --series-subs 100000 --sweep-subs 100000
        --subs-values 50000,100000,250000,500000,1000000,2500000,5000000,10000000)
SPARK=(--spark-o-init 50000 --spark-subscriptions 50000 --spark-timestamps 10 --spark-ms 5,10,20,40)
export OMP_NUM_THREADS=1
export DKMSKS_DATA_DIR="${DKMSKS_DATA_DIR:-$(cd .. && pwd)/shared/data}"

snapshot() {  # prints the folder of a source snapshot of HEAD
  local snap=".cache/bench/snapshot-$(git rev-parse --short=10 HEAD)"
  if [ ! -f "$snap/COMMIT" ]; then
    rm -rf "$snap" && mkdir -p "$snap/.cache" && git archive HEAD lib sql spark_apps | tar -x -C "$snap"
    ln -s "$PWD/.cache/jars" "$snap/.cache/jars"
    git rev-parse HEAD > "$snap/COMMIT"
  fi
  echo "$PWD/$snap"
}

engine() {  # dkm bench paper from the snapshot
  PYTHONPATH="$(snapshot)/lib" "$DKM" bench paper "${COMMON[@]}" --no-spark --no-report "$@"
}

case "${1:-}" in
  a) engine --datasets place --figures tables,fig7,ps2long ;;
  b) engine --datasets twitter --figures tables,fig7,ps2long ;;
  c) snap="$(snapshot)"
     "$DKM" bench paper "${COMMON[@]}" "${SPARK[@]}" --figures "" --spark --spark-code "$snap" --no-report ;;
  d) for ds in ${DATASETS:-place twitter}; do engine --datasets "$ds" --figures "fig7,${SWEEPS:-fig8,fig10,fig9}"; done ;;
  report) PYTHONPATH="$PWD/lib" "$DKM" bench paper "${COMMON[@]}" "${SPARK[@]}" --report-only ;;
  sedona) PYTHONPATH="$(snapshot)/lib" "$PWD/.venv/bin/python" -m dkmsks.bench.paper_sedona --out "$OUT" --jars "$PWD/.cache/jars-sedona" ;;
  sweep-report)  # a report of its own for the sweeps a `d` step re-ran alone (docs/paper-SWEEPS.md)
     sweeps="${SWEEPS:-fig9}" datasets="${DATASETS:-place twitter}"
     PYTHONPATH="$PWD/lib" "$DKM" bench paper "${COMMON[@]}" --no-spark --datasets "${datasets// /,}" \
       --figures "$sweeps" --report-only --docs "docs/paper-${sweeps//,/-}.md" --img-dir "docs/img/paper-${sweeps//,/-}" ;;
  *) echo "usage: [RUNS=R] $0 {a|b|c|d|report|sweep-report|sedona}" >&2; exit 2 ;;
esac
