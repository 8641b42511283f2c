"""A multi-node Kubernetes in podman containers, driven by kind, with everything built on this machine.

Owns: the OCI runtime wrapper podman needs here (``oci-runtime``), the per-run podman configuration
(`podman`), kind's and kube-router's binaries (`tools`), the kind node image assembled without a
registry (`nodeimage`) and the cluster's life cycle with its leak check (`cluster`).
Never: touches the machine's global podman configuration, or the single-node testbed cluster.
"""
