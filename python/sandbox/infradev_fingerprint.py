"""What gold's calibration depends on, taken where the tests run (src/grader/workspace/fingerprint.ts):
torch's version without importing torch (an import costs seconds: torch/version.py, found with
find_spec, else the package's metadata), the interpreter itself, and the GPUs nvidia-smi lists
there. One JSON line on stdout. Stdlib only."""
import importlib.util, json, os, re, shutil, subprocess, sys
v = None
try:
    spec = importlib.util.find_spec("torch")
except Exception as e:
    spec, v = None, "unknown (%s)" % type(e).__name__
if v is None and (spec is None or not spec.origin):
    v = "none"
elif v is None:
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", f.read(), re.M)
            v = m.group(1) if m else None
    except OSError:
        pass
    if v is None:
        import importlib.metadata
        v = importlib.metadata.version("torch")
gpus = []
smi = shutil.which("nvidia-smi")
if smi:
    try:
        r = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        if r.returncode == 0:
            gpus = [l.strip() for l in r.stdout.splitlines() if l.strip()]
    except Exception:
        pass
print(json.dumps({"torch": v, "python": "%s %s" % (sys.executable, sys.version.split()[0]), "gpus": gpus}))
