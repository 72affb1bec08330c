/**
 * Python source of attack building blocks shared by red-team tests (written into patches as text).
 *
 * DIRECT_BACKEND_PY defines `_direct(pg, name)`: the process group's backend method as torch bound it,
 * dug out of the closure of the counting wrapper the probe library installs on the class (or the
 * class's own method where there is no wrapper). Calls through it run real collectives the in-rank
 * counters never see: only the kernel's count of the loopback (the launcher's wire record) does.
 */
export const DIRECT_BACKEND_PY = `

def _direct(pg, name):
    f = getattr(type(pg), name)
    for cell in getattr(f, "__closure__", None) or ():
        v = cell.cell_contents
        if callable(v) and getattr(v, "__name__", "") == name:
            return v
    return f
`;
