/**
 * task.yaml and the grader-only README.md that `task new` writes, as text with comments (a task
 * author reads them first; the loader's schema, src/task/public/schema.ts, is what they must pass).
 */
import { AUTHOR_MARK } from "./drafts.js";
import type { CandidateRun } from "./curate-run.js";
import type { MadeBundle } from "./bundle.js";

export interface TaskFileInput {
  id: string;
  title: string;
  category: string;
  type: string;
  url: string;
  base: string;
  merge: string;
  testDirs: string[];
  officialModules: string[];
  deselected: Array<{ id: string; reason: string }>;
  gpus: number;
  ranks?: number;
  python?: string;
  timeoutSec?: number;
  env?: Record<string, string>;
  runVerdict: string | null;
}

/** A YAML scalar: JSON's double-quoted strings are YAML's too. */
const q = (s: string) => JSON.stringify(s);

export function taskYaml(t: TaskFileInput): string {
  const python = t.python ?? (t.gpus > 0 ? "python3" : "/usr/bin/python3");
  const lines = [
    "schema_version: 1",
    `id: ${t.id}`,
    `title: ${q(t.title)}`,
    `category: ${t.category}`,
    `type: ${t.type}`,
    "# Written by `infradev task new` from a merged PR. Nothing of the upstream repository is in this",
    "# folder: the pre-PR snapshot, the golden patch (the PR's diff outside test_dirs) and the post-PR",
    "# tests (merge's test_dirs) come from the git cache, seeded offline from hidden/upstream/ (README.md).",
    "source:",
    "  kind: git",
    `  url: ${q(t.url)}`,
    `  base: ${t.base}`,
    `  merge: ${t.merge}`,
    "# The folders of the test files the PR changes; the grader replaces each with merge's version.",
    `test_dirs: [${t.testDirs.map(q).join(", ")}]`,
    "official_tests:",
    "  # The PR's changed test modules that pass at merge.",
    "  paths:",
    ...t.officialModules.map((m) => `    - ${q(m)}`),
    ...(t.deselected.length
      ? ["  # Cases merge fails on the node `curate --run` used, with its reason (needs-more-GPUs by message).", "  deselect:", ...t.deselected.flatMap((d) => [`    - id: ${q(d.id)}`, `      reason: ${q(d.reason)}`])]
      : [`  deselect: []${t.runVerdict ? "" : "  # no curate --run result was given"}`]),
    `ranks: ${t.ranks ?? 1}`,
    `timeout_sec: ${t.timeoutSec ?? 120}`,
    "run_timeout_sec: 900",
    `requires_gpu: ${t.gpus > 0}`,
    ...(t.gpus > 0 ? [`gpus: ${t.gpus}`] : []),
    "env:",
    `  python: ${q(python)}`,
    ...(t.env && Object.keys(t.env).length ? ["  vars:", ...Object.entries(t.env).map(([k, v]) => `    ${k}: ${q(v)}`)] : []),
    "",
  ];
  return lines.join("\n");
}

export function taskReadme(t: TaskFileInput & { subject: string; bundle: MadeBundle; shallow: string[]; run: CandidateRun | null; notes: string[]; hollow: { stubbed: string[]; reverted: string[] } }): string {
  const shallowFlags = t.shallow.map((s) => ` --shallow ${s}`).join("");
  const run = t.run;
  return [
    `# ${t.id} — ${t.subject}`,
    "",
    `Grader-only notes (the agent sees prompt.md and task.yaml without \`merge\` and \`official_tests\`). Scaffolded by`,
    "`infradev task new`; what the author still writes is marked `" + AUTHOR_MARK + "` in prompt.md, hidden/promises.yaml and",
    "hidden/probes/ (`infradev task check` lists each one left).",
    "",
    "## Where the code comes from",
    "",
    `- \`source: git\` — ${t.url}, base \`${t.base}\`, merge \`${t.merge}\`.`,
    `- \`hidden/upstream/${t.id}.bundle\` (${(t.bundle.bytes / 1048576).toFixed(1)} MiB): base's full tree and merge, history cut below base. Seed the cache with it where the URL cannot be reached:`,
    "",
    "  ```sh",
    `  infradev tasks cache import tasks/${t.id}/hidden/upstream/${t.id}.bundle --url ${t.url}${shallowFlags}`,
    "  ```",
    "",
    "## What is graded",
    "",
    `- \`test_dirs\`: ${t.testDirs.map((d) => `\`${d}\``).join(", ")}; \`official_tests.paths\`: ${t.officialModules.map((m) => `\`${m}\``).join(", ")}.`,
    `- Deselected: ${t.deselected.length ? `${t.deselected.length} case(s), each with its reason in task.yaml` : "none"}.`,
    `- The generated hollow (hidden/hollow.patch): ${t.hollow.stubbed.length} function(s) raise NotImplementedError, ${t.hollow.reverted.length} changed one(s) back to base.`,
    "",
    "## curate --run",
    "",
    run
      ? `${run.verdict}: ${run.why}. Base ${run.base.status} (${run.base.wall_s} s), merge ${run.merge.status} (${run.merge.wall_s} s); python ${run.python}, ${run.ranks} rank(s), sandbox ${run.sandbox}.`
      : "Not given: run `infradev curate --repo <repo> --only <merge> --run --out run.json` on a node that runs the tests, then re-scaffold with --run-results run.json (or edit official_tests by hand).",
    ...(t.notes.length ? ["", "## Notes", "", ...t.notes.map((n) => `- ${n}`)] : []),
    "",
    "## Next",
    "",
    `1. prompt.md: every \`${AUTHOR_MARK}\`; check the interface contract names what the tests and probes use.`,
    "2. hidden/promises.yaml: one checkable claim each, quoting prompt.md.",
    "3. hidden/probes/: probes of each promise (a placeholder fails on gold until it is written).",
    "4. hidden/adversarial/ (wrong patches that pass the official tests) and hidden/alternatives/ (correct ones).",
    `5. \`infradev task check ${t.id} --static\`, then the full check on the grading hardware.`,
    "",
  ].join("\n");
}
