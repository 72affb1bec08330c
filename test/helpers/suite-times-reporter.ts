/**
 * Two jobs for a vitest run over the `fast` and `slow` projects (vitest.config.ts):
 *
 * - the per-suite time table at the end (suite-times.ts; INFRADEV_SUITE_TABLE=0: not printed), also written as JSON to
 *   $INFRADEV_SUITE_TIMES (default test-results/suite-times.json) for bench/ci_suite_times.ts;
 * - fail fast: when a file of the `fast` project has failed, the run is cancelled once the last fast
 *   file has ended, before the `slow` project starts, so a broken unit test costs minutes, not the
 *   whole slow half (and every fast failure is still shown). INFRADEV_NO_FAIL_FAST=1 runs everything.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, relative, resolve } from "node:path";
import type { Reporter, TestModule, TestSpecification, Vitest } from "vitest/node";
import { suiteTable, type SuiteTime } from "./suite-times.js";

/** CPU seconds every core of the machine has spent busy since boot (user, nice, sys, irq: all but idle). */
function machineBusySeconds(): number {
  return cpus().reduce((n, c) => n + c.times.user + c.times.nice + c.times.sys + c.times.irq, 0) / 1000;
}

export default class SuiteTimesReporter implements Reporter {
  private vitest!: Vitest;
  private readonly started = new Map<string, { wall: number; busy: number }>();
  private readonly suites: SuiteTime[] = [];
  private readonly runStart = Date.now();
  private readonly loadStart = loadavg()[0]!;
  private fastFailed: string | null = null;
  private fastLeft = 0;
  private cancelled = false;

  onInit(vitest: Vitest): void {
    this.vitest = vitest;
  }

  onTestRunStart(specs: ReadonlyArray<TestSpecification>): void {
    this.fastLeft = specs.filter((s) => s.project.name === "fast").length;
  }

  onTestModuleStart(m: TestModule): void {
    this.started.set(m.moduleId, { wall: Date.now(), busy: machineBusySeconds() });
    // A slow file that starts anyway (a fast file that never reported its end) stops here.
    if (m.project.name === "slow") this.failFast();
  }

  onTestModuleEnd(m: TestModule): void {
    const start = this.started.get(m.moduleId) ?? { wall: Date.now(), busy: machineBusySeconds() };
    const tests = [...m.children.allTests()];
    const failed = tests.filter((t) => t.result().state === "failed").length;
    const file = relative(this.vitest.config.root, m.moduleId);
    this.suites.push({ file, project: m.project.name, seconds: (Date.now() - start.wall) / 1000, started_s: (start.wall - this.runStart) / 1000, cpu_s: Math.round((machineBusySeconds() - start.busy) * 10) / 10, tests: tests.length, failed, skipped: tests.filter((t) => t.result().state === "skipped").length });
    if (m.project.name !== "fast") return;
    if (!this.fastFailed && (failed > 0 || m.state() === "failed")) this.fastFailed = file;
    if (--this.fastLeft <= 0) this.failFast();
  }

  /** Cancels the run when a fast file failed: the slow project's files are then never started. */
  private failFast(): void {
    if (!this.fastFailed || this.cancelled || process.env.INFRADEV_NO_FAIL_FAST === "1") return;
    this.cancelled = true;
    process.stderr.write(`\n[fail fast] ${this.fastFailed} failed in the fast project: the slow project is not run (INFRADEV_NO_FAIL_FAST=1 runs it anyway)\n`);
    void this.vitest.cancelCurrentRun("test-failure");
  }

  onTestRunEnd(): void {
    if (!this.suites.length) return;
    const times = { ended_at: new Date().toISOString(), wall_s: (Date.now() - this.runStart) / 1000, cores: cpus().length, load: { start: this.loadStart, end: loadavg()[0]! }, suites: this.suites };
    const file = resolve(this.vitest.config.root, process.env.INFRADEV_SUITE_TIMES ?? "test-results/suite-times.json");
    try {
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, `${JSON.stringify(times, null, 2)}\n`);
    } catch (e) {
      process.stderr.write(`suite times: could not write ${file}: ${(e as Error).message}\n`);
    }
    // Only when more than one file ran (a single file's run needs no table), and not when the caller
    // prints it itself (.ci/run: INFRADEV_SUITE_TABLE=0).
    if (this.suites.length > 1 && process.env.INFRADEV_SUITE_TABLE !== "0") process.stdout.write(`\nper-suite times (${file}):\n${suiteTable(times).join("\n")}\n`);
  }
}
