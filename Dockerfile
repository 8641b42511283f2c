ARG BASE=docker.io/library/debian:bookworm-slim
# Headrace's images, from one file:
#   --target operator : the kopf operator (Python 3.11, no JVM), runs `python -m headrace`
#   --target spark    : the Spark application base image (JRE 17, pyspark 4.3.0, the Kafka connector,
#                       hadoop-aws with the AWS SDK v2 modules for s3a://, Google's Cloud Storage
#                       connector for gs://, hadoop-azure for abfss://, headrace[runtime]);
#                       the driver runs `python -m headrace.runtime <script> <args>`,
#                       executors run `executor` (see docker/spark-entrypoint.sh). Users extend it
#                       with their job under /opt/headrace/apps/.
# Everything is pinned: Python packages by uv.lock (with hashes), the connector by
# docker/kafka-connector/pom.xml, S3A by docker/s3a/pom.xml and docker/s3a/jars.sha256, the GCS
# connector by docker/gcs/pom.xml and docker/gcs/jars.sha256, ABFS by docker/azure/pom.xml and
# docker/azure/jars.sha256, build
# tools by docker/build-requirements.txt and docker/build-backends.txt, Debian packages by
# release (bookworm).
# Heavy layers come first, the repository's sources last, so a source change rebuilds little.
# Build args only needed behind a TLS-intercepting proxy (the project's testbed passes them):
#   BUILD_CA  : path of a CA bundle mounted into the build (Maven's truststore is made from it)
#   PIP_CERT  : the same path, for pip

# --- Python 3.11: what both images run ------------------------------------------------------------
FROM ${BASE} AS python-runtime
ARG DEBIAN_FRONTEND=noninteractive
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3.11 \
 && rm -rf /var/lib/apt/lists/*

# --- ... plus a virtual environment with pip, where dependencies are installed ---------------------
FROM python-runtime AS python
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv

# --- Pinned requirements exported from uv.lock (only this file's content reaches the images) ----
FROM python AS requirements
ARG PIP_CERT
COPY docker/build-requirements.txt /tmp/build-requirements.txt
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --require-hashes -r /tmp/build-requirements.txt
COPY pyproject.toml uv.lock /src/
WORKDIR /src
RUN mkdir /requirements \
 && uv export --frozen --no-dev --no-emit-project --format requirements.txt \
      --output-file /requirements/operator.txt \
 && uv export --frozen --no-dev --no-emit-project --format requirements.txt --extra runtime \
      --output-file /requirements/spark.txt

# --- The headrace package, built from the sources and staged for copying into /opt/venv ----------
FROM requirements AS headrace
COPY README.md /src/
COPY operator/ /src/operator/
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels /src \
 && pip install --no-deps --no-index --prefix /staging /wheels/*.whl

# --- The Spark Kafka connector and its dependencies, from Maven Central ----------------------------
FROM ${BASE} AS kafka-jars
ARG BUILD_CA
ARG DEBIAN_FRONTEND=noninteractive
# With BUILD_CA, split the bundle into single certificates before ca-certificates-java builds
# Java's truststore from /etc/ssl/certs (it reads one certificate per file).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && if [ -n "${BUILD_CA:-}" ]; then \
      awk '/BEGIN CERTIFICATE/ {n++; out = sprintf("/usr/local/share/ca-certificates/build-ca-%03d.crt", n)} \
           out {print > out} /END CERTIFICATE/ {close(out); out = ""}' "${BUILD_CA}" \
      && update-ca-certificates; \
    fi \
 && mkdir -p /usr/share/man/man1 \
 && apt-get install -y --no-install-recommends maven \
 && rm -rf /var/lib/apt/lists/*
COPY docker/kafka-connector/pom.xml /build/pom.xml
# Repository layout (group/artifact/version/file) lets the spark stage know each jar's artifact.
RUN --mount=type=cache,target=/root/.m2 \
    mvn -B -ntp -f /build/pom.xml dependency:copy-dependencies \
      -DincludeScope=runtime -Dmdep.useRepositoryLayout=true -DoutputDirectory=/jars

# --- hadoop-aws and the AWS SDK v2 modules S3A needs (s3a:// state), from Maven Central -------------
FROM kafka-jars AS s3a-jars
COPY docker/s3a/pom.xml /build-s3a/pom.xml
RUN --mount=type=cache,target=/root/.m2 \
    mvn -B -ntp --strict-checksums -f /build-s3a/pom.xml dependency:copy-dependencies \
      -DincludeScope=runtime -Dmdep.useRepositoryLayout=true -DoutputDirectory=/s3a-jars

# --- Google's Cloud Storage connector, one shaded jar (gs:// state), from Maven Central ----------------
FROM kafka-jars AS gcs-jars
COPY docker/gcs/pom.xml /build-gcs/pom.xml
RUN --mount=type=cache,target=/root/.m2 \
    mvn -B -ntp --strict-checksums -f /build-gcs/pom.xml dependency:copy-dependencies \
      -DincludeScope=runtime -Dmdep.useRepositoryLayout=true -DoutputDirectory=/gcs-jars

# --- Hadoop's ABFS connector (abfss:// state) and its one dependency Spark lacks, from Maven Central ----------
FROM kafka-jars AS azure-jars
COPY docker/azure/pom.xml /build-azure/pom.xml
RUN --mount=type=cache,target=/root/.m2 \
    mvn -B -ntp --strict-checksums -f /build-azure/pom.xml dependency:copy-dependencies \
      -DincludeScope=runtime -Dmdep.useRepositoryLayout=true -DoutputDirectory=/azure-jars

# --- JRE 17 and pyspark with the runtime dependencies --------------------------------------------
FROM python AS spark-dependencies
ARG DEBIAN_FRONTEND=noninteractive
ARG PIP_CERT
# Debian's openjdk-17-jre-headless includes the jdk.incubator.vector module Spark asks for.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17
COPY --from=requirements /requirements/spark.txt /tmp/requirements.txt
COPY docker/install-requirements.sh docker/build-backends.txt /tmp/
RUN --mount=type=cache,target=/root/.cache/pip \
    bash /tmp/install-requirements.sh /tmp/requirements.txt /tmp/build-backends.txt \
 && rm /tmp/requirements.txt /tmp/install-requirements.sh /tmp/build-backends.txt

FROM spark-dependencies AS connector-jars
COPY --from=kafka-jars /jars /tmp/kafka-jars
COPY docker/select-connector-jars.sh /tmp/select-connector-jars.sh
RUN bash /tmp/select-connector-jars.sh /tmp/kafka-jars \
      /opt/venv/lib/python3.11/site-packages/pyspark/jars /connector-jars
COPY --from=s3a-jars /s3a-jars /tmp/s3a-jars
COPY docker/s3a/jars.sha256 /tmp/s3a-jars.sha256
# Exactly the pinned S3A jars, byte for byte: any other jar or a changed one fails the build.
RUN bash /tmp/select-connector-jars.sh /tmp/s3a-jars \
      /opt/venv/lib/python3.11/site-packages/pyspark/jars /tmp/s3a-selected \
 && cd /tmp/s3a-selected && sha256sum --check --strict --quiet /tmp/s3a-jars.sha256 \
 && [ "$(ls | sort)" = "$(awk '{print $2}' /tmp/s3a-jars.sha256 | sort)" ] \
 && mv /tmp/s3a-selected/*.jar /connector-jars/
COPY --from=gcs-jars /gcs-jars /tmp/gcs-jars
COPY docker/gcs/jars.sha256 /tmp/gcs-jars.sha256
# The same for the GCS connector: exactly the pinned shaded jar.
RUN bash /tmp/select-connector-jars.sh /tmp/gcs-jars \
      /opt/venv/lib/python3.11/site-packages/pyspark/jars /tmp/gcs-selected \
 && cd /tmp/gcs-selected && sha256sum --check --strict --quiet /tmp/gcs-jars.sha256 \
 && [ "$(ls | sort)" = "$(awk '{print $2}' /tmp/gcs-jars.sha256 | sort)" ] \
 && mv /tmp/gcs-selected/*.jar /connector-jars/
COPY --from=azure-jars /azure-jars /tmp/azure-jars
COPY docker/azure/jars.sha256 /tmp/azure-jars.sha256
# The same for ABFS: exactly the pinned jars (hadoop-azure and HdrHistogram).
RUN bash /tmp/select-connector-jars.sh /tmp/azure-jars \
      /opt/venv/lib/python3.11/site-packages/pyspark/jars /tmp/azure-selected \
 && cd /tmp/azure-selected && sha256sum --check --strict --quiet /tmp/azure-jars.sha256 \
 && [ "$(ls | sort)" = "$(awk '{print $2}' /tmp/azure-jars.sha256 | sort)" ] \
 && mv /tmp/azure-selected/*.jar /connector-jars/

# --- Hadoop's local file system setting permissions without forking chmod (docker/local-fs) ---------
# Compiled against the Hadoop of the pyspark above; the JDK stays in this stage.
FROM spark-dependencies AS local-fs
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
 && rm -rf /var/lib/apt/lists/*
COPY docker/local-fs/src /build/local-fs/src
RUN mkdir -p /build/local-fs/classes /local-fs \
 && javac --release 17 -nowarn -cp '/opt/venv/lib/python3.11/site-packages/pyspark/jars/*' \
      -d /build/local-fs/classes $(find /build/local-fs/src -name '*.java' | sort) \
 && jar --create --file /local-fs/headrace-local-fs.jar -C /build/local-fs/classes .

# --- target: spark ---------------------------------------------------------------------------------
FROM spark-dependencies AS spark
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python
# libnss-wrapper (30 kB): a passwd entry for an arbitrary uid on the read-only root (docker/spark-entrypoint.sh).
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends libnss-wrapper \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 185 spark \
 && useradd --system --uid 185 --gid spark --home-dir /opt/headrace --no-create-home spark \
 && mkdir -p /opt/headrace/bin \
 && chown spark:spark /opt/headrace
COPY --from=connector-jars /connector-jars/ ${SPARK_HOME}/jars/
COPY --from=local-fs /local-fs/headrace-local-fs.jar ${SPARK_HOME}/jars/
COPY --chmod=0755 docker/spark-entrypoint.sh /opt/headrace/bin/spark-entrypoint
COPY apps/ /opt/headrace/apps/
COPY --from=headrace /staging/ /opt/venv/
# The driver's JVM command (recorded from Spark's launcher) and a class-data sharing archive for the
# driver and executor JVMs, dumped from a local training run (headrace.runtime.jvm).
COPY --chmod=0755 docker/train-cds.sh /opt/headrace/bin/train-cds
RUN /opt/headrace/bin/train-cds
LABEL org.opencontainers.image.title="headrace-spark" \
      org.opencontainers.image.description="Spark application base image for Headrace: pyspark 4.3.0, Kafka connector, S3A, GCS connector, ABFS, headrace runtime" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /opt/headrace
USER 185
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/opt/headrace/bin/spark-entrypoint"]

# --- The operator's dependencies, without pip ----------------------------------------------------
FROM python AS operator-dependencies
ARG PIP_CERT
COPY --from=requirements /requirements/operator.txt /tmp/requirements.txt
COPY docker/install-requirements.sh docker/build-backends.txt /tmp/
RUN --mount=type=cache,target=/root/.cache/pip \
    bash /tmp/install-requirements.sh /tmp/requirements.txt /tmp/build-backends.txt \
 && pip uninstall --yes pip setuptools

# --- target: operator ------------------------------------------------------------------------------
FROM python-runtime AS operator
RUN groupadd --gid 10001 headrace \
 && useradd --uid 10001 --gid headrace --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin headrace
COPY --from=operator-dependencies /opt/venv /opt/venv
COPY --from=headrace /staging/ /opt/venv/
LABEL org.opencontainers.image.title="headrace-operator" \
      org.opencontainers.image.description="The Headrace Kubernetes operator (kopf)" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001
ENTRYPOINT ["/opt/venv/bin/python", "-m", "headrace"]
