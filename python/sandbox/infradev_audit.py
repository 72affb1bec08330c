"""The ranks' PEP 578 audit hook: in-memory forgery refused, and every refusal recorded where the code
under test cannot take it back.

The rank boot installs the hook (`install`) once the harness is imported and before the repository
is on sys.path; an audit hook cannot be removed. It refuses (raises RuntimeError) and records:

- setting `__code__`, `__defaults__` or `__kwdefaults__` of a function defined in the workspace (the
  tests, probes, canaries and the repository), or of any function from code in the workspace;
- `code.__new__` / `code.replace` and `function.__new__` called from code in the workspace;
- ctypes (`ctypes.*` events: dlopen, dlsym, addressof, cdata, string_at, call_function, ...) from
  code in the workspace;
- opening /proc/<any>/mem or pagemap, and another process's /proc/<pid>/environ, fd/, map_files/;
- `sys.settrace` / `sys.setprofile` (no bundled task's tests or gold use them in a rank);
- `gc.get_referrers` / `get_referents` / `get_objects` and `sys._current_frames` from code in the
  workspace.

"Code in the workspace" is decided by the caller's frame, not by a name: the first frame outside
the ctypes package and the import machinery whose file is not under the interpreter's own prefixes
(stdlib, site-packages) or the harness's folder. The same events from library code (torch loading
its libraries with ctypes at import) are counted as observed, not refused.

Records go to a pipe whose other end only the launcher holds (INFRADEV_AUDIT_FD, popped; not
inherited by the rank's children): "armed", one line per refusal (the first MAX_LINES in full),
"observed" counts and "done" once pytest returned. What was written cannot be taken back; a rank
that exited by itself without "armed" and "done" lost its channel, which the grader counts as
evidence too (parse_channel, src/grader/grade/audit-evidence.ts).
"""

import os
import sys

AUDIT_FD_ENV = "INFRADEV_AUDIT_FD"
MAX_LINES = 40
# Above this many bytes the channel cannot be honest (an honest rank writes < 8 KiB).
CHANNEL_LIMIT = 32 << 10
_FUNC_ATTRS = ("__code__", "__defaults__", "__kwdefaults__")
_PROC_OTHER = ("environ", "fd", "map_files", "mem", "pagemap", "fdinfo")


class Refused(RuntimeError):
    pass


def _clean(text, cap=240):
    text = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return text[:cap]


def trusted_roots():
    """Folders whose code is the interpreter's, its libraries' or the harness's."""
    import sysconfig

    roots = set()
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        if p:
            roots.add(os.path.join(os.path.realpath(p), "lib"))
            roots.add(os.path.join(os.path.realpath(p), "lib64"))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            roots.add(os.path.realpath(sysconfig.get_paths()[key]))
        except (KeyError, OSError):
            pass
    try:
        import site

        roots.update(os.path.realpath(p) for p in site.getsitepackages())
    except Exception:  # noqa: BLE001 - -S or a stripped site module
        pass
    for entry in sys.path:  # the interpreter's own path entries at boot (dist-packages, the harness)
        if entry and os.path.isabs(entry) and ("-packages" in entry or entry.startswith(sys.base_prefix)):
            roots.add(os.path.realpath(entry))
    roots.add(os.path.dirname(os.path.realpath(__file__)))
    return tuple(sorted(r.rstrip("/") + "/" for r in roots if r and r != "/"))


def _proc_target(path):
    """True for a /proc path the hook refuses: any process's mem or pagemap, another process's
    environ, fd/, fdinfo/ or map_files/ (`path` already resolved)."""
    if not path.startswith("/proc/"):
        return False
    parts = [p for p in path.split("/") if p][1:]
    if len(parts) < 2:
        return False
    who, what = parts[0], parts[1]
    if what == "task" and len(parts) >= 4:
        what = parts[3]
    if what in ("mem", "pagemap"):
        return True
    mine = who in ("self", "thread-self") or who == str(os.getpid())
    return not mine and who.isdigit() and what in _PROC_OTHER


class Auditor:
    def __init__(self, fd, roots, ctypes_dir, workspace):
        self.fd = fd
        self.roots = roots
        self.ctypes_dir = ctypes_dir
        self.workspace = workspace
        self.refused = 0
        self.lines = 0
        self.observed = {}
        self.frame = sys._getframe  # bound before the hook exists
        self.transparent = transparent_prefixes(ctypes_dir)
        self.function_type = type(Auditor.__init__)

    def write(self, line):
        if self.fd is None:
            return
        data = (line + "\n").encode("ascii", "replace")
        try:
            os.write(self.fd, data)
        except OSError:
            pass

    def trusted_file(self, filename):
        if self.workspace and (filename + "/").startswith(self.workspace):
            return False
        return filename.startswith(self.roots) or filename.startswith("<frozen ")

    def in_workspace(self, filename):
        """A function defined in a real file that is not the interpreter's or the harness's."""
        return bool(filename) and not filename.startswith("<") and not self.trusted_file(filename)

    def caller_trusted(self, depth=2, bottom=False):
        """Whether the code that asked is the interpreter's, a library's or the harness's: the first
        frame outside the trampolines (ctypes, the import machinery, threading and other code that
        calls what it is given); none (a thread running only trampolines) counts as untrusted."""
        f = self.frame(depth)
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith(self.transparent):
                f = f.f_back
                continue
            return self.trusted_file(name)
        return bottom

    def refuse(self, event, detail):
        self.refused += 1
        if self.lines < MAX_LINES:
            self.lines += 1
            self.write("refused %s %s" % (_clean(event, 60), _clean(detail)))
        raise Refused("infradev: %s refused in this test session (%s); the harness records it" % (event, _clean(detail, 120)))

    def observe(self, event):
        self.observed[event] = self.observed.get(event, 0) + 1

    def hook(self, event, args):
        if event == "object.__setattr__":
            if len(args) >= 2 and type(args[0]) is self.function_type and args[1] in _FUNC_ATTRS:
                target = args[0]
                where = getattr(target.__code__, "co_filename", "")
                if self.in_workspace(where) or not self.caller_trusted(2):
                    self.refuse(event, "%s of %s (%s)" % (args[1], getattr(target, "__qualname__", "?"), where))
                self.observe(event)
        elif event in ("compile", "exec"):
            # A code object that claims a library's file, made or run by workspace code, would pass
            # for library code in caller_trusted. The import machinery compiles and runs code under
            # the path its finder found; for a module, that path must be the module's own file.
            if event == "compile":
                name = args[1] if len(args) > 1 else None
                code = None
            else:
                code = args[0] if args else None
                name = getattr(code, "co_filename", None)
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            if isinstance(name, str) and (name.startswith(self.roots) or name.startswith("<frozen")):
                caller = self.frame(1)
                if caller is not None and caller.f_code.co_filename.startswith("<frozen importlib"):
                    if code is not None:
                        glb = caller.f_locals.get("args", (None, None))
                        glb = glb[1] if isinstance(glb, tuple) and len(glb) > 1 and isinstance(glb[1], dict) else {}
                        origin = glb.get("__file__")
                        if isinstance(origin, str) and origin != name and not self.trusted_file(origin):
                            self.refuse(event, "%s claims %s" % (origin, name))
                elif not self.caller_trusted(2, bottom=True):
                    self.refuse(event, "code claiming %s" % name)
        elif event in ("code.__new__", "function.__new__"):
            if not self.caller_trusted(2):
                self.refuse(event, "from workspace code")
            self.observe(event)
        elif event.startswith("ctypes."):
            if not self.caller_trusted(2):
                self.refuse(event, "from workspace code")
            self.observe(event)
        elif event == "open":
            path = args[0] if args else None
            if isinstance(path, bytes):
                path = path.decode("utf-8", "replace")
            if isinstance(path, str) and not path.startswith(self.roots):
                if not path.startswith("/") and os.path.basename(path) in ("mem", "pagemap"):
                    self.refuse(event, path)  # relative to a descriptor of some /proc/<pid>
                try:
                    real = os.path.realpath(path) if not path.startswith("/proc/") or "/root" in path or "/cwd" in path else os.path.normpath(path)
                except (OSError, ValueError):
                    real = path
                if _proc_target(real):
                    self.refuse(event, path)
        elif event in ("sys.settrace", "sys.setprofile"):
            self.refuse(event, "a trace or profile function in a test session")
        elif event in ("gc.get_referrers", "gc.get_referents", "gc.get_objects", "sys._current_frames"):
            if not self.caller_trusted(2):
                self.refuse(event, "from workspace code")
            self.observe(event)

    def finish(self):
        if self.observed:
            self.write("observed " + " ".join("%s=%d" % (k, v) for k, v in sorted(self.observed.items())))
        self.write("done refused=%d" % self.refused)


def transparent_prefixes(ctypes_dir):
    """Files whose frames the caller check looks through: they call what they are handed."""
    import importlib

    std = os.path.dirname(os.path.realpath(os.__file__)) + "/"
    names = ["threading.py", "weakref.py", "contextlib.py", "functools.py", "runpy.py", "pkgutil.py", "sched.py",
             "concurrent/", "asyncio/", "multiprocessing/", "unittest/mock.py"]
    out = [ctypes_dir, "<frozen importlib", "<frozen runpy", os.path.dirname(os.path.realpath(importlib.__file__)) + "/"]
    out += [std + n for n in names]
    return tuple(out)


_STATE = []


def install(workspace):
    """Arms the hook for this process (once); the channel fd from INFRADEV_AUDIT_FD (popped)."""
    if _STATE:
        return _STATE[0]
    ref = os.environ.pop(AUDIT_FD_ENV, None)
    fd = None
    if ref and ref.isdigit():
        fd = int(ref)
        try:
            os.set_inheritable(fd, False)
        except OSError:
            fd = None
    import ctypes  # noqa: F401 - imported now, so that its import is not refused later

    ctypes_dir = os.path.dirname(os.path.realpath(ctypes.__file__)) + "/"
    ws = os.path.realpath(workspace).rstrip("/") + "/" if workspace else None
    auditor = Auditor(fd, trusted_roots(), ctypes_dir, ws)
    auditor.write("armed %d" % os.getpid())
    sys.addaudithook(auditor.hook)
    _STATE.append(auditor)
    return auditor


def finish():
    if _STATE:
        _STATE[0].finish()


def parse_channel(data, overflow=False):
    """What a rank's channel said (the launcher reads it once the rank's processes are gone)."""
    out = {"armed": False, "done": False, "refused": [], "refused_count": 0, "observed": {}, "junk": 0,
           "overflow": bool(overflow) or len(data) >= CHANNEL_LIMIT}
    for raw in data.split(b"\n"):
        if not raw:
            continue
        line = raw.decode("ascii", "replace")
        word, _, rest = line.partition(" ")
        if word == "armed" and rest.isdigit() and not out["armed"]:
            out["armed"] = True
        elif word == "refused" and out["armed"]:
            out["refused_count"] += 1
            if len(out["refused"]) < MAX_LINES:
                out["refused"].append(rest[:300])
        elif word == "observed" and out["armed"]:
            for item in rest.split():
                k, _, v = item.partition("=")
                if v.isdigit():
                    out["observed"][k[:60]] = int(v)
        elif word == "done" and out["armed"] and not out["done"] and rest.startswith("refused="):
            out["done"] = True
            n = rest[len("refused="):]
            if n.isdigit() and int(n) > out["refused_count"]:
                out["refused_count"] = int(n)
        else:
            out["junk"] += 1
    return out
