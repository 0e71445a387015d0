"""scripts/images.py: the mirror list covers every image the charts and the operator values can use."""

from __future__ import annotations

import json
import subprocess
import sys

from chartlib import REPO


def test_image_list(helm):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "images.py"), "--kube-version", "1.36.2", "--helm", helm, "--json"],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    images = json.loads(proc.stdout)
    assert images == sorted(set(images))
    expected = {
        # Pinned by the digests upstream publishes (values.yaml says where from): printed with the tag to mirror under.
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
        "@sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312",
        "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.6.0"
        "@sha256:367c597799aa6925f5bd2bc4bcdc45c26f018d13cdc2ce9aaf1ca07c492c6d9e",
        "docker.io/projecthami/hami:v2.10.0",
        "registry.k8s.io/ingress-nginx/kube-webhook-certgen:v1.6.9"
        "@sha256:01038e7de14b78d702d2849c3aad72fd25903c4765af63cf16aa3398f5d5f2dd",
        "docker.io/tkestack/gpu-manager:v1.1.5",
        "docker.io/tkestack/gpu-quota-admission:v1.0.0",
        "registry.k8s.io/kube-scheduler:v1.36.2",
        "nvcr.io/nvidia/gpu-operator:v26.7.0",
        "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"
        "@sha256:cab2cf9deafc9602da69d0832a82958a7687f22f4a2f19674099dc9a5c4ea8e2",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
        "@sha256:613ab03c11d442fd960ff515f547e9921537454a712d08160bc8f677f89f1c35",
    }
    assert expected <= set(images), expected - set(images)
    assert not [i for i in images if "example.net" in i], "mirror references leaked into the upstream list"
    assert [i for i in images if "kube-scheduler" in i] == ["registry.k8s.io/kube-scheduler:v1.36.2"]
    # A digest is never printed without the tag a mirror stores it under.
    assert not [i for i in images if "@" in i and ":" not in i.split("@")[0].rsplit("/", 1)[-1]]
