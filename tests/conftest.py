"""Shared pytest setup: the lab fixture. kube-accel's code imports as the collection kube_accel.gpu
(ansible_collections.kube_accel.gpu...: the venv's kube_accel_collection.pth names .collections, see the Makefile)."""

from __future__ import annotations

from lab_fixture import FIRST, lab  # noqa: F401  (session fixture)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "second_lab: a lab test that needs podman hosts and a lab kube-accel never "
                            "touched, run on the second lab with hosts of its own (the upgrade from 0.1.0)")


# A lab lane's order: the tests in FIRST need a lab kube-accel never touched, and leave it converged (hosts and cluster)
# for the tests after them; everything else keeps its file order.


def pytest_collection_modifyitems(items) -> None:
    items[:] = sorted(items, key=lambda item: not item.nodeid.startswith(FIRST))
