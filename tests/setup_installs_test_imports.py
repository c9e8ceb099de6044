#!/usr/bin/python3
"""Every Python module a test script imports is installed by scripts/setup.sh.

CI runs on a machine where earlier sessions installed packages by hand, so a
test can import a module that only `setup.sh --bench` (or nobody) installs and
still pass there, then fail on a fresh machine. This check reads the imports
of every Python file under tests/ and examples/ (and the Python embedded in
their shell scripts), finds the Debian package that provides each module, and
fails unless that package is in setup.sh's default package list. The same
holds for the servers the C++ tests start themselves (SERVICES below).

    /usr/bin/python3 tests/setup_installs_test_imports.py REPO_ROOT
"""
import importlib.util
import os
import re
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
OWN_MODULES = {"collage"}  # built by the project itself


def own_modules():
    """The Python module built here, and every module that is one of the
    repository's own .py files (a test importing a bench script by path)."""
    own = set(OWN_MODULES)
    for top in ("bench", "tests", "examples", "python", "scripts"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "node_modules"]
            own.update(f[:-3] for f in files if f.endswith(".py"))
    return own
# Servers a test starts in a temporary folder: the file it runs, the file that
# starts it, and the Debian package (in setup.sh's list) that should provide it.
SERVICES = [
    ("/usr/lib/postgresql/15/bin/initdb", "tests/unit/scratch_postgres.h", "postgresql"),
    ("/usr/include/postgresql/libpq-fe.h", "core/measure/shared_store.cc", "libpq-dev"),
]
IMPORT = re.compile(r"^\s*(?:import\s+([\w.]+(?:\s*,\s*[\w.]+)*)|from\s+([\w.]+)\s+import\b)")


def default_packages():
    text = open(os.path.join(ROOT, "scripts", "setup.sh")).read()
    block = re.search(r"^packages=\((.*?)^\)", text, re.S | re.M)
    assert block, "scripts/setup.sh has no packages=( ... ) list"
    words = re.sub(r"#.*", "", block.group(1)).split()
    return set(words)


def imported_modules():
    found = {}  # top-level module -> first file:line importing it
    for top in ("tests", "examples"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith((".py", ".sh")):
                    continue
                path = os.path.join(dirpath, f)
                for number, line in enumerate(open(path, errors="replace"), 1):
                    m = IMPORT.match(line)
                    if not m:
                        continue
                    names = m.group(1).split(",") if m.group(1) else [m.group(2)]
                    for name in names:
                        module = name.strip().split(".")[0]
                        if module and not module.startswith("_"):
                            found.setdefault(module, "%s:%d" % (os.path.relpath(path, ROOT), number))
    return found


def providing_package(module):
    """(package, problem): the Debian package whose files make `module`."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None, "is not installed"
    if spec.origin in (None, "namespace"):
        # A folder without __init__.py: some -dev or data package's files,
        # not the Python module (libonnx-testdata leaves such an onnx/).
        return None, "is only a namespace folder (%s), not an installed module" % (
            ", ".join(spec.submodule_search_locations or []))
    owner = subprocess.run(["dpkg", "-S", os.path.realpath(spec.origin)],
                           capture_output=True, text=True)
    if owner.returncode != 0:
        return None, "comes from %s, which no Debian package installs" % spec.origin
    return owner.stdout.split(":")[0].strip(), None


def main():
    packages = default_packages()
    own = own_modules()
    problems = []
    checked = 0
    for module, where in sorted(imported_modules().items()):
        if module in own or module in sys.stdlib_module_names:
            continue
        checked += 1
        package, problem = providing_package(module)
        if problem:
            problems.append("%s: module '%s' %s" % (where, module, problem))
        elif package not in packages:
            problems.append("%s: module '%s' comes from the Debian package %s, which "
                            "scripts/setup.sh does not install by default" % (where, module, package))
    for path, where, package in SERVICES:
        if package not in packages:
            problems.append("%s: needs %s from the Debian package %s, which scripts/setup.sh "
                            "does not install by default" % (where, path, package))
    for p in problems:
        print("FAIL " + p)
    print("%d third-party modules imported by test scripts; %d not installed by setup.sh"
          % (checked, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
