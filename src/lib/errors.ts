/** Bad input on the command line: the CLI prints the message alone (no stack) and exits 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}
