import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { UsageError } from "../../lib/errors.js";
import type { TokenCounts } from "../types.js";

/**
 * `--prices F.yaml`: USD per million tokens per model (as run.json's `model` names it).
 *
 *   models:
 *     gpt-5-codex: { input: 1.25, cached_input: 0.125, output: 10 }
 *
 * Token counts follow the OpenAI usage convention the harnesses report: `input` includes the cached
 * input and `output` includes the reasoning tokens. So uncached input is billed at `input`, cached at
 * `cached_input` (else at `input`), output at `output`; reasoning is billed as output unless the
 * model has its own `reasoning` price, which then applies to that part of the output.
 */
const Price = z.number().nonnegative();
const ModelPrices = z.strictObject({ input: Price, cached_input: Price.optional(), output: Price, reasoning: Price.optional() });
const PricesFile = z.strictObject({ models: z.record(z.string(), ModelPrices) });
export type ModelPrices = z.infer<typeof ModelPrices>;
export type Prices = Record<string, ModelPrices>;

export function loadPrices(file: string): Prices {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(file, "utf8"));
  } catch (e) {
    throw new UsageError(`report: --prices ${file}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : `not readable YAML (${(e as Error).message.split("\n")[0]})`}`);
  }
  const r = PricesFile.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new UsageError(`report: --prices ${file}: ${issue.path.join(".") || "(top level)"}: ${issue.message} (expected models: { <model>: { input, output, cached_input?, reasoning? } } in USD per million tokens)`);
  }
  return r.data.models;
}

/** USD for one run's tokens; null when a count the price needs is missing. */
export function runCost(tokens: TokenCounts, p: ModelPrices): number | null {
  if (tokens.input === null || tokens.output === null) return null;
  const cached = Math.min(tokens.cached_input ?? 0, tokens.input);
  const reasoning = p.reasoning !== undefined ? Math.min(tokens.reasoning ?? 0, tokens.output) : 0;
  const usd =
    (tokens.input - cached) * p.input + cached * (p.cached_input ?? p.input) + (tokens.output - reasoning) * p.output + reasoning * (p.reasoning ?? p.output);
  return usd / 1e6;
}
