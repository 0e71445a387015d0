# Copyright: kube-accel contributors
# Apache License 2.0
"""Which pods a node's drain evicts, decided as ``kubectl drain`` decides (k8s.io/kubectl/pkg/drain/filters.go), and
the drain itself: evictions through the policy/v1 Eviction API (PodDisruptionBudgets honoured), then a wait until
every evicted pod is gone.

Why not kubernetes.core.k8s_drain: it checks for emptyDir volumes before it looks at the owner, so with
``delete_emptydir_data`` (which any real node needs) it deletes DaemonSet pods that have one
(ansible-collections/kubernetes.core#622, open since 2023): on every drain it restarted kube-accel's own device
plugin and MPS control daemon, and any DaemonSet of the cluster's (log shippers, CNI agents) with an emptyDir. kubectl
looks at the DaemonSet first and leaves its pods alone: they would be recreated at once on the cordoned node anyway.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED = ("Succeeded", "Failed")


@dataclass
class Selection:
    """What a drain does with each pod of the node: evict it, skip it (with why), or refuse to drain."""

    evict: list[dict] = field(default_factory=list)  # {"namespace", "name", "uid"}
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> ["namespace/name", ...]
    errors: list[str] = field(default_factory=list)


def _ref(pod: dict) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _controller(pod: dict) -> dict | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner
    return None


def select_pods(pods: list[dict], *, force: bool = False, delete_emptydir_data: bool = True,
                ignore_daemonsets: bool = True) -> Selection:
    """Sort a node's pods (API JSON) the way kubectl drain's filters do, in their order: DaemonSet-managed pods are
    skipped (an error without ``ignore_daemonsets``), mirror pods skipped, pods with emptyDir data refused without
    ``delete_emptydir_data``, pods without a controller refused without ``force``; finished pods are always
    evicted."""
    sel = Selection()
    problems: dict[str, list[str]] = {}

    def skip(reason: str, pod: dict) -> None:
        sel.skipped.setdefault(reason, []).append(_ref(pod))

    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        finished = (pod.get("status") or {}).get("phase") in FINISHED
        controller = _controller(pod)
        if controller and controller.get("kind") == "DaemonSet" and not finished:
            if ignore_daemonsets:
                skip("DaemonSet-managed", pod)
            else:
                problems.setdefault("DaemonSet-managed Pods (set ignore_daemonsets)", []).append(_ref(pod))
            continue
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            skip("mirror (static) pod", pod)
            continue
        if not finished and not delete_emptydir_data and any("emptyDir" in v for v in spec.get("volumes") or []):
            problems.setdefault("Pods with local storage (set delete_emptydir_data)", []).append(_ref(pod))
            continue
        if not finished and controller is None and not force:
            problems.setdefault("Pods that declare no controller (set force)", []).append(_ref(pod))
            continue
        sel.evict.append({"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")})
    sel.errors = [f"cannot delete {what}: {', '.join(sorted(refs))}" for what, refs in sorted(problems.items())]
    return sel


class Blocked(Exception):
    """An eviction the API server keeps refusing (429: a PodDisruptionBudget) past the drain's time."""


def drain(api, pods: list[dict], *, grace_period: int | None, timeout: float, disable_eviction: bool = False,
          sleep=time.sleep, clock=time.monotonic) -> list[str]:
    """Evict (or, with ``disable_eviction``, delete) each pod of ``pods`` (``Selection.evict``) and wait until every
    one is gone (deleted, or replaced under its name by a pod with another UID). ``api``: a kubernetes CoreV1Api.
    ``grace_period``: None leaves each pod its own terminationGracePeriodSeconds. Returns the pods still there when
    ``timeout`` seconds have passed (empty: the node is drained)."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - optional dependency, checked by the module

    deadline = clock() + timeout
    # The UID precondition: a pod recreated under the same name since the listing is not evicted by mistake.
    options: dict = {} if grace_period is None else {"gracePeriodSeconds": grace_period}
    pending = list(pods)
    while pending:  # evict; a 429 (disruption budget) is asked again until the deadline, as kubectl does
        refused = []
        for pod in pending:
            delete_options = {**options, "preconditions": {"uid": pod["uid"]}}
            try:
                if disable_eviction:
                    api.delete_namespaced_pod(pod["name"], pod["namespace"], body=delete_options)
                else:
                    api.create_namespaced_pod_eviction(pod["name"], pod["namespace"], body={
                        "apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": pod["name"], "namespace": pod["namespace"]},
                        "deleteOptions": delete_options})
            except ApiException as exc:
                if exc.status == 404 or (exc.status == 409 and "precondition" in (exc.body or "").lower()):
                    continue  # gone already, or replaced by another pod of that name
                if exc.status == 429:
                    refused.append(pod)
                    continue
                raise
        pending = refused
        if pending:
            if clock() >= deadline:
                raise Blocked("evictions refused until the drain's time ran out (a PodDisruptionBudget allows no "
                              "disruption): " + ", ".join(f"{p['namespace']}/{p['name']}" for p in pending))
            sleep(5)
    waiting = list(pods)
    while waiting:
        still = []
        for pod in waiting:
            try:
                current = api.read_namespaced_pod(pod["name"], pod["namespace"])
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            if current.metadata.uid == pod["uid"]:
                still.append(pod)
        waiting = still
        if waiting:
            if clock() >= deadline:
                break
            sleep(1)
    return [f"{p['namespace']}/{p['name']}" for p in waiting]


REVISION_LABEL = "controller-revision-hash"


def daemonset_namespaces(pods: list[dict]) -> list[str]:
    """The namespaces of the DaemonSets that control some of these pods: where outdated_on_delete's inputs live."""
    return sorted({(pod.get("metadata") or {}).get("namespace") for pod in pods
                   if ((_controller(pod) or {}).get("kind")) == "DaemonSet"})


def outdated_on_delete(pods: list[dict], daemonsets: dict[str, dict], current: dict[str, str]) -> list[dict]:
    """The node's DaemonSet pods whose DaemonSet updates ``OnDelete`` and that run an older template than its newest
    ControllerRevision. ``daemonsets``: by UID; ``current``: DaemonSet UID -> its newest revision's hash. A drained node
    is when such a pod can be replaced: kube-accel's MPS control daemon is ``OnDelete`` because replacing it quits the
    MPS server under running clients, and the drain has just evicted them."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        owner = _controller(pod)
        if not owner or owner.get("kind") != "DaemonSet" or meta.get("deletionTimestamp"):
            continue
        ds = daemonsets.get(owner.get("uid"))
        if not ds or ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type") != "OnDelete":
            continue
        want = current.get(owner.get("uid"))
        if want and (meta.get("labels") or {}).get(REVISION_LABEL) != want:
            found.append({"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")})
    return found


def newest_revisions(revisions: list[dict]) -> dict[str, str]:
    """ControllerRevisions (API JSON) -> {owner DaemonSet UID: the hash of its highest revision}."""
    best: dict[str, tuple[int, str]] = {}
    for rev in revisions:
        meta = rev.get("metadata") or {}
        for owner in meta.get("ownerReferences") or []:
            if owner.get("controller") and owner.get("kind") == "DaemonSet":
                number = int(rev.get("revision") or 0)
                if owner["uid"] not in best or number > best[owner["uid"]][0]:
                    best[owner["uid"]] = (number, (meta.get("labels") or {}).get(REVISION_LABEL, ""))
    return {uid: digest for uid, (_number, digest) in best.items() if digest}
