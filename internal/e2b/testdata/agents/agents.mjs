// The OpenAI Agents SDK's E2B sandbox client (@openai/agents-extensions
// 0.18.0, sandbox/e2b) driven WITHOUT a model against the server
// E2B_API_URL names (internal/e2b/e2btest sets the environment; the
// client loads the e2b package pinned beside it in package.json).
// The calls are the ones an agent's tools make on a sandbox session:
// create (workspace root and manifest entries written through the SDK's
// files API), execCommand (the shell tool), readFile, a listing, and
// close (stop: the sandbox is killed), plus a terminal (execCommand with
// tty, writeStdin) and serialize and resume (connect).
// Usage: node agents.mjs ROOT; ROOT is the workspace root in the
// sandbox's view (the base template's /tmp is the sandbox's own).
// Prints one JSON line of what was seen; a step that throws ends the
// script with {"error": NAME, "message": ..., "step": ...}.
import { Manifest } from '@openai/agents-core/sandbox';
import { E2BSandboxClient } from '@openai/agents-extensions/sandbox/e2b';

const [root] = process.argv.slice(2);
const out = {};
let step = 'create';
let session;

// exitOf reads the exit code from execCommand's answer (the text the
// shell tool hands a model: "Process exited with code N").
const exitOf = (s) => {
  const m = /exited with code (-?\d+)/.exec(s);
  return m ? Number(m[1]) : null;
};

try {
  // requestTimeoutMs: a safety bound above the SDK's 60 s for one request
  // (a create timed out once at load 10).
  const client = new E2BSandboxClient({ template: 'base', timeout: 300, requestTimeoutMs: 180_000, metadata: { via: 'agents-sdk' } });
  const manifest = new Manifest({
    root,
    entries: {
      'notes.txt': { type: 'file', content: 'from the manifest\n' },
      src: { type: 'dir', children: { 'a.go': { type: 'file', content: 'package a\n' } } },
    },
  });
  session = await client.create({ manifest });
  out.sandboxId = session.state.sandboxId;

  step = 'exec';
  const ex = await session.execCommand({ cmd: 'pwd; echo hi; echo err >&2' });
  out.exec = { text: ex, exitCode: exitOf(ex) };
  const fail = await session.execCommand({ cmd: 'exit 3' });
  out.execFail = exitOf(fail);

  step = 'readFile';
  out.readFile = new TextDecoder().decode(await session.readFile({ path: 'notes.txt' }));
  out.readNested = new TextDecoder().decode(await session.readFile({ path: 'src/a.go' }));
  try {
    await session.readFile({ path: 'no-such-file' });
    out.readMissing = 'no error';
  } catch (e) {
    out.readMissing = `${e.name}: ${e.message}`;
  }

  step = 'listDir';
  // E2BSandboxSession (0.18.0) has no listDir (an optional method of
  // agents-core's SandboxSession); an agent lists through its shell tool.
  out.hasListDir = typeof session.listDir === 'function';
  if (out.hasListDir) {
    out.listDir = (await session.listDir({ path: '.' })).map((e) => e.name).sort();
  } else {
    const ls = await session.execCommand({ cmd: 'ls -1A' });
    out.listDir = ls.split('\n').filter((l) => l === 'notes.txt' || l === 'src');
  }
  out.dirExists = await session.directoryExists('src');
  out.pathExists = await session.pathExists('nothing-here');

  step = 'running';
  out.running = [await session.running()];

  step = 'tty';
  // execCommand with tty: a terminal (E2B's pty.create) that the command
  // is typed into; the session stays for writeStdin.
  out.hasPty = session.supportsPty();
  // An answer is what the terminal printed within yieldTimeMs; under load
  // the shell may print later, so the session is read again (writeStdin
  // without input, as an agent polls) until the awaited number is there or
  // the shell has ended, within a safety bound of 90 s.
  const printed = (answer) => answer.split('\nOutput:\n').slice(1).join('');
  const sessionOf = (answer) => {
    const m = /Process running with session ID (\d+)/.exec(answer);
    return m ? Number(m[1]) : null;
  };
  const awaitPrinted = async (answer, seen) => {
    let text = printed(answer);
    for (const end = Date.now() + 90_000; !seen(text) && sessionOf(answer) !== null && Date.now() < end; ) {
      answer = await session.writeStdin({ sessionId: sessionOf(answer), chars: '', yieldTimeMs: 1000 });
      text += printed(answer);
    }
    return text;
  };
  const forty2 = (text) => /\b42\b/.test(text.replace(/echo \$\(\(6\*7\)\)/g, ''));
  const fifty6 = (text) => /\b56\b/.test(text.replace(/echo \$\(\(7\*8\)\)/g, ''));
  const tty = await session.execCommand({ cmd: 'echo $((6*7))', tty: true, yieldTimeMs: 3000 });
  out.tty = forty2(await awaitPrinted(tty, forty2));
  const sid = sessionOf(tty);
  if (sid !== null) {
    const more = await session.writeStdin({ sessionId: sid, chars: 'echo $((7*8))\n', yieldTimeMs: 3000 });
    out.ttyStdin = fifty6(await awaitPrinted(more, fifty6));
  }

  step = 'resume';
  const state = await client.deserializeSessionState(await client.serializeSessionState(session.state));
  const resumed = await client.resume(state);
  out.resumedSame = resumed.state.sandboxId === session.state.sandboxId;
  out.resumedExec = exitOf(await resumed.execCommand({ cmd: 'test -f notes.txt' }));

  step = 'stop';
  await session.close();
  out.running.push(await session.running());
  session = undefined;
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ ...out, error: e.name ?? 'Error', message: `${e.message}${e.details ? ' ' + JSON.stringify(e.details) : ''}`, step }));
  if (session) await session.close().catch(() => {});
}
