// Drives the `agents` package's own AgentClient against a live Helix server and prints what it
// sees, one JSON line per step. Run by tests/js/test_agents_client.py, which starts the server,
// asserts on the lines and passes HELIX_HOST (host:port) and HELIX_TOKEN.
//
//   node agent_state.mjs SCENARIO NAME
//
// Scenarios, each on the GameAgent of tests/agents_app/state_agents.py named NAME:
//   share  two clients write the state in turn, then one writes a state the agent rejects;
//   rpc    plain, streaming and failing calls;
//   write  one client writes a state;
//   read   a new client reports the state it is sent on connect.
import { isDeepStrictEqual } from "node:util";
import { AgentClient } from "agents/client";
import WebSocket from "ws";

const [scenario, name] = process.argv.slice(2);
const host = process.env.HELIX_HOST;
const token = process.env.HELIX_TOKEN;
const TIMEOUT_MS = 10_000;

// Node 20 has no global WebSocket; `ws` sends the API token, as a non-browser client would.
class TokenWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols, { headers: { Authorization: `Token ${token}` } });
  }
}

function report(step, details) {
  console.log(JSON.stringify({ step, ...details }));
}

async function until(check, what) {
  const deadline = Date.now() + TIMEOUT_MS;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// An AgentClient with connection id `id` that records its state updates and state errors.
async function connect(id) {
  const seen = { updates: [], errors: [], connectionError: null };
  const client = new AgentClient({
    agent: "GameAgent", // The client turns it into the kebab-case path segment.
    name,
    host,
    id,
    WebSocket: TokenWebSocket,
    maxRetries: 0, // A refused handshake ends the script instead of retrying.
    onStateUpdate: (state, source) => seen.updates.push({ state, source }),
    onStateUpdateError: (error) => seen.errors.push(error),
    onConnectionError: (error) => {
      seen.connectionError = error.message;
    },
  });
  await until(() => client.identified || seen.connectionError, `${id} was identified`);
  if (seen.connectionError) throw new Error(`${id}: ${seen.connectionError}`);
  return { client, seen };
}

// Wait until `side` got `state` from the server, and return that update.
async function received(side, state, what) {
  const sent = (update) => update.source === "server" && isDeepStrictEqual(update.state, state);
  const match = () => side.seen.updates.find(sent);
  await until(match, what);
  return match();
}

function connected(side) {
  return {
    agent: side.client.agent,
    name: side.client.name,
    id: side.client.id,
    updates: side.seen.updates,
  };
}

async function share() {
  const a = await connect("client-a");
  const b = await connect("client-b");
  await until(() => a.seen.updates.length && b.seen.updates.length, "both got the stored state");
  report("connected", { a: connected(a), b: connected(b) });

  const fromA = { players: ["ann"], score: 1, status: "playing" };
  a.client.setState(fromA);
  const bGot = await received(b, fromA, "B got A's state");
  report("a-to-b", { b_update: bGot, a_state: a.client.state, a_update: a.seen.updates.at(-1) });

  const fromB = { players: ["ann", "bob"], score: 2, status: "playing" };
  b.client.setState(fromB);
  const aGot = await received(a, fromB, "A got B's state");
  await received(b, fromB, "B's own write came back"); // B has had others' states: it is sent.
  report("b-to-a", { a_update: aGot, b_state: b.client.state });

  const bUpdates = b.seen.updates.length;
  a.client.setState({ ...fromB, score: -1 });
  await until(() => a.seen.errors.length, "A got a state error");
  const score = await a.client.call("score"); // Answered after the write before it was handled.
  report("rejected", {
    errors: a.seen.errors,
    stored_score: score,
    b_updates_since: b.seen.updates.slice(bUpdates),
  });

  a.client.close();
  b.client.close();
}

async function outcome(promise) {
  try {
    return { result: await promise };
  } catch (error) {
    return { error: error.message };
  }
}

async function rpc() {
  const a = await connect("client-rpc");
  report("double", await outcome(a.client.call("double", [21])));

  const addPlayer = await outcome(a.client.call("add_player", ["ann"]));
  const written = await received(a, { players: ["ann"], score: 0, status: "waiting" }, "written");
  report("add_player", { ...addPlayer, update: written });

  for (const [method, args] of [
    ["count", [3]],
    ["count_then_fail", []],
  ]) {
    const chunks = [];
    const done = [];
    const errors = [];
    const stream = {
      onChunk: (chunk) => chunks.push(chunk),
      onDone: (result) => done.push(result),
      onError: (error) => errors.push(error),
    };
    const returned = await outcome(a.client.call(method, args, { stream }));
    report(method, { ...returned, chunks, done, errors });
  }

  report("fail", await outcome(a.client.call("fail")));
  a.client.close();
}

async function write() {
  const a = await connect("client-writer");
  const state = { players: ["before-restart"], score: 9, status: "playing" };
  a.client.setState(state);
  const score = await a.client.call("score");
  report("written", { state, stored_score: score });
  a.client.close();
}

async function read() {
  const a = await connect("client-reader");
  await until(() => a.seen.updates.length, "the reader got the stored state");
  report("read", { updates: a.seen.updates, state: a.client.state });
  a.client.close();
}

const scenarios = { share, rpc, write, read };
if (!host || !token || !name || !(scenario in scenarios)) {
  console.error("usage: HELIX_HOST=host:port HELIX_TOKEN=key node agent_state.mjs SCENARIO NAME");
  console.error(`SCENARIO is one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
await scenarios[scenario]();
