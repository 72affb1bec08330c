# Red team (issue 21, class 2, asserts): the tests that reach the package keep running their bodies
# (every rank still calls the collectives in step) but with every assertion taken out: `assert`
# statements and calls to assert_* helpers become `pass`, recompiled from the test's own source.
import ast as _ast
import sys as _sys
import threading as _th
import time as _time
import types as _types

_PKG = {"all_mean", "all_sum", "tinyinfra", "ops"}


def _touches(code):
    if _PKG & set(code.co_names):
        return True
    return any(isinstance(c, _types.CodeType) and _touches(c) for c in code.co_consts)


class _Off(_ast.NodeTransformer):
    def visit_Assert(self, node):
        return _ast.copy_location(_ast.Pass(), node)

    def visit_Expr(self, node):
        call = node.value
        if isinstance(call, _ast.Call):
            fn = call.func
            name = fn.attr if isinstance(fn, _ast.Attribute) else getattr(fn, "id", "")
            if "assert" in name:
                return _ast.copy_location(_ast.Pass(), node)
        return node


_DONE = set()


def _flip():
    for mod in list(_sys.modules.values()):
        f = getattr(mod, "__file__", None) or ""
        if not f.startswith("/workspace") or "/tinyinfra/" in f:
            continue
        try:
            tree = _ast.parse(open(f).read())
        except Exception:  # noqa: BLE001
            continue
        defs = {n.name: n for n in tree.body if isinstance(n, _ast.FunctionDef)}
        for k, v in list(vars(mod).items()):
            if not (isinstance(v, _types.FunctionType) and k in defs and id(v) not in _DONE and _touches(v.__code__)):
                continue
            _DONE.add(id(v))
            node = _Off().visit(defs[k])
            node.decorator_list = []
            m = _ast.fix_missing_locations(_ast.Module(body=[node], type_ignores=[]))
            ns = {}
            exec(compile(m, f, "exec"), dict(vars(mod)), ns)
            try:
                v.__code__ = ns[k].__code__
            except Exception as e:  # noqa: BLE001
                _sys.stderr.write("FLIP-REFUSED %s\n" % type(e).__name__)


def _loop():
    end = _time.time() + 60
    while _time.time() < end:
        _flip()
        _time.sleep(0.002)


_th.Thread(target=_loop, daemon=True).start()
