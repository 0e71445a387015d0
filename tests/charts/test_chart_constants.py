"""Chart defaults that mirror product constants, and the shared helper file kept identical in every chart."""

from __future__ import annotations

import accel_constants
import pytest
import yaml
from chartlib import CHARTS, CHARTS_DIR


def defaults(chart):
    return yaml.safe_load((CHARTS_DIR / chart / "values.yaml").read_text())


@pytest.mark.parametrize("chart", CHARTS)
def test_pool_label_key_is_the_product_constant(chart):
    assert defaults(chart)["poolLabelKey"] == accel_constants.LABELS["pool"]


@pytest.mark.parametrize("chart", [c for c in CHARTS if c in ("pgpu", "mps")])
def test_device_plugin_config_label(chart):
    assert defaults(chart)["configLabel"] == accel_constants.UPSTREAM_LABELS["device_plugin_config"]


@pytest.mark.parametrize("chart", CHARTS)
def test_chart_metadata(chart):
    meta = yaml.safe_load((CHARTS_DIR / chart / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["kubeVersion"] == ">= 1.25.0-0"
    assert meta["version"] == "0.1.0"
    assert meta["name"] == chart


def test_common_helpers_identical():
    texts = {c: (CHARTS_DIR / c / "templates" / "_common.tpl").read_text() for c in CHARTS}
    first = texts[CHARTS[0]]
    for chart, text in texts.items():
        assert text == first, f"charts/{chart}/templates/_common.tpl drifted from charts/{CHARTS[0]}'s copy"
