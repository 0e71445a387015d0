# Copyright: kube-accel contributors
# Apache License 2.0
"""The inventory as a whole against kube-accel's model: every source of every setting, before any rule runs.

The preflight's ``accel_plan`` action reads the inventory as Ansible does (every group's and host's own variables,
extra vars, and each GPU host's effective values, templated one variable at a time so that one broken value is that
host's problem and nobody else's) and hands it here as plain data. ``check(inventory)`` returns, per GPU host, the
problems found and the settings that passed (strictly typed, ready for the plan rules in ``plan.rules``), plus the
problems of the cluster's settings and of the inventory's structure, which belong to no single GPU host.

Input (``inventory``), every value a ``{"value", "error", "origin", "written", "source"}`` record (``value``: the value,
templated where it is a host's effective value; ``error``: why it could not be templated; ``origin``: "file:line";
``written``: its text in that file; ``source``: ``extra`` or ``ini`` where values arrive as strings):

- ``groups``: name -> ``{"vars", "children", "hosts"}`` (own variables, direct children, direct hosts)
- ``hosts``: name -> ``{"vars"}`` (own variables: inventory line and host_vars)
- ``extra``: extra vars
- ``effective``: GPU host (and the cluster host) -> its effective ``accel_*`` values
- ``gpu_hosts``: the hosts under ``gpu_pools``; ``cluster_host``: ``kube_control_plane[0]`` or None
- ``orphans``: ``[{"path", "kind", "name"}]`` group_vars/host_vars entries that name no group or host
- ``role_options``: variable names kube-accel's roles take (their defaults and argument specs)

Output: ``{"hosts": {host: {"problems", "settings", "invalid", "origins"}}, "cluster": [..], "inventory": [..]}``.
Every problem reads ``<who>: <field> = <value> (<origin>): <what>; allowed: <allowed>``.
"""

from __future__ import annotations

import difflib
from collections import defaultdict

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import MODES, VGPU_BACKENDS
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import k8s_names as names
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import (
    cluster_problems,
    cluster_settings,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import (
    RUNTIME_FACTS,
    VARIABLES,
    defaults,
    did_you_mean,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory_records import (
    applies,
    applies_text,
    descendant_groups,
    group_depths,
    host_list,
    hosts_of,
    is_ansible_name,
    minor_version,
    near_miss,
    origin_of,
    problem,
    same_record,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.value_text import shown
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.values import value_problems

POOLS_GROUP = "gpu_pools"
CLUSTER_GROUP = "kube_control_plane"
MODEL_ALLOWED = "the variables of kube-accel's inventory model (docs/inventory.md, docs/plan-checks.md)"
# Lab variables that change what the preflight reads on the host: only where accel_lab says it is a lab host.
LAB_ONLY = ("accel_lab_host_runtime",)


class _Checker:
    def __init__(self, inventory: dict):
        self.groups = inventory.get("groups") or {}
        self.hosts = inventory.get("hosts") or {}
        self.extra = inventory.get("extra") or {}
        self.effective = inventory.get("effective") or {}
        self.gpu_hosts = list(inventory.get("gpu_hosts") or [])
        self.cluster_host = inventory.get("cluster_host")
        self.orphans = inventory.get("orphans") or []
        self.role_options = set(inventory.get("role_options") or ())
        self.pool_groups = list((self.groups.get(POOLS_GROUP) or {}).get("children") or [])
        self.under_pools = descendant_groups(self.groups, POOLS_GROUP)
        self.out = {"hosts": {h: {"problems": [], "settings": {}, "invalid": [], "origins": {}}
                              for h in self.gpu_hosts},
                    "cluster": [], "inventory": []}
        # pool group -> its GPU hosts; host -> the pool groups holding it
        self.pool_hosts = {g: hosts_of(self.groups, g) for g in self.pool_groups}
        self.host_groups = defaultdict(set)
        for group in self.groups:
            for host in hosts_of(self.groups, group):
                self.host_groups[host].add(group)
        self.depth = group_depths(self.groups)
        self.memberships = defaultdict(list)
        for group, members in self.pool_hosts.items():
            for host in members:
                self.memberships[host].append(group)

    # -- where a problem goes ------------------------------------------------------------------------------------

    def host_problem(self, host: str, text: str, invalid: str | None = None) -> None:
        entry = self.out["hosts"][host]
        if text not in entry["problems"]:
            entry["problems"].append(text)
        if invalid and invalid not in entry["invalid"]:
            entry["invalid"].append(invalid)

    def source_problem(self, kind: str, name: str, build) -> None:
        """A problem of one source (a group's or host's own variables): the GPU host it belongs to, every GPU host
        of the one pool a group serves, or else the inventory's report. ``build(who)`` makes the message."""
        if kind == "host":
            if name in self.out["hosts"]:
                self.host_problem(name, build(name))
            elif name == self.cluster_host:
                self.out["cluster"].append(build(f"{name} (host_vars)"))
            else:
                self.out["inventory"].append(build(f"host {name}"))
            return
        members = sorted(hosts_of(self.groups, name) & set(self.out["hosts"]))
        pools = {tuple(sorted(self.memberships.get(h) or [])) for h in members}
        if members and len(pools) == 1 and name not in (POOLS_GROUP, "all"):
            for host in members:
                self.host_problem(host, build(host))
        else:
            self.out["inventory"].append(build(f"group {name}"))

    # -- checks --------------------------------------------------------------------------------------------------

    def sources(self) -> None:
        """Unknown names, in every group's and host's own variables and in extra vars."""
        for kind, entries in (("group", self.groups), ("host", self.hosts)):
            for name in sorted(entries):
                for var, record in sorted((entries[name].get("vars") or {}).items()):
                    self.unknown(kind, name, var, record)
        for var, record in sorted(self.extra.items()):
            if var.startswith("accel_") and var not in VARIABLES and var not in RUNTIME_FACTS:
                self.out["cluster"].append(problem("extra vars", var, record, self.unknown_text(var), MODEL_ALLOWED))

    @staticmethod
    def unknown_text(var: str) -> str:
        hint = did_you_mean(var.lower())
        return f"unknown variable (did you mean {hint}?)" if hint else "unknown variable"

    def unknown(self, kind: str, name: str, var: str, record: dict) -> None:
        if not origin_of(record):  # a YAML boolean or null carries no origin tag: name its source's file
            own = (self.groups if kind == "group" else self.hosts)[name].get("vars") or {}
            files = {origin_of(r).rsplit(":", 1)[0] for r in own.values() if origin_of(r) and ":" in origin_of(r)}
            record = {**record, "origin": files.pop() if len(files) == 1 else ""}
        if var.lower().startswith("accel_"):
            if var in VARIABLES or var in RUNTIME_FACTS:
                return
            self.source_problem(kind, name, lambda who: problem(who, var, record, self.unknown_text(var),
                                                                MODEL_ALLOWED))
            return
        if is_ansible_name(var) or var in self.role_options:
            return
        hint = near_miss(var, self.role_options)
        if hint:
            self.source_problem(kind, name, lambda who: problem(
                who, var, record, f"unknown variable (did you mean {hint}?)",
                f"{MODEL_ALLOWED}, and the variables of kube-accel's roles"))

    def settings_reaching_no_gpu_host(self) -> None:
        """Pool and lab settings in a group or host that no GPU host inherits from: a pool group put outside
        gpu_pools, or settings on the control plane. Its hosts get no GPU setup and the settings do nothing."""
        gpu = set(self.gpu_hosts)
        for name in sorted(self.groups):
            if name in ("all", POOLS_GROUP) or name in self.under_pools:
                continue
            members = hosts_of(self.groups, name)
            if members & gpu:
                continue  # a group across pools (a rack, a site): the pool agreement check covers it
            for var, record in sorted((self.groups[name].get("vars") or {}).items()):
                entry = VARIABLES.get(var)
                if entry and entry["scope"] in ("pool", "lab"):
                    where = (f"its hosts ({host_list(members)}) are not under {POOLS_GROUP}, so nothing sets up "
                             "their GPUs" if members else "it holds no host")
                    self.out["inventory"].append(problem(
                        f"group {name}", var, record, f"a {entry['scope']} setting that reaches no GPU host: {where}",
                        f"pool groups as children of {POOLS_GROUP}; cluster settings only in group_vars/all"))
        for name in sorted(self.hosts):
            if name in gpu:
                continue
            for var, record in sorted((self.hosts[name].get("vars") or {}).items()):
                entry = VARIABLES.get(var)
                if entry and entry["scope"] in ("pool", "lab"):
                    who = f"{name} (host_vars)" if name == self.cluster_host else f"host {name}"
                    target = self.out["cluster"] if name == self.cluster_host else self.out["inventory"]
                    target.append(problem(who, var, record, f"a {entry['scope']} setting on a host that is not "
                                          f"under {POOLS_GROUP}: nothing reads it",
                                          f"pool settings on hosts of a pool group under {POOLS_GROUP}"))

    def orphan_files(self) -> None:
        for orphan in self.orphans:
            known = list(self.groups) if orphan["kind"] == "group_vars" else list(self.hosts)
            match = difflib.get_close_matches(orphan["name"], known, n=1, cutoff=0.6)
            hint = f" (did you mean {match[0]}?)" if match else ""
            self.out["inventory"].append(
                f"inventory: {orphan['path']}: names no {orphan['kind'].split('_')[0]} of the inventory{hint}, so "
                f"Ansible never reads it; allowed: {orphan['kind']} files named after a "
                f"{orphan['kind'].split('_')[0]} of the inventory")

    def membership(self) -> None:
        for host in self.gpu_hosts:
            what = names.dns1123_subdomain(host)
            if what:
                self.host_problem(host, f"{host}: inventory_hostname = {host!r}: {what}: the cluster play labels the "
                                        f"node of this name, and Kubernetes names nodes so; allowed: "
                                        f"{names.DNS1123_SUBDOMAIN_ALLOWED} (the node's name)")
            groups = self.memberships.get(host) or []
            if not groups:
                self.host_problem(host, f"{host}: group_names: the host is in {POOLS_GROUP} but in none of its pool "
                                        f"groups; allowed: exactly one pool group under {POOLS_GROUP}")
            elif len(groups) > 1:
                modes = []
                for group in sorted(groups):
                    record = (self.groups[group].get("vars") or {}).get("accel_mode")
                    modes.append(f"{group} (accel_mode={record['value'] if record else '(inherited)'})")
                distinct = {(self.groups[g].get("vars") or {}).get("accel_mode", {}).get("value") for g in groups}
                what = "different modes on one host" if len(distinct) > 1 else "one host in two pools"
                if "dra" in distinct and len(distinct) > 1:
                    # Both would take the host's GPUs: the DRA kubelet plugin publishes them for claims while a
                    # device plugin advertises them as extended resources, and neither knows the other's pods.
                    what = ("a DRA pool and a device-plugin pool on one host: NVIDIA's DRA kubelet plugin and a "
                            "device plugin would hand out the same GPUs twice")
                self.host_problem(host, f"{host}: group_names = {sorted(groups)!r}: {what}: {', '.join(modes)}; "
                                        f"allowed: exactly one pool group under {POOLS_GROUP}, so one mode per host")

    def reference_cluster_values(self) -> tuple[str, dict]:
        """Who the cluster's settings are read on, and those values: kube_control_plane[0] as the cluster play
        reads them, or (an inventory without a control plane, e.g. preflight-only) the first GPU host."""
        if self.cluster_host and self.cluster_host in self.effective:
            return f"{self.cluster_host} ({CLUSTER_GROUP}[0])", self.effective[self.cluster_host]
        for host in self.gpu_hosts:
            if host in self.effective:
                return f"{host} (first GPU host, the inventory has no {CLUSTER_GROUP})", self.effective[host]
        return "", {}

    def cluster(self) -> dict:
        """Cluster settings checked once, where the cluster play reads them; GPU hosts that see another value."""
        who, reference = self.reference_cluster_values()
        good = {}
        for var in sorted(reference):
            entry = VARIABLES.get(var)
            if not entry or entry["scope"] != "cluster":
                continue
            texts = self.record_problems(who, var, reference[var])
            if texts:
                self.out["cluster"].extend(texts)
            else:
                good[var] = reference[var]["value"]
        # Pools the cluster settings cannot serve (plan.cluster_settings: a HAMi pool without the API
        # servers' CIDRs would have its webhook port shut to them).
        pools = {}
        for host in self.gpu_hosts:
            mine = self.effective.get(host) or {}
            settings = {k: r.get("value") for k, r in mine.items() if not r.get("error")}
            if (isinstance(settings.get("accel_pool"), str) and settings.get("accel_mode") in MODES
                    and (settings["accel_mode"] != "vgpu" or settings.get("accel_vgpu_backend") in VGPU_BACKENDS)):
                pools.setdefault(settings["accel_pool"], {"pool": settings["accel_pool"],
                                                          "settings": {**defaults("pool"), **settings}})
        version = good.get("accel_kubernetes_version")
        control_plane = set((self.groups.get(CLUSTER_GROUP) or {}).get("hosts") or []) | {
            h for g in descendant_groups(self.groups, CLUSTER_GROUP) for h in self.groups[g].get("hosts") or []}
        # Known only where the inventory names the control plane: its hosts are the nodes kube-accel knows of.
        non_pool_nodes = bool(control_plane - set(self.gpu_hosts)) if control_plane else None
        for sentence in cluster_problems(list(pools.values()), cluster_settings(good),
                                         minor_version(version) if isinstance(version, str) else None, non_pool_nodes):
            self.out["cluster"].append(f"{who}: {sentence}")
        # Cluster settings for a component the cluster does not install (its values would be silently ignored).
        for var in sorted(good):
            entry = VARIABLES[var]
            if entry.get("applies") and not applies(entry, good) and good[var] not in (
                    entry.get("default"), None, "", [], {}):
                self.out["cluster"].append(problem(
                    who, var, reference[var], f"set while the component it configures is off (it applies with "
                    f"{applies_text(entry)})", "remove it, or turn the component on"))
        for var, entry in VARIABLES.items():
            if entry["scope"] != "cluster":
                continue
            ref = reference.get(var)
            differing = {}
            for host in self.gpu_hosts:
                record = (self.effective.get(host) or {}).get(var)
                if not same_record(record, ref, path=entry["type"] == "path"):
                    differing[host] = record
            if not differing:
                continue
            seen_as = f"{shown(ref['value']) if ref else '(not set)'}" + (
                f" ({origin_of(ref)})" if origin_of(ref) else "")
            allowed = "cluster settings once, in group_vars/all (or extra vars), the same for every host"
            if len(differing) == len(self.gpu_hosts) > 1 and len({repr(r and r.get("value")) for r in
                                                                  differing.values()}) == 1:
                # Every GPU host sees one other value: the cluster host's own setting is the odd one.
                record = next(iter(differing.values()))
                self.out["cluster"].append(problem(
                    who, var, ref, f"every GPU host reads {shown(record['value']) if record else '(not set)'}"
                    + (f" ({origin_of(record)})" if origin_of(record) else "")
                    + ": a cluster setting set where only the cluster host sees it", allowed))
                continue
            for host, record in differing.items():
                self.host_problem(host, problem(
                    host, var, record, f"a cluster setting that differs from what the cluster play reads on {who}: "
                    f"{seen_as}", allowed), var)
                for text in self.record_problems(host, var, record) if record else []:
                    self.host_problem(host, text, var)
        return good

    def record_problems(self, who: str, var: str, record: dict) -> list[str]:
        if record.get("error"):
            return [problem(who, var, record, f"cannot be read: {record['error']}",
                            "a value, or a template that renders one for this host")]
        return [problem(who, var, record, what, allowed)
                for what, allowed in value_problems(var, record.get("value"), record.get("written"),
                                                    record.get("source") or "")]

    def where_set(self, host: str, var: str) -> str:
        """Where a host's value without an origin tag (YAML booleans and nulls carry none) was set: extra vars, its
        host vars, or the most specific group that sets it, named by that group's file where one is known."""
        if var in self.extra:
            return "extra vars (-e)"
        sources = []
        if var in (self.hosts.get(host, {}).get("vars") or {}):
            sources.append(("host", host, self.hosts[host]["vars"]))
        else:
            groups = [g for g in self.host_groups.get(host, ()) if var in (self.groups[g].get("vars") or {})]
            for group in sorted(groups, key=lambda g: (self.depth.get(g, 0), g), reverse=True)[:1]:
                sources.append(("group", group, self.groups[group]["vars"]))
        for kind, name, own in sources:
            files = sorted({origin_of(r).rsplit(":", 1)[0] for r in own.values() if origin_of(r)
                            and not origin_of(r).startswith("extra")})
            return files[0] if len(files) == 1 else f"{kind} {name}"
        return ""

    def gpu_host(self, host: str, cluster_values: dict) -> None:
        entry_out = self.out["hosts"][host]
        mine = self.effective.get(host) or {}
        for var, record in mine.items():
            if record is not None and not origin_of(record) and var in VARIABLES:
                record["origin"] = self.where_set(host, var)
        lab = (mine.get("accel_lab") or {}).get("value") is True
        settings = {}
        for var in sorted(mine):
            entry = VARIABLES.get(var)
            if not entry or entry["scope"] == "cluster":
                continue
            record = mine[var]
            entry_out["origins"][var] = origin_of(record)
            texts = self.record_problems(host, var, record)
            if var in LAB_ONLY and not lab:
                texts.append(problem(host, var, record, "a lab stand-in on a host that is not a lab host (it replaces "
                                     "what the preflight reads on the host)",
                                     "only with accel_lab: true (lab containers); remove it on real hosts"))
            for text in texts:
                self.host_problem(host, text, var)
            if not texts:
                settings[var] = record["value"]
        for var, record in mine.items():
            if VARIABLES.get(var, {}).get("scope") == "cluster":
                entry_out["origins"][var] = origin_of(record)
        if "accel_pool" not in mine:
            self.host_problem(host, problem(host, "accel_pool", None, "required on every GPU host (it names the "
                                            "host's pool: labels, releases and verify Jobs)",
                                            "the pool name, set in the pool group's group_vars"), "accel_pool")
        # Settings a pool's mode or backend ignores, set for this pool (defaults for every pool, in group_vars/all
        # or gpu_pools, are not this pool's choice and are left alone).
        for var in sorted(settings):
            entry = VARIABLES[var]
            if not entry.get("applies") or applies(entry, settings):
                continue
            if settings[var] == entry.get("default") or not self.set_for_pool(host, var):
                continue
            self.host_problem(host, problem(
                host, var, mine[var], f"set for this pool, whose settings make it ignored (it applies with "
                f"{applies_text(entry)})", "remove it, or set it for pools it applies to"), var)
            del settings[var]
        entry_out["settings"] = {**cluster_values, **settings}

    def set_for_pool(self, host: str, var: str) -> bool:
        """Whether the host's value of ``var`` comes from a source more specific than all/gpu_pools."""
        if var in (self.hosts.get(host, {}).get("vars") or {}) or var in self.extra:
            return True
        return any(var in (self.groups[group].get("vars") or {})
                   for group in self.host_groups.get(host, ()) if group not in ("all", POOLS_GROUP))

    def pools_agree(self) -> None:
        """Every host of one pool (one accel_pool) agrees on every pool setting: one pool is one label value, one
        chart config and one set of Jobs, built from one host's settings (plan.pools.collect_pools)."""
        by_pool = defaultdict(list)
        for host in self.gpu_hosts:
            record = (self.effective.get(host) or {}).get("accel_pool")
            if record and not record.get("error") and isinstance(record.get("value"), str):
                by_pool[record["value"]].append(host)
        for pool, members in sorted(by_pool.items()):
            if len(members) < 2:
                continue
            for var, entry in VARIABLES.items():
                if entry["scope"] != "pool" or entry.get("per_host") or var == "accel_pool":
                    continue
                values = defaultdict(list)
                for host in members:
                    record = (self.effective.get(host) or {}).get(var)
                    key = "(not set)" if record is None else repr(record.get("value"))
                    values[key].append((host, record))
                if len(values) < 2:
                    continue
                described = "; ".join(
                    f"{shown(hosts[0][1]['value']) if hosts[0][1] else '(not set)'} on "
                    f"{host_list(host for host, _record in hosts)}"
                    + (f" ({origin_of(hosts[0][1])})" if origin_of(hosts[0][1]) else "")
                    for hosts in sorted(values.values(), key=lambda found: -len(found)))
                groups = sorted({g for h in members for g in self.memberships.get(h) or []})
                for host in members:
                    record = (self.effective.get(host) or {}).get(var)
                    self.host_problem(host, problem(
                        host, "accel_pool", {"value": pool}, f"the hosts of pool {pool!r} (groups {', '.join(groups)})"
                        f" disagree on {var}: {described}",
                        "the same pool settings on every host of a pool: set them in its pool group, or give the "
                        "hosts different accel_pool names"), None if record is None else var)

    def run(self) -> dict:
        self.sources()
        self.orphan_files()
        self.settings_reaching_no_gpu_host()
        self.membership()
        cluster_values = self.cluster()
        for host in self.gpu_hosts:
            self.gpu_host(host, cluster_values)
        self.pools_agree()
        return self.out


def check(inventory: dict) -> dict:
    """Every problem of the inventory as a whole, per GPU host, for the cluster and for the inventory."""
    return _Checker(inventory).run()
