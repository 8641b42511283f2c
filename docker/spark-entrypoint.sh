#!/bin/bash
# Entrypoint of the Headrace Spark image (runs under tini).
#   executor  -> a Spark executor, started the way Spark's Kubernetes backend expects: it creates
#                executor pods with this image, args `executor` and SPARK_* variables (the
#                equivalent of upstream Spark's docker entrypoint.sh, which pyspark does not ship)
#   driver    -> spark-submit in client mode (upstream's `driver`, for spark-submit --deploy-mode cluster)
#   otherwise -> the Headrace driver runtime: python -m headrace.runtime <script> <args>
set -euo pipefail

# Hadoop's login (UnixLoginModule: "invalid null input: name") and Java's user.home ("?", so Ivy's
# "basedir must be absolute") need a passwd entry for the uid. An arbitrary uid (OpenShift's
# restricted SCC, any runAsUser) has none, and the root filesystem is read-only, so /etc/passwd
# cannot get one: nss_wrapper serves a copy with the entry from the writable scratch directory.
ensure_user_entry() {
  local uid gid dir wrapper
  uid=$(id -u)
  gid=$(id -g)
  getent passwd "$uid" >/dev/null && return
  wrapper=${HEADRACE_NSS_WRAPPER:-$(echo /usr/lib/*-linux-gnu/libnss_wrapper.so)}
  dir="${HOME:-/tmp}/.headrace-passwd"
  if [[ ! -f "$wrapper" ]] || ! mkdir -p "$dir" 2>/dev/null; then
    echo "spark-entrypoint: uid $uid has no passwd entry and none can be made; Hadoop's login may fail" >&2
    return
  fi
  { cat /etc/passwd; echo "spark-$uid:x:$uid:$gid:Headrace Spark (arbitrary uid):${HOME:-/tmp}:/bin/false"; } \
    >"$dir/passwd"
  cat /etc/group >"$dir/group"
  getent group "$gid" >/dev/null || echo "spark-$gid:x:$gid:" >>"$dir/group"
  export LD_PRELOAD="$wrapper${LD_PRELOAD:+ $LD_PRELOAD}" NSS_WRAPPER_PASSWD="$dir/passwd" NSS_WRAPPER_GROUP="$dir/group"
}

# Same order as upstream: conf dir, Hadoop conf, user classpath, Spark's jars, extra classpath.
upstream_classpath() {
  local classpath="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*"
  classpath+="${SPARK_EXTRA_CLASSPATH:+:$SPARK_EXTRA_CLASSPATH}"
  classpath="${HADOOP_CONF_DIR:+$HADOOP_CONF_DIR:}$classpath"
  classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$classpath"
  echo "$classpath${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}"
}

# With the image's recorded jar list (headrace.runtime.jvm, docker/train-cds.sh): Spark's jars in
# that order first (then any jar added since), the conf dir last, so the class-data sharing archive
# dumped over that list at build matches; the same entries as upstream otherwise. None of Spark's
# jars holds a file a conf dir has (log4j2.properties, core-site.xml, ...), so nothing is shadowed.
jvm_dir=${HEADRACE_JVM_DIR:-/opt/headrace/jvm}
direct_start() {
  [[ "${HEADRACE_JVM_START:-direct}" != spark-submit && -f "$jvm_dir/classpath" ]]
}
spark_classpath() {
  if ! direct_start; then
    upstream_classpath
    return
  fi
  local classpath="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}" jar
  declare -A recorded=()
  while IFS= read -r jar; do
    if [[ -n "$jar" && -f "$jar" ]]; then
      classpath+="$jar:"
      recorded[$jar]=1
    fi
  done <"$jvm_dir/classpath"
  for jar in "$SPARK_HOME"/jars/*.jar; do
    [[ -n "${recorded[$jar]:-}" ]] || classpath+="$jar:"
  done
  classpath+="${SPARK_EXTRA_CLASSPATH:+$SPARK_EXTRA_CLASSPATH:}${HADOOP_CONF_DIR:+$HADOOP_CONF_DIR:}"
  classpath+="${SPARK_DIST_CLASSPATH:+$SPARK_DIST_CLASSPATH:}"
  echo "$classpath${SPARK_CONF_DIR:-$SPARK_HOME/conf}"
}

archive_options=()
if direct_start && [[ -f "$jvm_dir/spark.jsa" ]]; then
  archive_options=("-XX:SharedArchiveFile=$jvm_dir/spark.jsa" -Xshare:auto)
fi

# The driver passes the executor's JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... (one each).
executor_java_options=()
collect_executor_java_options() {
  local name
  while IFS= read -r name; do
    executor_java_options+=("${!name}")
  done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4 -n)
}

run_executor() {
  collect_executor_java_options
  exec "$JAVA_HOME/bin/java" \
    "${executor_java_options[@]}" "${archive_options[@]}" \
    "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" \
    -cp "$(spark_classpath)" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "$SPARK_DRIVER_URL" \
    --executor-id "$SPARK_EXECUTOR_ID" \
    --cores "$SPARK_EXECUTOR_CORES" \
    --app-id "$SPARK_APPLICATION_ID" \
    --hostname "$SPARK_EXECUTOR_POD_IP" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
}

ensure_user_entry
case "${1:-}" in
  executor)
    shift
    run_executor
    ;;
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  *)
    exec python -m headrace.runtime "$@"
    ;;
esac
