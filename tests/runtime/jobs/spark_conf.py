"""Writes the SparkConf the driver's session really holds (JSON) to the file named by its one argument."""

import json
import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump(dict(spark.sparkContext.getConf().getAll()), out)
spark.stop()
