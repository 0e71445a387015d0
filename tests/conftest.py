"""Shared pytest setup: the lab fixture. kube-accel's code imports as the collection kube_accel.gpu
(ansible_collections.kube_accel.gpu...: the venv's kube_accel_collection.pth names .collections, see the Makefile)."""

from __future__ import annotations

from lab_fixture import lab  # noqa: F401  (session fixture)

# The lab lane's order: the upgrade from 0.1.0 needs a lab kube-accel never touched, and leaves it converged (hosts and
# cluster) for the tests after it; everything else keeps its file order.
FIRST = ("tests/integration/test_upgrade_lab.py",)


def pytest_collection_modifyitems(items) -> None:
    items[:] = sorted(items, key=lambda item: not item.nodeid.startswith(FIRST))
