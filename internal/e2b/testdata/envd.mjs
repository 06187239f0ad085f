// The envd calls of E2B's SDK (commands, files, pty) in one sandbox,
// against the server E2B_API_URL names (internal/e2b/e2btest sets the
// environment; E2B_SDK is the SDK module to import).
// Usage: node envd.mjs DIR; DIR is a directory of the sandbox's view the
// files calls make and use (the base template's /tmp is the sandbox's own).
// Prints one JSON line of what was seen; a step that throws unexpectedly
// ends the script with {"error": NAME, "message": ..., "step": ...}.
import { readFileSync } from 'node:fs';

const { Sandbox, CommandExitError } = await import(process.env.E2B_SDK);
const [dir] = process.argv.slice(2);
const out = {};
let step = 'create';

// startTime is a live process's start time (/proc/PID/stat field 22):
// the sandbox shares the host's PIDs.
const startTime = (pid) => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return '';
  }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = async (what, cond, ms = 30000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
};

let sbx;
try {
  sbx = await Sandbox.create('base', { timeoutMs: 300_000, envs: { SBX_VAR: 'from-create' } });

  step = 'run';
  const r = await sbx.commands.run('echo hi; echo there >&2');
  out.run = { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };

  step = 'envs';
  out.envs = (await sbx.commands.run('echo "$SBX_VAR $CALL_VAR"', { envs: { CALL_VAR: 'from-run' } })).stdout;

  step = 'fail';
  try {
    await sbx.commands.run('echo failing >&2; exit 3');
    out.fail = { error: 'none' };
  } catch (e) {
    out.fail = { error: e?.constructor?.name, isExitError: e instanceof CommandExitError, exitCode: e.exitCode, stderr: e.stderr };
  }

  step = 'timeout';
  try {
    await sbx.commands.run('sleep 60', { timeoutMs: 1500, onStdout: () => {} });
    out.timeout = { error: 'none' };
  } catch (e) {
    out.timeout = { error: e?.constructor?.name };
  }
  // The command is stopped when its time is up: no sleep 60 runs on.
  const left = async () => (await sbx.commands.list()).filter((p) => p.args.includes('sleep 60')).length;
  const deadline = Date.now() + 30000;
  while ((await left()) > 0 && Date.now() < deadline) await sleep(50);
  out.timeout.left = await left();

  step = 'cwd';
  try {
    await sbx.commands.run('pwd', { cwd: '/no/such/dir' });
    out.badCwd = 'none';
  } catch (e) {
    out.badCwd = `${e?.constructor?.name}: ${e?.message}`;
  }

  step = 'background';
  let first = '';
  const bg = await sbx.commands.run('sleep 600 & echo "child=$!"; wait', { background: true, timeoutMs: 0, onStdout: (d) => { first += d; } });
  await until('the child pid', () => first.includes('\n'));
  const child = Number(first.trim().split('=')[1]);
  out.bg = { pid: bg.pid, child, pidStart: startTime(bg.pid), childStart: startTime(child) };
  out.bg.listed = (await sbx.commands.list()).some((p) => p.pid === bg.pid);
  await bg.disconnect();
  let replay = '';
  const h = await sbx.commands.connect(bg.pid, { onStdout: (d) => { replay += d; } });
  await until('the replay', () => replay.includes('\n'));
  out.bg.replay = replay;
  out.bg.killed = await sbx.commands.kill(bg.pid);
  try {
    await h.wait();
    out.bg.wait = 'no error';
  } catch (e) {
    out.bg.wait = e?.constructor?.name;
    out.bg.exitCode = e.exitCode;
  }
  out.bg.killedAgain = await sbx.commands.kill(bg.pid);

  step = 'files';
  await sbx.files.makeDir(dir);
  const events = [];
  const w = await sbx.files.watchDir(dir, (e) => events.push(e.name + ':' + e.type));
  const info = await sbx.files.write(`${dir}/sub/a.txt`, 'alpha\n');
  await sbx.files.write(`${dir}/b.txt`, 'beta\n');
  out.files = {
    written: info.path,
    read: await sbx.files.read(`${dir}/sub/a.txt`),
    list: (await sbx.files.list(dir)).map((e) => `${e.name}:${e.type}`).sort(),
    exists: await sbx.files.exists(`${dir}/nothing`),
  };
  await until('the watch events', () => events.some((e) => e.startsWith('b.txt')));
  await w.stop();
  out.files.events = events;
  await sbx.files.rename(`${dir}/b.txt`, `${dir}/sub/c.txt`);
  await sbx.files.remove(`${dir}/sub/a.txt`);
  out.files.after = (await sbx.files.list(`${dir}/sub`)).map((e) => e.name);
  out.files.moved = await sbx.files.read(`${dir}/sub/c.txt`);

  step = 'pty';
  let screen = '';
  const dec = new TextDecoder();
  const enc = new TextEncoder();
  const pty = await sbx.pty.create({ cols: 80, rows: 24, envs: { PS1: '$ ' }, onData: (d) => { screen += dec.decode(d); } });
  await sbx.pty.sendInput(pty.pid, enc.encode('echo $((6*7))\n'));
  await until('42', () => screen.includes('42\r\n'));
  await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(pty.pid, enc.encode('stty size\n'));
  await until('the new size', () => screen.includes('30 100'));
  await sbx.pty.sendInput(pty.pid, enc.encode('exit\n'));
  const end = await pty.wait();
  out.pty = { fortyTwo: true, resized: true, exitCode: end.exitCode };

  step = 'health';
  out.running = [await sbx.isRunning()];
  await sbx.kill();
  out.running.push(await sbx.isRunning());
  sbx = undefined;
} catch (e) {
  out.error = e?.constructor?.name ?? 'Error';
  out.message = String(e?.message ?? e);
  out.step = step;
} finally {
  if (sbx) await sbx.kill().catch(() => {});
}
// Exit now: the SDK's kept-alive connections would hold the process.
process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
