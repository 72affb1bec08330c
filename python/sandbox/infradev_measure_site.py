"""Copied as `sitecustomize.py` by infradev_measure.py: every Python process of a measured command
runs under `infradev_probe.measure()` and writes its figures at exit (INFRADEV_MEASURE_OUT)."""
import os as _infradev_os
_infradev_out = _infradev_os.environ.get("INFRADEV_MEASURE_OUT")
if _infradev_out:
    def _infradev_measure(out):
        import atexit, json, os
        os.makedirs(out, exist_ok=True)
        try:
            from infradev_probe import measure
            m = measure()
            m.__enter__()
        except Exception as e:
            with open(os.path.join(out, "%d.err" % os.getpid()), "w") as f:
                f.write("%s: %s" % (type(e).__name__, e))
            return
        def done():
            try:
                m.__exit__(None, None, None)
            except Exception as e:
                with open(os.path.join(out, "%d.err" % os.getpid()), "w") as f:
                    f.write("%s: %s" % (type(e).__name__, e))
            with open(os.path.join(out, "%d.json" % os.getpid()), "w") as f:
                json.dump(m.as_dict(), f)
        # Registered first, so it runs last: after torch's own exit handlers.
        atexit.register(done)
    _infradev_measure(_infradev_out)
