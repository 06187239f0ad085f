// Sandbox.create + commands.run('true') + kill with E2B's SDK, N times in
// a row (internal/e2b's BenchmarkSDKCreateRunKill). Prints one JSON line:
// the milliseconds of each step and of the whole, p50 and p99.
const { Sandbox } = await import(process.env.E2B_SDK);
const n = Number(process.argv[2] ?? 20);
const steps = { create: [], run: [], kill: [], total: [] };
for (let i = 0; i < n; i++) {
  const t0 = performance.now();
  const sbx = await Sandbox.create('base', { timeoutMs: 120_000 });
  const t1 = performance.now();
  const r = await sbx.commands.run('true');
  if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
  const t2 = performance.now();
  await sbx.kill();
  const t3 = performance.now();
  steps.create.push(t1 - t0); steps.run.push(t2 - t1); steps.kill.push(t3 - t2); steps.total.push(t3 - t0);
}
const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]; };
const out = { n };
for (const [k, xs] of Object.entries(steps)) out[k] = { p50: q(xs, 0.5), p99: q(xs, 0.99) };
process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
