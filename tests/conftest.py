"""Shared pytest setup: the lab fixture. kube-accel's code imports as the collection kube_accel.gpu
(ansible_collections.kube_accel.gpu...: the venv's kube_accel_collection.pth names .collections, see the Makefile)."""

from __future__ import annotations

from lab_fixture import lab  # noqa: F401  (session fixture)

