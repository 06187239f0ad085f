// The control-plane calls of E2B's SDK, one per run, against the server
// E2B_API_URL names (internal/e2b/e2btest sets the environment; E2B_SDK is
// the SDK module to import, so one script runs with either pinned version).
// Usage: node plane.mjs VERB ARGS...; prints one JSON line: the result, or
// {"error": NAME, "message": ...} when the SDK threw.
const { Sandbox } = await import(process.env.E2B_SDK);

const [verb, ...args] = process.argv.slice(2);
const json = (s) => (s ? JSON.parse(s) : undefined);

const verbs = {
  // create TEMPLATE [TIMEOUT_MS] [METADATA_JSON] [OPTS_JSON]
  async create(template, timeoutMs, meta, opts) {
    const sbx = await Sandbox.create(template, {
      timeoutMs: timeoutMs ? Number(timeoutMs) : undefined,
      metadata: json(meta),
      ...(json(opts) ?? {}),
    });
    return { id: sbx.sandboxId, token: sbx.envdAccessToken };
  },
  // list [QUERY_JSON]: the ids and states of every page (limit 1 per page,
  // so the paging is exercised)
  async list(query) {
    const p = Sandbox.list({ query: json(query), limit: 1 });
    const out = [];
    while (p.hasNext) {
      for (const s of await p.nextItems()) out.push({ id: s.sandboxId, state: s.state, template: s.templateId, metadata: s.metadata });
    }
    out.sort((a, b) => (a.id < b.id ? -1 : 1));
    return out;
  },
  async info(id) {
    const i = await Sandbox.getInfo(id);
    return { id: i.sandboxId, template: i.templateId, state: i.state, metadata: i.metadata, startedAt: i.startedAt, endAt: i.endAt, envdVersion: i.envdVersion };
  },
  async kill(id) {
    return { killed: await Sandbox.kill(id) };
  },
  async settimeout(id, ms) {
    await Sandbox.setTimeout(id, Number(ms));
    const i = await Sandbox.getInfo(id);
    return { endAt: i.endAt };
  },
  async pause(id) {
    return { paused: await Sandbox.pause(id) };
  },
  // connect ID [TIMEOUT_MS]
  async connect(id, timeoutMs) {
    const sbx = await Sandbox.connect(id, { timeoutMs: timeoutMs ? Number(timeoutMs) : undefined });
    const i = await sbx.getInfo();
    return { id: sbx.sandboxId, state: i.state, token: sbx.envdAccessToken };
  },
};

let answer;
try {
  if (!verbs[verb]) throw new Error(`unknown verb ${verb}`);
  answer = await verbs[verb](...args);
} catch (e) {
  answer = { error: e?.constructor?.name ?? 'Error', message: String(e?.message ?? e) };
}
// Exit now: the SDK's kept-alive connections would hold the process
// for seconds.
process.stdout.write(JSON.stringify(answer) + '\n', () => process.exit(0));
