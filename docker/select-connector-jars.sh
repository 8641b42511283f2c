#!/bin/bash
# Pick the connector jars Spark does not already ship.
# Usage: select-connector-jars.sh <maven repository layout dir> <spark jars dir> <output dir>
# A jar's artifact is its grandparent directory (group/artifact/version/file.jar); when Spark's
# jars/ holds any version of that artifact, Spark's copy wins and the connector's is skipped.
set -euo pipefail
source_dir=$1
spark_jars=$2
output_dir=$3
mkdir -p "$output_dir"
find "$source_dir" -name '*.jar' -print0 | sort -z | while IFS= read -r -d '' jar; do
  artifact=$(basename "$(dirname "$(dirname "$jar")")")
  shipped=$(compgen -G "$spark_jars/$artifact-[0-9]*.jar" || true)
  if [[ -n "$shipped" ]]; then
    echo "skip $(basename "$jar"): Spark ships $(basename "$shipped")"
  else
    echo "add  $(basename "$jar")"
    cp "$jar" "$output_dir/"
  fi
done
if [[ -z "$(ls -A "$output_dir")" ]]; then
  echo "no connector jar selected from $source_dir" >&2
  exit 1
fi
