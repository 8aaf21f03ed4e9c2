// A reader of newline-delimited JSON bodies (application/x-ndjson): one
// value a line; blank lines are keep-alives (the streamed gather sends one
// every 15 s while no result comes) and are skipped.

/**
 * Yields each non-blank line of the body, without its line ending; a
 * last line the body ends in before its newline is dropped.
 * @param {ReadableStream<Uint8Array>} body
 * @param {AbortSignal} [signal]
 * @param {() => void} [onBytes] called on every chunk read (keep-alives too)
 */
export async function* readLines(body, signal, onBytes) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      signal?.throwIfAborted();
      const { value, done } = await reader.read();
      if (done) break;
      onBytes?.();
      buf += decoder.decode(value, { stream: true });
      let start = 0;
      let nl;
      while ((nl = buf.indexOf('\n', start)) >= 0) {
        const line = buf.slice(start, nl).trim();
        start = nl + 1;
        if (line !== '') yield line;
      }
      buf = buf.slice(start);
    }
    // A last line without its newline was cut short: not a value.
  } finally {
    reader.cancel().catch(() => {});
  }
}
