// The control-plane calls of E2B's SDK against the server E2B_API_URL
// names (internal/e2b/e2btest sets the environment; E2B_SDK is the SDK
// module to import, so one script runs with either pinned version;
// E2B_KEYS maps key names to keys).
//
//   node plane.mjs VERB ARGS...        one call with E2B_API_KEY
//   node plane.mjs batch CALLS_JSON    [{"key": NAME, "call": [VERB, ARGS...]}, ...]
//                                      in order; a key that is no name is sent as is
//
// Prints one JSON line: the call's answer (an array of them for batch),
// each the result or {"error": NAME, "message": ...} when the SDK threw.
const { Sandbox } = await import(process.env.E2B_SDK);
const keys = JSON.parse(process.env.E2B_KEYS ?? '{}');

const json = (s) => (s ? JSON.parse(s) : undefined);

const verbs = {
  // create TEMPLATE [TIMEOUT_MS] [METADATA_JSON] [OPTS_JSON]
  async create(o, template, timeoutMs, meta, opts) {
    const sbx = await Sandbox.create(template, {
      ...o,
      timeoutMs: timeoutMs ? Number(timeoutMs) : undefined,
      metadata: json(meta),
      ...(json(opts) ?? {}),
    });
    return { id: sbx.sandboxId, token: sbx.envdAccessToken };
  },
  // list [QUERY_JSON]: the ids and states of every page (limit 1 per page,
  // so the paging is exercised)
  async list(o, query) {
    const p = Sandbox.list({ ...o, query: json(query), limit: 1 });
    const out = [];
    while (p.hasNext) {
      for (const s of await p.nextItems()) out.push({ id: s.sandboxId, state: s.state, template: s.templateId, metadata: s.metadata });
    }
    out.sort((a, b) => (a.id < b.id ? -1 : 1));
    return { list: out };
  },
  async info(o, id) {
    const i = await Sandbox.getInfo(id, o);
    return { id: i.sandboxId, template: i.templateId, state: i.state, metadata: i.metadata, startedAt: i.startedAt, endAt: i.endAt, envdVersion: i.envdVersion };
  },
  async kill(o, id) {
    return { killed: await Sandbox.kill(id, o) };
  },
  async settimeout(o, id, ms) {
    await Sandbox.setTimeout(id, Number(ms), o);
    const i = await Sandbox.getInfo(id, o);
    return { endAt: i.endAt };
  },
  async pause(o, id) {
    return { paused: await Sandbox.pause(id, o) };
  },
  // connect ID [TIMEOUT_MS]
  async connect(o, id, timeoutMs) {
    const sbx = await Sandbox.connect(id, { ...o, timeoutMs: timeoutMs ? Number(timeoutMs) : undefined });
    const i = await sbx.getInfo();
    return { id: sbx.sandboxId, state: i.state, token: sbx.envdAccessToken };
  },
};

async function call(o, [verb, ...args]) {
  try {
    if (!verbs[verb]) throw new Error(`unknown verb ${verb}`);
    return await verbs[verb](o, ...args);
  } catch (e) {
    return { error: e?.constructor?.name ?? 'Error', message: String(e?.message ?? e) };
  }
}

const argv = process.argv.slice(2);
let answer;
if (argv[0] === 'batch') {
  answer = [];
  for (const c of JSON.parse(argv[1])) {
    answer.push(await call(c.key ? { apiKey: keys[c.key] ?? c.key } : {}, c.call));
  }
} else {
  answer = await call({}, argv);
}
// Exit now: the SDK's kept-alive connections would hold the process
// for seconds.
process.stdout.write(JSON.stringify(answer) + '\n', () => process.exit(0));
