# Copyright: kube-accel contributors
# Apache License 2.0
"""Action for kube_accel.gpu.accel_plan: reads the inventory as Ansible does and checks it against kube-accel's model
(plugins/module_utils/plan/inventory_check.py). Runs on the controller only; documentation in
plugins/modules/accel_plan.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ansible.plugins.action import ActionBase
from ansible.utils.vars import combine_vars
from ansible.vars.plugins import get_vars_from_inventory_sources, get_vars_from_path
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory_check as accel_plan_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.values import oversized

try:  # ansible-core 2.19+ tags every loaded value with where it came from (display only; absent: no origins)
    from ansible._internal._datatag._tags import Origin
except ImportError:  # pragma: no cover
    Origin = None

# Variables the inventory never sets, which Ansible adds to every host.
_MAGIC = ("inventory_file", "inventory_dir")
_YAML_SUFFIXES = (".yml", ".yaml", ".json")
_MAX_ERROR = 200


def _plain(value, depth: int = 0):
    """Plain Python containers (a templated container may be lazy: reading it templates its items)."""
    if depth > 64:
        raise ValueError("nested more than 64 levels deep")
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    return value


def _error_text(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    # Ansible appends the template's origin to its messages; the problem names it already.
    text = re.sub(r"\s*Origin: .*$", "", text)
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= _MAX_ERROR else text[:_MAX_ERROR - 3] + "..."


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "cluster_host"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        hostvars = task_vars["hostvars"]
        inventory = hostvars._inventory  # the run's own inventory (HostVars keeps it; no public accessor)
        sources = [s for s in (task_vars.get("ansible_inventory_sources") or []) if s]
        self._lines: dict[str, list[str]] = {}
        self._snapshots: dict[str, str] = {}
        self._cwd = Path.cwd()
        basedir = task_vars.get("playbook_dir")

        groups = {}
        for group in inventory.groups.values():
            sourced = get_vars_from_inventory_sources(self._loader, inventory._sources, [group], "all")
            own = combine_vars(group.get_vars(), sourced)
            if basedir:
                own = combine_vars(own, get_vars_from_path(self._loader, basedir, [group], "all"))
            groups[group.name] = {"vars": {k: self._record(v) for k, v in own.items()},
                                  "children": [g.name for g in group.child_groups],
                                  "hosts": [h.name for h in group.hosts]}
        hosts = {}
        for host in inventory.hosts.values():
            sourced = get_vars_from_inventory_sources(self._loader, inventory._sources, [host], "all")
            own = combine_vars(host.get_vars(), sourced)
            if basedir:
                own = combine_vars(own, get_vars_from_path(self._loader, basedir, [host], "all"))
            hosts[host.name] = {"vars": {k: self._record(v) for k, v in own.items() if k not in _MAGIC}}
        variable_manager = hostvars._variable_manager
        extra = {k: self._record(v) for k, v in (variable_manager.extra_vars or {}).items()}

        gpu_hosts = [str(h) for h in (args.get("hosts") or [])]
        cluster_host = args.get("cluster_host") or None
        effective = {}
        for host in dict.fromkeys(gpu_hosts + ([cluster_host] if cluster_host else [])):
            if inventory.get_host(host) is not None:
                # hostvars as a play task sees them: a value may name another host's.
                effective[host] = self._effective({**hostvars.raw_get(host), "hostvars": hostvars})

        report = accel_plan_inventory.check({
            "groups": groups, "hosts": hosts, "extra": extra, "effective": effective, "gpu_hosts": gpu_hosts,
            "cluster_host": cluster_host, "orphans": self._orphans(sources, basedir, groups, hosts),
            "role_options": sorted(self._role_options()),
        })
        # GPU hosts this play does not reach (unreachable, or left out by --limit) still have their plan checked: the
        # reporter lists their problems.
        in_play = set(task_vars.get("ansible_play_hosts_all") or ())
        report["unreached"] = [text for host, entry in report["hosts"].items() if host not in in_play
                               for text in entry["problems"]]
        result.update(changed=False, **report)
        return result

    # -- values --------------------------------------------------------------------------------------------------

    def _record(self, value, templated=None, error: str = "") -> dict:
        origin = Origin.get_tag(value) if Origin is not None else None
        record = {"value": value if templated is None else templated, "error": error, "origin": "", "written": None,
                  "source": ""}
        if origin is None:
            return record
        if origin.path:
            path = Path(origin.path)
            shown_path = str(path.relative_to(self._cwd)) if path.is_relative_to(self._cwd) else str(path)
            record["origin"] = f"{shown_path}:{origin.line_num}" if origin.line_num else shown_path
            if origin.line_num and isinstance(value, (int, float)) and not isinstance(value, bool):
                record["written"] = self._written(origin.path, origin.line_num, origin.col_num)
            if isinstance(value, str) and path.suffix not in _YAML_SUFFIXES and path.parent.name not in (
                    "group_vars", "host_vars"):
                record["source"] = "ini"
        elif origin.description:
            record["origin"] = origin.description.strip("<>")
            if "-e" in origin.description or "extra" in origin.description:
                record["source"] = "extra"
                record["origin"] = "extra vars (-e)"
        return record

    def _written(self, path: str, line: int, col: int | None) -> str | None:
        """The scalar as written at path:line:col (YAML), for messages such as "1.30 read as 1.3"."""
        if path not in self._lines:
            try:
                self._lines[path] = Path(path).read_text(errors="replace").splitlines()
            except OSError:
                self._lines[path] = []
        lines = self._lines[path]
        if not 0 < line <= len(lines):
            return None
        text = lines[line - 1][(col or 1) - 1:]
        text = re.split(r"\s+#", text, maxsplit=1)[0]
        ini = re.match(r"[A-Za-z_][A-Za-z0-9_]*=(\S*)", text)  # an INI line: key=value
        if ini:
            return ini.group(1) or None
        return re.split(r"[,}\]]", text, maxsplit=1)[0].strip() or None

    def _effective(self, raw: dict) -> dict:
        """A host's accel_* values, each templated on its own: a broken one is that variable's problem only."""
        templar = self._templar.copy_with_new_env(available_variables=raw)
        out = {}
        for name, value in raw.items():
            if not str(name).startswith("accel_"):
                continue
            big = oversized(value)
            if big:
                out[name] = self._record(value, templated="(not read)", error=big)
                continue
            try:
                templated = _plain(templar.template(value))
            except Exception as exc:  # noqa: BLE001 - any failure to render is this value's problem, reported
                out[name] = self._record(value, error=_error_text(exc))
                continue
            record = self._record(value, templated=templated)
            if name == "accel_nvml_snapshot" and isinstance(templated, str):
                record["error"] = self._snapshot_error(templated)
            out[name] = record
        return out

    def _snapshot_error(self, path: str) -> str:
        """Why the snapshot the preflight would read on the controller cannot be read ("" when it can)."""
        if path not in self._snapshots:
            try:
                data = json.loads(Path(path).read_text())
                shaped = isinstance(data, dict) and isinstance(data.get("nvml"), dict)
                self._snapshots[path] = "" if shaped else "not an NVML snapshot (a JSON object with an 'nvml' key)"
            except OSError as exc:
                self._snapshots[path] = f"no readable snapshot file on the controller ({exc.strerror or exc})"
            except ValueError as exc:
                self._snapshots[path] = f"the snapshot file is not JSON ({exc})"
        return self._snapshots[path]

    # -- files and roles -----------------------------------------------------------------------------------------

    def _orphans(self, sources, basedir, groups, hosts) -> list[dict]:
        """group_vars/host_vars entries next to the inventory sources and the playbook that name nothing."""
        dirs = []
        for source in sources:
            path = Path(source)
            dirs.append(path if path.is_dir() else path.parent)
        if basedir:
            dirs.append(Path(basedir))
        found = []
        for base in dict.fromkeys(dirs):
            for kind, known in (("group_vars", groups), ("host_vars", hosts)):
                folder = base / kind
                if not folder.is_dir():
                    continue
                for entry in sorted(folder.iterdir()):
                    if entry.name.startswith(".") or entry.name.endswith(("~", ".swp", ".bak", ".orig")):
                        continue
                    name = entry.name
                    if entry.is_file() and entry.suffix in _YAML_SUFFIXES:
                        name = entry.stem
                    if name not in known:
                        shown = entry.relative_to(self._cwd) if entry.is_relative_to(self._cwd) else entry
                        found.append({"path": str(shown), "kind": kind, "name": name})
        return found

    @staticmethod
    def _role_options() -> set[str]:
        """Names kube-accel's roles take: their defaults and argument-spec options."""
        import yaml

        roles = Path(__file__).resolve().parents[2] / "roles"
        names: set[str] = set()
        for defaults in roles.glob("*/defaults/main.yml"):
            names.update((yaml.safe_load(defaults.read_text()) or {}).keys())
        for specs in roles.glob("*/meta/argument_specs.yml"):
            for entry in ((yaml.safe_load(specs.read_text()) or {}).get("argument_specs") or {}).values():
                names.update((entry or {}).get("options") or {})
        return names
