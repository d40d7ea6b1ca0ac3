#!/usr/bin/env bash
# Nightly milabench run: run the suite, add the run to the results store, rebuild the
# history site and alert on a new regression. Exit code: `milabench history`'s when not 0
# (1: a new regression), else `milabench run`'s (a benchmark failed), so cron or systemd
# records the failure. See docs/ci.md.
#
# Settings (environment; the systemd unit reads them from an EnvironmentFile):
#   MILABENCH_CONFIG     suite file (default: milabench's default suite)
#   MILABENCH_BASE       base directory: environments, data, runs, results.sqlite (./results)
#   MILABENCH_STORE_URL  results store (default sqlite:///$MILABENCH_BASE/results.sqlite)
#   SITE                 where the static history site goes (default $MILABENCH_BASE/site)
#   WEBHOOK_URL          where alerts are POSTed (optional; keep it secret: never echoed)
#   MILABENCH            how to start milabench (default: milabench)
#   RUN_ARGS             extra `milabench run` arguments (e.g. --use-current-env)
#   HISTORY_NEW          `history --new`: alert when the change's first run is among the
#                        last N runs (default 3: a change point needs 3 runs after it, so
#                        the night it becomes detectable is the night it alerts)
#   HISTORY_ARGS         extra `milabench history` arguments (e.g. --alpha 0.05 --suite ci.yaml)
set -euo pipefail

MILABENCH_BASE=${MILABENCH_BASE:-$PWD/results}
export MILABENCH_BASE MILABENCH_DASH=no
SITE=${SITE:-$MILABENCH_BASE/site}
read -r -a mb <<< "${MILABENCH:-milabench}"
read -r -a run_args <<< "${RUN_ARGS:-}"
read -r -a history_args <<< "${HISTORY_ARGS:-}"
run_name="nightly.$(date -u +%Y-%m-%d_%H-%M-%S)"
run_dir="$MILABENCH_BASE/runs/$run_name"

echo "nightly: run $run_name"
# a failed run (a benchmark crashed) is still stored and shows in the history: go on
set +e
"${mb[@]}" run --run-name "$run_name" "${run_args[@]}"
run_code=$?
set -e
if [ ! -d "$run_dir" ]; then
    echo "nightly: milabench run made no run folder (exit $run_code)" >&2
    [ "$run_code" -ne 0 ] || run_code=1
    exit "$run_code"
fi

"${mb[@]}" store import "$run_dir"

history=("${mb[@]}" history --output "$SITE" --new "${HISTORY_NEW:-3}" "${history_args[@]}")
if [ -n "${WEBHOOK_URL:-}" ]; then
    history+=(--notify "$WEBHOOK_URL")
fi
echo "nightly: milabench history --output $SITE --new ${HISTORY_NEW:-3} ${HISTORY_ARGS:-}${WEBHOOK_URL:+ --notify <WEBHOOK_URL>}"
set +e
"${history[@]}"
code=$?
set -e
echo "nightly: run exit $run_code, history exit $code"
# history's verdict first (1: a new regression), else the run's own (a benchmark failed)
if [ "$code" -ne 0 ]; then exit "$code"; fi
exit "$run_code"
