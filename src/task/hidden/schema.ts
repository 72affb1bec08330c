import { z } from "zod";
import { relPath } from "../public/schema.js";

/**
 * The grader-only files of a task that say what it promises and how its probes are held honest
 * (the task author's check reads them; the agent never sees them):
 *
 *   hidden/promises.yaml            the promises (id, one line, where prompt.md states it)
 *   hidden/alternatives/index.yaml  correct patches that differ from golden (positive controls)
 *   hidden/mutants.yaml             mutants of the golden patch the author judged equivalent, with why
 */

const id = z.string().regex(/^[a-z0-9][a-z0-9-]*$/, "expected a lowercase id of letters, digits and '-'");

const relFile = z
  .string()
  .min(1, "expected a non-empty relative path")
  .refine((p) => !p.includes("\0"), "must not contain NUL")
  .refine((p) => !p.startsWith("/") && !p.split(/[\\/]/).includes(".."), "expected a path inside the folder (relative, no '..')");

export const PromiseSchema = z.strictObject({
  id,
  text: z
    .string()
    .min(1)
    .refine((t) => !t.trim().includes("\n"), "expected one line"),
  /** A verbatim fragment of prompt.md (whitespace-normalised), or a 1-based line number of it. */
  prompt: z.union([z.string().min(8, "expected a fragment of prompt.md of at least 8 characters"), z.number().int().min(1)]),
});
export const PromisesFileSchema = z.array(PromiseSchema).min(1, "expected at least one promise");
export type TaskPromise = z.infer<typeof PromiseSchema>;

export const AlternativeEntrySchema = z.strictObject({
  name: id,
  patch: relFile,
  note: z.string().min(1),
});
export const AlternativesIndexSchema = z.array(AlternativeEntrySchema);
export type AlternativeEntry = z.infer<typeof AlternativeEntrySchema>;

export const MutantsFileSchema = z.strictObject({
  equivalent: z
    .array(
      z.strictObject({
        id: z.string().min(3),
        reason: z.string().min(10, "expected a reason of at least 10 characters"),
      }),
    )
    .default([]),
});
export type EquivalentMutant = z.infer<typeof MutantsFileSchema>["equivalent"][number];

/** hidden/adversarial/index.yaml: wrong patches that pass the official tests, each with the promises it breaks. */
export const AdversarialIndexSchema = z.array(
  z.strictObject({
    name: z.string().regex(/^[a-z0-9][a-z0-9-]*$/, "expected a lowercase name of letters, digits and '-'"),
    patch: relPath,
    breaks: z.array(z.string().min(1)).min(1),
    description: z.string().min(1),
  }),
);
export type AdversarialEntry = z.infer<typeof AdversarialIndexSchema>[number];
