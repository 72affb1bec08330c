/** The report's statistics: small pure functions, each rate shown with its standard error. */

export interface Rate {
  k: number;
  n: number;
  /** k / n; null when n is 0. */
  p: number | null;
  /** Binomial standard error sqrt(p(1-p)/n); null when n is 0. */
  se: number | null;
}

export function rate(k: number, n: number): Rate {
  if (n === 0) return { k, n, p: null, se: null };
  const p = k / n;
  return { k, n, p, se: Math.sqrt((p * (1 - p)) / n) };
}

export interface Mean {
  n: number;
  mean: number | null;
  /** Standard error of the mean: sample standard deviation / sqrt(n); null when n < 2. */
  se: number | null;
}

export function mean(values: number[]): Mean {
  const n = values.length;
  if (n === 0) return { n, mean: null, se: null };
  const m = values.reduce((a, b) => a + b, 0) / n;
  if (n < 2) return { n, mean: m, se: null };
  const variance = values.reduce((a, v) => a + (v - m) ** 2, 0) / (n - 1);
  return { n, mean: m, se: Math.sqrt(variance / n) };
}

function logChoose(n: number, k: number): number {
  let s = 0;
  for (let i = 1; i <= k; i++) s += Math.log(n - k + i) - Math.log(i);
  return s;
}

/**
 * Exact two-sided McNemar test on the discordant pairs (fixed b vs broken c): under no difference
 * each discordant task goes either way with probability 1/2. null when there are none.
 */
export function mcnemarExact(b: number, c: number): number | null {
  const n = b + c;
  if (n === 0) return null;
  const k = Math.min(b, c);
  let tail = 0;
  for (let i = 0; i <= k; i++) tail += Math.exp(logChoose(n, i) - n * Math.LN2);
  return Math.min(1, 2 * tail);
}
