import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { hostPythonDir } from "../../lib/paths.js";
import { displayPath } from "../../task/public/loader.js";
import { type GraderTask } from "../../task/hidden/grader-task.js";
import { PROBE_KINDS } from "../../task/public/schema.js";
import { analysisPython } from "./task-analysis.js";

/**
 * The probes' markers, read statically (Python's own `ast` over the task's hidden probes:
 * python/host/infradev_markers.py; nothing is imported or run) and checked against the task's
 * promises: every probe test carries `probe(promise=..., kind=...)`, the promise is one of
 * hidden/promises.yaml, the kind one of PROBE_KINDS. Each problem names file and line.
 */

export interface ScannedProbe {
  /** Relative to the probes folder. */
  file: string;
  line: number;
  /** `test_x` or `TestC::test_x` */
  name: string;
  /** world_sizes: the marker's `world_sizes=[...]` (where the probe applies; it skips itself elsewhere), or null. */
  marker: { promise: string | null; kind: string | null; line: number; problems: string[]; world_sizes?: number[] | null } | null;
}

export interface MarkerScan {
  probes: ScannedProbe[];
  /** One line each, `<file>:<line>: ...`, naming the probe and what is wrong. */
  problems: string[];
}


export function scanProbeMarkers(task: GraderTask, opts: { python?: string } = {}): MarkerScan {
  const python = analysisPython(opts);
  let out: string;
  try {
    out = execFileSync(python, ["-I", "-S", join(hostPythonDir(), "infradev_markers.py"), task.hidden.probesDir], { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    const err = e as NodeJS.ErrnoException & { stderr?: string };
    throw new Error(`cannot scan the probes' markers with ${python}: ${err.code === "ENOENT" ? "not found (set INFRADEV_HOST_PYTHON)" : (err.stderr ?? err.message).trim()}`);
  }
  const scan = JSON.parse(out) as { tests: ScannedProbe[]; errors: Array<{ file: string; line: number | null; message: string }> };
  const where = (file: string, line: number | null) => `${displayPath(join(task.hidden.probesDir, file))}:${line ?? "?"}`;
  const problems = scan.errors.map((e) => `${where(e.file, e.line)}: ${e.message}`);
  const known = task.hidden.promises ? new Set(task.hidden.promises.map((p) => p.id)) : null;
  for (const t of scan.tests) {
    const m = t.marker;
    if (!m) {
      problems.push(`${where(t.file, t.line)}: ${t.name}: no probe marker (add @pytest.mark.probe(promise="<id>", kind="${PROBE_KINDS.join("|")}"))`);
      continue;
    }
    for (const p of m.problems) problems.push(`${where(t.file, m.line)}: ${t.name}: probe marker: ${p}`);
    if (m.kind !== null && !(PROBE_KINDS as readonly string[]).includes(m.kind)) problems.push(`${where(t.file, m.line)}: ${t.name}: probe marker: kind "${m.kind}" is not one of ${PROBE_KINDS.join(", ")}`);
    if (m.promise !== null && known && !known.has(m.promise)) problems.push(`${where(t.file, m.line)}: ${t.name}: probe marker: unknown promise "${m.promise}" (not in ${task.hidden.promisesFile}; known: ${[...known].join(", ")})`);
  }
  if (!scan.tests.length) problems.push(`${displayPath(task.hidden.probesDir)}: no probe test found (test_*.py files with test_* functions)`);
  return { probes: scan.tests, problems };
}
