"""Write and read back a few rows on gs:// with the Spark settings in STATE_CONF (a JSON object), through the
image's Cloud Storage connector: whatever credentials the settings make it fetch, it fetches before the first call.

Usage: gcs_auth.py <gs:// directory> <jar,jar,...>; prints ``ROWS <n>``.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession


def main() -> None:
    target, jars = sys.argv[1:3]
    builder = SparkSession.builder
    for key, value in json.loads(os.environ["STATE_CONF"]).items():
        builder = builder.config(key, value)
    spark = (
        builder.master("local[1]")
        .appName("gcs-auth")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.createDataFrame([("a",), ("b",)], ["value"]).write.mode("overwrite").text(target)
    print(f"ROWS {spark.read.text(target).count()}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
