# Copyright: kube-accel contributors
# Apache License 2.0
"""A chart on the controller's disk (a directory or a .tgz): metadata, default values and schema, read without helm."""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import dataclass

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.pyyaml import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import HelmError


@dataclass
class LocalChart:
    """A chart's metadata, default values and schema, when the chart can be read from disk."""

    metadata: dict
    defaults: dict
    schema: dict | None


def load_yaml_text(text: str, what: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HelmError(f"{what} is not valid YAML: {exc}") from None
    return data if isinstance(data, dict) else {}


def _load_json_text(text: str, what: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HelmError(f"{what} is not valid JSON: {exc}") from None


def read_local_chart(path: str) -> LocalChart:
    """Read Chart.yaml, values.yaml and values.schema.json from a chart directory or packaged .tgz."""
    files: dict[str, str] = {}
    wanted = ("Chart.yaml", "values.yaml", "values.schema.json")
    if os.path.isdir(path):
        for name in wanted:
            full = os.path.join(path, name)
            if os.path.isfile(full):
                with open(full, encoding="utf-8") as handle:
                    files[name] = handle.read()
    else:
        try:
            with tarfile.open(path, "r:*") as tar:
                for member in tar.getmembers():
                    top, _unused, rest = member.name.partition("/")
                    if top and rest in wanted and member.isfile():
                        extracted = tar.extractfile(member)
                        if extracted is not None:
                            files[rest] = extracted.read().decode("utf-8")
        except (OSError, tarfile.TarError) as exc:
            raise HelmError(f"cannot read chart archive {path}: {exc}") from None
    if "Chart.yaml" not in files:
        raise HelmError(f"{path} is not a helm chart (no Chart.yaml)")
    schema = None
    if "values.schema.json" in files:
        schema = _load_json_text(files["values.schema.json"], f"{path}/values.schema.json")
    return LocalChart(
        metadata=load_yaml_text(files["Chart.yaml"], f"{path}/Chart.yaml"),
        defaults=load_yaml_text(files.get("values.yaml", ""), f"{path}/values.yaml"),
        schema=schema,
    )


def is_local_chart(chart: str) -> bool:
    return os.path.exists(chart) and not chart.startswith(("oci://", "http://", "https://"))
