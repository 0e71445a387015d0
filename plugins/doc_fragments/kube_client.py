# Copyright: kube-accel contributors
# Apache License 2.0
"""Cluster connection options of every kube-accel module that talks to Kubernetes
(cluster.client.KUBE_ARGUMENT_SPEC)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path of the kubeconfig file.
      - When omitted, the client's default, as kubectl and helm read it (the first file of C(KUBECONFIG), else
        C(~/.kube/config)); the helm modules pass it to helm as C(--kubeconfig).
    type: path
  context:
    description:
      - Context in the kubeconfig; its current context when omitted (C(--kube-context) for helm).
    type: str
"""
