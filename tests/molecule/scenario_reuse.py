"""Reuse of a Molecule scenario's last green run on this machine, keyed by the scenario's whole input.

A scenario may be reported green without running only when everything that decides its outcome is the same as in
a green run recorded under ~/.cache/kube-accel/molecule/ (KA_CACHE overrides the root):

- files: the scenario directory; for a role's scenario the role (without its other scenarios); every role, module,
  filter or connection plugin named in those files, and every repository path they name, followed until nothing new
  turns up (a module_utils file when a Python file in the set imports it, sub-packages and relative imports
  resolved: what a module imports, and what that imports, not every module_utils file); ansible.cfg, the
  collection's galaxy.yml and meta/runtime.yml, and this harness;
- the image id of every platform image, the podman version and the machine's kernel release;
- every installed Python distribution of the venv (Molecule, ansible-core, the collections, Jinja2 ...) and any
  collection outside it, and the ANSIBLE_* / MOLECULE_* / KA_* environment;
- the Debian packages: the green run records, host by host, the packages the scenario changed on it (dpkg's list
  on the host against the image's own list, read once per image id: every package added, upgraded, downgraded or
  removed), which package indices apt had (base URI, meta key, SHA-256 of the file) and, per index, every version
  that index offered for each of those package names (empty when it offered none). Before a reuse, each
  repository's InRelease is fetched: an index it lists with the same SHA-256 is as it was. For one it lists with
  another SHA-256, the new index is downloaded (its .xz or .gz, by hash where the repository offers that), checked
  against the SHA-256 InRelease lists for it and for the uncompressed index, and parsed; any version added or removed
  for one of the recorded names means no reuse, the reason naming the index and the package ("bookworm-security
  main: linux-headers-6.1.0-50-amd64 versions changed"). A repository on the host itself (file:) is built by the
  scenario from its own files and is not fetched.

  Why this is sound: apt's choice for the packages the run changed is a function of the image (its id is in the key),
  the sources, pins and apt settings the scenario writes (files in the key), and what the indices offer. A Debian
  archive never publishes two different packages under one name and version, so the same versions offered for a
  name carry the same dependencies, conflicts and files; with every version of every changed package offered as
  before, apt makes the same choice, and a new version of one of them, or one withdrawn, is seen. The rest of an
  index, which is what bookworm-security and bookworm-updates change almost daily, is not part of the key.

  What it does not see: a change to a package the run neither installed nor removed that alters the outcome
  without changing the version set of any package it did: a new package that now satisfies an alternative or a
  virtual dependency first, a Recommends target newly offered, or a package a scenario only asks apt about (dkms
  reads `apt-cache depends linux-headers-amd64` and installs the headers it names; site, which installs no driver,
  reads `apt-cache madison` / `policy` for the driver packages). That is accepted: Debian's stable suites publish new
  versions of existing packages, and very rarely a new name that takes over a dependency; the scenarios install by
  name without Recommends; the kernel metapackage moves only with a new upload of linux, which also brings new
  versions of linux-kbuild-6.1 and linux-compiler-gcc-12-x86, which the dkms run installed with the headers; and
  site's checks hold for any candidate of the pinned branch. If that ever is not enough, the names a scenario
  queries can be recorded beside the changed ones (the check compares whatever names a record holds).

Anything missing or unreadable (an image not built, a repository not reachable, an index that does not match its
InRelease, a record without package data) means no reuse.
KA_MOLECULE_REUSE=0 runs every scenario; a fresh machine has no records and runs every scenario.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import http.client
import io
import json
import lzma
import os
import platform
import re
import subprocess
import sys
import time
import tokenize
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).resolve().parent
# Bump when the key's definition changes: older records are then never matched.
KEY_VERSION = 2
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
    # An action plugin runs on the controller under its module's name; modules name the doc fragments they extend.
    for kind in ("modules", "action", "connection", "doc_fragments"):
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
    """The text whose names and paths count: YAML without its comments (keys and values), Python without its comments
    and docstrings (prose: a docstring naming plugins/module_utils is no import of all of them), other files as they
    are."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""
    if path.suffix == ".py":
        return _python_code(text)
    if path.suffix in (".yml", ".yaml"):
        try:
            return "\n".join(_strings(list(yaml.safe_load_all(text))))
        except yaml.YAMLError:
            return text
    return text


def _python_code(text: str) -> str:
    """Python source without comments and docstrings, as tokens; the text itself when it does not parse."""
    try:
        docstrings = {(n.body[0].lineno, n.body[0].col_offset) for n in ast.walk(ast.parse(text))
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
                      and isinstance(n.body[0].value.value, str)}
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return text
    return " ".join(t.string for t in tokens
                    if t.type != tokenize.COMMENT and not (t.type == tokenize.STRING and t.start in docstrings))


# Collection files a plugin reads at run time (through Path(__file__); tests/unit/test_molecule_reuse.py finds every
# plugin that does and fails when one is missing here).
PLUGIN_READS = {"plugins/action/accel_plan.py": ("roles/*/defaults/main.yml", "roles/*/meta/argument_specs.yml")}
# Prose keys of argument specs and galaxy/meta files: Ansible shows them, it never acts on them.
PROSE_KEYS = {"description", "short_description", "notes", "author"}


def _strings(node) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() if k not in PROSE_KEYS for s in (*_strings(k), *_strings(v))]
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
    # module_utils by what a Python file really imports (module_utils_imports): a module brings what it imports and
    # those files what they import, and nothing else (a name in YAML or prose imports nothing).
    utils_root = repo / "plugins" / "module_utils"
    env_dirs = {"MOLECULE_PROJECT_DIRECTORY": scenario.cwd, "MOLECULE_SCENARIO_DIRECTORY": scenario.directory}
    scanned: set[Path] = set()
    while pending := sorted(files - scanned):
        for path in pending:
            scanned.add(path)
            text = _text(path) if path.suffix in SCANNED else ""
            if not text:
                continue
            words = set(WORD.findall(text))
            # Python cannot include a role: a role's name in a plugin is a setting or a message.
            for role in roles & words if path.suffix != ".py" else ():
                files |= _role_files(universe, repo, role)
            for name in words & plugins.keys():
                files |= plugins[name]
            if path.suffix == ".py":
                files |= {p for p in module_utils_imports(path, utils_root) if p in universe}
            for pattern in PLUGIN_READS.get(path.relative_to(repo).as_posix(), ()):
                files |= {p for p in universe if p.relative_to(repo).match(pattern)}
            # A plugin runs from the installed collection: a repository path in its strings is a message, not a read
            # (what a plugin does read from the collection is in PLUGIN_READS).
            if path.suffix == ".py" and path.parent.parent == repo / "plugins":
                continue
            for token in PATHISH.findall(text):
                for target in _resolve(token, path, scenario.cwd, repo, env_dirs):
                    files |= _files_under(universe, target)
    return sorted(files | fixed)


def _utils_module(parts: list[str], utils_root: Path) -> list[Path]:
    """The module_utils files a dotted name below module_utils means: each package's __init__.py on the way (Ansible
    ships them in the module's payload) and the module itself (``a/b.py``, or the package ``a/b/__init__.py``)."""
    found, here = [], utils_root
    for part in parts:
        here = here / part
        if (here / "__init__.py").is_file():
            found.append(here / "__init__.py")
        elif here.with_suffix(".py").is_file():
            found.append(here.with_suffix(".py"))
            break
        else:
            break
    return found


# Functions that import the module a string names: importlib.import_module(name, package) and __import__(name,
# globals, locals, fromlist, level), called by that name or as an attribute (importlib.import_module).
IMPORT_CALLS = ("import_module", "__import__")


def is_import_call(node: ast.AST) -> bool:
    """Whether node is a call of import_module or __import__."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "") \
        in IMPORT_CALLS


def import_call_target(node: ast.Call) -> tuple[str, int, list[str]] | None:
    """What an import_module / __import__ call imports, as an ``ImportFrom`` has it: (module, level, names); None when
    the name, or the package, fromlist or level the call passes, is not a constant. ``import_module(".client",
    package="<...>.helm")`` is the absolute ``<...>.helm.client``; ``__import__`` with a level is relative to the file
    (its globals)."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    params = ("name", "package") if name == "import_module" else ("name", "globals", "locals", "fromlist", "level")
    if len(node.args) > len(params) or any(k.arg is None for k in node.keywords):
        return None
    args = dict(zip(params, node.args, strict=False))  # the parameters passed by position, the rest by keyword
    args.update((k.arg, k.value) for k in node.keywords if k.arg in params)

    def constant(key, kinds, default):
        value = args.get(key)
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return default
        if isinstance(value, ast.Constant) and isinstance(value.value, kinds):
            return value.value
        if isinstance(value, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                             for e in value.elts):
            return [e.value for e in value.elts] if kinds is list else None
        return None

    module = constant("name", str, None)
    if module is None:
        return None
    if name == "import_module":
        level = len(module) - len(module.lstrip("."))
        if not level:
            return module, 0, []
        package = constant("package", str, None)
        if not package:
            return None
        base = package.split(".")
        if level - 1 >= len(base):
            return None
        base = base[:len(base) - (level - 1)]
        return ".".join([*base, *([module[level:]] if module[level:] else [])]), 0, []
    fromlist, level = constant("fromlist", list, []), constant("level", int, 0)
    if fromlist is None or level is None:
        return None
    return module, level, list(fromlist)


def module_utils_imports(path: Path, utils_root: Path) -> set[Path]:
    """The files below ``utils_root`` (plugins/module_utils) a Python file imports directly: absolute imports through
    any ``...module_utils.`` prefix (``ansible_collections.<ns>.<name>.plugins.module_utils.plan.pools``, the legacy
    ``ansible.module_utils.x``), ``from ...module_utils.plan import pools`` (a module or a name of the package),
    relative imports (``from ..plan import pools`` inside module_utils, ``from ..module_utils.x import y``), and
    ``importlib.import_module`` / ``__import__`` calls whose arguments are constants (``import_call_target``)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return set()
    found: set[Path] = set()

    def below_utils(dotted: str) -> list[str] | None:
        parts = dotted.split(".") if dotted else []
        return parts[parts.index("module_utils") + 1:] if "module_utils" in parts else None

    def from_import(module: str, level: int, names: list[str]) -> None:
        if level:
            base = path.parent
            for _ in range(level - 1):
                base = base.parent
            target = base.joinpath(*module.split(".")) if module else base
            if target != utils_root and utils_root not in target.parents:
                return
            parts = list(target.relative_to(utils_root).parts)
        else:
            parts = below_utils(module)
            if parts is None:
                return
        found.update(_utils_module(parts, utils_root))
        # from <package> import <name>: the name is a module of the package, or something the package defines.
        for name in names:
            found.update(_utils_module([*parts, name], utils_root)[len(parts):])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = below_utils(alias.name)
                if parts:
                    found.update(_utils_module(parts, utils_root))
        elif isinstance(node, ast.ImportFrom):
            from_import(node.module or "", node.level, [alias.name for alias in node.names])
        elif is_import_call(node) and (target := import_call_target(node)):
            from_import(*target)
    return found


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


def platform_hosts(scenario: Scenario) -> dict[str, str]:
    """Host name -> its image, with ${VAR} / ${VAR:-default} expanded as Molecule does."""
    data = yaml.safe_load((scenario.directory / "molecule.yml").read_text(encoding="utf-8")) or {}
    return {str(p["name"]): _interpolate(str(p.get("image", ""))) for p in data.get("platforms") or []}


def platform_images(scenario: Scenario) -> list[str]:
    """Images of the scenario's platforms."""
    return sorted(set(platform_hosts(scenario).values()))


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


# Package versions: recorded from the hosts after a green run, checked against the repositories before a reuse.
INDEX_FORMAT = "$(METAKEY)\t$(BASE_URI)\t$(FILENAME)"
# Every package dpkg knows, with its state: removed packages keep a line (config-files) and do not count.
DPKG_FORMAT = "${Package}:${Architecture}\t${Version}\t${db:Status-Status}\n"
ABSENT = {"not-installed", "config-files", ""}
# What a failed download or a bad file raises.
FETCH_ERRORS = (OSError, ValueError, http.client.HTTPException)
# Compressed variants of an index, in the order they are fetched (InRelease lists each with its SHA-256).
COMPRESSED = ((".xz", lzma.decompress), (".gz", gzip.decompress))


def parse_installed(text: str) -> dict[str, str]:
    """dpkg-query output in DPKG_FORMAT -> {"name:arch": version} of the packages present (not removed)."""
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2] not in ABSENT:
            found[parts[0]] = parts[1]
    return found


def changed_packages(image: dict[str, str], host: dict[str, str]) -> dict[str, str | None]:
    """What the scenario did to the image's packages: {"name:arch": version on the host}, None for one it removed."""
    changed: dict[str, str | None] = {p: v for p, v in host.items() if image.get(p) != v}
    changed.update({p: None for p in image if p not in host})
    return dict(sorted(changed.items()))


def package_names(changed: dict[str, str | None]) -> list[str]:
    """The package names (without architecture) an index is searched for."""
    return sorted({p.split(":", 1)[0] for p in changed})


def parse_packages(text: str, names=None) -> dict[str, set[str]]:
    """A Packages index (stanzas; or just its Package: and Version: lines) -> {name: the versions it offers}; only
    the given names when names is set. A name may have several stanzas (several versions)."""
    offers: dict[str, set[str]] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("Package:"):
            name = line[8:].strip()
            if names is not None and name not in names:
                name = None
        elif line.startswith("Version:"):
            if name is not None:
                offers.setdefault(name, set()).add(line[8:].strip())
        elif not line.strip():
            name = None
    return offers


def _image_packages(image_id: str) -> dict[str, str]:
    """The packages of an image (by id), read once with `podman run` and kept under the cache by the image's id."""
    path = cache_root() / "images" / (re.sub(r"[^A-Za-z0-9]+", "_", image_id) + ".json")
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    proc = subprocess.run(["podman", "run", "--rm", "--network", "none", "--entrypoint", "dpkg-query", image_id,
                           "-W", "-f", DPKG_FORMAT], capture_output=True, text=True, check=True)
    packages = parse_installed(proc.stdout)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(packages, indent=0, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return packages


def host_indices(container: str) -> list[dict]:
    """The Packages indices apt has on a host: where from (base_uri, meta_key), the SHA-256 of the downloaded one
    ("missing" when apt never downloaded it) and its file under /var/lib/apt/lists (uncompressed there)."""
    script = (
        "command -v apt-get >/dev/null || exit 0; "
        f"apt-get indextargets --format '{INDEX_FORMAT}' 'Identifier: Packages' | while IFS=\"$(printf '\\t')\" "
        "read -r key base file; do "
        "if [ -e \"$file\" ]; then sum=$(sha256sum < \"$file\" | cut -d' ' -f1); else sum=missing; fi; "
        "printf '%s\\t%s\\t%s\\t%s\\n' \"$key\" \"$base\" \"$sum\" \"$file\"; done"
    )
    proc = subprocess.run(["podman", "exec", container, "sh", "-c", script],
                          capture_output=True, text=True, check=True)
    rows = []
    for line in proc.stdout.splitlines():
        key, base, sha, file = line.split("\t")
        rows.append({"meta_key": key, "base_uri": base, "sha256": sha, "file": file})
    return rows


def host_state(container: str, image_id: str) -> dict:
    """What a green run leaves to check before a reuse, for one host: the packages the scenario added, upgraded,
    downgraded or removed against its image, and per index apt had, the versions it offered for those names."""
    proc = subprocess.run(["podman", "exec", container, "sh", "-c",
                           f"command -v dpkg-query >/dev/null || exit 0; dpkg-query -W -f '{DPKG_FORMAT}'"],
                          capture_output=True, text=True, check=True)
    changed = changed_packages(_image_packages(image_id), parse_installed(proc.stdout))
    names = set(package_names(changed))
    indices = host_indices(container)
    files = [row["file"] for row in indices if row["sha256"] != "missing"]
    lists: dict[str, dict[str, set[str]]] = {}
    if files and names:
        # Only the Package: and Version: lines leave the host (a 50 MB index is 2 MB of them).
        script = ("for f in \"$@\"; do printf '@@%s\\n' \"$f\"; grep -E '^(Package|Version):' \"$f\" || "
                  "[ $? -eq 1 ] || exit 2; done")
        out = subprocess.run(["podman", "exec", container, "sh", "-c", script, "_", *files],
                             capture_output=True, text=True, check=True).stdout
        for chunk in out.split("@@")[1:]:
            file, _, body = chunk.partition("\n")
            lists[file] = parse_packages(body, names)
    for row in indices:
        if row["sha256"] != "missing":
            offered = lists.get(row["file"], {})
            row["offers"] = {name: sorted(offered.get(name, ())) for name in sorted(names)}
    return {"image": image_id, "packages": changed, "indices": indices}


def hosts_state(scenario: Scenario, images: dict[str, str | None]) -> dict[str, dict]:
    """host_state of each of the scenario's hosts (images: image -> id, as in inputs()); nothing when an image has no
    id (such inputs have no key and are never recorded)."""
    if any(v is None for v in images.values()):
        return {}
    return {name: host_state(name, str(images[image])) for name, image in platform_hosts(scenario).items()}


@dataclass(frozen=True)
class Release:
    """A repository's InRelease: SHA-256 per file it lists, and whether files can be fetched by their hash."""
    base_uri: str
    hashes: dict[str, str]
    by_hash: bool = False


def fetch_release(base_uri: str, timeout: float = 20) -> Release:
    """Read a repository's InRelease (without verifying its signature: a comparison, not a trust)."""
    with urllib.request.urlopen(base_uri.rstrip("/") + "/InRelease", timeout=timeout) as resp:  # noqa: S310
        text = resp.read().decode("utf-8", errors="replace")
    hashes, section, by_hash = {}, None, False
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section, _, value = line.partition(":")
            by_hash = by_hash or (section == "Acquire-By-Hash" and value.strip().lower() == "yes")
            continue
        if section == "SHA256":
            parts = line.split()
            if len(parts) == 3:
                hashes[parts[2]] = parts[0]
    if not hashes:
        raise ValueError(f"{base_uri}InRelease lists no SHA256 files")
    return Release(base_uri, hashes, by_hash)


def fetch_index(release: Release, meta_key: str, names, timeout: float = 120) -> dict[str, set[str]]:
    """The versions an index now offers for names: a compressed variant InRelease lists, fetched (by hash where the
    repository offers that, so a repository updated meanwhile cannot mix old and new), its SHA-256 checked against
    InRelease, decompressed, its SHA-256 checked again against the one InRelease lists for the index, parsed."""
    listed = [(meta_key + ext, decompress) for ext, decompress in COMPRESSED if meta_key + ext in release.hashes]
    if not listed:
        raise ValueError(f"InRelease lists no {' or '.join(s for s, _ in COMPRESSED)} of {meta_key}")
    path, decompress = listed[0]
    want = release.hashes[path]
    where = f"{path.rsplit('/', 1)[0]}/by-hash/SHA256/{want}" if release.by_hash and "/" in path else path
    with urllib.request.urlopen(release.base_uri.rstrip("/") + "/" + where, timeout=timeout) as resp:  # noqa: S310
        data = resp.read()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise ValueError(f"{path} has SHA-256 {got[:12]}, InRelease lists {want[:12]}")
    try:
        raw = decompress(data)
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    if meta_key in release.hashes and hashlib.sha256(raw).hexdigest() != release.hashes[meta_key]:
        raise ValueError(f"{path} decompressed is not the {meta_key} InRelease lists")
    return parse_packages(raw.decode("utf-8", errors="replace"), set(names))


def index_label(base_uri: str, meta_key: str) -> str:
    """http://deb.debian.org/debian-security/dists/bookworm-security/ + main/binary-amd64/Packages ->
    "bookworm-security main"; a flat repository keeps its address."""
    match = re.search(r"/dists/([^/]+)/?$", base_uri)
    if match and "/" in meta_key:
        return f"{match.group(1)} {meta_key.split('/', 1)[0]}"
    return base_uri.rstrip("/") + "/" + meta_key


def _versions(versions) -> str:
    return ", ".join(sorted(versions)) or "none"


def stale_indices(hosts: dict[str, dict], release=None, index=None) -> list[str]:
    """Why the recorded hosts' packages could resolve differently now (empty when they cannot): for each index a host
    resolved against whose InRelease lists another SHA-256, any version added or removed there for a package the
    run changed; or an index that cannot be fetched, verified or parsed."""
    release = release or fetch_release
    index = index or fetch_index
    stale: list[str] = []
    releases: dict[str, Release | Exception] = {}
    indices: dict[tuple[str, str, str], dict[str, set[str]] | Exception] = {}
    for host, state in sorted(hosts.items()):
        if not isinstance(state, dict) or "packages" not in state or "indices" not in state:
            stale.append(f"{host}: no package data recorded")
            continue
        for row in state["indices"]:
            if row["sha256"] == "missing":
                # Configured but never downloaded in the green run: an index apt did not use then.
                continue
            if row["base_uri"].startswith("file:"):
                # A repository on the host itself, built by the scenario from files the key already holds.
                continue
            base, meta = row["base_uri"], row["meta_key"]
            label = index_label(base, meta)
            if base not in releases:
                try:
                    releases[base] = release(base)
                except FETCH_ERRORS as exc:
                    releases[base] = exc
            rel = releases[base]
            if isinstance(rel, Exception):
                stale.append(f"{host}: {label}: InRelease unreachable: {rel}")
                continue
            now = rel.hashes.get(meta)
            if now == row["sha256"]:
                continue
            if now is None:
                stale.append(f"{host}: {label}: no longer listed in InRelease")
                continue
            if not isinstance(row.get("offers"), dict):
                stale.append(f"{host}: {label}: changed, and no versions recorded")
                continue
            recorded = row["offers"]
            cache_key = (base, meta, now)
            # Every name any host needs from this index, so one download serves all hosts.
            if cache_key not in indices:
                wanted = {n for st in hosts.values() if isinstance(st, dict)
                          for r in st.get("indices", []) if (r["base_uri"], r["meta_key"]) == (base, meta)
                          for n in r.get("offers") or {}}
                try:
                    indices[cache_key] = index(rel, meta, wanted)
                except FETCH_ERRORS as exc:
                    indices[cache_key] = exc
            offered = indices[cache_key]
            if isinstance(offered, Exception):
                stale.append(f"{host}: {label}: changed and cannot be read: {offered}")
                continue
            for name, versions in sorted(recorded.items()):
                current = offered.get(name, set())
                if set(versions) != current:
                    stale.append(f"{host}: {label}: {name} versions changed ({_versions(versions)} -> "
                                 f"{_versions(current)})")
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
    if not isinstance(record.get("hosts"), dict):
        return None, "record has no package data (an older format)"
    stale = stale_indices(record["hosts"])
    if stale:
        return None, "package indices changed: " + "; ".join(stale[:4])
    return record, "unchanged"


def write_record(scenario: Scenario, data: dict, hosts: dict[str, dict], seconds: float,
                 stages: dict[str, float]) -> Path | None:
    """Record a green run; hosts: host name -> host_state() of it, read before the hosts were destroyed."""
    key = key_of(data)
    if key is None:
        return None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=scenario.repo, capture_output=True,
                            text=True, check=False).stdout.strip()
    record = {
        "scenario": scenario.id, "key": key, "inputs": data, "hosts": hosts, "seconds": round(seconds, 1),
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
