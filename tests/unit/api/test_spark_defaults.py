"""spark-defaults.conf as Spark reads it: rendering escapes what would split a line or a key, and
parsing reads back what `java.util.Properties.load` (Spark's loader) reads."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from headrace.api import spark_defaults

AWKWARD = {
    "spark.plain": "value",
    "spark.multi.line": "first\nsecond",
    "spark.equals": "a=b:c",
    "spark.spaces.inside": "one two  three",
    "spark.backslash": "C:\\path\\n-not-a-newline\\",
    "spark.hash": "#not a comment !either",
    "spark.key with=sep:arators": "x",
    "#spark.comment.like": "y",
    "spark.unicode": "straße ✓",
    "spark.carriage": "a\rb\tc",
    "spark.empty": "",
}

LOADER = """
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class Load {
    public static void main(String[] args) throws Exception {
        Properties properties = new Properties();
        try (Reader reader = new InputStreamReader(new FileInputStream(args[0]), StandardCharsets.UTF_8)) {
            properties.load(reader);
        }
        HexFormat hex = HexFormat.of();
        for (String key : new TreeSet<>(properties.stringPropertyNames())) {
            String value = properties.getProperty(key).trim();
            System.out.println(hex.formatHex(key.getBytes(StandardCharsets.UTF_8)) + " "
                + hex.formatHex(value.getBytes(StandardCharsets.UTF_8)));
        }
    }
}
"""


def test_rendered_settings_read_back_unchanged() -> None:
    text = spark_defaults.render(AWKWARD, header="written by a test")
    assert text.startswith("# written by a test\n")
    assert len(text.splitlines()) == len(AWKWARD) + 1  # no value or key splits a line
    assert spark_defaults.parse(text) == AWKWARD


def test_plain_settings_render_as_key_space_value() -> None:
    assert spark_defaults.render({"spark.b": "2", "spark.a": "x y"}) == "spark.a x y\nspark.b 2\n"


def test_parse_reads_the_separators_comments_and_continuations_spark_accepts() -> None:
    text = "# comment\n! also\n\nspark.a=1\nspark.b : 2\nspark.c\t3  \nspark.d long\\\n    value\nspark.e\n"
    assert spark_defaults.parse(text) == {
        "spark.a": "1",
        "spark.b": "2",
        "spark.c": "3",
        "spark.d": "longvalue",
        "spark.e": "",
    }


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the host packages install one)")
def test_java_properties_reads_what_was_rendered(tmp_path: Path) -> None:
    (tmp_path / "Load.java").write_text(LOADER)
    conf_file = tmp_path / "spark-defaults.conf"
    conf_file.write_text(spark_defaults.render(AWKWARD, header="header"), encoding="utf-8")
    output = subprocess.run(
        ["java", str(tmp_path / "Load.java"), str(conf_file)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    read = {}
    for line in output.splitlines():
        key, _, value = line.partition(" ")
        read[bytes.fromhex(key).decode()] = bytes.fromhex(value).decode()
    assert read == AWKWARD
