/**
 * Tamper evidence from a rank's audit channel (python/sandbox/infradev_audit.py): the PEP 578 hook
 * every rank arms before any repository code runs refuses in-memory forgery (test bodies swapped,
 * ctypes, /proc/<pid>/mem, trace functions, gc referrer walks from workspace code) and writes each
 * refusal on a pipe only the launcher reads. A pure function of one integrity record.
 *
 * Evidence: any refusal (whatever the rank's fate: a refusal is never an accident of a crash); bytes
 * on the channel that are not the hook's, or more than an honest rank writes; and, on a rank that
 * exited by itself with pytest's own codes (0 or 1: tests ran), a channel without "armed" or "done"
 * (the hook's records were cut off). A rank of a torchrun session has no channel (audit null).
 */
export interface AuditRecord {
  armed: boolean;
  done: boolean;
  refused: string[];
  refused_count: number;
  observed?: Record<string, number>;
  junk: number;
  overflow: boolean;
}

export function auditEvidence(rank: number, exitCode: number | null, audit: AuditRecord | null | undefined, disturbed: boolean): string[] {
  if (audit === null || audit === undefined || typeof audit !== "object") return [];
  const out: string[] = [];
  const refused = Array.isArray(audit.refused) ? audit.refused.filter((s) => typeof s === "string") : [];
  const count = Math.max(refused.length, typeof audit.refused_count === "number" ? audit.refused_count : 0);
  if (count > 0) {
    out.push(`rank ${rank}: the audit hook refused ${count} in-memory forgery attempt(s): ${refused.slice(0, 3).join("; ")}${count > 3 ? "; …" : ""}`);
  }
  if (audit.overflow) out.push(`rank ${rank}: the audit channel overflowed (more than an honest rank ever writes)`);
  else if (audit.junk > 0) out.push(`rank ${rank}: the audit channel holds ${audit.junk} line(s) the hook never writes`);
  if (!disturbed && (exitCode === 0 || exitCode === 1) && (!audit.armed || !audit.done)) {
    out.push(`rank ${rank}: pytest exited ${exitCode} but its audit channel was ${audit.armed ? "cut before pytest returned" : "never armed"}`);
  }
  return out;
}
