// Drives the `agents` package's AgentClient against a live Helix server: it adds an MCP server
// to a session over the socket, then removes it, reporting the `cf_agent_mcp_servers` updates it
// gets, one JSON line per step. Run by tests/agents_app/mcp/test_agents_client_mcp.py, which
// passes HELIX_HOST (host:port) and HELIX_TOKEN.
//
//   node mcp_servers.mjs NAME SERVER_URL
//
// AgentClient leaves `cf_agent_mcp_servers` frames to its listeners; this one hands each frame's
// `mcp` to `onMcpUpdate`, as the package's `useAgent` does.
import { AgentClient } from "agents/client";
import WebSocket from "ws";

const [name, serverUrl] = process.argv.slice(2);
const host = process.env.HELIX_HOST;
const token = process.env.HELIX_TOKEN;
const TIMEOUT_MS = 20_000;

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

const updates = [];
const onMcpUpdate = (mcp) => updates.push(mcp);
const client = new AgentClient({
  agent: "McpSession",
  name,
  host,
  WebSocket: TokenWebSocket,
  maxRetries: 0,
});
client.addEventListener("message", (event) => {
  const message = JSON.parse(event.data);
  if (message.type === "cf_agent_mcp_servers") onMcpUpdate(message.mcp);
});

await until(() => client.identified && updates.length, "connected with the servers");
report("connected", { first: updates[0] });

const added = await client.call("addMcpServer", ["fixture", serverUrl]);
const ready = () => updates.at(-1).servers.fixture?.state === "ready";
await until(ready, "the server is ready");
report("added", { result: added, update: updates.at(-1) });

const before = updates.length;
await client.call("removeMcpServer", ["fixture"]);
await until(() => updates.length > before && !updates.at(-1).servers.fixture, "it is gone");
report("removed", { update: updates.at(-1) });
client.close();
