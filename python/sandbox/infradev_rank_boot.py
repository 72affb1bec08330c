"""One rank's pytest: `python -s infradev_rank_boot.py`, its arguments in a spec (never in argv).

The launcher (and infradev_rank_entry.py under torchrun) starts every rank this way instead of
`python -m pytest <args>`:

- The spec (pytest arguments, task plugins, the skip list of a restart) comes on a descriptor named
  by INFRADEV_RANK_SPEC ("fd:N", normally the rank's stdin: a sealed memfd) or a path; the variable
  is popped before anything else runs and the descriptor is replaced by /dev/null, so neither argv,
  /proc/self/cmdline nor the environment show the test paths.
- sys.path[0] is this file's (read-only) folder, never the repo: `python script.py` does not put
  the cwd on sys.path the way `-m` does. Before the repo goes on sys.path the boot also takes out the
  PYTHONPATH entries, then imports the whole harness: pytest, pluggy, every built-in pytest plugin,
  the recording plugin and probe library, the task's plugins, and the standard-library modules
  those import lazily during a run. Only then does it restore sys.path (with the cwd first, as
  `python -m pytest` has it) and run pytest.main. A repo (or PYTHONPATH folder) with a top-level
  json.py, pluggy.py, xml/ ... then changes what the tests import, not what the harness runs.
- PYTEST_DISABLE_PLUGIN_AUTOLOAD=1: only the plugins named (`-p`) are loaded; entry points
  registered by a `*.dist-info` folder in the repo are not.
- `-s` (the launcher's flag): no user site-packages, so a `.pth` file a test drops into
  ~/.local/lib/python3.X/site-packages cannot run code at the start of the next session's ranks.
"""

import os
import sys

from infradev_outputs import PYTEST_PLUGIN_ARGS, SPEC_ENV, decode_spec

# Standard-library modules pytest, pluggy and the plugin import lazily during a run (measured on
# pytest 7.2 / 8.x with a session of passes, failures, skips, xfails, warnings and a collection
# error): loaded here, before the repo is on sys.path, so a repo module of the same name cannot
# stand in for them. Missing ones are skipped (not every interpreter has all).
LAZY_STDLIB = (
    "argparse", "ast", "bdb", "codecs", "collections", "contextlib", "copy", "dataclasses", "datetime",
    "decimal", "difflib", "enum", "errno", "faulthandler", "fnmatch", "functools", "gc", "getpass", "glob", "hashlib",
    "importlib", "importlib.abc", "importlib.machinery", "importlib.metadata", "importlib.util", "inspect",
    "io", "itertools", "json", "json.decoder", "json.encoder", "json.scanner", "locale", "logging",
    "marshal", "math", "numbers", "operator", "os", "pathlib", "pdb", "platform", "pprint", "re", "resource",
    "select", "shlex", "shutil", "signal", "socket", "stat", "string", "struct", "subprocess", "sys",
    "tempfile", "textwrap", "threading", "time", "tokenize", "traceback", "types", "typing", "unittest",
    "uuid", "warnings", "weakref", "xml.etree.ElementTree", "zipfile", "zipimport",
)

# pytest's own modules it imports lazily (beyond its built-in plugins).
LAZY_PYTEST = ("_argcomplete", "config.compat", "config.argparsing", "config.findpaths", "_code", "_io", "assertion.rewrite",
               "assertion.util", "assertion.truncate")


def read_spec():
    ref = os.environ.pop(SPEC_ENV, None)
    if not ref:
        raise SystemExit("infradev_rank_boot: %s is not set (the launcher starts this script)" % SPEC_ENV)
    if ref.startswith("fd:"):
        fd = int(ref[3:])
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        if fd == 0:  # stdin: /dev/null from here on, as the ranks always had it
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        else:
            os.close(fd)
        data = b"".join(chunks)
    else:
        with open(ref, "rb") as f:
            data = f.read()
    return decode_spec(data)


def _under(path, roots):
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def harness_path(path, pythonpath, cwd):
    """sys.path for importing the harness: without the cwd, '' and the PYTHONPATH entries (except
    those inside the interpreter's own prefixes, e.g. a PYTHONPATH naming site-packages)."""
    prefixes = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix) if p}
    drop = {os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p}
    drop = {p for p in drop if not _under(p, prefixes)}
    drop.add(os.path.abspath(cwd))
    kept = path[:1]
    for entry in path[1:]:
        if entry and os.path.abspath(entry) not in drop:
            kept.append(entry)
    return kept


def import_harness(plugins):
    """Import everything the harness runs; returns the task plugins that could not be imported
    (pytest imports those itself, from the repo's sys.path, and reports them if missing)."""
    import importlib

    import pluggy  # noqa: F401
    import pytest  # noqa: F401
    from _pytest.config import default_plugins

    for name in tuple(default_plugins) + LAZY_PYTEST:
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass
    for name in LAZY_STDLIB:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    import infradev_probe  # noqa: F401
    import infradev_probe.plugin  # noqa: F401

    later = []
    for name in plugins:
        if name.startswith(PATH_PLUGIN):  # a workspace file: loaded once the repo is on sys.path
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a plugin that is the repo's own is imported by pytest later
            later.append(name)
            continue
        # Imported before pytest's assertion rewriting exists: its asserts stay as they are (only their
        # failure messages differ), and the marker keeps pytest from warning about that on every run.
        try:
            module.__doc__ = (module.__doc__ or "") + "\nPYTEST_DONT_REWRITE"
        except (AttributeError, TypeError):
            pass
    return later


PATH_PLUGIN = "path:"


def pytest_args(spec):
    args = list(PYTEST_PLUGIN_ARGS)
    for name in spec["plugins"]:
        if not name.startswith(PATH_PLUGIN):
            args += ["-p", name]
    return args + spec["args"]


def path_plugins(spec, cwd):
    """The plugins named by a file of the workspace ("path:<relative .py path>": the hidden probes'
    conftest, which sits beside the official tests under a random module name): each loaded as a
    module of its own stem, as pytest imports a conftest, and handed to pytest.main as an object (a
    `-p` name would need the file's folder on sys.path in the probe sessions only)."""
    import importlib.util

    out = []
    for name in spec["plugins"]:
        if not name.startswith(PATH_PLUGIN):
            continue
        rel = name[len(PATH_PLUGIN):]
        if os.path.isabs(rel) or ".." in rel.split("/") or not rel.endswith(".py"):
            raise SystemExit("infradev_rank_boot: bad plugin file %r" % rel)
        path = os.path.join(cwd, rel)
        stem = os.path.basename(rel)[:-3]
        module_spec = importlib.util.spec_from_file_location(stem, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[stem] = module
        module_spec.loader.exec_module(module)
        out.append(module)
    return out


def main():
    spec = read_spec()
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    cwd = os.getcwd()
    saved = list(sys.path)
    helpers = saved[0]
    sys.path[:] = harness_path(saved, os.environ.get("PYTHONPATH", ""), cwd)
    try:
        import_harness(spec["plugins"])
        # Before any repository code: no other process may read or write this one's memory, and
        # in-memory forgery (test bodies swapped, ctypes, /proc/*/mem, trace functions) is refused
        # and recorded on the launcher's channel (infradev_audit.py).
        import infradev_audit
        import infradev_guard

        infradev_guard.non_dumpable()
        infradev_audit.install(cwd)
    finally:
        # As `python -m pytest` has it: the cwd first, then PYTHONPATH and the rest.
        sys.path[:] = [cwd] + saved[1:]
        if helpers not in sys.path:
            sys.path.append(helpers)
    import infradev_audit
    import pytest

    from infradev_probe import plugin

    plugin.BOOT_SPEC = spec
    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py")]
    try:
        plugins = path_plugins(spec, cwd)
    except Exception:  # noqa: BLE001 - as pytest ends when a conftest does not import
        # The probes' conftest raised on import (a submission that breaks what it imports): what
        # pytest itself does with a conftest that does not import — say so, exit 4 (usage error),
        # no report written. Exit 1 without a JUnit report would read as records cut by the rank.
        import traceback

        sys.stderr.write("ImportError while loading conftest (the probes' plugin module).\n")
        traceback.print_exc()
        infradev_audit.finish()
        return 4
    code = int(pytest.main(pytest_args(spec), plugins=plugins))
    infradev_audit.finish()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
