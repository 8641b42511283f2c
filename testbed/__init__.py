"""A real Kubernetes on one machine for tests and development, built from official sources.

Owns: building the binaries (cached outside the repository), running etcd, the control plane, a
node (containerd, runc, CNI, kubelet) and helper services such as a Kafka broker, and tearing all
of it down. Never: imported by the operator or the runtime.
"""

from pathlib import Path

# The checkout this testbed belongs to: the Dockerfile, the chart and the apps are read from here, and
# `python -m testbed...` subprocesses run here so the top-level package is importable.
REPOSITORY = Path(__file__).resolve().parents[1]
