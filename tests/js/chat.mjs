// Sends one message through the AI SDK's own chat transport to a live Helix server and checks
// the reply it streams back. Run by tests/js/test_ai_sdk_chat.py, which starts the server and
// passes HELIX_URL and HELIX_TOKEN.
import assert from "node:assert/strict";
import { DefaultChatTransport, readUIMessageStream } from "ai";

const transport = new DefaultChatTransport({
  api: `${process.env.HELIX_URL}/api/chat`,
  headers: { Authorization: `Token ${process.env.HELIX_TOKEN}` },
  body: { agentType: "counter" },
});

async function send(chatId, text, history = []) {
  const message = { id: `m-${history.length}`, role: "user", parts: [{ type: "text", text }] };
  const stream = await transport.sendMessages({
    chatId,
    messages: [...history, message],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  let reply;
  for await (const snapshot of readUIMessageStream({ stream })) {
    reply = snapshot;
  }
  return { message, reply };
}

const chatId = `node-${Date.now()}`;
const first = await send(chatId, "Add 5");
const textOf = (reply) =>
  reply.parts.filter((part) => part.type === "text").map((part) => part.text).join("");

assert.equal(first.reply.role, "assistant");
assert.equal(textOf(first.reply), "The counter is now 5.");
const tool = first.reply.parts.find((part) => part.type === "dynamic-tool");
assert.equal(tool.toolName, "add");
assert.equal(tool.state, "output-available");
assert.deepEqual(tool.input, { amount: 5 });

const second = await send(chatId, "Add 2", [first.message, first.reply]);
assert.equal(textOf(second.reply), "The counter is now 7.");
assert.equal(await transport.reconnectToStream({ chatId }), null); // Nothing executing: 204.

console.log(JSON.stringify({ chatId, replies: [textOf(first.reply), textOf(second.reply)] }));
