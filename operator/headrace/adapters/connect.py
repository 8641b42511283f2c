"""Connecting to the Kubernetes API: the one place a client is configured (the operator and the CLI).

Owns: where the credentials come from (a kubeconfig named by the caller, else the in-cluster
ServiceAccount, else the default kubeconfig) and the connection pool.
Never: API calls (`headrace.adapters.kube` and `headrace.adapters.lease` make them).
"""

from __future__ import annotations

from kubernetes import client, config

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
