#!/usr/bin/env bash
# The full `dkm bench paper` run behind docs/paper-reproduction.md, split into resumable steps
# that can run as two parallel processes on a 2-core machine (each step skips the points
# already in .cache/bench/paper/results-*.jsonl; every engine point runs 3 times, the report
# takes per-timestamp medians). Usage: bench/paper_full.sh {a|b|c|d|report}
#   a: Tables 2-3 and the targets at |O_init| = 1M, |S| = 1M, m = 20 (10 timestamps) on Place
#      and the Twitter stand-in, then Figure 9 on Place, then Figure 9 on the Twitter stand-in
#   b: Figure 7 (100 timestamps, |S| = 100k) on both data sets, then the sweeps (Figures 8-10;
#      a point step a already measured is skipped)
#   c: the Spark pipeline points (default setting and the m sweep), from a snapshot of HEAD
#      (git archive; its commit in COMMIT, which the points record), so that edits in the
#      working tree cannot change the code under measurement mid-run
#   d: only Figure 9 on Place at |S| = 10M, then 2.5M and 5M (the paper's range; a size that does
#      not fit in the available memory is recorded as failed, with the estimate)
#   report: plots and docs/paper-reproduction.md from what was measured
set -euo pipefail
cd "$(dirname "$0")/.."
DKM=".venv/bin/dkm"
COMMON=(--runs 3 --t-table 10 --series-subs 100000 --table-subs-twitter 1000000 --sweep-subs 100000
        --subs-values 50000,100000,250000,500000,1000000,2500000,5000000,10000000 --subs-values-twitter 50000,100000,250000,500000,1000000,2500000,5000000,10000000)
SPARK=(--spark-o-init 50000 --spark-subscriptions 50000 --spark-timestamps 10 --spark-ms 5,10,20,40)
export OMP_NUM_THREADS=1
case "${1:-}" in
  a) nice -n 5 "$DKM" bench paper "${COMMON[@]}" --datasets place --figures tables --no-spark --no-report
     nice -n 5 "$DKM" bench paper "${COMMON[@]}" --datasets twitter --figures tables --no-spark --no-report
     nice -n 5 "$DKM" bench paper "${COMMON[@]}" --datasets place --figures fig9 --no-spark --no-report
     nice -n 5 "$DKM" bench paper "${COMMON[@]}" --datasets twitter --figures fig9 --no-spark --no-report ;;
  b) nice -n 5 "$DKM" bench paper "${COMMON[@]}" --datasets place --figures fig7,fig8,fig10 --no-spark --no-report
     nice -n 5 "$DKM" bench paper "${COMMON[@]}" --datasets twitter --figures fig7 --no-spark --no-report
     nice -n 5 "$DKM" bench paper "${COMMON[@]}" --datasets twitter --figures fig8,fig10 --no-spark --no-report ;;
  c) snap=".cache/bench/head-snapshot"
     rm -rf "$snap" && mkdir -p "$snap/.cache" && git archive HEAD lib sql spark_apps | tar -x -C "$snap"
     ln -s "$PWD/.cache/jars" "$snap/.cache/jars"
     git rev-parse HEAD > "$snap/COMMIT"
     nice -n 5 "$DKM" bench paper "${COMMON[@]}" "${SPARK[@]}" --figures "" --spark --spark-code "$PWD/$snap" --no-report ;;
  d) for subs in 10000000 2500000 5000000; do
       nice -n 5 "$DKM" bench paper "${COMMON[@]}" --subs-values "$subs" --datasets place --figures fig9 --no-spark --no-report
     done ;;
  report) "$DKM" bench paper "${COMMON[@]}" "${SPARK[@]}" --report-only ;;
  *) echo "usage: $0 {a|b|c|d|report}" >&2; exit 2 ;;
esac
