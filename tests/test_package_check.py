"""The packaging promises: the metadata in pyproject.toml, and the checks ``make package`` runs.

``make package`` builds the real wheel and sdist and runs ``tests/package_check.py`` on them;
here the same checks run on small made-up distributions, so that each can be seen to fail.
"""

from __future__ import annotations

import importlib.util
import io
import re
import sys
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import pytest

import aiokpl

if sys.version_info >= (3, 11):
    import tomllib
else:  # coverage[toml] brings tomli on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
VERSION = "1.0.0.dev0"
INVENTED = "https://github.com/aiokpl/aiokpl"  # once in the metadata; it does not exist


@pytest.fixture(scope="module")
def check() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "package_check", ROOT / "tests" / "package_check.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Metadata fields to replace (or, with None, drop), keyed by name with "_" for "-".
Changes = Mapping[str, str | list[str] | None]


def metadata_text(version: str = VERSION, changes: Changes | None = None) -> str:
    """Core metadata as setuptools writes it; ``changes`` replace (or, with None, drop) lines."""
    fields: dict[str, str | list[str]] = {
        "Metadata-Version": "2.4",
        "Name": "aiokpl",
        "Version": version,
        "License-Expression": "Apache-2.0",
        "License-File": "LICENSE",
        "Classifier": [
            "Programming Language :: Python :: 3.10",
            "Programming Language :: Python :: 3.11",
        ],
        "Requires-Python": ">=3.10",
        "Requires-Dist": [
            "aiobotocore>=3.9",
            "anyio<5,>=4.11",
            "sortedcontainers>=2.4",
            "moto[server]>=5.1; extra == 'demo'",
            "moto[server]>=5.1; extra == 'local'",
            "trio>=0.27; extra == 'trio'",
        ],
        "Provides-Extra": ["demo", "local", "trio"],
        "Description-Content-Type": "text/markdown",
    }
    for name, value in (changes or {}).items():
        key = name.replace("_", "-")
        if value is None:
            del fields[key]
        else:
            fields[key] = value
    lines = []
    for key, value in fields.items():
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"{key}: {item}")
    return "\n".join(lines) + "\n\n# aiokpl\n\nAn async-native producer.\n"


def make_wheel(
    directory: Path, metadata: str, *, version: str = VERSION, extra_files: tuple[str, ...] = ()
) -> Path:
    path = directory / f"aiokpl-{version}-cp311-cp311-linux_x86_64.whl"
    info = f"aiokpl-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        for name in (
            "aiokpl/__init__.py",
            "aiokpl/py.typed",
            "aiokpl/_cli/__init__.py",
            "aiokpl/_core/_cdecoder.cpython-311-x86_64-linux-gnu.so",
            *extra_files,
        ):
            wheel.writestr(name, "")
        wheel.writestr(f"{info}/METADATA", metadata)
        wheel.writestr(f"{info}/licenses/LICENSE", "Apache")
        wheel.writestr(f"{info}/entry_points.txt", "[console_scripts]\naiokpl = aiokpl._cli:main\n")
    return path


def make_sdist(directory: Path, metadata: str, *, version: str = VERSION) -> Path:
    path = directory / f"aiokpl-{version}.tar.gz"
    top = f"aiokpl-{version}"
    with tarfile.open(path, "w:gz") as sdist:
        files = {
            "PKG-INFO": metadata,
            "pyproject.toml": "",
            "README.md": "# aiokpl",
            "LICENSE": "Apache",
            "src/aiokpl/__init__.py": "",
            "src/aiokpl/py.typed": "",
            "setup.py": "",
            "src/aiokpl/_core/_cdecoder.c": "",
            "src/aiokpl/_core/_cdecoder.pyi": "",
        }
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{top}/{name}")
            member.size = len(data)
            sdist.addfile(member, io.BytesIO(data))
    return path


def problems(check: ModuleType, changes: Changes | None = None) -> list[str]:
    metadata = check._parse(metadata_text(changes=changes))
    result: list[str] = check.metadata_problems(metadata, version=VERSION)
    return result


def test_good_metadata_passes(check: ModuleType, tmp_path: Path) -> None:
    assert problems(check) == []
    make_wheel(tmp_path, metadata_text())
    make_sdist(tmp_path, metadata_text())
    assert check.wheel_problems(next(tmp_path.glob("*.whl")), version=VERSION) == []
    assert check.sdist_problems(next(tmp_path.glob("*.tar.gz")), version=VERSION) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"Version": "0.1.0.dev0"}, "the tree says"),
        ({"Name": "aiokpl2"}, "Name is"),
        ({"Provides_Extra": ["demo", "local", "trio", "dev"]}, "'dev' publishes development tools"),
        ({"Provides_Extra": ["trio"]}, "'demo' is missing"),
        ({"Provides_Extra": ["demo", "trio"]}, "'local' is missing"),
        (
            {"Requires_Dist": ["anyio", "aiobotocore", "sortedcontainers", "boto3"]},
            "not SPEC §1's",
        ),
        ({"Requires_Dist": ["anyio", "aiobotocore"]}, "not SPEC §1's"),
        ({"Project_URL": [f"Homepage, {INVENTED}"]}, f"the Homepage URL {INVENTED} is not"),
        ({"Project_URL": [f"Issues, {INVENTED}/issues"]}, "is not an address the project vouches"),
        ({"Home_page": INVENTED}, f"the Home-page URL {INVENTED} is not"),
        (
            {"Classifier": ["Programming Language :: Python :: 3.11"]},
            "no classifier for Python 3.10",
        ),
        (
            {
                "Classifier": [
                    "Programming Language :: Python :: 3.10",
                    "Programming Language :: Python :: 3.12",
                ]
            },
            "skip a version",
        ),
        ({"Description_Content_Type": None}, "not declared as Markdown"),
        ({"License_Expression": None}, "License-Expression"),
    ],
)
def test_each_broken_promise_is_reported(
    check: ModuleType, changes: dict[str, str | list[str] | None], expected: str
) -> None:
    found = problems(check, changes)
    assert any(expected in problem for problem in found), found


def test_a_version_at_or_below_the_original_is_refused(check: ModuleType) -> None:
    for version in ("0.2.0", "0.3.0"):
        metadata = check._parse(metadata_text(version))
        found = check.metadata_problems(metadata, version=version)
        assert any("1.x line above the original 0.2.0" in problem for problem in found), found
    for version in ("1.0.0", "1.0.0.dev0", "1.2.3"):
        metadata = check._parse(metadata_text(version))
        assert check.metadata_problems(metadata, version=version) == []


def test_wheel_contents_are_checked(check: ModuleType, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, metadata_text(), extra_files=("tests/test_x.py",))
    found = check.wheel_problems(wheel, version=VERSION)
    assert found == [f"{wheel.name}: files outside the package: tests/test_x.py"]


def test_a_wheel_without_the_c_decoder_is_reported(
    check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = make_wheel(tmp_path, metadata_text())
    with zipfile.ZipFile(wheel) as built, zipfile.ZipFile(tmp_path / "pure.whl", "w") as pure:
        for item in built.infolist():
            if "_cdecoder" not in item.filename:
                pure.writestr(item, built.read(item))
    monkeypatch.delenv("AIOKPL_NO_EXTENSIONS", raising=False)
    assert check.wheel_problems(tmp_path / "pure.whl", version=VERSION) == [
        "pure.whl: the C decoder (aiokpl/_core/_cdecoder) was not built"
    ]
    assert check.wheel_problems(wheel, version=VERSION) == []
    monkeypatch.setenv("AIOKPL_NO_EXTENSIONS", "1")  # a build told to leave it out
    assert check.wheel_problems(tmp_path / "pure.whl", version=VERSION) == []


def test_distribution_problems_wants_one_wheel_and_one_sdist(
    check: ModuleType, tmp_path: Path
) -> None:
    make_wheel(tmp_path, metadata_text())
    found = check.distribution_problems(tmp_path)
    assert len(found) == 1
    assert "expected one wheel and one sdist" in found[0]


def test_the_tree_is_versioned_above_the_original_project() -> None:
    # pip prefers another project's aiokpl 0.2.0 to anything below it: a 1.x line.
    assert aiokpl.__version__ == VERSION
    release = tuple(int(part) for part in re.match(r"\d+(\.\d+)*", VERSION)[0].split("."))  # type: ignore[index]
    assert release >= (1, 0, 0)


def test_pyproject_publishes_no_development_extra(check: ModuleType) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(project["project"]["optional-dependencies"])
    assert not extras & check.DEVELOPMENT_EXTRAS
    groups = project["dependency-groups"]

    def requirements(group: str) -> set[str]:  # with the groups it includes
        found: set[str] = set()
        for item in groups[group]:
            found |= requirements(item["include-group"]) if isinstance(item, dict) else {item}
        return found

    tools = requirements("dev")
    assert {"pytest>=8.3", "mypy>=1.13", "ruff>=0.8", "build>=1.2", "twine>=6.1"} <= tools
    # The other Pythons' venvs get the test group alone: the suite needs nothing else.
    assert {"pytest>=8.3", "hypothesis>=6.100", "matplotlib>=3.8"} <= requirements("test")
    # A group naming the project would fetch it from the index (another project's 0.2.0).
    for requirement in (r for group in groups.values() for r in group if isinstance(r, str)):
        assert check._requirement_name(requirement) != "aiokpl", requirement
    urls = project["project"].get("urls", {})
    assert all(check.vouched(url) for url in urls.values()), urls


def test_only_vouched_addresses_pass(check: ModuleType) -> None:
    site = ("https://example.org/aiokpl",)
    metadata = check._parse(
        metadata_text(changes={"Project_URL": [f"Documentation, {site[0]}/docs"]})
    )
    assert check.metadata_problems(metadata, version=VERSION, addresses=site) == []
    assert check.metadata_problems(metadata, version=VERSION) != []
    assert not check.vouched("https://example.org/aiokpl-other", site)


def test_the_installed_check_finds_a_package_from_elsewhere(
    check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if this interpreter's virtualenv were tmp_path: aiokpl comes from somewhere else, and
    # its version is not the wheel's. The command line's help still runs.
    (tmp_path / "aiokpl-9.9.9-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    found = check.installed_problems(tmp_path)
    # One for each public module (aiokpl, aggregation, testing, coordination, tracing).
    assert len([p for p in found if "not from the virtualenv" in p]) == 5, found
    assert f"aiokpl.__version__ is {VERSION}, the wheel 9.9.9" in found
    assert len(found) == 6, found
