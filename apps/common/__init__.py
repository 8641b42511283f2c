"""Shared plumbing of the example apps: command-line options, Kafka or file sources, exactly-once sinks.

Owns: how every example app reads its input (`--source kafka|files`), writes its parquet output and
runs its queries (continuous, or bounded with `--available-now`); and `generate`, realistic input.
Never: business logic (that lives in each app's transforms.py) or any import of headrace: the apps
are ordinary PySpark programs.
"""
