/**
 * The host parses no JUnit XML any more: per-rank results reach it only as JSON in the rank
 * launcher's result bundle (sandbox/ranks.ts, sandbox/merge.ts). This module only keeps the outcome
 * type where older imports look for it.
 */
export type { CaseOutcome } from "./merge.js";
