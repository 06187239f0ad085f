// A 2 GiB upload through E2B's SDK (files.write of a ReadableStream: an
// octet-stream body streamed without a length) against the server
// E2B_API_URL names (internal/e2b/e2btest sets the environment; E2B_SDK
// is the SDK module to import). The stream makes zeros as it is pulled
// and counts them: after the refusal nothing more is pulled.
// Usage: node bigupload.mjs PATH; PATH is in the sandbox's view.
// Prints one JSON line: {error, message, pulled, ms, exists, after}.
const { Sandbox } = await import(process.env.E2B_SDK);
const [path] = process.argv.slice(2);
const total = 2 ** 31;
const chunk = new Uint8Array(1 << 20);
const out = { pulled: 0 };
const sbx = await Sandbox.create('base', { timeoutMs: 300_000 });
try {
  const stream = new ReadableStream({
    pull(c) {
      if (out.pulled >= total) return c.close();
      out.pulled += chunk.length;
      c.enqueue(chunk);
    },
  }, { highWaterMark: 0 });
  const t0 = Date.now();
  try {
    await sbx.files.write(path, stream, { requestTimeoutMs: 0 });
    out.error = '';
  } catch (e) {
    out.error = e.name;
    out.message = e.message;
  }
  out.ms = Date.now() - t0;
  // A moment for anything still in flight, then the count again.
  const pulled = out.pulled;
  await new Promise((r) => setTimeout(r, 1000));
  out.after = out.pulled - pulled;
  out.exists = await sbx.files.exists(path);
} finally {
  await sbx.kill();
}
console.log(JSON.stringify(out));
