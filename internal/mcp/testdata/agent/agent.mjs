// A coding agent's session with `hostfork mcp`, through the official MCP
// TypeScript SDK: start a dev server, wait until it prints "listening",
// run tests against it, read the last 50 lines of its log, stop it.
// internal/mcp's TestAgentNodeSDK runs it with HOSTFORK_MCP, a JSON
// {path, args, env} of the hostfork binary to start; it prints one JSON
// summary on stdout and exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const spec = JSON.parse(process.env.HOSTFORK_MCP);
const env = Object.fromEntries(spec.env.map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
const transport = new StdioClientTransport({ command: spec.path, args: spec.args, env, stderr: "inherit" });
const client = new Client({ name: "hostfork-agent-test", version: "1" });
await client.connect(transport);

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}

// call returns the tool's JSON result, or {error} for a tool error.
async function call(name, args, options) {
  const res = await client.callTool({ name, arguments: args }, CallToolResultSchema, options);
  const text = res.content[0].text;
  return res.isError ? { error: JSON.parse(text) } : JSON.parse(text);
}

const summary = {};
try {
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const name of ["start", "wait", "logs", "stop", "send_input"]) check(byName[name], "tool " + name);
  check(byName.logs.annotations?.readOnlyHint === true, "logs is read-only");
  check(byName.wait.annotations?.readOnlyHint === true, "wait is read-only");
  check(byName.stop.annotations?.destructiveHint === true, "stop is destructive");
  check(byName.start.inputSchema.properties.argv.type === "array", "argv is a plain array");
  check(byName.start.inputSchema.properties.vars && byName.run.inputSchema.properties.vars, "one name for variables");
  summary.tools = tools.length;

  // 1. Start a dev server: it takes 3 s to come up, then serves HTTP and
  // logs each request on stderr.
  const server = `
import http.server, socketserver, sys, time
time.sleep(3)
httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
print("listening on 127.0.0.1:%d" % httpd.server_address[1], flush=True)
httpd.serve_forever()
`;
  const started = await call("start", { argv: ["python3", "-u", "-c", server], ttl: "5m", purpose: "dev server" });
  check(!started.error, "start: " + JSON.stringify(started.error));
  const id = started.id;
  summary.command = id;

  // 2. Wait until it prints "listening". The request's own timeout (2 s)
  // is shorter than the wait: the server's progress notifications keep
  // the request alive.
  let progress = 0;
  const t0 = Date.now();
  const waited = await call("wait", { id, for: "listening on 127\\.0\\.0\\.1:([0-9]+)", timeout: "2m" },
    { timeout: 2000, resetTimeoutOnProgress: true, onprogress: () => progress++ });
  check(!waited.error, "wait: " + JSON.stringify(waited.error));
  check(waited.reason === "match" && waited.match.stream === "stdout" && waited.match.offset === 0, "wait: " + JSON.stringify(waited.match));
  summary.waited_ms = Date.now() - t0;
  summary.progress = progress;
  check(progress >= 1, "progress notifications while waiting");
  const port = Number(/:([0-9]+)$/.exec(waited.match.line)[1]);

  // 3. Run tests against it.
  for (let i = 0; i < 60; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/?test=${i}`);
    check(r.status === 200, "GET " + i + ": " + r.status);
    await r.text();
  }
  summary.requests = 60;

  // 4. Read the last 50 lines of its log (its request log is stderr);
  // wait until it has been quiet, so that all 60 are written.
  const quiet = await call("wait", { id, stalled: "300ms", timeout: "1m" });
  check(quiet.reason === "stalled", "stalled: " + JSON.stringify(quiet));
  const logs = await call("logs", { id, stream: "stderr", tail: 50 });
  check(!logs.error, "logs: " + JSON.stringify(logs.error));
  const lines = logs.text.trimEnd().split("\n");
  check(lines.length === 50, "tail 50 gave " + lines.length + " lines");
  check(lines[0].includes("GET /?test=10 ") && lines[49].includes("GET /?test=59 "), "the last 50 requests: " + lines[0] + " ... " + lines[49]);
  summary.tail_lines = lines.length;

  // Bad input: a clear error with the CLI's exit code.
  const bad = await call("wait", { id, for: "(" });
  check(bad.error && bad.error.exit_code === 122 && bad.error.message.includes("regular expression"), "invalid regex: " + JSON.stringify(bad));

  // 5. Stop it.
  const stopped = await call("stop", { id });
  check(!stopped.error && stopped.tree_state === "exited" && stopped.stop_reason === "user", "stop: " + JSON.stringify(stopped));
  const ended = await call("wait", { id, condition: "tree" });
  check(ended.reason === "tree" && ended.record_state === "exited", "wait after the stop: " + JSON.stringify(ended.reason));

  // A shell in a terminal: type into it, wait for its answer, end it.
  const sh = await call("start", { argv: ["sh"], tty: true, cols: 100, rows: 30, ttl: "5m" });
  check(!sh.error, "start tty: " + JSON.stringify(sh.error));
  const typed = await call("send_input", { id: sh.id, text: "stty size; echo $((6*7))\n" });
  check(!typed.error && typed.bytes === 25, "send_input: " + JSON.stringify(typed));
  const answer = await call("wait", { id: sh.id, for: "^42", timeout: "1m" });
  check(answer.reason === "match", "the shell's answer: " + JSON.stringify(answer));
  const size = await call("logs", { id: sh.id, tail: 3 });
  check(size.text.includes("30 100"), "the terminal's size: " + JSON.stringify(size.text));
  await call("send_input", { id: sh.id, text: "exit 3\n" });
  const shEnd = await call("wait", { id: sh.id, condition: "tree" });
  check(shEnd.reason === "tree" && shEnd.exit_code === 3, "the shell's end: " + JSON.stringify(shEnd.exit_code));
  const late = await call("send_input", { id: sh.id, text: "echo late\n" });
  check(late.error && late.error.cause === "command_finished", "send_input after the end: " + JSON.stringify(late));
  summary.ok = true;
} finally {
  console.log(JSON.stringify(summary));
  await client.close();
}
