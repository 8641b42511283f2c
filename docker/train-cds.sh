#!/bin/bash
# Image build: record how Spark's launcher starts the driver JVM, then dump the class-data sharing
# archive both the driver and the executors use (/opt/headrace/jvm, see headrace.runtime.jvm).
# The training run is the windowed-counts example through the Headrace runtime in local mode, on
# a few generated files, one a batch, with a RocksDB state store: it loads the classes a driver and an
# executor load up to and through their first batches (the later batches load the state the first
# one committed); the archive is dumped at the JVM's exit.
set -euo pipefail
jvm_dir=${HEADRACE_JVM_DIR:-/opt/headrace/jvm}
python -m headrace.runtime.jvm record "$jvm_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
app=/opt/headrace/apps/windowed-counts/app.py
cd /opt/headrace
python -m apps.common.generate clicks --files "$work/in" --batches 3 --per-batch 200 >/dev/null
SPARK_LOCAL_HOSTNAME=localhost SPARK_LOCAL_IP=127.0.0.1 HEADRACE_CDS_DUMP="$jvm_dir/spark.jsa" \
HEADRACE_TERMINATION_MESSAGE_PATH="$work/termination" \
HEADRACE_CONTROL_BIND=127.0.0.1 HEADRACE_CONTROL_PORT=0 HEADRACE_METRICS_PORT=0 HEADRACE_STATE_PARTITIONS=4 \
  python -m headrace.runtime "$app" --source files --input "$work/in" --output "file://$work/out" \
    --checkpoint "file://$work/checkpoint" --available-now --max-files-per-trigger 1
test -s "$jvm_dir/spark.jsa"
ls -l "$jvm_dir"
