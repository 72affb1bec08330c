import type { z } from "zod";

/** A task folder that cannot be used; the message names the file, the field path and what was expected. */
export class TaskError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TaskError";
  }
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let cur = root;
  for (const key of path) {
    if (cur === null || typeof cur !== "object") return undefined;
    cur = (cur as Record<PropertyKey, unknown>)[key];
  }
  return cur;
}

function show(value: unknown): string {
  if (value === undefined) return "nothing (field missing)";
  const s = JSON.stringify(value);
  return s === undefined ? String(value) : s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/** One line per issue: `<file>: <field.path>: expected ..., got ...`. */
export function formatZodIssues(file: string, error: z.ZodError, input: unknown): string {
  return error.issues
    .map((issue) => {
      const field = issue.path.length ? issue.path.map(String).join(".") : "(top level)";
      const got = show(valueAt(input, issue.path));
      let what: string;
      switch (issue.code) {
        case "invalid_type":
          {
          const expected = issue.expected === "int" ? "integer" : issue.expected;
          what = got === "nothing (field missing)" ? `required field missing (expected ${expected})` : `expected ${expected}, got ${got}`;
          }
          break;
        case "too_small": {
          const op = issue.inclusive === false ? ">" : "≥";
          const unit = issue.origin === "string" ? " characters" : issue.origin === "array" ? " items" : "";
          const kind = issue.origin === "number" ? "a number" : issue.origin;
          what = `expected ${kind} ${op} ${String(issue.minimum)}${unit}, got ${got}`;
          break;
        }
        case "too_big": {
          const op = issue.inclusive === false ? "<" : "≤";
          what = `expected ${issue.origin === "number" ? "a number" : issue.origin} ${op} ${String(issue.maximum)}, got ${got}`;
          break;
        }
        case "unrecognized_keys":
          what = `unknown key${issue.keys.length > 1 ? "s" : ""} ${issue.keys.map((k) => JSON.stringify(k)).join(", ")} (not part of schema)`;
          break;
        case "invalid_value":
          what = `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(" | ")}, got ${got}`;
          break;
        case "invalid_union":
          what = `${issue.message}, got ${got}`;
          break;
        default:
          what = `${issue.message}, got ${got}`;
      }
      return `${file}: ${field}: ${what}`;
    })
    .join("\n");
}
