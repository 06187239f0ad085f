// The TypeScript client example of docs/temporal.md ("From TypeScript"),
// compiled with tsc and run by TestOutsideClients against the embedded dev
// server and a real worker. Usage:
//   TEMPORAL_ADDRESS=127.0.0.1:7233 node run-in-environment.js WORKFLOW_ID CMD [ARGS...]
// It prints one JSON line: {"workflow_id", "ending", "result"}.

// --- the example (docs/temporal.md quotes from here to "end of the example") ---
import { ApplicationFailure, CancelledFailure, Client, Connection, WorkflowFailedError } from '@temporalio/client';

// RunInEnvironment's input, flow.Request (fields that may be left out are
// optional). Durations are Go duration strings: "10s", "1h30m".
interface Command {
  argv: string[];
  cwd?: string;
  env_policy?: 'inherit' | 'clean' | 'host-shell' | 'toolchain';
  env_set?: string[]; // "K=V"; visible in the workflow history
  purpose?: string;
  labels?: Record<string, string>;
  timeout?: string;
}
interface Request {
  spec?: Record<string, unknown>; // a hostfork spec (docs/spec.md), as JSON
  commands: Command[];
  export?: Record<string, string>; // tree name -> path on the node
  options?: { heartbeat_timeout?: string; node_pickup?: string; max_placements?: number };
}

// Its output, flow.Result (the fields most callers read).
interface CommandRecord {
  id: string;
  argv: string[];
  record_state: string; // "exited" once final
  exit_code: number | null;
  signal: number | null;
  stop_reason: string;
  stdout_path: string;
  stderr_path: string;
}
interface Result {
  node: string;
  env: string;
  commands: CommandRecord[];
  exit_status: number; // the last command's; -1: unknown
  stopped?: { id: string; state: string; stop_reason: string };
  exports?: { tree: string; dest: string; label: string }[];
  placements: { node: string; env: string; outcome: string; error?: string; cleanup?: string }[];
}

// runInEnvironment starts the workflow and waits for it. It returns the
// Result whenever the workflow has one, with how it ended: "ok"; a type
// of ApplicationFailure, whose first detail is the Result ("CommandFailed":
// a command exited non-zero, not retried; "RunFailed": the workflow could
// not do its work); or "Cancelled". Anything else is thrown.
async function runInEnvironment(client: Client, workflowId: string, req: Request): Promise<{ result: Result; ending: string }> {
  const handle = await client.workflow.start('RunInEnvironment', {
    taskQueue: 'hostfork',
    workflowId,
    args: [req],
  });
  try {
    return { result: (await handle.result()) as Result, ending: 'ok' };
  } catch (err) {
    if (err instanceof WorkflowFailedError) {
      const cause = err.cause;
      if (cause instanceof ApplicationFailure && cause.type && cause.details?.length) {
        return { result: cause.details[0] as Result, ending: cause.type };
      }
      if (cause instanceof CancelledFailure && cause.details?.length) {
        return { result: cause.details[0] as Result, ending: 'Cancelled' };
      }
    }
    throw err;
  }
}
// --- end of the example ---

async function main(): Promise<void> {
  const [workflowId, ...argv] = process.argv.slice(2);
  const connection = await Connection.connect({ address: process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233' });
  try {
    const client = new Client({ connection, namespace: process.env.TEMPORAL_NAMESPACE ?? 'default' });
    const { result, ending } = await runInEnvironment(client, workflowId, {
      spec: { purpose: 'ts-client', lifetime: { max_runtime: '10m' } },
      commands: [{ argv }],
    });
    console.log(JSON.stringify({ workflow_id: workflowId, ending, result }));
  } finally {
    await connection.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
