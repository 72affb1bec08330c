import { existsSync, mkdirSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { create } from "xmlbuilder2";
import { readJsonFile } from "../../lib/json.js";
import type { CaseRecord, GradeResult, GradedCase, SessionResult, SetScore, Suite } from "./types.js";

/**
 * `grade --junit F`: one grade as JUnit XML, for CI systems that show test reports. One <testsuite>
 * per grader suite (official, probe; pass_to_pass when the task has one), one <testcase> per graded case. A case reads as passed only when
 * the grade counts it passed: a tampered grade scores 0, so its passing cases are failures too, and a
 * harness fault (not scored) makes every case an <error>. The XML is built with xmlbuilder2 (escaping
 * and invalid characters are its job: a test's message is the submission's text).
 */

export const JUNIT_SUITES: readonly Suite[] = ["official", "pass_to_pass", "probe"];

/** What one case becomes in the report (pure; also what the tests compare the parsed XML with). */
export interface JunitCase {
  classname: string;
  name: string;
  time_s: number;
  verdict: "passed" | "failure" | "error" | "skipped";
  /** failure/error: the failure label (or the grade's status); skipped: why. */
  type?: string;
  message?: string;
}

export interface JunitSuite {
  name: Suite;
  cases: JunitCase[];
  properties: Array<[string, string]>;
}

/** Per case id, what its session recorded (time, message, mode, world size), from the grade's sessions/ folder. */
export function sessionCases(artifactDir: string): Map<string, { record: CaseRecord; mode: string; ranks: number }> {
  const out = new Map<string, { record: CaseRecord; mode: string; ranks: number }>();
  const dir = join(artifactDir, "sessions");
  if (!existsSync(dir)) return out;
  for (const f of readdirSync(dir).filter((x) => x.endsWith(".json")).sort()) {
    const s = readJsonFile<SessionResult>(join(dir, f));
    for (const c of s?.cases ?? []) out.set(c.id, { record: c, mode: s!.mode, ranks: s!.ranks });
  }
  return out;
}

function setProperties(prefix: string, s: SetScore): Array<[string, string]> {
  const show = (v: number | boolean | null) => (v === null ? "n/a" : String(v));
  return [
    [`${prefix}.n_cases`, String(s.n_cases)],
    [`${prefix}.passed`, show(s.passed)],
    [`${prefix}.score`, show(s.score)],
    [`${prefix}.resolved`, show(s.resolved)],
    [`${prefix}.resolved_strict`, show(s.resolved_strict)],
  ];
}

function verdictOf(r: GradeResult, c: GradedCase, message: string | undefined): Omit<JunitCase, "classname" | "name" | "time_s"> {
  const why = r.reason ?? r.status;
  if (r.status === "harness_fault") return { verdict: "error", type: "harness_fault", message: why };
  if (c.outcome === "not_run") return { verdict: "failure", type: r.status, message: why };
  if (r.status === "tampered") return { verdict: "failure", type: "tampered", message: r.tamper_evidence[0] ?? why };
  const msg = message ?? c.outcome;
  switch (c.outcome) {
    case "passed":
      return { verdict: "passed" };
    case "skipped":
      // A skip gold passes is a failure the grader labels `skipped`; one gold skips too is a plain skip.
      return c.label ? { verdict: "failure", type: c.label, message: msg } : { verdict: "skipped", message: msg };
    case "error":
      return { verdict: "error", type: c.label ?? "error (gold does not pass it either)", message: msg };
    default:
      return { verdict: "failure", type: c.label ?? "failed (gold does not pass it either)", message: msg };
  }
}

/** The report's content (pure): suites in JUNIT_SUITES order, cases in the result's order. */
export function junitSuites(r: GradeResult, sessions: ReturnType<typeof sessionCases>): JunitSuite[] {
  const oneWorldSize = r.world_sizes?.length === 1 ? r.world_sizes[0] : undefined;
  // pass_to_pass only when the task has that suite (a task without one keeps its two testsuites).
  return JUNIT_SUITES.filter((suite) => suite !== "pass_to_pass" || r.pass_to_pass).map((suite) => ({
    name: suite,
    properties: [
      ["task", r.task_id],
      ["status", r.status],
      ...(r.apply_method ? [["apply_method", r.apply_method] as [string, string]] : []),
      ...(r.world_sizes ? [["world_sizes", r.world_sizes.join(",")] as [string, string]] : []),
      ...setProperties("set_a", r.official),
      ...setProperties("set_b", r.with_probes),
      ...(r.pass_to_pass ? setProperties("pass_to_pass", r.pass_to_pass) : []),
    ],
    cases: r.cases
      .filter((c) => c.suite === suite)
      .map((c) => {
        const s = sessions.get(c.id);
        // classname: the suite, then where it ran (mode, world size); a case that never ran has no session.
        const where = s ? `.${s.mode}.ws${s.ranks}` : oneWorldSize !== undefined ? `.ws${oneWorldSize}` : "";
        return { classname: `${suite}${where}`, name: c.id, time_s: s?.record.time_s ?? 0, ...verdictOf(r, c, s?.record.message) };
      }),
  }));
}

/** The JUnit XML text of one grade. */
export function junitXml(r: GradeResult, sessions: ReturnType<typeof sessionCases>): string {
  const suites = junitSuites(r, sessions);
  const count = (cs: JunitCase[], v: JunitCase["verdict"]) => cs.filter((c) => c.verdict === v).length;
  const time = (cs: JunitCase[]) => cs.reduce((t, c) => t + c.time_s, 0).toFixed(3);
  const all = suites.flatMap((s) => s.cases);
  const doc = create({ version: "1.0", encoding: "UTF-8", invalidCharReplacement: "\uFFFD" });
  const root = doc.ele("testsuites", { name: `infradev grade ${r.task_id}`, tests: all.length, failures: count(all, "failure"), errors: count(all, "error"), skipped: count(all, "skipped"), time: time(all) });
  for (const s of suites) {
    const el = root.ele("testsuite", { name: s.name, tests: s.cases.length, failures: count(s.cases, "failure"), errors: count(s.cases, "error"), skipped: count(s.cases, "skipped"), time: time(s.cases) });
    const props = el.ele("properties");
    for (const [name, value] of s.properties) props.ele("property", { name, value });
    for (const c of s.cases) {
      const tc = el.ele("testcase", { classname: c.classname, name: c.name, time: c.time_s.toFixed(3) });
      if (c.verdict === "failure" || c.verdict === "error") tc.ele(c.verdict, { type: c.type ?? "", message: c.message ?? "" }).txt(`${c.type}: ${c.message ?? ""}`);
      else if (c.verdict === "skipped") tc.ele("skipped", { message: c.message ?? "" });
    }
  }
  return doc.end({ prettyPrint: true });
}

/** Writes the report of the grade in `artifactDir` to `file` atomically (a CI never reads half a file). */
export function writeJunitReport(file: string, result: GradeResult, artifactDir: string): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.tmp${process.pid}`;
  writeFileSync(tmp, junitXml(result, sessionCases(artifactDir)));
  renameSync(tmp, file);
}
