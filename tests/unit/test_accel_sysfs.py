"""accel_sysfs and the sriov_numvfs / vfio_pci_bind modules against a fake sysfs tree under tmp_path.

The fake kernel below enforces what the real one does: EBUSY on a non-zero -> non-zero VF change, VFs that
appear as devices, and a driver link that moves when a driver's ``bind`` file is written while
``driver_override`` names it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import sysfs as accel_sysfs
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.sysfs import SysfsError
from ansible_collections.kube_accel.gpu.plugins.modules import sriov_numvfs, vfio_pci_bind

GPU = "0000:3b:00.0"
AUDIO = "0000:3b:00.1"
OTHER = "0000:5e:00.0"


def make_device(root: Path, bdf: str, pci_id: str, driver: str | None, totalvfs: int | None = None) -> Path:
    dev = root / "bus/pci/devices" / bdf
    dev.mkdir(parents=True)
    vendor, device = pci_id.split(":")
    (dev / "vendor").write_text(f"0x{vendor}\n")
    (dev / "device").write_text(f"0x{device}\n")
    (dev / "driver_override").write_text("(null)\n")
    if totalvfs is not None:
        (dev / "sriov_totalvfs").write_text(f"{totalvfs}\n")
        (dev / "sriov_numvfs").write_text("0\n")
    if driver:
        link_driver(root, bdf, driver)
    return dev


def make_driver(root: Path, name: str) -> Path:
    drv = root / "bus/pci/drivers" / name
    drv.mkdir(parents=True, exist_ok=True)
    for attr in ("bind", "unbind"):
        (drv / attr).touch()
    return drv


def link_driver(root: Path, bdf: str, driver: str | None) -> None:
    link = root / "bus/pci/devices" / bdf / "driver"
    if link.is_symlink():
        link.unlink()
    if driver:
        make_driver(root, driver)
        link.symlink_to(os.path.relpath(root / "bus/pci/drivers" / driver, link.parent))


class FakeKernel(accel_sysfs.SysfsWriter):
    """Applies each write the way the kernel would, and records it."""

    def __init__(self, root: Path, honour_bind: bool = True):
        self.root = root
        self.honour_bind = honour_bind
        self.log: list[tuple[str, str]] = []

    def write(self, path: str, value: str) -> None:
        rel = os.path.relpath(path, self.root)
        self.log.append((rel, value))
        parts = rel.split(os.sep)
        if parts[-1] == "sriov_numvfs":
            current = int(Path(path).read_text())
            if current and int(value) and current != int(value):
                raise SysfsError(f"writing {value!r} to {path} failed: [Errno 16] Device or resource busy")
            Path(path).write_text(f"{value}\n")
        elif parts[-1] == "unbind":
            link_driver(self.root, value, None)
        elif parts[-1] == "driver_override":
            Path(path).write_text("(null)\n" if value.strip() == "" else f"{value}\n")
        elif parts[-1] == "bind":
            override = (self.root / "bus/pci/devices" / value / "driver_override").read_text().strip()
            if self.honour_bind and override == parts[-2]:
                link_driver(self.root, value, parts[-2])


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    make_device(tmp_path, GPU, "10de:20b5", "nvidia", totalvfs=16)
    make_device(tmp_path, AUDIO, "10de:1aef", "snd_hda_intel")
    make_device(tmp_path, OTHER, "8086:1572", "i40e")
    make_driver(tmp_path, "vfio-pci")
    return tmp_path


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("3B:00.0", GPU), ("00000000:3B:00.0", GPU), ("0000:3b:00.0", GPU), ("0001:af:1f.7", "0001:af:1f.7")],
)
def test_normalize_bdf(raw, expected):
    assert accel_sysfs.normalize_bdf(raw) == expected


@pytest.mark.parametrize("raw", ["3b:00", "zz:00.0", "3b:00.8", ""])
def test_normalize_bdf_rejects(raw):
    with pytest.raises(SysfsError):
        accel_sysfs.normalize_bdf(raw)


@pytest.mark.parametrize(
    ("current", "desired", "writes"),
    [(0, 0, []), (4, 4, []), (0, 4, [4]), (4, 0, [0]), (2, 8, [0, 8]), (8, 2, [0, 2])],
)
def test_plan_numvfs(current, desired, writes):
    assert accel_sysfs.plan_numvfs(current, desired, 16) == writes


def test_plan_numvfs_rejects_more_than_total():
    with pytest.raises(SysfsError, match="0..16"):
        accel_sysfs.plan_numvfs(0, 17, 16)


def test_resize_goes_through_zero(sysfs):
    kernel = FakeKernel(sysfs)
    assert accel_sysfs.apply_numvfs(str(sysfs), GPU, 4, writer=kernel)["writes"] == [4]
    result = accel_sysfs.apply_numvfs(str(sysfs), GPU, 8, writer=kernel)
    assert result["before"] == 4
    assert result["writes"] == [0, 8]
    assert [v for _p, v in kernel.log] == ["4", "0", "8"]
    assert (sysfs / "bus/pci/devices" / GPU / "sriov_numvfs").read_text().strip() == "8"


def test_direct_resize_is_what_the_fake_kernel_refuses(sysfs):
    """Guards the fake: if it accepted N->M, the test above would prove nothing."""
    kernel = FakeKernel(sysfs)
    kernel.write(str(sysfs / "bus/pci/devices" / GPU / "sriov_numvfs"), "4")
    with pytest.raises(SysfsError, match="busy"):
        kernel.write(str(sysfs / "bus/pci/devices" / GPU / "sriov_numvfs"), "8")


def test_check_mode_writes_nothing(sysfs):
    kernel = FakeKernel(sysfs)
    result = accel_sysfs.apply_numvfs(str(sysfs), GPU, 4, writer=kernel, check=True)
    assert result["writes"] == [4]
    assert kernel.log == []


def test_sriov_state_errors(sysfs):
    with pytest.raises(SysfsError, match="no PCI device"):
        accel_sysfs.sriov_state(str(sysfs), "0000:99:00.0")
    with pytest.raises(SysfsError, match="no SR-IOV"):
        accel_sysfs.sriov_state(str(sysfs), AUDIO)


def test_find_devices_by_id(sysfs):
    assert accel_sysfs.find_devices(str(sysfs), ["10DE:20B5", "10de:1aef"]) == [GPU, AUDIO]
    assert accel_sysfs.find_devices(str(sysfs), ["1234:5678"]) == []
    assert accel_sysfs.find_devices(str(sysfs / "missing"), ["10de:20b5"]) == []


def test_bind_moves_device_and_clears_override(sysfs):
    kernel = FakeKernel(sysfs)
    result = accel_sysfs.bind_driver(str(sysfs), GPU, writer=kernel)
    assert result["driver_before"] == "nvidia"
    assert result["driver"] == "vfio-pci"
    attrs = [p.split(os.sep)[-1] for p, _v in kernel.log]
    assert attrs == ["unbind", "driver_override", "bind", "driver_override"]
    assert (sysfs / "bus/pci/devices" / GPU / "driver_override").read_text().strip() == "(null)"
    # Second run: already bound, nothing written.
    kernel.log.clear()
    assert accel_sysfs.bind_driver(str(sysfs), GPU, writer=kernel)["steps"] == []
    assert kernel.log == []


def test_bind_unbound_device_skips_unbind(sysfs):
    link_driver(sysfs, AUDIO, None)
    steps = accel_sysfs.plan_bind(str(sysfs), AUDIO)
    assert [purpose for _p, _v, purpose in steps][0] == "set driver_override=vfio-pci"


def test_bind_fails_when_kernel_ignores_it(sysfs):
    kernel = FakeKernel(sysfs, honour_bind=False)
    with pytest.raises(SysfsError, match="driver is none"):
        accel_sysfs.bind_driver(str(sysfs), GPU, writer=kernel)


def test_bind_needs_vfio_driver_loaded(sysfs):
    (sysfs / "bus/pci/drivers/vfio-pci/bind").unlink()
    (sysfs / "bus/pci/drivers/vfio-pci/unbind").unlink()
    (sysfs / "bus/pci/drivers/vfio-pci").rmdir()
    with pytest.raises(SysfsError, match="not loaded"):
        accel_sysfs.bind_driver(str(sysfs), GPU, writer=FakeKernel(sysfs))


def run_module(module, args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        module.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_sriov_module_idempotent_with_diff(sysfs, capsys):
    args = {"device": "3b:00.0", "numvfs": 2, "sysfs_root": str(sysfs), "_ansible_diff": True}
    code, out = run_module(sriov_numvfs, args, capsys)
    assert code == 0
    assert out["changed"] is True
    assert out["writes"] == [2]
    assert out["diff"]["after"] == "2\n"
    code, out = run_module(sriov_numvfs, args, capsys)
    assert out["changed"] is False
    assert "diff" not in out


def test_sriov_module_check_mode(sysfs, capsys):
    args = {"device": GPU, "numvfs": 2, "sysfs_root": str(sysfs), "_ansible_check_mode": True}
    _code, out = run_module(sriov_numvfs, args, capsys)
    assert out["changed"] is True
    assert (sysfs / "bus/pci/devices" / GPU / "sriov_numvfs").read_text().strip() == "0"


def test_sriov_module_fails_on_missing_device(sysfs, capsys):
    code, out = run_module(sriov_numvfs, {"device": "99:00.0", "numvfs": 1, "sysfs_root": str(sysfs)}, capsys)
    assert code == 1
    assert out["failed"] is True
    assert "no PCI device" in out["msg"]


def test_vfio_module_query_and_check(sysfs, capsys):
    ids = ["10de:20b5", "10de:1aef"]
    _code, out = run_module(vfio_pci_bind, {"ids": ids, "sysfs_root": str(sysfs)}, capsys)
    assert out["changed"] is False
    assert out["not_bound"] == [GPU, AUDIO]
    args = {"ids": ids, "state": "bound", "sysfs_root": str(sysfs), "_ansible_check_mode": True}
    _code, out = run_module(vfio_pci_bind, args, capsys)
    assert out["changed"] is True
    assert out["not_bound"] == []
    assert accel_sysfs.current_driver(str(sysfs), GPU) == "nvidia"


def test_vfio_module_reports_kernel_refusal(sysfs, capsys):
    """A plain file tree does not move the driver link: the module must notice and fail, not claim success."""
    args = {"ids": ["10de:20b5"], "state": "bound", "sysfs_root": str(sysfs)}
    code, out = run_module(vfio_pci_bind, args, capsys)
    assert code == 1
    assert "but its driver is" in out["msg"]


def test_pci_filters():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.kube_accel.gpu.plugins.filter import accel_pci

    assert accel_pci.accel_pci_bdf("00000000:3B:00.0") == GPU
    assert accel_pci.accel_pci_id("10DE:20B5") == "10de:20b5"
    with pytest.raises(AnsibleFilterError):
        accel_pci.accel_pci_id("10de-20b5")


def test_boot_script_resizes_through_zero(sysfs):
    """The boot-time helper of the sriov role, run against the fake tree."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "roles/sriov/files/sriov-numvfs"
    attr = sysfs / "bus/pci/devices" / GPU / "sriov_numvfs"
    env = {"SYSFS_ROOT": str(sysfs), "PATH": "/usr/bin:/bin"}
    for want in ("4", "8", "8", "0"):
        subprocess.run(["sh", "-x", str(script), GPU, want], env=env, check=True, capture_output=True)
        assert attr.read_text().strip() == want
    # 4 -> 8 must pass through 0: look at the trace of a fresh resize.
    subprocess.run(["sh", str(script), GPU, "4"], env=env, check=True)
    trace = subprocess.run(["sh", "-x", str(script), GPU, "8"], env=env, check=True, capture_output=True, text=True)
    assert "echo 0" in trace.stderr
    assert trace.stderr.index("echo 0") < trace.stderr.index("echo 8")
