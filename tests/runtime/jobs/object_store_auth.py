"""Write and read back a few rows on an object store (gs://, abfss://) with the Spark settings in STATE_CONF (a JSON
object), through the image's connector: whatever credentials the settings make it fetch, it fetches before the first
call.

Usage: object_store_auth.py <directory URI>[,<directory URI>...] <jar,jar,...>; prints ``ROWS <n>`` for each.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession


def main() -> None:
    targets, jars = sys.argv[1:3]
    builder = SparkSession.builder
    for key, value in json.loads(os.environ["STATE_CONF"]).items():
        builder = builder.config(key, value)
    spark = (
        builder.master("local[1]")
        .appName("object-store-auth")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    for target in targets.split(","):
        spark.createDataFrame([("a",), ("b",)], ["value"]).write.mode("overwrite").text(target)
        print(f"ROWS {spark.read.text(target).count()}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
