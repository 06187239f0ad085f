// The E2B SDK's side of internal/e2b's benchmarks, driven line by line
// from standard input so the Go benchmark can interleave each SDK round
// with `hostfork run` and bwrap. Each request line gets one JSON line:
//
//   round          Sandbox.create + commands.run('true') + kill:
//                  {"create","run","kill","total"} in milliseconds
//   concurrent N   N sandboxes created at once, each running one command
//                  (not killed): {"ms", "ids"}
//   live N         N sandboxes created (at most 10 at a time), left
//                  running: {"ms", "ids"}
//   kill ID...     kills those sandboxes: {"ms"}
//
// BENCH_HOME is the sandboxes' HOME: an empty directory, because the
// SDK runs every command as `bash -l -c CMD`, and a login shell reads
// ~/.profile and ~/.bashrc. On a developer's machine those can cost
// seconds (a `pyenv init` made each `true` take 2 s); an empty HOME
// measures hostfork, not the host's dotfiles.
import readline from 'node:readline';

const { Sandbox } = await import(process.env.E2B_SDK);
const envs = { HOME: process.env.BENCH_HOME };
const opts = { timeoutMs: 600_000, envs };

const out = (o) => new Promise((res) => process.stdout.write(JSON.stringify(o) + '\n', res));

async function runOne(sbx) {
  const r = await sbx.commands.run('true');
  if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [op, ...args] = line.trim().split(/\s+/);
  if (op === 'round') {
    const t0 = performance.now();
    const sbx = await Sandbox.create('base', opts);
    const t1 = performance.now();
    await runOne(sbx);
    const t2 = performance.now();
    await sbx.kill();
    const t3 = performance.now();
    await out({ create: t1 - t0, run: t2 - t1, kill: t3 - t2, total: t3 - t0 });
  } else if (op === 'concurrent') {
    const n = Number(args[0]);
    const t0 = performance.now();
    const ids = await Promise.all(Array.from({ length: n }, async () => {
      const sbx = await Sandbox.create('base', opts);
      await runOne(sbx);
      return sbx.sandboxId;
    }));
    await out({ ms: performance.now() - t0, ids });
  } else if (op === 'live') {
    const n = Number(args[0]);
    const t0 = performance.now();
    const ids = [];
    while (ids.length < n) {
      const k = Math.min(10, n - ids.length);
      const batch = await Promise.all(Array.from({ length: k }, () => Sandbox.create('base', opts)));
      ids.push(...batch.map((s) => s.sandboxId));
    }
    await out({ ms: performance.now() - t0, ids });
  } else if (op === 'kill') {
    const t0 = performance.now();
    for (let i = 0; i < args.length; i += 10) {
      await Promise.all(args.slice(i, i + 10).map((id) => Sandbox.kill(id)));
    }
    await out({ ms: performance.now() - t0 });
  } else if (op) {
    throw new Error(`bench.mjs: unknown request ${JSON.stringify(line)}`);
  }
}
process.exit(0);
