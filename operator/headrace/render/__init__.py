"""Pure rendering of Kubernetes manifests and Spark configuration for one attempt of an app.

Owns: what the driver pod, its headless Service, ConfigMap (spark-defaults.conf and the executor pod
template), ServiceAccount, Role, RoleBinding and control Secret look like.
Never: creating anything, choosing what to do, reading the clock.
"""
