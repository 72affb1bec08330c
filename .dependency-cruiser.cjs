/**
 * The walls between the rooms of src/, checked on every `npm test` (`npm run lint:imports`).
 * docs/architecture.md draws the picture; this file is what holds it. Type-only imports count too
 * (tsPreCompilationDeps): a room that may not know another may not name its types either.
 *
 *   cli → campaign → server | grader → tools → runner → sandbox → task/public → lib
 *   grader, campaign (and cli) → task/hidden → task/public
 *   author (curate, task new) → runner → sandbox → task/public → lib
 */
const room = (name) => `^src/${name}/`;

/** Rooms each room may NOT import (besides the rules that hold everywhere: no circle, nothing imports cli). */
const layers = [
  { name: "lib-imports-nothing-of-ours", from: "^src/lib/", to: "^src/(?!lib/)", comment: "lib/ is the floor: small helpers with no knowledge of any room" },
  { name: "task-public-is-low", from: room("task/public"), to: "^src/(?!lib/|task/public/)", comment: "the public task door knows only lib/" },
  { name: "task-hidden-is-low", from: room("task/hidden"), to: "^src/(?!lib/|task/)", comment: "the grader's door into hidden/ knows only the public door and lib/" },
  { name: "sandbox-knows-no-task-code", from: room("sandbox"), to: "^src/(?!lib/|sandbox/)", comment: "sandboxes isolate commands; they know nothing of tasks, tools, grading or campaigns" },
  { name: "runner-is-below-tools", from: room("runner"), to: "^src/(?!lib/|sandbox/|runner/|task/public/)", comment: "the multi-rank runner sits on a sandbox; tools and the grader call it" },
  { name: "tools-are-below-the-server", from: room("tools"), to: "^src/(?!lib/|sandbox/|runner/|task/public/|tools/)", comment: "tools never import the server, the grader, campaigns or hidden task code" },
  { name: "server-never-reaches-the-grader", from: room("server"), to: "^src/(grader|task/hidden|campaign)/", comment: "nothing reachable from the MCP server may open a task's hidden part or know how grading works" },
  { name: "author-tools-stand-apart", from: room("author"), to: "^src/(?!lib/|sandbox/|runner/|task/public/|author/)", comment: "the task author's tools (curate, task new) read git and run tests through the runner; they never reach the grader, the server, campaigns or hidden task code" },
  { name: "nothing-imports-the-author-tools", from: "^src/(?!author/|cli/)", to: room("author"), comment: "curate and the scaffold are the author's: only the CLI calls them" },
  { name: "grader-is-not-a-server", from: room("grader"), to: "^src/(server|tools|campaign)/", comment: "the grader runs suites through runner/ and sandbox/, never through the agent's tools" },
];

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "a circle makes two rooms one; split the interface from the implementations instead (see campaign/engines/types.ts + registry.ts)",
      from: {},
      to: { circular: true },
    },
    {
      name: "nothing-imports-cli",
      severity: "error",
      comment: "cli/ turns flags into one call; what another room needs from it belongs in that room",
      from: { pathNot: "^src/cli/" },
      to: { path: "^src/cli/" },
    },
    {
      name: "only-grader-and-campaign-open-hidden",
      severity: "error",
      comment: "task/hidden/ (golden patch, probes, post-PR tests) is the grader's: only grader/, campaign/ and cli/ may import it",
      from: { pathNot: "^src/(grader|campaign|cli|task/hidden)/" },
      to: { path: "^src/task/hidden/" },
    },
    ...layers.map(({ name, from, to, comment }) => ({ name, severity: "error", comment, from: { path: from }, to: { path: to } })),
    {
      name: "not-to-unresolvable",
      severity: "error",
      comment: "an import that resolves to nothing is a typo or a file that moved",
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(node_modules|dist|tasks|test|bench)/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"], extensions: [".ts", ".js", ".mjs", ".json"] },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
