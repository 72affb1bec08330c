/**
 * The order test files start in when two run at once (vitest.config.ts): longest first within each
 * group (`fast`, then `slow`), from the measured wall times in test/helpers/suite-weights.json. With
 * two workers pulling from one queue, longest-first keeps the group's end short (the classic LPT rule):
 * a 16-minute file that started last would run alone at the end. A file the table does not know yet
 * (new since it was measured) is given the table's median, so it neither jumps the queue nor trails it.
 * Refresh the table from a whole run: `npx tsx bench/ci_suite_times.ts --weights test/helpers/suite-weights.json`.
 */
import { readFileSync } from "node:fs";
import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

interface Weights {
  measured: string;
  seconds: Record<string, number>;
}

function loadWeights(): Weights {
  try {
    return JSON.parse(readFileSync(new URL("./suite-weights.json", import.meta.url), "utf8")) as Weights;
  } catch {
    return { measured: "", seconds: {} };
  }
}

/** Files in the order to start them: by group, then longest first (pure, for the test). */
export function orderByWeight<T>(files: T[], key: (f: T) => { group: number; file: string }, seconds: Record<string, number>): T[] {
  const known = Object.values(seconds).sort((a, b) => a - b);
  const median = known.length ? known[Math.floor(known.length / 2)]! : 0;
  const weight = (f: T) => seconds[key(f).file] ?? median;
  return [...files].sort((a, b) => key(a).group - key(b).group || weight(b) - weight(a) || (key(a).file < key(b).file ? -1 : 1));
}

export default class WeightedSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const { seconds } = loadWeights();
    return orderByWeight(files, (f) => ({ group: f.project.config.sequence.groupOrder, file: relative(f.project.config.root, f.moduleId) }), seconds);
  }
}
