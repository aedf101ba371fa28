// make e2e-real: the official OpenAI Node client (openai, pinned in
// package.json) against prefixring in front of llama-server. It lists the
// models, streams a chat completion and checks that the engine's 400 for a
// request it refuses reaches the client as the SDK's BadRequestError. Exits 1 on
// the first thing that is not as it should be.
//
//   node stream.mjs http://127.0.0.1:18380/v1
import OpenAI from "openai";

const baseURL = process.argv[2];
if (!baseURL) {
  console.error("usage: node stream.mjs BASE_URL (e.g. http://127.0.0.1:18380/v1)");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const fail = (msg) => {
  console.error(`openai-node: FAIL: ${msg}`);
  process.exit(1);
};

const models = await client.models.list();
const ids = models.data.map((m) => m.id);
if (!ids.includes("tiny")) fail(`models.list() gave ${JSON.stringify(ids)}, want "tiny" among them`);

const { data: stream, response } = await client.chat.completions
  .create({
    model: "tiny",
    messages: [
      { role: "system", content: " you are a tiny model" },
      { role: "user", content: " abc def ghi jkl mno pqr stu vwx" },
    ],
    max_tokens: 24,
    stream: true,
    stream_options: { include_usage: true },
  })
  .withResponse();
const endpoint = response.headers.get("x-prefixring-endpoint");
if (!endpoint) fail("no X-Prefixring-Endpoint header: did the request go through prefixring?");
let chunks = 0, text = "", usage = null, finish = null;
for await (const chunk of stream) {
  chunks++;
  for (const c of chunk.choices) {
    text += c.delta?.content ?? "";
    finish = c.finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
if (chunks < 3) fail(`${chunks} chunks: not a stream`);
if (!text) fail("no text streamed");
if (!usage || usage.completion_tokens !== 24) fail(`usage ${JSON.stringify(usage)}, want 24 completion tokens`);
if (finish !== "length") fail(`finish_reason ${finish}, want "length"`);

// A request the router passes on and the engine refuses: the engine's 400
// and its message reach the SDK as a BadRequestError.
let refused = "";
try {
  await client.chat.completions.create({
    model: "tiny", max_tokens: 4, messages: [{ role: "user", content: "hi" }],
    response_format: { type: "nope" },
  });
  fail("a response_format the engine does not know was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError)) fail(`bad response_format: ${e}`);
  if (!String(e.message).includes("response_format")) fail(`not the engine's error: ${e.message}`);
  refused = e.message;
}

console.log(`openai-node ${OpenAI.VERSION ?? ""}: models ${JSON.stringify(ids)}; streamed ${chunks} chunks ` +
  `(${usage.prompt_tokens} prompt, ${usage.completion_tokens} completion tokens) from ${endpoint}; ` +
  `the engine's refusal -> BadRequestError: ${refused.slice(0, 100)}`);
