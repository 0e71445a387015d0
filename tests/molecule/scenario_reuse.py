"""Reuse of a Molecule scenario's last green run on this machine, keyed by the scenario's whole input.

A scenario may be reported green without running only when everything that decides its outcome is the same as in
a green run recorded under ~/.cache/kube-accel/molecule/ (KA_CACHE overrides the root):

- files: the scenario directory; for a role's scenario the role (without its other scenarios); every role, module,
  filter or connection plugin named in those files, and every repository path they name, followed until nothing new
  turns up (module_utils with any module or filter); ansible.cfg, the collection's galaxy.yml and
  meta/runtime.yml, and this harness;
- the image id of every platform image, the podman version and the machine's kernel release;
- every installed Python distribution of the venv (Molecule, ansible-core, the collections, Jinja2 ...) and any
  collection outside it, and the ANSIBLE_* / MOLECULE_* / KA_* environment;
- the Debian repositories: the green run records, host by host, which package indices apt resolved against and their
  SHA-256; reuse needs each repository's InRelease (fetched now) to list the same SHA-256 for each of them. Same
  image, same inputs and same indices give apt the same package versions (driver, kernel headers, compiler). A
  repository on the host itself (file:) is built by the scenario from its own files and is not fetched.

Anything missing or unreadable (an image not built, a repository not reachable, a compressed index) means no reuse.
KA_MOLECULE_REUSE=0 runs every scenario; a fresh machine has no records and runs every scenario.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).resolve().parent
# Bump when the key's definition changes: older records are then never matched.
KEY_VERSION = 1
# Files whose text can name a role, a plugin or another path; other files (data, binaries) are hashed only.
SCANNED = {".yml", ".yaml", ".j2", ".py", ".cfg", ".ini", ".sh", ".json", ""}
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Path-like tokens: ${MOLECULE_PROJECT_DIRECTORY}/tests/data/x.json, ../../inventories/lab/group_vars/, a/b.yml
PATHISH = re.compile(r"(?:\$\{?[A-Z_]+\}?/)?[A-Za-z0-9_.\-]*(?:/[A-Za-z0-9_.\-]+)+/?")
FILTER_NAME = re.compile(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']\s*:""")


def cache_root() -> Path:
    return Path(os.environ.get("KA_CACHE") or Path.home() / ".cache" / "kube-accel") / "molecule"


def reuse_enabled() -> bool:
    return os.environ.get("KA_MOLECULE_REUSE", "1") != "0"


@dataclass(frozen=True)
class Scenario:
    cwd: Path  # where `molecule` runs: the repository or a role
    name: str
    repo: Path = REPO

    @property
    def directory(self) -> Path:
        return self.cwd / "molecule" / self.name

    @property
    def id(self) -> str:
        rel = self.cwd.relative_to(self.repo).as_posix()
        return f"{rel if rel != '.' else '.'}:{self.name}"

    @property
    def slug(self) -> str:
        rel = self.cwd.relative_to(self.repo).as_posix()
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{rel if rel != '.' else 'molecule'}-{self.name}")


def repo_files(repo: Path) -> frozenset[Path]:
    """Files git shows in the work tree (tracked, or untracked and not ignored): what a scenario can read from the
    repository. Ignored paths (.venv, caches) are not repository inputs; the venv counts through its versions."""
    proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                          capture_output=True, check=True)
    found = set()
    for name in proc.stdout.decode().split("\0"):
        path = repo / name
        # Ansible never reads Markdown; a README edit is not an input. Deleted-but-tracked files are not either.
        if name and not name.endswith(".md") and (path.is_file() or path.is_symlink()):
            found.add(path)
    return frozenset(found)


def _files_under(universe: frozenset[Path], path: Path, exclude: Path | None = None) -> set[Path]:
    return {p for p in universe if (p == path or path in p.parents)
            and not (exclude is not None and (p == exclude or exclude in p.parents))}


def _role_files(universe: frozenset[Path], repo: Path, role: str) -> set[Path]:
    """A role's files without its Molecule scenarios (a scenario adds its own directory)."""
    root = repo / "roles" / role
    return _files_under(universe, root, exclude=root / "molecule")


def _plugin_index(repo: Path) -> dict[str, set[Path]]:
    """Name a task, filter or connection uses -> the plugin file that provides it."""
    index: dict[str, set[Path]] = {}
    for kind in ("modules", "connection"):
        for p in (repo / "plugins" / kind).glob("*.py"):
            index.setdefault(p.stem, set()).add(p)
    for p in (repo / "plugins" / "filter").glob("*.py"):
        text = p.read_text(encoding="utf-8", errors="replace")
        # The names a template can use: the keys of the dict FilterModule.filters() returns.
        names = {p.stem, *FILTER_NAME.findall(text.split("def filters", 1)[1] if "def filters" in text else "")}
        for name in names:
            index.setdefault(name, set()).add(p)
    return index


def _text(path: Path) -> str:
    """The text whose names and paths count: YAML without its comments (keys and values), other files as they are."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""
    if path.suffix in (".yml", ".yaml"):
        try:
            return "\n".join(_strings(list(yaml.safe_load_all(text))))
        except yaml.YAMLError:
            return text
    return text


def _strings(node) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [str(node)] if node is not None else []


def input_files(scenario: Scenario) -> list[Path]:
    """Every file the scenario's outcome can depend on (see the module docstring), sorted."""
    repo = scenario.repo
    universe = repo_files(repo)
    files = _files_under(universe, scenario.directory)
    if scenario.cwd != repo:
        files |= _role_files(universe, repo, scenario.cwd.name)
    # Hashed, not followed: the harness that runs Molecule and the repository's Ansible configuration.
    fixed = {p for p in (repo / "ansible.cfg", repo / "galaxy.yml", repo / "meta" / "runtime.yml",
                         HARNESS / "test_scenarios.py", HARNESS / "scenario_reuse.py", HARNESS / "conftest.py")
             if p in universe}
    roles = {p.name for p in (repo / "roles").iterdir() if p.is_dir()} if (repo / "roles").is_dir() else set()
    plugins = _plugin_index(repo)
    module_utils = _files_under(universe, repo / "plugins" / "module_utils")
    env_dirs = {"MOLECULE_PROJECT_DIRECTORY": scenario.cwd, "MOLECULE_SCENARIO_DIRECTORY": scenario.directory}
    scanned: set[Path] = set()
    while pending := sorted(files - scanned):
        for path in pending:
            scanned.add(path)
            text = _text(path) if path.suffix in SCANNED else ""
            if not text:
                continue
            words = set(WORD.findall(text))
            for role in roles & words:
                files |= _role_files(universe, repo, role)
            for name in words & plugins.keys():
                for plugin in plugins[name]:
                    files.add(plugin)
                    if plugin.parent.name in ("modules", "filter"):
                        files |= module_utils
            for token in PATHISH.findall(text):
                for target in _resolve(token, path, scenario.cwd, repo, env_dirs):
                    files |= _files_under(universe, target)
    return sorted(files | fixed)


def _resolve(token: str, source: Path, cwd: Path, repo: Path, env_dirs: dict[str, Path]) -> list[Path]:
    """Repository paths a path-like token can mean: from the file's directory, the scenario's cwd or the repo."""
    match = re.match(r"\$\{?([A-Z_]+)\}?/(.*)", token)
    if match:
        base = env_dirs.get(match.group(1))
        candidates = [base / match.group(2)] if base else []
    else:
        candidates = [source.parent / token, cwd / token, repo / token]
    found = []
    for candidate in candidates:
        try:
            resolved = candidate.resolve()
        except OSError:
            continue
        # Only what lies inside the repository, never the repository (or a whole role tree) by accident.
        if resolved == repo or repo not in resolved.parents or not resolved.exists():
            continue
        if resolved.is_dir() and resolved.parent == repo:
            continue
        found.append(resolved)
    return found


def file_digests(scenario: Scenario) -> dict[str, str]:
    digests = {}
    for path in input_files(scenario):
        rel = path.relative_to(scenario.repo).as_posix()
        if path.is_symlink():
            digests[rel] = "link:" + os.readlink(path)
            continue
        h = hashlib.sha256(path.read_bytes())
        digests[rel] = h.hexdigest() + (":x" if os.access(path, os.X_OK) else "")
    return digests


def platform_images(scenario: Scenario) -> list[str]:
    """Images of the scenario's platforms, with ${VAR} / ${VAR:-default} expanded as Molecule does."""
    data = yaml.safe_load((scenario.directory / "molecule.yml").read_text(encoding="utf-8")) or {}
    images = []
    for p in data.get("platforms") or []:
        image = str(p.get("image", ""))
        images.append(_interpolate(image))
    return sorted(set(images))


def _interpolate(value: str) -> str:
    def sub(m: re.Match) -> str:
        var, sep, default = m.group(1).partition(":-")
        return os.environ.get(var) or (default if sep else "")
    return re.sub(r"\$\{([^}]+)\}", sub, value)


def image_ids(images: list[str]) -> dict[str, str | None]:
    ids: dict[str, str | None] = {}
    for image in images:
        proc = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", image],
                              capture_output=True, text=True, check=False)
        ids[image] = proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None
    return ids


def tool_versions() -> dict[str, str]:
    """Python distributions of the interpreter running Molecule, collections outside it, podman, kernel."""
    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"])
    collections = []
    for root in (Path.home() / ".ansible" / "collections", Path("/usr/share/ansible/collections")):
        for manifest in sorted(root.glob("ansible_collections/*/*/MANIFEST.json")):
            collections.append(f"{manifest.parent.relative_to(root)}:{hashlib.sha256(manifest.read_bytes()).hexdigest()}")
    podman = subprocess.run(["podman", "version", "--format", "{{.Client.Version}}"],
                            capture_output=True, text=True, check=False).stdout.strip()
    # The engine settings lab-host-image.sh writes (runtime, ulimits), for root and rootless podman.
    confs = [Path("/etc/containers/containers.conf"),
             Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "containers" / "containers.conf"]
    return {
        "containers_conf": hashlib.sha256(b"".join(p.read_bytes() for p in confs if p.is_file())).hexdigest(),
        "python": sys.version,
        "distributions": hashlib.sha256("\n".join(dists).encode()).hexdigest(),
        "collections": hashlib.sha256("\n".join(collections).encode()).hexdigest(),
        "podman": podman or "missing",
        "kernel": platform.release(),
    }


def environment() -> dict[str, str]:
    """The ANSIBLE_* / MOLECULE_* / KA_* environment, the checkout's own path written REPO (ANSIBLE_CONFIG names it):
    a clone elsewhere on this machine with the same files reuses the same records."""
    skip = {"KA_MOLECULE_REUSE", "KA_STAGE_LOG"}
    return {k: v.replace(str(REPO), "REPO") for k, v in sorted(os.environ.items())
            if k.startswith(("ANSIBLE_", "MOLECULE_", "KA_")) and k not in skip}


def inputs(scenario: Scenario, *, images: dict[str, str | None] | None = None,
           tools: dict[str, str] | None = None, env: dict[str, str] | None = None) -> dict:
    """Everything the key is made of, before the repositories (checked against the record, see fresh_indices)."""
    return {
        "key_version": KEY_VERSION,
        "scenario": scenario.id,
        "files": file_digests(scenario),
        "images": image_ids(platform_images(scenario)) if images is None else images,
        "tools": tool_versions() if tools is None else tools,
        "env": environment() if env is None else env,
    }


def key_of(data: dict) -> str | None:
    """The key of a scenario's inputs; None when one of them is unknown (a missing image): never reused."""
    if any(v is None for v in data["images"].values()):
        return None
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def changed_inputs(old: dict, new: dict) -> list[str]:
    """What differs between two input sets, for the message that says why a scenario runs."""
    changes = []
    for name in sorted(set(old["files"]) | set(new["files"])):
        if old["files"].get(name) != new["files"].get(name):
            changes.append(name)
    for part in ("images", "tools", "env", "key_version"):
        if old.get(part) != new.get(part):
            changes.append(part)
    return changes


# Package indices: recorded from the hosts after a green run, checked against the repositories before a reuse.
INDEX_FORMAT = "$(METAKEY)\t$(BASE_URI)\t$(FILENAME)"


def host_indices(container: str) -> list[dict]:
    """The Packages indices apt has on a host, with the SHA-256 of each downloaded one."""
    script = (
        "command -v apt-get >/dev/null || exit 0; "
        f"apt-get indextargets --format '{INDEX_FORMAT}' 'Identifier: Packages' | while IFS=\"$(printf '\\t')\" "
        "read -r key base file; do "
        "if [ -e \"$file\" ]; then sum=$(sha256sum < \"$file\" | cut -d' ' -f1); else sum=missing; fi; "
        "printf '%s\\t%s\\t%s\\n' \"$key\" \"$base\" \"$sum\"; done"
    )
    proc = subprocess.run(["podman", "exec", container, "sh", "-c", script],
                          capture_output=True, text=True, check=True)
    rows = []
    for line in proc.stdout.splitlines():
        key, base, sha = line.split("\t")
        rows.append({"meta_key": key, "base_uri": base, "sha256": sha})
    return rows


def release_hashes(base_uri: str, timeout: float = 20) -> dict[str, str]:
    """meta key -> SHA-256 from a repository's InRelease (read without verifying: a comparison, not a trust)."""
    with urllib.request.urlopen(base_uri.rstrip("/") + "/InRelease", timeout=timeout) as resp:  # noqa: S310
        text = resp.read().decode("utf-8", errors="replace")
    hashes, section = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.split(":", 1)[0]
            continue
        if section == "SHA256":
            parts = line.split()
            if len(parts) == 3:
                hashes[parts[2]] = parts[0]
    return hashes


def stale_indices(recorded: dict[str, list[dict]], fetch=None) -> list[str]:
    """Indices whose repository now lists another SHA-256 (or cannot say): empty when all are as recorded."""
    fetch = fetch or release_hashes
    stale, releases = [], {}
    for host, rows in sorted(recorded.items()):
        for row in rows:
            if row["sha256"] == "missing":
                # Configured but never downloaded in the green run: an index apt did not use then.
                continue
            if row["base_uri"].startswith("file:"):
                # A repository on the host itself, built by the scenario from files the key already holds.
                continue
            base = row["base_uri"]
            if base not in releases:
                try:
                    releases[base] = fetch(base)
                except (OSError, ValueError) as exc:
                    releases[base] = {"__error__": str(exc)}
            now = releases[base].get(row["meta_key"])
            if now != row["sha256"]:
                error = releases[base].get("__error__")
                stale.append(f"{host}: {base} {row['meta_key']} ({'unreachable: ' + error if error else 'changed'})")
    return stale


def record_path(scenario: Scenario, key: str) -> Path:
    return cache_root() / "results" / scenario.slug / f"{key}.json"


def latest_path(scenario: Scenario) -> Path:
    return cache_root() / "results" / scenario.slug / "latest.json"


def find_reusable(scenario: Scenario, data: dict) -> tuple[dict | None, str]:
    """(record, why): the green run to reuse, or None and the reason the scenario runs."""
    if not reuse_enabled():
        return None, "KA_MOLECULE_REUSE=0"
    key = key_of(data)
    if key is None:
        return None, "an image is missing: " + ", ".join(i for i, v in data["images"].items() if v is None)
    path = record_path(scenario, key)
    if not path.exists():
        latest = latest_path(scenario)
        if latest.exists():
            old = json.loads(latest.read_text(encoding="utf-8"))
            changes = changed_inputs(old["inputs"], data)
            shown = ", ".join(changes[:6]) + (f" and {len(changes) - 6} more" if len(changes) > 6 else "")
            return None, f"inputs changed since the green run of {old['finished']}: {shown}"
        return None, "no green run recorded on this machine"
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("inputs") != data:
        return None, "record does not match its key"
    stale = stale_indices(record.get("indices", {}))
    if stale:
        return None, "package indices changed: " + "; ".join(stale[:4])
    return record, "unchanged"


def write_record(scenario: Scenario, data: dict, indices: dict[str, list[dict]], seconds: float,
                 stages: dict[str, float]) -> Path | None:
    key = key_of(data)
    if key is None:
        return None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=scenario.repo, capture_output=True,
                            text=True, check=False).stdout.strip()
    record = {
        "scenario": scenario.id, "key": key, "inputs": data, "indices": indices, "seconds": round(seconds, 1),
        "stages": stages, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
    }
    path = record_path(scenario, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    for target in (path, latest_path(scenario)):
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(target)
    return path


# Molecule host images (scripts/molecule-images.txt, built by scripts/lab-host-image.sh molecule).
def molecule_image_key(line: str, host_image_id: str) -> str:
    """The label lab-host-image.sh gives an image: sha256 of its line and the host image's id, 16 hex digits."""
    return hashlib.sha256(f"{line}\n{host_image_id}\n".encode()).hexdigest()[:16]


def _versions_env(repo: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (repo / "scripts" / "versions.env").read_text(encoding="utf-8").splitlines()
             if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def molecule_images(repo: Path) -> dict[str, tuple[str, str]]:
    """Image -> (its molecule-images.txt line, the host image it is committed from), as lab-host-image.sh names them:
    NAME on Debian 12 ($HOST_IMAGE), trixie:NAME on Debian 13 ($HOST_IMAGE13)."""
    env = _versions_env(repo)
    out = {}
    for line in (repo / "scripts" / "molecule-images.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name = line.split()[0]
            if name.startswith("trixie:"):
                host, image = env["HOST_IMAGE13"], f"debian13-{name.split(':', 1)[1]}"
            else:
                host, image = env["HOST_IMAGE"], f"debian12-{name}"
            out[f"{host.rsplit('/', 1)[0]}/{image}:current"] = (line, host)
    return out


def outdated_images(scenario: Scenario) -> list[str]:
    """Platform images of molecule-images.txt that are missing or were built from another line or host image."""
    wanted = molecule_images(scenario.repo)
    problems = []
    for image in platform_images(scenario):
        if image not in wanted:
            continue
        line, host = wanted[image]
        host_id = image_ids([host])[host]
        proc = subprocess.run(["podman", "image", "inspect", "--format", '{{index .Labels "kube-accel.image-key"}}',
                               image], capture_output=True, text=True, check=False)
        if host_id is None or proc.returncode != 0 or proc.stdout.strip() != molecule_image_key(line, host_id):
            problems.append(image)
    return problems
