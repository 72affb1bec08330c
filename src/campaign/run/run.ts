/**
 * `infradev run`: one agent harness on one task, then its grade. In order: a public export of the
 * task (no hidden part), a run of our server made ahead on that export (so every attempt of the
 * harness resumes the same workspace), a private harness config naming only that server and the
 * model endpoint (or the scripted stand-in model), the harness's attempts under one time budget
 * (re-prompted while it exits without submit, up to --recoveries), then our own resume of the run
 * to save the patch and close the trace (Codex kills its servers ~0.1 s after asking them to stop),
 * run.json, and `infradev grade` as a process.
 *
 * The out folder D is resumable (common13.md): run.json + grade.json → nothing to do; run.json
 * alone → grade only; neither → a fresh start (a killed attempt's leftovers are cleared).
 */
import { isPathInside } from "../../lib/path-validation.js";
import { spawn } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { UsageError } from "../../lib/errors.js";
import { readRegularFile, readRegularText } from "../../lib/safe-fs.js";
import { bundledTasksDir, packageRoot } from "../../lib/paths.js";
import { SYSTEM_DIRS } from "../../sandbox/local/mounts.js";
import { createBaseCheckout } from "../../server/base-checkout.js";
import { openRun } from "../../server/run-dir.js";
import { loadPublicTask, resolveTaskDir } from "../../task/public/loader.js";
import { loadGraderTask } from "../../task/hidden/grader-task.js";
import type { ConnectOptions } from "../harness/mcp-entry.js";
import { startEgressProxy, type EgressProxy } from "./egress-proxy.js";
import { exportPublicTask } from "./export.js";
import { runAttempt, type AttemptResult } from "../harness/attempt.js";
import { codexServerTable, prepareCodex } from "../harness/codex.js";
import { prepareOpencode } from "../harness/opencode.js";
import { RELAY_PORT, startRunContainer, type DockerRunOptions, type RunContainer } from "./run-docker.js";
import { emptyTally, type HarnessSetup, type PreparedHarness } from "../harness/types.js";
import { STANDIN_PREFIX, standinSteps } from "../standin/script.js";
import { startStandin, type StandinServer } from "../standin/server.js";
import { GRADE_FILE, HARNESS_EVENTS_FILE, HARNESS_STDERR_FILE, PATCH_FILE, RUN_RECORD_FILE, TRACE_FILE, runId as makeRunId, type ExitReason, type RunRecord } from "../types.js";
import { writeJsonAtomic } from "../../lib/json.js";

export const ATTEMPTS_FILE = "attempts.json";
export const STANDIN_REQUESTS_FILE = "standin-requests.jsonl";
/** Docker mode: what the egress proxy forwarded to the model endpoint, one line per request. */
export const EGRESS_FILE = "egress.jsonl";
/** Docker mode: the run's container (name, id, image, network), written when it starts. */
export const CONTAINER_FILE = "container.json";
/** Caps on what the host reads back of files the agent's side could write (docker: the whole run folder). */
const PATCH_MAX_BYTES = 64 << 20;
const TRACE_MAX_BYTES = 256 << 20;

export interface RunOptions {
  task: string;
  tasksDir?: string;
  agent: "codex" | "opencode";
  model: string;
  providerUrl?: string;
  providerKeyEnv?: string;
  name: string;
  repeat: number;
  timeLimitMin: number;
  skill: boolean;
  recoveries: number;
  out: string;
  sandbox: "local" | "none" | "docker";
  /** --sandbox docker: the image and limits of the run's container (also passed to the grader). */
  docker?: DockerRunOptions;
  grade: boolean;
  python?: string;
  calibrationDir?: string;
  gradeOut?: string;
  onProgress?: (msg: string) => void;
  signal?: AbortSignal;
}

export interface RunOutcome {
  record: RunRecord;
  /** What this invocation did: the run and its grade, the grade only, or nothing (both were there). */
  did: "ran" | "graded" | "nothing";
  gradeError: string | null;
}

/** What the harness is told first (the task prompt) and on each recovery. */
export function instruction(prompt: string): string {
  return `${prompt.trim()}\n\n---\nWork through the infradev MCP tools: the repository is in their sandboxed workspace (get_task, run_shell, pytest_collect, pytest_run, measure, submit). Call submit when you are done.\n`;
}
export const RECOVERY_PROMPT = "You stopped before calling the infradev submit tool. Continue the task from where you left off, and call submit when you are done.";


const readJson = <T>(file: string): T | null => (existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as T) : null);

/** Tool calls per tool from a trace (lines that name a tool; session events do not). */
export function toolsUsed(traceText: string): Record<string, number> {
  const used: Record<string, number> = {};
  for (const line of traceText.split("\n")) {
    if (!line.trim()) continue;
    try {
      const r = JSON.parse(line) as { tool?: unknown };
      if (typeof r.tool === "string") used[r.tool] = (used[r.tool] ?? 0) + 1;
    } catch {
      // A line cut by a kill: not a call.
    }
  }
  return used;
}

function cliEntry(): string {
  return join(packageRoot(), "dist", "cli", "main.js");
}

/** Runs `node <cli> args…` to its end; stdout and stderr collected. */
function runCli(args: string[], opts: { timeoutMs: number; closeStdin?: boolean }): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((res) => {
    const child = spawn(process.execPath, [cliEntry(), ...args], { stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
    if (opts.closeStdin) child.stdin.end();
    const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs);
    child.once("error", (e) => {
      clearTimeout(timer);
      res({ code: null, stdout, stderr: `${stderr}${e.message}` });
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      res({ code, stdout, stderr });
    });
  });
}

/** Clears what a killed earlier attempt left in D (never D itself, never other files). */
function clearLeftovers(out: string): void {
  for (const f of [RUN_RECORD_FILE, GRADE_FILE, PATCH_FILE, TRACE_FILE, HARNESS_EVENTS_FILE, HARNESS_STDERR_FILE, ATTEMPTS_FILE, STANDIN_REQUESTS_FILE, EGRESS_FILE, CONTAINER_FILE]) rmSync(join(out, f), { force: true });
  rmSync(join(out, "grade"), { recursive: true, force: true });
}

async function gradeRun(o: RunOptions, out: string, record: RunRecord): Promise<string | null> {
  const gradeOut = resolve(o.gradeOut ?? join(out, "grade"));
  const args = ["grade", "--json", "--task", o.task, "--patch", join(out, PATCH_FILE), "--out", gradeOut, "--sandbox", o.sandbox];
  if (o.tasksDir) args.push("--tasks-dir", resolve(o.tasksDir));
  if (o.calibrationDir) args.push("--calibration-dir", resolve(o.calibrationDir));
  if (o.python) args.push("--python", o.python);
  if (o.sandbox === "docker") args.push(...graderDockerArgs(o.docker ?? {}));
  o.onProgress?.(`grading ${PATCH_FILE} (${record.patch_bytes} bytes)`);
  const r = await runCli(args, { timeoutMs: 6 * 3600_000 });
  let result: { status?: unknown } | null = null;
  try {
    result = JSON.parse(r.stdout) as { status?: unknown };
  } catch {
    result = null;
  }
  if (!result || typeof result.status !== "string") return `infradev grade exited ${r.code}: ${r.stderr.trim().split("\n").slice(-3).join(" | ") || "no result on stdout"}`;
  writeJsonAtomic(join(out, GRADE_FILE), result);
  writeJsonAtomic(join(out, RUN_RECORD_FILE), { ...record, grade: { status: result.status, file: GRADE_FILE } } satisfies RunRecord);
  return null;
}

/** The docker flags of `infradev grade` for the run's docker options (the grader makes its own container). */
export function graderDockerArgs(d: DockerRunOptions): string[] {
  const args: string[] = [];
  if (d.image) args.push("--image", d.image);
  if (d.hostSystemMounts) args.push("--host-system-mounts");
  if (d.gpus !== undefined) args.push("--gpus", Array.isArray(d.gpus) ? d.gpus.join(",") : d.gpus === 0 ? "none" : String(d.gpus));
  if (d.memoryMb !== undefined) args.push("--memory-mb", String(d.memoryMb));
  if (d.pidsLimit !== undefined) args.push("--pids-limit", String(d.pidsLimit));
  if (d.cpus !== undefined) args.push("--cpus", String(d.cpus));
  if (d.shmSizeMb !== undefined) args.push("--shm-mb", String(d.shmSizeMb));
  return args;
}

/** session.json's submitted_at, read without following a link (docker: the container could have planted one). */
function submittedIn(sessionFile: string): boolean {
  try {
    return (JSON.parse(readRegularText(sessionFile, 1 << 20).text) as { submitted_at?: string | null }).submitted_at != null;
  } catch {
    return false;
  }
}

const inside = isPathInside;

/**
 * The server runs on the export and hides only the export; the real task folder stays unseen by
 * the local sandbox because that binds the system folders alone (/usr, /etc, …). A task folder
 * under one of them (other than the package's own tasks, which every sandbox masks) would be
 * readable through run_shell, hidden part included: refused.
 */
export function checkTaskFolderUnseen(taskRef: string, tasksDir: string | undefined): void {
  const real = realpathSync(resolveTaskDir(taskRef, tasksDir ?? bundledTasksDir()));
  if (inside(realpathSync(bundledTasksDir()), real)) return;
  const system = SYSTEM_DIRS.find((d) => inside(d, real));
  if (system) throw new UsageError(`run: the task folder ${real} lies under ${system}, which the sandbox binds read-only: the agent could read its hidden part; copy the tasks folder elsewhere (e.g. under your home) and pass --tasks-dir`);
}

/** What a run holds while it runs: closed (and the temp folder removed) whatever happens. */
interface RunResources {
  tmp: string;
  standin: StandinServer | null;
  proxy: EgressProxy | null;
  container: RunContainer | null;
}

/** The run's exported task, its server-side run folder and the MCP server entry the harness starts. */
interface ServedRun {
  exp: ReturnType<typeof exportPublicTask>;
  runsDir: string;
  session: Awaited<ReturnType<typeof openRun>>["session"];
  serverSandbox: "local" | "none";
}

type AttemptRecord = AttemptResult & { attempt: number; session_id: string | null };

/**
 * `infradev run`: one agent harness on one task, then (with `grade`) its grade. Phases: the public
 * export and the server's run folder; the model endpoint (stand-in or real, through the egress proxy
 * in docker mode); the harness (and its container); the attempts with recovery re-prompts; the patch
 * saved by our own `serve --resume`; run.json. A run whose run.json says it ended is not run again.
 */
export async function runAgentOnTask(o: RunOptions): Promise<RunOutcome> {
  const out = resolve(o.out);
  mkdirSync(out, { recursive: true });
  const existing = readJson<RunRecord>(join(out, RUN_RECORD_FILE));
  if (existing?.ended_at) {
    if (!o.grade || existsSync(join(out, GRADE_FILE))) return { record: existing, did: "nothing", gradeError: null };
    const gradeError = await gradeRun(o, out, existing);
    return { record: readJson<RunRecord>(join(out, RUN_RECORD_FILE))!, did: "graded", gradeError };
  }
  clearLeftovers(out);

  const publicTask = loadPublicTask(o.task, o.tasksDir);
  checkTaskFolderUnseen(o.task, o.tasksDir);
  if (o.sandbox === "none") o.onProgress?.("--sandbox none: the agent's commands run as plain processes on this host; NOTHING is isolated, the task's hidden part included");
  const id = makeRunId(publicTask.id, o.name, o.repeat);
  const startedAt = new Date();
  const deadline = startedAt.getTime() + o.timeLimitMin * 60_000;
  // A stand-in script that does not load is a usage error before anything is made.
  const steps = o.model.startsWith(STANDIN_PREFIX) ? standinSteps(o.model.slice(STANDIN_PREFIX.length), loadGraderTask(o.task, o.tasksDir)) : null;
  const docker = o.sandbox === "docker";
  const image = docker ? (o.docker?.image ?? publicTask.spec.image) : undefined;
  if (docker && !image) throw new UsageError(`run: --sandbox docker needs an image and task ${publicTask.id} names none: pass --image <image> or set \`image:\` in its task.yaml`);
  const res: RunResources = { tmp: mkdtempSync(join(tmpdir(), `infradev-run-${publicTask.id}-`)), standin: null, proxy: null, container: null };
  try {
    const served = await serveExport(o, publicTask, res.tmp);
    const endpoint = await startModelEndpoint(o, out, res, steps);
    const harness = await prepareHarness(o, out, res, served, endpoint, id, image);
    const attempted = await runAttempts(o, out, res, served, harness, deadline);
    await res.standin?.close();
    res.standin = null;
    const saved = await savePatch(o, out, res, served, attempted);
    const record = writeRunRecord(o, out, { id, publicTask, harness, startedAt, attempted: { ...attempted, ...saved }, session: served.session });
    const gradeError = o.grade ? await gradeRun(o, out, record) : null;
    return { record: readJson<RunRecord>(join(out, RUN_RECORD_FILE))!, did: "ran", gradeError };
  } finally {
    await res.container?.remove().catch(() => undefined);
    await res.proxy?.close();
    await res.standin?.close();
    if (process.env.INFRADEV_KEEP_RUN_TMP !== "1") rmSync(res.tmp, { recursive: true, force: true });
  }
}

/** The public export of the task, the server's run folder over it, and the base checkout measure compares with. */
async function serveExport(o: RunOptions, publicTask: ReturnType<typeof loadPublicTask>, tmp: string): Promise<ServedRun> {
  // In docker mode the container is the sandbox: the server inside runs its tools as plain processes there.
  const serverSandbox = o.sandbox === "docker" ? "none" : (o.sandbox as "local" | "none");
  const exp = exportPublicTask(publicTask, join(tmp, "export"));
  const runsDir = join(tmp, "runs");
  const { session } = await openRun({ task: exp.task, runsDir, taskDir: exp.taskDir });
  await createBaseCheckout(session.paths.workspaceDir, session.paths.baseDir, session.baseCommit);
  return { exp, runsDir, session, serverSandbox };
}

interface ModelEndpoint {
  providerUrl: string;
  keyEnv: string;
  key: string;
  /** The URL the harness is given (docker: the relay inside the container). */
  harnessUrl: string;
  socketDir: string;
}

/** The model the harness talks to: the real endpoint, or the scripted stand-in; in docker mode only through the egress proxy. */
async function startModelEndpoint(o: RunOptions, out: string, res: RunResources, steps: ReturnType<typeof standinSteps> | null): Promise<ModelEndpoint> {
  let providerUrl = o.providerUrl ?? "";
  let keyEnv = o.providerKeyEnv ?? "";
  let key = keyEnv ? (process.env[keyEnv] ?? "") : "";
  if (steps) {
    const log = join(out, STANDIN_REQUESTS_FILE);
    res.standin = await startStandin({ steps, onRequest: (r) => appendFileSync(log, `${JSON.stringify(r)}\n`) });
    providerUrl = res.standin.url;
    keyEnv = "INFRADEV_STANDIN_KEY";
    key = "stand-in-model-no-key";
  }
  let harnessUrl = providerUrl;
  const socketDir = join(res.tmp, "egress");
  if (o.sandbox === "docker") {
    mkdirSync(socketDir);
    const egressLog = join(out, EGRESS_FILE);
    res.proxy = await startEgressProxy({ socketPath: join(socketDir, "model.sock"), target: providerUrl, onRequest: (r) => appendFileSync(egressLog, `${JSON.stringify(r)}\n`) });
    const u = new URL(providerUrl);
    harnessUrl = `http://127.0.0.1:${RELAY_PORT}${u.pathname === "/" ? "" : u.pathname}${u.search}`;
  }
  return { providerUrl, keyEnv, key, harnessUrl, socketDir };
}

/** The harness adapter with its private config naming our server; in docker mode wrapped to run in the run's container. */
async function prepareHarness(o: RunOptions, out: string, res: RunResources, { exp, runsDir, session, serverSandbox }: ServedRun, endpoint: ModelEndpoint, id: string, image: string | undefined): Promise<PreparedHarness> {
  const { harnessUrl, keyEnv, key, socketDir } = endpoint;
  const connect: ConnectOptions = { task: exp.task.id, sandbox: serverSandbox, runsDir, tasksDir: exp.tasksDir, node: process.execPath, cli: cliEntry() };
  const extraArgs = ["--resume", session.runId, ...(o.python ? ["--python", o.python] : [])];
  const setup: HarnessSetup = { root: join(res.tmp, "harness"), serveArgv: [], runTimeoutSec: exp.task.spec.run_timeout_sec, model: o.model, providerUrl: harnessUrl, providerKeyEnv: keyEnv, providerKey: key, skill: o.skill };
  let harness: PreparedHarness =
    o.agent === "codex" ? prepareCodex(setup, codexServerTable(connect, setup.runTimeoutSec, extraArgs)) : prepareOpencode(setup, connect, extraArgs);
  if (o.sandbox === "docker") {
    o.onProgress?.(`starting the run's container from ${image} (network none; the model endpoint through the egress proxy only)`);
    res.container = await startRunContainer({
      runId: id,
      image: image!,
      docker: o.docker ?? {},
      readOnly: [exp.tasksDir],
      readWrite: [runsDir, setup.root],
      realTaskDir: realpathSync(resolveTaskDir(o.task, o.tasksDir ?? bundledTasksDir())),
      socketDir,
      socketPath: join(socketDir, "model.sock"),
      workdir: harness.cwd,
    });
    writeJsonAtomic(join(out, CONTAINER_FILE), { name: res.container.name, id: res.container.id, image: res.container.image, network: "none", relay: harnessUrl });
    harness = res.container.wrap(harness);
  }

  return harness;
}

interface Attempted {
  exitReason: ExitReason;
  error: string | null;
  attempts: AttemptRecord[];
  tally: ReturnType<typeof emptyTally>;
}

/** The first prompt, then recovery re-prompts of the same session until the agent submits, the time is up or the harness fails. */
async function runAttempts(o: RunOptions, out: string, res: RunResources, { exp, session }: ServedRun, harness: PreparedHarness, deadline: number): Promise<Attempted> {
  const container = res.container;
  const tally = emptyTally();
  const attempts: Array<AttemptResult & { attempt: number; session_id: string | null }> = [];
  const submittedNow = () => submittedIn(session.paths.sessionFile);
  const inContainer = container;
  let exitReason: ExitReason = "harness_exited";
  let error: string | null = null;
  for (let k = 0; k <= o.recoveries; k++) {
    if (Date.now() >= deadline) {
      exitReason = "time_limit";
      break;
    }
    const argv = harness.argv({ prompt: k === 0 ? instruction(exp.task.prompt) : RECOVERY_PROMPT, resumeSession: k === 0 ? null : tally.sessionId });
    o.onProgress?.(`attempt ${k + 1}: ${harness.name}${k > 0 ? ` (re-prompt of session ${tally.sessionId})` : ""}`);
    // A signal that came during set-up (the container's start) finds no attempt to end: stop here.
    if (o.signal?.aborted) throw new Error("run interrupted");
    await container?.ensureRunning();
    const a = await runAttempt(harness, argv, { deadline, eventsFile: join(out, HARNESS_EVENTS_FILE), stderrFile: join(out, HARNESS_STDERR_FILE), tally, signal: o.signal, onStop: inContainer ? () => inContainer.kill() : undefined });
    // Docker: what the harness left running in the container (its server, commands) ends with it, as
    // host mode ends the attempt's process group; the next attempt starts the container again.
    await container?.kill();
    attempts.push({ ...a, attempt: k + 1, session_id: tally.sessionId });
    writeJsonAtomic(join(out, ATTEMPTS_FILE), attempts);
    if (a.aborted) throw new Error("run interrupted");
    if (submittedNow()) {
      exitReason = "submitted";
      break;
    }
    if (a.timedOut) {
      exitReason = "time_limit";
      break;
    }
    if (a.spawnError) {
      exitReason = "error";
      error = `${harness.name} could not start: ${a.spawnError}`;
      break;
    }
    exitReason = a.exitCode === 0 ? "harness_exited" : "error";
    error = a.exitCode === 0 ? null : `${harness.name} exited ${a.exitCode ?? a.signal}: ${a.stderrTail.trim().split("\n").slice(-2).join(" | ")}`;
    if (k < o.recoveries && tally.sessionId === null) {
      error = `${harness.name} reported no session id to re-prompt`;
      exitReason = "error";
      break;
    }
  }
  // Ended without a submission: what the harness last complained about says why (an unreachable endpoint…).
  if (exitReason !== "submitted" && error === null && tally.lastError) error = `last harness error: ${tally.lastError}`;
  return { exitReason, error, attempts, tally };
}

/**
 * Our own resume of the run: `serve --resume` with stdin closed writes patch.diff from the workspace
 * through the sandbox (the host follows no path the agent controls) and session_end. Docker: inside
 * the container (killed first, so nothing the agent started still runs; then started again for the
 * resume alone), then removed before the host reads anything of the run folder.
 */
async function savePatch(o: RunOptions, out: string, res: RunResources, { exp, runsDir, session, serverSandbox }: ServedRun, attempted: Attempted): Promise<Pick<Attempted, "exitReason" | "error">> {
  let { exitReason, error } = attempted;
  const container = res.container;
  const resumeArgs = ["serve", "--task", exp.task.id, "--tasks-dir", exp.tasksDir, "--runs-dir", runsDir, "--resume", session.runId, "--sandbox", serverSandbox, ...(o.python ? ["--python", o.python] : [])];
  let finish: { code: number | null; stderr: string };
  if (container) {
    await container.kill();
    finish = await container.execToEnd([process.execPath, cliEntry(), ...resumeArgs], 120_000);
    await container.remove();
  } else {
    finish = await runCli(resumeArgs, { timeoutMs: 120_000, closeStdin: true });
  }
  if (finish.code !== 0 || !existsSync(session.paths.patchPath)) {
    exitReason = "error";
    error = `saving the patch failed (serve --resume exited ${finish.code}): ${finish.stderr.trim().split("\n").filter((l) => l.trim()).slice(-3).join(" | ")}`;
  }
  // No link followed, regular files only, capped: in docker mode the container could write the whole run folder.
  let patch: Buffer = Buffer.alloc(0);
  if (existsSync(session.paths.patchPath)) {
    const r = readRegularFile(session.paths.patchPath, PATCH_MAX_BYTES);
    if (r.truncated) throw new Error(`run: the patch is larger than ${PATCH_MAX_BYTES} bytes`);
    patch = r.data;
  }
  writeFileSync(join(out, PATCH_FILE), patch);
  const trace = existsSync(session.paths.tracePath) ? readRegularText(session.paths.tracePath, TRACE_MAX_BYTES).text : "";
  writeFileSync(join(out, TRACE_FILE), trace);
  return { exitReason, error };
}

/** run.json, written last (its ended_at marks the run finished), from what the run left in `out`. */
function writeRunRecord(o: RunOptions, out: string, r: { id: string; publicTask: ReturnType<typeof loadPublicTask>; harness: PreparedHarness; startedAt: Date; attempted: Attempted; session: ServedRun["session"] }): RunRecord {
  const { id, publicTask, harness, startedAt, session } = r;
  const { exitReason, error, attempts, tally } = r.attempted;
  const trace = readFileSync(join(out, TRACE_FILE), "utf8");
  const submittedNow = () => submittedIn(session.paths.sessionFile);
  const used = toolsUsed(trace);
  const endedAt = new Date();
  const record: RunRecord = {
    schema_version: 1,
    run_id: id,
    task_id: publicTask.id,
    category: publicTask.spec.category,
    type: publicTask.spec.type,
    agent: o.name,
    harness: o.agent,
    harness_version: harness.version,
    model: o.model,
    skill: o.skill,
    repeat: o.repeat,
    started_at: startedAt.toISOString(),
    ended_at: endedAt.toISOString(),
    wall_s: Math.round((endedAt.getTime() - startedAt.getTime()) / 100) / 10,
    time_limit_min: o.timeLimitMin,
    exit_reason: exitReason,
    error,
    attempts: attempts.length,
    recoveries_used: Math.max(0, attempts.length - 1),
    turns: tally.turns,
    tool_calls: Object.values(used).reduce((a, b) => a + b, 0),
    tools_used: used,
    tokens: tally.tokens,
    patch_bytes: Buffer.byteLength(readFileSync(join(out, PATCH_FILE))),
    submitted: submittedNow(),
    grade: null,
  };
  writeJsonAtomic(join(out, RUN_RECORD_FILE), record);
  return record;
}
