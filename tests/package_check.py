"""What ``make package`` checks in the built wheel and sdist, and in the installed wheel.

``python tests/package_check.py metadata DIST`` reads the one wheel and the one sdist in
``DIST`` and checks what this project promises about them, beyond what ``twine check`` (run
before it) holds PyPI's rules to:

* the version is the tree's (``src/aiokpl/_version.py``) and above 0.2.0, the release of
  another project under the same name on the public index, in a 1.x line (see
  ``docs/contributing.md``, "Versions and releases");
* the runtime dependencies are exactly SPEC §1's, every optional one behind an extra, and no
  extra is a development toolchain (``dev``, ``test``, …: those are dependency groups);
* Python-version classifiers cover ``Requires-Python``; every URL of the metadata (project
  URLs, home page, download) is one the project can vouch for (:data:`VOUCHED_URLS`, none
  today): an address invented for a repository that does not exist misleads every reader;
* the wheel holds the package with ``py.typed``, the licence and the ``aiokpl`` command, the
  compiled C decoder (unless ``AIOKPL_NO_EXTENSIONS`` is set: ``setup.py`` then leaves it out),
  and nothing of ``tests/`` or ``bench/``; the sdist holds what a build from it needs (the C
  decoder's source and ``setup.py`` among it).

``python -I tests/package_check.py installed DIST``, run by the interpreter of a new
virtualenv into which only the wheel was installed, from outside the source tree, imports the
package and its public modules from that virtualenv and runs ``aiokpl --help`` and each
subcommand's ``--help`` through the installed console script.

The checks are plain functions returning a list of problems (empty when all is well), so
``tests/test_package_check.py`` can run them on small made-up distributions.
"""

from __future__ import annotations

import email.message
import email.parser
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ORIGINAL_RELEASE = (0, 2, 0)
"""The newest release of the other project named ``aiokpl`` on the public index."""

RUNTIME_DEPENDENCIES = frozenset({"anyio", "aiobotocore", "sortedcontainers"})
"""SPEC §1: the only unconditional dependencies."""

DEVELOPMENT_EXTRAS = frozenset({"dev", "develop", "development", "test", "tests", "lint", "docs"})
"""Extra names that would publish a development toolchain (they belong in dependency groups)."""

VOUCHED_URLS: tuple[str, ...] = ()
"""Addresses the project can vouch for (its repository, site, tracker): the metadata's URLs must
be these or under them. None today: the project has no public address yet, so its metadata
names none (``github.com/aiokpl/aiokpl``, once named everywhere, does not exist). Add one here
and in ``pyproject.toml``'s ``[project.urls]`` together."""

SUBCOMMANDS = ("demo", "local", "put", "tail", "coordinate", "spool")


def tree_version(root: Path = ROOT) -> str:
    """The version written in the source tree."""
    text = (root / "src" / "aiokpl" / "_version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, flags=re.M)
    if found is None:
        raise ValueError("no __version__ in src/aiokpl/_version.py")
    return found.group(1)


def vouched(url: str, addresses: tuple[str, ...] = VOUCHED_URLS) -> bool:
    """Whether ``url`` is one of ``addresses`` or under one of them."""
    return any(url == a or url.startswith(f"{a.rstrip('/')}/") for a in addresses)


def _release(version: str) -> tuple[int, ...]:
    found = re.match(r"(\d+(?:\.\d+)*)", version)
    if found is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in found.group(1).split("."))


def _parse(text: str) -> email.message.Message:
    return email.parser.Parser().parsestr(text)


def _requirement_name(requirement: str) -> str:
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return found.group(1).lower().replace("_", "-") if found else requirement


def _minimum_python(requires_python: str) -> tuple[int, int] | None:
    found = re.search(r">=\s*3\.(\d+)", requires_python)
    return (3, int(found.group(1))) if found else None


def metadata_problems(
    metadata: email.message.Message, *, version: str, addresses: tuple[str, ...] = VOUCHED_URLS
) -> list[str]:
    """What is wrong with one distribution's core metadata (``METADATA`` or ``PKG-INFO``)."""
    problems: list[str] = []
    if metadata.get("Name") != "aiokpl":
        problems.append(f"Name is {metadata.get('Name')!r}, not 'aiokpl'")
    found_version = metadata.get("Version", "")
    if found_version != version:
        problems.append(f"Version is {found_version!r}; the tree says {version!r}")
    elif _release(found_version) <= ORIGINAL_RELEASE or _release(found_version)[0] < 1:
        problems.append(
            f"Version {found_version} is not in a 1.x line above the original "
            f"{'.'.join(map(str, ORIGINAL_RELEASE))}"
        )

    requires = metadata.get_all("Requires-Dist") or []
    unconditional = {_requirement_name(r) for r in requires if ";" not in r}
    if unconditional != RUNTIME_DEPENDENCIES:
        problems.append(
            f"unconditional dependencies are {sorted(unconditional)}, not SPEC §1's "
            f"{sorted(RUNTIME_DEPENDENCIES)}"
        )
    for requirement in requires:
        if ";" in requirement and "extra ==" not in requirement:
            problems.append(f"a conditional dependency outside any extra: {requirement!r}")
    extras = set(metadata.get_all("Provides-Extra") or [])
    for extra in sorted(extras & DEVELOPMENT_EXTRAS):
        problems.append(f"the extra {extra!r} publishes development tools (use a dependency group)")
    for extra in ("trio", "local", "demo"):
        if extra not in extras:
            problems.append(f"the extra {extra!r} is missing")

    classifiers = metadata.get_all("Classifier") or []
    minimum = _minimum_python(metadata.get("Requires-Python", ""))
    if minimum is None:
        problems.append(f"Requires-Python {metadata.get('Requires-Python')!r} has no 3.x minimum")
    else:
        versions = {
            int(m.group(1))
            for c in classifiers
            if (m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))
        }
        if minimum[1] not in versions:
            problems.append(f"no classifier for Python 3.{minimum[1]}, the oldest supported")
        if versions and sorted(versions) != list(range(minimum[1], max(versions) + 1)):
            problems.append(f"the Python classifiers skip a version: 3.{sorted(versions)}")

    urls = [
        (label.strip(), url.strip())
        for entry in metadata.get_all("Project-URL") or []
        for label, _, url in [entry.partition(",")]
    ]
    urls += [
        (field, metadata[field]) for field in ("Home-page", "Download-URL") if field in metadata
    ]
    for label, url in urls:
        if not vouched(url, addresses):
            problems.append(
                f"the {label} URL {url} is not an address the project vouches for (VOUCHED_URLS)"
            )

    if metadata.get("Description-Content-Type") != "text/markdown":
        problems.append("the description is not declared as Markdown")
    description = metadata.get_payload()
    if not (isinstance(description, str) and description.lstrip().startswith("# aiokpl")):
        problems.append("the description is not the README")
    if metadata.get("License-Expression") != "Apache-2.0":
        problems.append(f"License-Expression is {metadata.get('License-Expression')!r}")
    return problems


def wheel_problems(path: Path, *, version: str) -> list[str]:
    """What is wrong with a built wheel: its metadata and its files."""
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        dist_info = f"aiokpl-{version}.dist-info"
        metadata_name = f"{dist_info}/METADATA"
        if metadata_name not in names:
            return [f"{path.name}: no {metadata_name}"]
        metadata = _parse(wheel.read(metadata_name).decode())
        entry_points = (
            wheel.read(f"{dist_info}/entry_points.txt").decode()
            if f"{dist_info}/entry_points.txt" in names
            else ""
        )
    problems = [f"{path.name}: {p}" for p in metadata_problems(metadata, version=version)]
    for needed in (
        "aiokpl/__init__.py",
        "aiokpl/py.typed",
        "aiokpl/_cli/__init__.py",
        f"{dist_info}/licenses/LICENSE",
    ):
        if needed not in names:
            problems.append(f"{path.name}: {needed} is missing")
    if not os.environ.get("AIOKPL_NO_EXTENSIONS") and not any(
        re.fullmatch(r"aiokpl/_core/_cdecoder\.[^/]+\.(so|pyd)", name) for name in names
    ):
        problems.append(f"{path.name}: the C decoder (aiokpl/_core/_cdecoder) was not built")
    stray = sorted(n for n in names if not n.startswith(("aiokpl/", f"{dist_info}/")))
    if stray:
        problems.append(f"{path.name}: files outside the package: {', '.join(stray[:5])}")
    if not re.search(r"^aiokpl = aiokpl\._cli:main$", entry_points, flags=re.M):
        problems.append(f"{path.name}: no `aiokpl` console script")
    return problems


def sdist_problems(path: Path, *, version: str) -> list[str]:
    """What is wrong with a built sdist: its metadata and the files a build needs."""
    top = f"aiokpl-{version}"
    with tarfile.open(path) as sdist:
        names = set(sdist.getnames())
        member = f"{top}/PKG-INFO"
        if member not in names:
            return [f"{path.name}: no {member}"]
        extracted = sdist.extractfile(member)
        assert extracted is not None
        metadata = _parse(extracted.read().decode())
    problems = [f"{path.name}: {p}" for p in metadata_problems(metadata, version=version)]
    for needed in (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "src/aiokpl/__init__.py",
        "src/aiokpl/py.typed",
        "setup.py",
        "src/aiokpl/_core/_cdecoder.c",
        "src/aiokpl/_core/_cdecoder.pyi",
    ):
        if f"{top}/{needed}" not in names:
            problems.append(f"{path.name}: {needed} is missing")
    return problems


def distribution_problems(dist: Path, root: Path = ROOT) -> list[str]:
    """Check the one wheel and the one sdist in ``dist`` against the tree at ``root``."""
    version = tree_version(root)
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        found = [p.name for p in (*wheels, *sdists)]
        return [f"expected one wheel and one sdist in {dist}, found {found}"]
    return [
        *wheel_problems(wheels[0], version=version),
        *sdist_problems(sdists[0], version=version),
    ]


def installed_problems(dist: Path) -> list[str]:
    """Import the installed package and run its command line's help (see the module's text)."""
    import importlib

    problems: list[str] = []
    prefix = Path(sys.prefix).resolve()
    wheel_version = sorted(dist.glob("*.whl"))[0].name.split("-")[1]
    for name in (
        "aiokpl",
        "aiokpl.aggregation",
        "aiokpl.testing",
        "aiokpl.coordination",
        "aiokpl.tracing",
    ):
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            problems.append(f"import {name} failed: {type(exc).__name__}: {exc}")
            continue
        where = Path(module.__file__ or "").resolve()
        if prefix not in where.parents:
            problems.append(f"{name} was imported from {where}, not from the virtualenv {prefix}")
    decoder = sys.modules.get("aiokpl._core.decoder")
    if (
        decoder is not None
        and decoder.NATIVE is None
        and not os.environ.get("AIOKPL_NO_EXTENSIONS")
    ):
        problems.append("the installed package decodes in Python: its C decoder is missing")
    aiokpl = sys.modules.get("aiokpl")
    if aiokpl is not None and aiokpl.__version__ != wheel_version:
        problems.append(f"aiokpl.__version__ is {aiokpl.__version__}, the wheel {wheel_version}")
    script = Path(sys.executable).parent / "aiokpl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for argv in ([], *([command] for command in SUBCOMMANDS)):
        ran = subprocess.run(
            [str(script), *argv, "--help"], capture_output=True, text=True, env=env, check=False
        )
        if ran.returncode != 0 or "usage: aiokpl" not in ran.stdout:
            problems.append(
                f"`aiokpl {' '.join([*argv, '--help'])}` exited {ran.returncode}: "
                f"{(ran.stderr or ran.stdout)[-500:]}"
            )
        elif not argv:
            missing = [c for c in SUBCOMMANDS if c not in ran.stdout]
            if missing:
                problems.append(f"`aiokpl --help` does not list {missing}")
    return problems


def main(argv: list[str]) -> int:
    """``metadata DIST`` or ``installed DIST``; prints the problems, returns 1 if any."""
    if len(argv) != 2 or argv[0] not in ("metadata", "installed"):
        print("usage: package_check.py {metadata|installed} DIST", file=sys.stderr)
        return 2
    dist = Path(argv[1])
    problems = distribution_problems(dist) if argv[0] == "metadata" else installed_problems(dist)
    for problem in problems:
        print(f"package check: {problem}", file=sys.stderr)
    if not problems:
        print(f"package check ({argv[0]}): all good")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
