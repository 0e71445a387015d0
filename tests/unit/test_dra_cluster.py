"""The cluster side of dra pools: the dra-pools chart values, NVIDIA's DRA driver values, and what verify
checks on a dra pool (helm.pool_charts, verify.pool_checks)."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import LABELS
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as cv
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import cluster_settings
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import pool_settings
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify import pool_checks as av

H100 = ["GPU-b2f6dc5f-6628-564d-a6a6-e38ffdfeb484", "GPU-f43c580b-6919-5eba-aff8-089e5cb0da3a"]
A100 = ["GPU-a728d1ca-c69f-5970-b633-ee22e69dd86c"]


def pool(name, uuids, hosts=("h",), **settings):
    return {"pool": name, "hosts": list(hosts), "gpu_uuids": uuids,
            "settings": pool_settings({"accel_pool": name, "accel_mode": "dra",
                                       **{f"accel_{k}": v for k, v in settings.items()}})}


def test_dra_release_installs_the_pools_classes_from_their_gpus_and_configs():
    pools = [pool("dra", H100, dra_sharing="mps", dra_mps_active_thread_percentage=50),
             pool("dramig", A100, mig_strategy="mixed", mig_geometry={"3g.40gb": 2})]
    (release,) = cv.pool_releases(pools, cluster_settings({"accel_dra_claim_namespaces": ["team-a"]}))
    assert (release["name"], release["chart"]) == ("kube-accel-dra", "dra-pools")
    values = release["values"]
    assert values["pools"] == ["dra", "dramig"] and values["claimTemplates"] == {"namespaces": ["team-a"]}
    whole, mig = values["devicePools"]
    assert whole == {"pool": "dra", "deviceClassName": "kube-accel-dra", "deviceType": "gpu", "gpuUUIDs": H100,
                     "config": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}}}
    assert (mig["deviceType"], mig["gpuUUIDs"], mig["config"]["kind"]) == ("mig", A100, "MigDeviceConfig")
    # exclusive: the driver's default, no sharing.
    excl = cv.dra_values([pool("x", H100)], {})["devicePools"][0]["config"]
    assert "sharing" not in excl


def test_dra_driver_runs_only_on_dra_nodes_with_the_inventorys_gates_and_mirror():
    pools = [pool("dra", H100, node_taint=True)]
    values = cv.dra_driver_values(pools, {"image_registry": "mirror.example.org", "image_pull_secrets": ["pull"]},
                                  {"MPSSupport": True}, "0.4.1")
    plugin = values["kubeletPlugin"]
    assert plugin["nodeSelector"] == {LABELS["dra"]: "true"}
    # Upstream's affinity (any NVIDIA PCI device, nvidia.com/gpu.present: every kube-accel pool) is replaced whole.
    terms = plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": LABELS["dra"], "operator": "In", "values": ["true"]}]}]
    assert {"key": LABELS["pool"], "operator": "Exists", "effect": "NoSchedule"} in plugin["tolerations"]
    assert values["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
    assert values["featureGates"] == {"MPSSupport": True} and values["webhook"] == {"enabled": False}
    assert values["image"] == {"repository": "mirror.example.org/dra-driver-nvidia/dra-driver-nvidia-gpu",
                               "tag": "v0.4.1"}
    assert values["imagePullSecrets"] == [{"name": "pull"}] and values["nvidiaDriverRoot"] == "/"
    # No alpha gate unless the inventory sets it; upstream's registry without a mirror.
    bare = cv.dra_driver_values(pools, {})
    assert bare["featureGates"] == {} and bare["image"]["repository"].startswith("registry.k8s.io/")


def test_verify_expects_the_driver_plugin_and_a_claim_from_the_pools_template():
    pools = [pool("dra", H100, hosts=("lab-dra-0",))]
    (expected,) = av.expected_pools(pools, cv.pool_releases(pools, {}))
    assert expected["release"] == "kube-accel-dra-driver" and expected["resources"] == {}
    assert expected["dra"] == {"device_class": "kube-accel-dra", "claim_template": "kube-accel-dra",
                               "driver": "gpu.nvidia.com", "gpu_uuids": H100}
    job = av.job_manifest("j", "ns", "kube-accel.io/pool", "dra", {}, "img", ["true"], None,
                          claim_template="kube-accel-dra")
    spec = job["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "kube-accel-dra"}]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]


def slice_of(node, pool_name, devices):
    return {"metadata": {"name": f"{node}-slice"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": pool_name},
                     "devices": [{"name": n, "attributes": {"type": {"string": "gpu"}, "uuid": {"string": u}}}
                                 for n, u in devices]}}


def claim(results):
    return {"metadata": {"name": "c"}, "status": {"allocation": {"devices": {"results": results}}}}


def test_verify_accepts_only_a_claim_allocated_on_the_pools_gpus():
    slices = [slice_of("lab-dra-0", "lab-dra-0", [("gpu-0", H100[0]), ("gpu-1", H100[1])]),
              slice_of("other", "other", [("gpu-0", A100[0])])]
    expected = {"driver": "gpu.nvidia.com", "gpu_uuids": H100}
    ok = claim([{"driver": "gpu.nvidia.com", "pool": "lab-dra-0", "device": "gpu-1", "request": "gpu"}])
    assert av.dra_claim_problems("dra", [ok], slices, expected) == ([], ["lab-dra-0/gpu-1"])
    # Another pool's GPU, an unknown device, no allocation: each named.
    wrong = claim([{"driver": "gpu.nvidia.com", "pool": "other", "device": "gpu-0", "request": "gpu"}])
    assert "not a GPU of the pool" in av.dra_claim_problems("dra", [wrong], slices, expected)[0][0]
    ghost = claim([{"driver": "gpu.nvidia.com", "pool": "lab-dra-0", "device": "gpu-7", "request": "gpu"}])
    assert "which no ResourceSlice" in av.dra_claim_problems("dra", [ghost], slices, expected)[0][0]
    assert "is not allocated" in av.dra_claim_problems("dra", [claim([])], slices, expected)[0][0]
    assert "no ResourceClaim" in av.dra_claim_problems("dra", [], slices, expected)[0][0]


def test_verify_names_who_published_the_slices():
    slices = [slice_of("lab-dra-0", "lab-dra-0", [("gpu-0", H100[0])])]
    assert av.dra_slice_problems("lab-dra-0", slices, "gpu.nvidia.com", fake=True) == ([], av.DRA_SLICES_STANDIN)
    assert av.dra_slice_problems("lab-dra-0", slices, "gpu.nvidia.com") == ([], av.DRA_KUBELET_PLUGIN)
    assert av.dra_slice_problems("gpu-9", slices, "gpu.nvidia.com")[0] == [
        "gpu-9: no ResourceSlice with devices from gpu.nvidia.com"]
