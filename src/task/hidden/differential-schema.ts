import { z } from "zod";
import { PROBE_KINDS } from "../public/schema.js";

/**
 * hidden/differential.yaml: golden-differential probes. The author names the interface the prompt
 * gives (entry points), a workload driver (Python, seeded), and per promise a rule that compares
 * the submission with golden on the same workload: values (bitwise or to a tolerance) or a figure
 * measured per call and per rank (bytes on the wire, number of collectives, peak memory) against a
 * formula over `golden` (golden's figure for the same call) and the facts the driver records.
 * The grader turns it into probe cases (src/task/hidden/differential.ts), one per rule.
 */

const id = z.string().regex(/^[a-z0-9][a-z0-9-]*$/, "expected a lowercase id of letters, digits and '-'");

const relFile = z
  .string()
  .min(1, "expected a non-empty relative path")
  .refine((p) => !p.includes("\0"), "must not contain NUL")
  .refine((p) => !p.startsWith("/") && !p.split(/[\\/]/).includes(".."), "expected a path inside hidden/ (relative, no '..')");

const glob = z.string().min(1).regex(/^[A-Za-z0-9_.:*?[\]!#/-]+$/, "expected a name pattern (fnmatch: * ? [..])");

export const METRIC = /^(values|bytes|collectives|peak_memory|bytes:[a-z_]+|collectives:[a-z_]+|fact:[A-Za-z_][A-Za-z0-9_]*)$/;

const ruleText = z.string().min(2);

export const DifferentialRuleSchema = z
  .strictObject({
    id,
    promise: z.string().min(1),
    kind: z.enum(PROBE_KINDS),
    metric: z.string().regex(METRIC, "expected values, bytes, collectives, peak_memory, bytes:<op>, collectives:<op> or fact:<name>"),
    /** values: which recorded values (names, fnmatch) the rule compares; default all. */
    values: z.array(glob).min(1).optional(),
    compare: z.enum(["bitwise", "tolerance"]).optional(),
    rtol: z.number().min(0).optional(),
    atol: z.number().min(0).optional(),
    /** resource metrics: which recorded calls (names, fnmatch); default all. */
    calls: z.array(glob).min(1).optional(),
    /** resource metrics: `<op> <expression>`, e.g. `<= golden * (1 + 0.1)` or `<= 16 * P + 64`. */
    rule: ruleText.optional(),
  })
  .superRefine((r, ctx) => {
    const values = r.metric === "values";
    const only = (field: string, forValues: boolean) =>
      ctx.addIssue({ code: "custom", path: [field], message: `only for ${forValues ? "metric values" : "a resource metric (not values)"} (metric is ${r.metric})` });
    if (values) {
      if (r.rule !== undefined) only("rule", false);
      if (r.calls !== undefined) only("calls", false);
      if (r.compare === "tolerance" && r.rtol === undefined && r.atol === undefined) ctx.addIssue({ code: "custom", path: ["compare"], message: "tolerance needs rtol and/or atol" });
      if (r.compare !== "tolerance" && (r.rtol !== undefined || r.atol !== undefined)) ctx.addIssue({ code: "custom", path: ["rtol"], message: "rtol / atol need compare: tolerance" });
    } else {
      for (const f of ["values", "compare", "rtol", "atol"] as const) if (r[f] !== undefined) only(f, true);
      if (r.rule === undefined) ctx.addIssue({ code: "custom", path: ["rule"], message: `required for metric ${r.metric} (e.g. "<= golden", "<= 16 * P + 64")` });
    }
  });
export type DifferentialRule = z.infer<typeof DifferentialRuleSchema>;

export const DifferentialSchema = z.strictObject({
  /** The top-level package whose golden version (base + golden.patch) is loaded privately. */
  package: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "expected a top-level Python package name"),
  /** The interface the prompt names, dotted (`pkg.mod.Class`); each last part must appear in prompt.md. */
  entry_points: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_.]*$/, "expected a dotted Python name")).min(1),
  /** The workload driver, relative to hidden/. */
  driver: relFile,
  seed: z.number().int().min(0).default(0),
  budget: z
    .strictObject({
      workloads: z.number().int().min(1).max(10_000),
      seconds: z.number().positive(),
      shrink_seconds: z.number().positive().optional(),
      shrink_runs: z.number().int().min(0).optional(),
    })
    .default({ workloads: 16, seconds: 60 }),
  /** Where the rules apply; elsewhere every rule's case is skipped with the reason. Default: all. */
  world_sizes: z.array(z.number().int().min(1)).min(1).optional(),
  /** The names the driver records per call, which a rule's formula may use besides `golden`. */
  facts: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "expected a Python identifier")).default([]),
  collective_timeout_sec: z.number().positive().default(10),
  rules: z.array(DifferentialRuleSchema).min(1, "expected at least one rule"),
});
export type DifferentialSpec = z.infer<typeof DifferentialSchema>;

const OPS = ["<=", ">=", "==", "<", ">"] as const;

/**
 * Checks a rule's text (`<op> <expression>`): numbers, names, + - * / //, parentheses, min(..) and
 * max(..); every name must be `golden` or a declared fact. Returns the problem, or null.
 * Mirrors python/host/infradev_differential.py parse_rule, which evaluates it.
 */
export function ruleProblem(text: string, facts: readonly string[]): string | null {
  const t = text.trim();
  const op = OPS.find((o) => t.startsWith(o));
  if (!op) return `expected it to start with one of ${OPS.join(", ")}`;
  const tokens = t.slice(op.length).match(/\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?|[A-Za-z_][A-Za-z0-9_]*|\/\/|[-+*/(),]|\S)/g)?.map((s) => s.trim()) ?? [];
  if (!tokens.length) return `no expression after ${op}`;
  const known = new Set(["golden", ...facts]);
  let i = 0;
  const peek = () => tokens[i];
  const fail = (why: string): never => {
    throw new Error(why);
  };
  const atom = (): void => {
    const tok = peek();
    if (tok === undefined) fail("the expression ends too early");
    i++;
    if (tok === "-" || tok === "+") return atom();
    if (tok === "(") {
      sum();
      if (tokens[i++] !== ")") fail("a '(' is not closed");
      return;
    }
    if (/^\d/.test(tok!)) return;
    if (/^[A-Za-z_]/.test(tok!)) {
      if (tok === "min" || tok === "max") {
        if (tokens[i++] !== "(") fail(`${tok} must be called: ${tok}(a, b)`);
        sum();
        while (peek() === ",") {
          i++;
          sum();
        }
        if (tokens[i++] !== ")") fail(`${tok}( is not closed`);
        return;
      }
      if (!known.has(tok!)) fail(`unknown name "${tok}" (known: ${[...known].join(", ")}; declare the driver's facts under facts:)`);
      return;
    }
    fail(`unexpected "${tok}"`);
  };
  const product = (): void => {
    atom();
    while (peek() === "*" || peek() === "/" || peek() === "//") {
      i++;
      atom();
    }
  };
  function sum(): void {
    product();
    while (peek() === "+" || peek() === "-") {
      i++;
      product();
    }
  }
  try {
    sum();
    if (i < tokens.length) fail(`unexpected "${tokens[i]}"`);
  } catch (e) {
    return (e as Error).message;
  }
  return null;
}
