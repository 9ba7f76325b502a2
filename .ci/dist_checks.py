"""Checks of the built distributions, for .ci/check-dists (which says when each runs).

    dist_checks.py contents DIST_DIR PROJECT...    what each wheel and sdist holds
    dist_checks.py plugins PROJECT... < JSON       `pdc plugins --json` lists each backend plugin
    dist_checks.py demo < JSON                     `pdc demo --json` found every anomaly
    dist_checks.py readmes PYTHON PROJECT...       each index page's python examples run

A PROJECT is a directory with a pyproject.toml (``.`` is pdc-core). Every problem found
is printed; the exit status is 1 when there was any.
"""

from __future__ import annotations

import email
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from email.message import Message
from pathlib import Path, PurePosixPath
from typing import Any

problems: list[str] = []

# A markdown link or image target, or an HTML href/src, outside code.
LINK = re.compile(r"\]\(\s*<?([^)>\s]+)|(?:href|src)\s*=\s*[\"']([^\"']+)")
CODE = re.compile(r"```.*?```|`[^`]*`", re.DOTALL)
PYTHON_BLOCK = re.compile(
    r"(?:<!--\s*doctest:\s*skip\s*(?P<reason>[^>]*?)\s*-->\s*\n)?^```python[^\n]*\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def problem(message: str) -> None:
    problems.append(message)
    print(f"check-dists: {message}", file=sys.stderr)


def project_table(project: Path) -> dict[str, Any]:
    return tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))


def dist_name(project: Path) -> str:
    name: str = project_table(project)["project"]["name"]
    return name


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def import_packages(project: Path) -> set[str]:
    """The top-level packages of a project's wheel (from its hatch wheel target)."""
    table = project_table(project)
    packages = table["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return {PurePosixPath(package).name for package in packages}


def readme_text(project: Path) -> tuple[Path, str]:
    readme = project_table(project)["project"]["readme"]
    path = project / (readme if isinstance(readme, str) else readme["file"])
    return path, path.read_text(encoding="utf-8")


def check_links(where: str, text: str) -> None:
    for match in LINK.finditer(CODE.sub("", text)):
        target = match[1] or match[2]
        if not re.match(r"(https?://|mailto:)", target):
            problem(f"{where}: the link {target!r} is not absolute (it breaks on the index page)")


def check_metadata(project: Path, metadata: Message, versions: dict[str, str]) -> None:
    import trove_classifiers
    from packaging.requirements import Requirement

    name = metadata["Name"]
    if metadata["License-Expression"] != "MIT":
        problem(f"{name}: License-Expression is {metadata['License-Expression']!r}, not MIT")
    classifiers = metadata.get_all("Classifier") or []
    for classifier in classifiers:
        if classifier not in trove_classifiers.classifiers:
            problem(f"{name}: {classifier!r} is not a valid trove classifier")
    if not any(c.startswith("Development Status :: ") for c in classifiers):
        problem(f"{name}: no Development Status classifier")
    if not any(re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c) for c in classifiers):
        problem(f"{name}: no classifier naming a Python version")
    if metadata["Description-Content-Type"] != "text/markdown":
        problem(f"{name}: the description is not markdown")
    payload = metadata.get_payload(decode=True)
    assert isinstance(payload, bytes)
    description = payload.decode("utf-8")
    readme_path, readme = readme_text(project)
    if description.strip() != readme.strip():
        problem(f"{name}: the index page is not {readme_path}")
    check_links(f"{name} ({readme_path})", description)
    if not re.search(rf"pip install .*\b{re.escape(name)}\b", description[:1500]):
        problem(f"{name}: the index page does not open with how to install {name}")
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        version = versions.get(normalized(requirement.name))
        if version is not None and version not in requirement.specifier:
            problem(f"{name}: requires {requirement}, but this build is {version}")


def contents(dist_dir: Path, projects: list[Path]) -> None:
    names = {project: dist_name(project) for project in projects}
    packages = {project: import_packages(project) for project in projects}
    wheels: dict[Path, Path] = {}
    for project, name in names.items():
        found = sorted(dist_dir.glob(f"{normalized(name)}-*.whl"))
        if len(found) != 1:
            problem(f"{name}: expected one wheel in {dist_dir}, found {found}")
        else:
            wheels[project] = found[0]
    versions = {normalized(names[p]): w.name.split("-")[1] for p, w in wheels.items()}

    for project, wheel in wheels.items():
        name = names[project]
        others = set().union(*(packages[p] for p in projects if p != project))
        with zipfile.ZipFile(wheel) as archive:
            members = archive.namelist()
            dist_info = f"{normalized(name)}-{versions[normalized(name)]}.dist-info"
            metadata = email.message_from_bytes(archive.read(f"{dist_info}/METADATA"))
        if f"{dist_info}/licenses/LICENSE" not in members:
            problem(f"{wheel.name}: no LICENSE")
        tops = {member.split("/")[0] for member in members}
        if tops != packages[project] | {dist_info}:
            problem(f"{wheel.name}: top-level entries {sorted(tops)}")
        if tops & others:
            problem(f"{wheel.name}: holds packages of other distributions: {tops & others}")
        check_metadata(project, metadata, versions)

        version = versions[normalized(name)]
        sdist = dist_dir / f"{normalized(name)}-{version}.tar.gz"
        if not sdist.exists():
            problem(f"{name}: no sdist {sdist.name}")
            continue
        with tarfile.open(sdist) as archive:
            paths = [PurePosixPath(m.name) for m in archive.getmembers() if m.isfile()]
        top = f"{normalized(name)}-{version}"
        inner = [path.relative_to(top) for path in paths if path.parts[0] == top]
        if len(inner) != len(paths):
            problem(f"{sdist.name}: files outside {top}/")
        for required in ("LICENSE", "pyproject.toml", "PKG-INFO"):
            if PurePosixPath(required) not in inner:
                problem(f"{sdist.name}: no {required}")
        if not any(set(path.parts) & packages[project] for path in inner):
            problem(f"{sdist.name}: does not hold its own package {packages[project]}")
        foreign = [
            str(path)
            for path in inner
            if set(path.parts) & others
            or (project == Path(".") and path.parts[0] in {"plugins", "examples"})
        ]
        if foreign:
            problem(f"{sdist.name}: holds files of other distributions: {foreign[:5]}")
        print(f"check-dists: {wheel.name} and {sdist.name}: {len(members)} + {len(inner)} files")


def plugins(projects: list[Path]) -> None:
    listed = {entry["distribution"]: entry for entry in json.load(sys.stdin)}
    for project in projects:
        name = dist_name(project)
        if "pdc" not in project_table(project)["project"].get("entry-points", {}):
            continue  # not a backend plugin (no `pdc` entry point): pdc plugins omits it
        if name not in listed:
            problem(f"pdc plugins does not list {name} (it lists {sorted(listed)})")
        elif listed[name]["error"] is not None:
            problem(f"pdc plugins: {name} failed: {listed[name]['error']}")


def demo() -> None:
    summary = json.load(sys.stdin)
    if summary["messages_processed"] != summary["messages_requested"]:
        problem(f"pdc demo processed {summary['messages_processed']} frames of {summary}")
    if not summary["anomalies_match"]:
        problem(f"pdc demo: the anomalies found are not those planted: {summary}")
    if not summary["feature_stage"].startswith("persistent kernel"):
        problem(f"pdc demo ran no persistent kernel: {summary['feature_stage']!r}")


def readmes(python: str, projects: list[Path]) -> None:
    """Run each index page's python blocks (in order, one process per page)."""
    for project in projects:
        path, text = readme_text(project)
        code = "\n".join(
            f"# {path}:{text.count(chr(10), 0, m.start('code')) + 1}\n{m['code']}"
            for m in PYTHON_BLOCK.finditer(text)
            if m["reason"] is None
        )
        if not code:
            continue
        with tempfile.TemporaryDirectory() as cwd:
            done = subprocess.run(
                [python, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
            )
        if done.returncode != 0:
            problem(f"the python examples of {path} fail:\n{done.stdout}{done.stderr}")
        else:
            print(f"check-dists: the python examples of {path} ran")


def main(argv: list[str]) -> int:
    match argv:
        case ["contents", dist_dir, *projects] if projects:
            contents(Path(dist_dir), [Path(p) for p in projects])
        case ["plugins", *projects]:
            plugins([Path(p) for p in projects])
        case ["demo"]:
            demo()
        case ["readmes", python, *projects]:
            readmes(python, [Path(p) for p in projects])
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
