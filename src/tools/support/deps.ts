import type { Logger } from "../../lib/logger.js";
import type { Sandbox } from "../../sandbox/types.js";
import type { PublicTask } from "../../task/public/loader.js";

/**
 * Everything a tool handler may touch, passed explicitly to `createServer(deps)` and on to every
 * `registerXTool(server, deps)`. Tools never reach the container engine, the host filesystem of the
 * workspace or the task folder except through these.
 */
export interface ToolDeps {
  /** The public view of the task (loadPublicTask): never the hidden part. */
  readonly task: PublicTask;
  /** Where every command of the agent runs; its repoDir is the workspace. */
  readonly sandbox: Sandbox;
  readonly session: RunSession;
  /** The pristine base checkout, when the sandbox can see it (for measure's compare_with_base). */
  readonly base: BaseCheckout | null;
  readonly skill: Skill;
  readonly logger: Logger;
  readonly trace: TraceSink;
  /**
   * Set while the session is still being built (`serve` answers `initialize` first): resolves when
   * sandbox, session, base and trace can be read, rejects with the reason the build failed. Every
   * tool call waits for it (tools/support/register.ts); absent when the deps are complete already.
   */
  readonly ready?: Promise<void>;
}

/** The pre-PR checkout, read-only inside the sandbox. */
export interface BaseCheckout {
  /** The checkout as the sandbox sees it (e.g. /base). */
  readonly sandboxDir: string;
  readonly hostDir: string;
  readonly commit: string;
}

export interface Skill {
  readonly name: string;
  readonly description: string;
  /** The whole SKILL.md, frontmatter included. */
  readonly text: string;
}

export interface PatchStats {
  files_changed: number;
  lines_added: number;
  lines_removed: number;
  patch_bytes: number;
}

/** One session's run folder and its state (runs/<run-id>/). */
export interface RunSession {
  readonly runId: string;
  readonly runDir: string;
  /** The base commit recorded outside the workspace when the run was created. */
  readonly baseCommit: string;
  readonly patchPath: string;
  readonly tracePath: string;
  submitted(): { at: string; note: string | null } | null;
  /** Writes the patch to runs/<run-id>/patch.diff; `submission` marks the run submitted. */
  recordPatch(patch: string, submission?: { note: string | null }): { at: string };
}

/** Where every tool call is appended (runs/<run-id>/trace.jsonl). */
export interface TraceSink {
  append(record: Record<string, unknown>): void;
}
