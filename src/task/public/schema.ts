import { z } from "zod";

/** The task.yaml format. `schema_version` lets the format evolve without silently misreading old files. */

export const TASK_SCHEMA_VERSION = 1;

export const relPath = z
  .string()
  .min(1, "expected a non-empty relative path")
  .refine((p) => !p.includes("\0"), "must not contain NUL")
  .refine((p) => !p.startsWith("/") && !/^[A-Za-z]:[\\/]/.test(p), "expected a relative path, got an absolute one")
  .refine((p) => !p.split(/[\\/]/).includes(".."), "must stay inside the task folder (no '..')");

const envVarName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "expected an environment variable name");

export const DirSourceSchema = z.strictObject({
  kind: z.literal("dir"),
  path: relPath.describe("pre-PR snapshot folder, relative to the task folder"),
});

export const GitSourceSchema = z.strictObject({
  kind: z.literal("git"),
  url: z.string().min(1),
  base: z.string().regex(/^[0-9a-f]{7,40}$/, "expected a commit sha (pre-PR)"),
  merge: z.string().regex(/^[0-9a-f]{7,40}$/, "expected a commit sha (post-PR)").optional(),
});

export type GitSource = z.infer<typeof GitSourceSchema>;

export const SourceSchema = z.discriminatedUnion("kind", [DirSourceSchema, GitSourceSchema]);

export const HiddenLayoutSchema = z.strictObject({
  dir: relPath.default("hidden"),
  golden_patch: relPath.default("hidden/golden.patch"),
  hollow_patch: relPath.default("hidden/hollow.patch"),
  tests: relPath.default("hidden/tests"),
  probes: relPath.default("hidden/probes"),
  adversarial: relPath.default("hidden/adversarial"),
});

/** A test module of the post-PR test dirs (official_tests, pass_to_pass). */
const testModule = relPath.refine((p) => p.endsWith(".py"), "expected a test module (a .py file)");

/** Cases left out of a list of modules, each with its reason (a case that needs more GPUs than the task has). */
const deselectList = z
  .array(
    z.strictObject({
      id: z.string().regex(/^[^:\s]+\.py::\S+$/, "expected a pytest case id <file.py>::<name>[params]"),
      reason: z.string().min(10, "expected a reason of at least 10 characters"),
    }),
  )
  .default([]);

export const TaskSpecSchema = z.strictObject({
  schema_version: z.literal(TASK_SCHEMA_VERSION),
  id: z.string().regex(/^[a-z0-9][a-z0-9-]*$/, "expected a lowercase id of letters, digits and '-'"),
  title: z.string().min(1),
  category: z.enum(["training", "inference", "rl"]),
  type: z.enum(["feature", "performance", "refactor", "bugfix"]),
  source: SourceSchema,
  test_dirs: z.array(relPath).min(1),
  ranks: z.number().int().min(1).max(1024),
  /**
   * The world sizes the grader runs every suite at (default: `[ranks]`). Grader-only: a wrong patch
   * that is right at one world size only (a constant 2 for the world size) is caught at another.
   */
  world_sizes: z
    .array(z.number().int().min(1).max(1024))
    .min(1)
    .refine((ws) => new Set(ws).size === ws.length, "expected distinct world sizes")
    .optional(),
  /**
   * Which of the post-PR test modules the official sessions run (default: every test under
   * test_dirs), and cases left out with the reason (a case that needs more GPUs than the task has).
   * Grader-only, as world_sizes is. A real repository's test dirs hold far more than the PR's tests.
   */
  official_tests: z
    .strictObject({
      paths: z.array(testModule).min(1).optional(),
      deselect: deselectList,
    })
    .optional(),
  /**
   * The repository's other tests that must keep passing (SWE-bench's PASS_TO_PASS): modules of the
   * post-PR test dirs beside the PR's own, which a patch could break by changing code the PR did not
   * touch. They run in the official sessions (no extra launcher start-up) and are scored as their own
   * suite (`pass_to_pass`), counted in Set A and Set B and reported apart. Needs official_tests.paths
   * (with every test of the test dirs official there would be nothing left to name); no module may be
   * in both lists (loader.ts checks). Grader-only, as official_tests is.
   */
  pass_to_pass: z
    .strictObject({
      paths: z.array(testModule).min(1),
      deselect: deselectList,
    })
    .optional(),
  timeout_sec: z.number().positive().max(86_400).describe("per test"),
  run_timeout_sec: z.number().positive().max(7 * 86_400).default(1800),
  modes: z.record(z.string().regex(/^[a-z0-9_-]+$/, "expected a mode name of [a-z0-9_-]"), z.record(envVarName, z.string())).default({ default: {} }),
  requires_gpu: z.boolean().default(false),
  /**
   * pytest plugins the task's tests need, loaded by name (`-p NAME`) in every session: plugin
   * autoload from entry points is off in the sandbox (a submission could register one).
   */
  pytest_plugins: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/, "expected a plugin module name (dotted identifiers)")).default([]),
  image: z.string().min(1).optional().describe("container image for the docker sandbox"),
  gpus: z.union([z.literal("all"), z.number().int().min(0), z.array(z.string())]).optional(),
  env: z
    .strictObject({
      python: z.string().min(1).default("/usr/bin/python3"),
      lock: z.string().optional(),
      vars: z.record(envVarName, z.string()).default({}),
      /**
       * Folders of the task's own (public part, never hidden/) put first on PYTHONPATH of every
       * process that runs the task's Python: import-only stand-ins for packages the grading image
       * lacks. Relative to the task folder; each is copied by the host and mounted read-only at
       * /opt/infradev/pythonpath/<i> (sandbox/task-pythonpath.ts). The loader checks that each is a
       * real folder inside the task folder (loader.ts taskPythonPath).
       */
      pythonpath: z.array(relPath).default([]),
    })
    .default({ python: "/usr/bin/python3", vars: {}, pythonpath: [] }),
  hidden: HiddenLayoutSchema.default({
    dir: "hidden",
    golden_patch: "hidden/golden.patch",
    hollow_patch: "hidden/hollow.patch",
    tests: "hidden/tests",
    probes: "hidden/probes",
    adversarial: "hidden/adversarial",
  }),
});

export type TaskSpec = z.infer<typeof TaskSpecSchema>;

export const PROBE_KINDS = ["numerical", "resource", "state", "condition"] as const;
export type ProbeKind = (typeof PROBE_KINDS)[number];

/**
 * The mark `infradev task new` leaves where only the task author can write (prompt.md, promises,
 * probes); `task check` reports every one still there.
 */
export const AUTHOR_MARK = "TODO(author)";
