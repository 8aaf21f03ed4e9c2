// A reader of text/event-stream bodies (the WHATWG server-sent events
// format): frames of `id:`, `event:` and `data:` lines ended by a blank
// line; comment lines (`: ping`) and unknown fields are skipped.

/**
 * Yields each frame of the stream as {id, event, data}; `id` is undefined
 * when the frame has none.
 * @param {ReadableStream<Uint8Array>} body
 * @param {AbortSignal} [signal]
 * @param {() => void} [onBytes] called on every chunk read (heartbeats too)
 */
export async function* readSSE(body, signal, onBytes) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let frame = { id: undefined, event: 'message', data: [] };
  try {
    for (;;) {
      signal?.throwIfAborted();
      const { value, done } = await reader.read();
      if (done) break;
      onBytes?.();
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (frame.data.length > 0 || frame.id !== undefined) {
            yield { id: frame.id, event: frame.event, data: frame.data.join('\n') };
          }
          frame = { id: undefined, event: 'message', data: [] };
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') frame.data.push(value);
        else if (field === 'event') frame.event = value;
        else if (field === 'id' && !value.includes('\0')) frame.id = value;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
