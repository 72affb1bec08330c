import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GradeResult } from "../../src/grader/grade/types.js";
import { packageRoot } from "../../src/lib/paths.js";
import { DIRECT_BACKEND_PY } from "../helpers/attack-snippets.js";

/**
 * Red team against the counts and the records (issue 21, properties 3 and 5), through the real CLI
 * (`infradev grade`) on the bundled grad-bucketing task at world size 2 (real gloo ranks, real
 * bwrap), one calibration shared by every case. Each submission is the golden patch bent by an
 * adversary who has read this repository:
 *
 * - fake-group: every bucket calls `dist.all_reduce(buf, group=<Python object>)`; torch calls the
 *   object's `allreduce`, which issues one real all-reduce per parameter. Before: the counters skipped
 *   the nested calls and saw one all-reduce with the bucket's bytes, Set B resolved (148/148).
 * - direct-backend: the per-parameter all-reduces go to the backend method dug out of the counting
 *   wrapper's closure (uncounted), and one counted MAX all-reduce of the bucket keeps calls and bytes
 *   right. Set B resolved under grading rules 7 (the counters fooled, the wire record only a
 *   measurement); since rules 8 the launcher's kernel count of what lo carried exceeds what the
 *   counted calls can explain (wire.py's bound): tampered.
 * - records-removed: at exit every rank deletes pytest's JUnit report, cuts its log (pytest's summary
 *   line) and exits 0. Before: accepted on exit codes alone (resolved).
 */

const CLI = join(packageRoot(), "dist", "cli", "main.js");
const TASKS = join(packageRoot(), "tasks");
const GOLDEN = readFileSync(join(TASKS, "grad-bucketing", "hidden", "golden.patch"), "utf8");
const run = promisify(execFile);

let root: string;

/** The golden patch with one hunk of nanoinfra/bucketing.py's reduce() replaced and lines appended to that new file. */
function bend(reduceBody: string, appended: string): string {
  const start = GOLDEN.indexOf("diff --git a/nanoinfra/bucketing.py");
  const end = GOLDEN.indexOf("diff --git", start + 1);
  const section = GOLDEN.slice(start, end);
  const lines = section.split("\n");
  const hunkAt = lines.findIndex((l) => l.startsWith("@@"));
  const body = lines.slice(hunkAt + 1).filter((l) => l.startsWith("+")).map((l) => l.slice(1));
  let text = body.join("\n");
  const old = "            dist.all_reduce(bucket.buffer, group=self.process_group)\n";
  if (!text.includes(old)) throw new Error("golden.patch changed: reduce() not found");
  text = text.replace(old, reduceBody) + appended;
  const out = text.split("\n");
  if (out.at(-1) === "") out.pop();
  const newSection = [...lines.slice(0, hunkAt).map((l) => l.replace(/^index 0000000\.\.[0-9a-f]+/, "index 0000000..1111111")), `@@ -0,0 +1,${out.length} @@`, ...out.map((l) => `+${l}`), ""].join("\n");
  return GOLDEN.slice(0, start) + newSection + GOLDEN.slice(end);
}

const FAKE_GROUP = bend(
  "            dist.all_reduce(bucket.buffer, group=_PerSlice(self.process_group, bucket._views))\n",
  `

class _PerSlice:
    def __init__(self, group, views):
        self.group = group if group is not None else dist.distributed_c10d._get_default_group()
        self.views = views

    def allreduce(self, tensors, opts):
        work = None
        for view in self.views:
            work = self.group.allreduce([view], opts)
            work.wait()
        return work
`,
);

export const DIRECT_BACKEND = bend(
  `            pg = self.process_group if self.process_group is not None else dist.distributed_c10d._get_default_group()
            direct = _direct(pg, "all" + "reduce")
            for view in bucket._views:
                direct(pg, [view]).wait()
            dist.all_reduce(bucket.buffer, op=dist.ReduceOp.MAX, group=self.process_group)
`,
  DIRECT_BACKEND_PY,
);

const RECORDS_REMOVED = bend(
  "            dist.all_reduce(bucket.buffer, group=self.process_group)\n",
  `

import atexit as _ax
import os as _os


def _tidy():
    out = _os.environ.get("INFRADEV_" + "OUT_DIR")
    if not out:
        return
    me = "rank%s." % _os.environ.get("RANK", "0")
    for name in _os.listdir(out):
        if name.startswith(me) and name.endswith(".xml"):
            try:
                _os.unlink(_os.path.join(out, name))
            except OSError:
                pass
    try:
        _os.ftruncate(1, 0)
    except OSError:
        pass
    _os._exit(0)


_ax.register(_tidy)
`,
);

/** The per-session result files (SessionResult) of the grades under `dir`: those with a `launch_status`. */
function sessionFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sessionFiles(p));
    else if (name.endsWith(".json") && /"launch_status"/.test(readFileSync(p, "utf8"))) out.push(p);
  }
  return out;
}

async function grade(name: string, patch: string): Promise<GradeResult> {
  const file = join(root, `${name}.patch`);
  writeFileSync(file, patch);
  const args = [CLI, "grade", "--task", "grad-bucketing", "--tasks-dir", TASKS, "--patch", file, "--ranks", "2", "--out", join(root, "out"), "--calibration-dir", join(root, "cal"), "--json", "--sandbox", "local"];
  const r = await run(process.execPath, args, { maxBuffer: 64 << 20, timeout: 600_000 }).catch((e: { stderr?: string; code?: number }) => {
    throw new Error(`grade exited ${e.code}: ${e.stderr?.slice(-2000)}`);
  });
  return JSON.parse(r.stdout) as GradeResult;
}

describe("red team: counts and records the code under test cannot steer (grad-bucketing, 2 ranks)", () => {
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "infradev-redteam-counts-"));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("the golden patch itself is graded resolved and never tampered (same calibration)", async () => {
    const r = await grade("gold", GOLDEN);
    expect(r.status).toBe("graded");
    expect(r.tamper_evidence).toEqual([]);
    expect(r.with_probes.resolved).toBe(true);
    // Every session carries the kernel's count of what it sent (bwrap's private network namespace):
    // a record beside the counters, taken and not a verdict.
    const wires = sessionFiles(join(root, "out")).map((f) => (JSON.parse(readFileSync(f, "utf8")) as { wire?: Record<string, unknown> }).wire);
    expect(wires.length).toBeGreaterThan(0);
    for (const w of wires) {
      expect(w?.skip).toBeUndefined();
      expect(w?.verdict).toBe(false);
      expect(w?.payload_bytes as number).toBeGreaterThan(0);
      expect(w?.counted_bytes as number).toBeGreaterThan(0);
      expect(w?.bound_ratio as number).toBeLessThan(1.25);
    }
  }, 600_000);

  it("direct-backend: all-reduces run through the backend method dug out of the counter's closure are tampered (the kernel's count)", async () => {
    const r = await grade("direct-backend", DIRECT_BACKEND);
    const why = JSON.stringify({ status: r.status, evidence: r.tamper_evidence });
    expect(r.status, why).toBe("tampered");
    expect(r.with_probes.resolved, why).toBe(false);
    expect(r.tamper_evidence.join("\n"), why).toMatch(/loopback carried [0-9.]+ MB of TCP payload .* collectives run past the counters/);
  }, 600_000);

  it("fake-group: collectives smuggled under a Python group object are refused and tampered", async () => {
    const r = await grade("fake-group", FAKE_GROUP);
    expect(r.status).toBe("tampered");
    expect(r.with_probes.resolved).toBe(false);
    expect(r.tamper_evidence.join("\n")).toMatch(/not a torch ProcessGroup: all_reduce\(group=<nanoinfra\.bucketing\._PerSlice>\)/);
  }, 600_000);

  it("records-removed: a rank that deletes its JUnit report and cuts its summary, then exits 0, is tampered", async () => {
    const r = await grade("records-removed", RECORDS_REMOVED);
    expect(r.status).toBe("tampered");
    expect(r.tamper_evidence.join("\n")).toMatch(/pytest exited 0 but pytest's JUnit report, pytest's summary line are missing/);
  }, 600_000);
});
