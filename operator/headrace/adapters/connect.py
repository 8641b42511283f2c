"""Connecting to the Kubernetes API: the one place a client is configured (the operator and the CLI).

Owns: where the credentials come from (a kubeconfig named by the caller, else the in-cluster
ServiceAccount, else the default kubeconfig), the namespace they imply (the context's, as kubectl takes
it), and the connection pool.
Never: API calls (`headrace.adapters.kube` and `headrace.adapters.lease` make them).
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

POOL_SIZE = 64  # connections kept per client: workers, the lease and kopf's watches never wait for one


def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """A client for the cluster the process runs in, or the kubeconfig's (`kubeconfig`, else the default one)."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(context=context, client_configuration=configuration)
    configuration.connection_pool_maxsize = POOL_SIZE
    return client.ApiClient(configuration)


def current_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace kubectl would use: the kubeconfig context's (`context`, else the current one), else the
    pod's own namespace in a cluster, else `default`."""
    if not kubeconfig and IN_CLUSTER_NAMESPACE.exists():
        try:
            config.load_incluster_config(client_configuration=client.Configuration())
        except config.ConfigException:
            pass
        else:
            return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except config.ConfigException:
        return "default"
    chosen = next((item for item in contexts if item.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")
