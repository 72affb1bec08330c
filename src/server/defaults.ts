/** The port `serve --http` listens on without --port, and the one `connect --http` writes into the config. */
export const DEFAULT_HTTP_PORT = 8741;
