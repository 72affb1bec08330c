import { dirname } from "node:path/posix";
import type { CaseRecord, CollectionError, FailureLabel } from "./types.js";

/**
 * Failure labels: pure functions from a failed case (and the collection errors of its run) to the
 * first cut of the InfraDev taxonomy. Structural causes win over the probe's declared kind: a probe
 * that dies with an AttributeError shows a missing interface, not a wrong number.
 */

const EXC_NAME = String.raw`(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt))`;
const IN_MESSAGE = new RegExp(String.raw`(?:^|[\s"'(])${EXC_NAME}(?=:|\s*$|["')])`);
const IN_TRACEBACK = new RegExp(String.raw`^E\s+${EXC_NAME}\b`, "gm");

/** The exception type a failure names: from pytest's message first, else the last `E   XxxError` line. */
export function exceptionType(message: string, text = ""): string | undefined {
  const m = IN_MESSAGE.exec(message);
  if (m) return m[1];
  let last: string | undefined;
  for (const t of text.matchAll(IN_TRACEBACK)) last = t[1];
  return last;
}

/** TypeErrors that mean the call did not fit the function's signature. */
const SIGNATURE_TYPEERROR =
  /unexpected keyword argument|required (positional|keyword-only) argument|positional arguments? but \d+ (were|was) given|takes no (keyword )?arguments|got multiple values for argument|takes \d+ positional argument/;

export function structuralLabel(errorType: string | undefined, message = ""): FailureLabel | undefined {
  switch (errorType) {
    case "ImportError":
    case "ModuleNotFoundError":
      return "structural:import";
    case "AttributeError":
      return "structural:attribute";
    case "NotImplementedError":
      return "structural:not-implemented";
    case "TypeError":
      return SIGNATURE_TYPEERROR.test(message) ? "structural:signature" : undefined;
    default:
      return undefined;
  }
}

const PROBE_KIND_LABEL: Record<string, FailureLabel> = {
  numerical: "numerical",
  resource: "behavioral-resource",
  condition: "behavioral-condition",
  state: "state",
};

const NUMERICAL_MESSAGE = /not close|allclose|Mismatched elements|Greatest (absolute|relative) difference/i;

/** Path of the test file a case id names (`<mode>/tests/test_x.py::test_y` → `<mode>/tests/test_x.py`). */
export function caseFile(id: string): string {
  const i = id.indexOf("::");
  return i < 0 ? id : id.slice(0, i);
}

/** The collection error that explains why a file's cases are missing: the file itself, or a conftest / folder above it. */
export function collectionErrorFor(file: string, errors: readonly CollectionError[]): CollectionError | undefined {
  return (
    errors.find((e) => e.path === file) ??
    errors.find((e) => (e.path.endsWith("/conftest.py") || e.path === "conftest.py") && (dirname(e.path) === "." || file.startsWith(`${dirname(e.path)}/`))) ??
    errors.find((e) => file.startsWith(`${e.path}/`))
  );
}

/**
 * The label of a case gold passes and the submission does not pass. `sub` is undefined when the
 * submission's run did not collect the case at all. `kind` is the probe's declared kind (from the
 * case itself, else from gold's run of the same case).
 */
export function labelFailure(
  id: string,
  sub: CaseRecord | undefined,
  collectionErrors: readonly CollectionError[],
  goldProbeKind?: string,
): FailureLabel {
  if (!sub || sub.reason === "not_collected") {
    const err = collectionErrorFor(caseFile(id), collectionErrors);
    return structuralLabel(err?.error_type, err?.message) ?? "structural:collection";
  }
  if (sub.reason === "hang" || sub.reason === "run_timeout") return "structural:hang";
  if (sub.reason === "crash" || sub.reason === "missing") return "structural:crash";
  if (sub.outcome === "skipped") return "skipped";
  const structural = structuralLabel(sub.error_type, sub.message);
  if (structural) return structural;
  const kind = sub.probe?.kind ?? goldProbeKind;
  if (kind && PROBE_KIND_LABEL[kind]) return PROBE_KIND_LABEL[kind];
  if (NUMERICAL_MESSAGE.test(sub.message ?? "")) return "numerical";
  if (sub.outcome === "failed" && (!sub.error_type || sub.error_type === "AssertionError")) return "assertion";
  return "error";
}
