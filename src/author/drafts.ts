/**
 * The texts `task new` drafts for the author: prompt.md in the shape of the InfraDev paper's
 * Appendix B (the shape of tasks/*\/prompt.md: what, why, impact, data flow, change scope, behaviour
 * that must hold, what you design yourself, definition of done, interface contract), the
 * promises.yaml skeleton and the probe skeleton. What only the author can write is marked
 * `TODO(author)`; `task check` lists every mark still left (a warning), and a placeholder probe fails
 * on gold until it is written.
 */
import { stringify as toYaml } from "yaml";
import { AUTHOR_MARK } from "../task/public/schema.js";
import type { InterfaceSymbol } from "./python.js";

export { AUTHOR_MARK };

export interface DraftInput {
  id: string;
  title: string;
  repoName: string;
  subject: string;
  /** The PR's description (the merge commit's body). */
  body: string;
  prUrl: string | null;
  codeFiles: Array<{ path: string; added: number; deleted: number; status: string }>;
  testDirs: string[];
  officialModules: string[];
  deselected: Array<{ id: string; reason: string }>;
  gpus: number;
  ranks: number;
  symbols: InterfaceSymbol[];
  /** New or changed official tests: name and the first line of its docstring. */
  tests: Array<{ node: string; doc: string }>;
}

export interface DraftPromise {
  id: string;
  /** The bullet of prompt.md it comes from (its text is the promise's `prompt` fragment). */
  bullet: string;
  test: string;
}

function humanize(testName: string): string {
  const name = testName.split("::").pop()!.replace(/\[.*$/, "").replace(/^test_?/, "");
  return name.replace(/_/g, " ").trim();
}

function slug(s: string): string {
  const full = s.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
  // At most 48 characters, cut at a word.
  const cut = full.length <= 48 ? full : full.slice(0, 49).replace(/-[^-]*$/, "");
  return cut || "promise";
}

/** One draft promise per new or changed test the PR's tests hold (at most 8), each a bullet of the prompt. */
export function draftPromises(tests: DraftInput["tests"]): DraftPromise[] {
  const seen = new Set<string>();
  const out: DraftPromise[] = [];
  for (const t of tests) {
    let id = slug(humanize(t.node));
    while (seen.has(id)) id = `${id}-2`;
    seen.add(id);
    const what = t.doc ? t.doc.replace(/\s+/g, " ").trim() : humanize(t.node);
    out.push({ id, test: t.node, bullet: `${what.replace(/\.$/, "")} (${AUTHOR_MARK}: restate as a behaviour the change must keep; drafted from the PR's test ${t.node.split("::").slice(1).join("::")})` });
    if (out.length === 8) break;
  }
  return out;
}

function contractBlock(symbols: InterfaceSymbol[]): string {
  const shown = symbols.filter((s) => s.change !== "body" && s.kind !== "module" && (s.public || s.referenced));
  if (!shown.length) return `# ${AUTHOR_MARK}: the golden patch adds no public signature; name what the tests and probes use\n`;
  const byFile = new Map<string, InterfaceSymbol[]>();
  for (const s of shown) byFile.set(s.file, [...(byFile.get(s.file) ?? []), s]);
  const lines: string[] = [];
  const newModules = new Set(symbols.filter((s) => s.kind === "module").map((s) => s.file));
  for (const [file, list] of byFile) {
    lines.push(`# ${file}${newModules.has(file) ? " (new)" : ""}`);
    const classes = new Set<string>();
    for (const s of list) {
      const parent = s.qualname.includes(".") ? s.qualname.slice(0, s.qualname.lastIndexOf(".")) : null;
      if (parent && !classes.has(parent) && !list.some((x) => x.qualname === parent)) {
        classes.add(parent);
        lines.push(`class ${parent.split(".").pop()}:  # existing`);
      }
      const indent = parent ? "    " : "";
      const note = s.change === "added" ? "new" : s.new_params?.length ? `new parameter(s): ${s.new_params.join(", ")}` : "signature changed";
      lines.push(`${indent}${s.signature}  # ${note}${s.doc ? `: ${s.doc.length > 110 ? `${s.doc.slice(0, 107)}...` : s.doc}` : ""}`);
      if (s.kind === "class") classes.add(s.qualname);
    }
    lines.push("");
  }
  return lines.join("\n");
}

export function draftPrompt(d: DraftInput, promises: DraftPromise[]): string {
  const body = d.body.split(/\n\s*\n/).map((p) => p.replace(/\s+/g, " ").trim()).filter((p) => p && !/^signed-off-by/i.test(p));
  const changed = d.symbols.filter((s) => s.change === "body").map((s) => `\`${s.qualname}\``);
  const scope = d.codeFiles.map((f) => {
    const own = changed.filter((c) => d.symbols.some((s) => s.file === f.path && `\`${s.qualname}\`` === c));
    return `- ${f.path}${f.status === "A" ? " (new)" : ""}: ${AUTHOR_MARK}: what changes here${own.length ? ` (the PR changes ${own.slice(0, 4).join(", ")}${own.length > 4 ? ", …" : ""})` : ""}`;
  });
  const where = d.gpus > 0 ? `on ${d.gpus === 1 ? "one GPU" : `${d.gpus} GPUs`}` : "on CPU";
  const modules = d.officialModules.map((m) => m.split("/").pop()).join(", ");
  const out = [
    `# ${d.title}`,
    "",
    `This repository is ${d.repoName}. ${AUTHOR_MARK}: two or three sentences on what the code around this change does today (the reader knows the field, not this repository).`,
    "",
    "## What",
    "",
    `${AUTHOR_MARK}: what to build, as behaviour, not as the PR's code. The upstream change is "${d.subject}"${d.prUrl ? ` (${d.prUrl}; do not point the agent to it)` : ""}.`,
    "",
    "## Why",
    "",
    `${AUTHOR_MARK}: why the change is needed.${body.length ? ` The PR's description begins: "${body[0]!.slice(0, 300)}${body[0]!.length > 300 ? "…" : ""}"` : ""}`,
    "",
    "## Impact",
    "",
    `${AUTHOR_MARK}: what gets faster, smaller or correct, and what must not change.`,
    "",
    "## Data flow",
    "",
    `${AUTHOR_MARK}: the path of the data through the changed code, before and after.`,
    "",
    "## Change scope",
    "",
    ...scope,
    "",
    "## Behaviour that must hold",
    "",
    ...(promises.length ? promises.map((p) => `- ${p.bullet}`) : [`- ${AUTHOR_MARK}: one checkable claim per line; hidden/promises.yaml quotes each`]),
    "",
    "## What you design yourself",
    "",
    `${AUTHOR_MARK}: what the agent may decide (private helpers, internal data structures, log messages).`,
    "",
    "## Definition of done",
    "",
    `The tests in ${d.testDirs.join(" and ")} (${modules}) pass ${where}${d.ranks > 1 ? ` with ${d.ranks} ranks` : ""}${d.deselected.length ? `; the ${d.deselected.length} case(s) that need more than this are out of scope` : ""}.`,
    "",
    "## Interface contract",
    "",
    "```python",
    contractBlock(d.symbols).trimEnd(),
    "```",
    "",
  ];
  return out.join("\n");
}

export function draftPromisesYaml(promises: DraftPromise[]): string {
  const head = `# What prompt.md promises, one checkable claim each (drafted by infradev task new from the PR's tests).\n# Every probe marker and every adversarial \`breaks\` names one of these ids; \`prompt\` is a verbatim\n# fragment of prompt.md. ${AUTHOR_MARK}: rewrite each text as the claim a probe checks, add the ones the\n# PR's tests leave out, and drop the ones that are not promises.\n`;
  const list = promises.length
    ? promises.map((p) => {
        const what = p.bullet.split(` (${AUTHOR_MARK}`)[0]!;
        return { id: p.id, text: `${AUTHOR_MARK}: the claim of "${what.slice(0, 120)}"`, prompt: what.length >= 8 ? what : p.bullet };
      })
    : [{ id: "behaviour", text: `${AUTHOR_MARK}: the claim`, prompt: "## Behaviour that must hold" }];
  return head + toYaml(list, { lineWidth: 0 });
}

export function draftProbes(promises: DraftPromise[], ids: string[]): string {
  const tests = (promises.length ? promises.map((p) => ({ id: p.id, from: p.test })) : ids.map((id) => ({ id, from: "" }))).map(
    (p) => `@pytest.mark.probe(promise="${p.id}", kind="state")
def test_${p.id.replace(/-/g, "_")}():
    pytest.fail("${AUTHOR_MARK}: a probe of promise ${p.id}: a case the PR's tests${p.from ? ` (${p.from.split("::").pop()})` : ""} leave out")
`,
  );
  return `"""Hidden probes (drafted by infradev task new). ${AUTHOR_MARK}: replace each placeholder with probes of its
promise (kind: numerical | resource | state | condition); each fails on gold until it is written."""

import pytest


${tests.join("\n\n")}`;
}
