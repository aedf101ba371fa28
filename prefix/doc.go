// Package prefix turns an OpenAI-compatible request body into an affinity
// key: requests that share a long prompt prefix get the same key, so the
// ring sends them to the server whose KV cache already holds that prefix.
//
// The package is a pure core: no I/O, no goroutines, no clock. Key walks
// the body once with a small hand-written JSON scanner that hashes only the
// fields that reach the prompt and skips everything else (long strings at
// memchr speed), without allocating.
//
// # What is keyed
//
// Every key starts with the route kind and the model name, hashed whole; a
// missing or null model hashes as "", since vLLM serves its default model
// for all three (and SGLang its default for a missing one).
// vLLM serves a LoRA adapter under its own model name and SGLang accepts
// "base:adapter" names or a "lora_path" field; an adapter's KV cache is not
// its base model's, so both the model string and a non-empty string
// "lora_path" are part of the key. Then:
//
//   - chat (/v1/chat/completions): three parts, each read up to
//     Config.MaxChars characters: the tool definitions ("tools", as a token
//     stream: formatting is ignored, member order is not, because chat
//     templates render tools with json.dumps in the order given); the
//     preamble (role and text of every message before the first user
//     message); and the anchor (the text of the first user message). Nothing
//     after the first user message is hashed, so every turn of a
//     conversation keys like its first turn, and a shared system prompt of
//     any length does not hide the question that tells conversations apart.
//   - completions ("prompt") and embeddings ("input"): the anchor is the
//     prompt (the first prompt of a batch), read for Config.PromptChars
//     characters after its shared prefix (below). Token-id prompts hash the
//     ids, 4 characters' worth each.
//
// Text parts of a content array are joined with a separator; other parts
// (images, audio) are not keyed. Characters are Unicode code points of the
// decoded JSON string, so escapes and literal text key alike, and a cut
// never falls inside a UTF-8 sequence; invalid UTF-8 bytes and lone
// surrogates hash as U+FFFD, as encoding/json decodes them.
//
// # Shared prefixes
//
// A Sketch learns from the traffic which anchor prefixes (the anchor's
// first k·ChunkChars characters) are shared preambles: prefixes continued
// in at least a fanout of different ways, as a system prompt pasted at the
// top of many conversations is, and a conversation's own history is not.
// Replicas merge their sketches' summaries into one Common table
// (MergeSummaries): a Share publishes this replica's summary as a record,
// merges the others' (MergeRecords) and is carried by the gossip node, and
// Live, the keyer a router keys with, swaps each new table in. With the table, Key
// skips the anchor up to the deepest shared prefix within
// Config.SharedChars and reads its window after it: one chunk of a
// completions prompt, so the first turn of a conversation sent as one
// growing prompt already holds the whole window and every later turn keys
// like it, and the first user message of a chat. Request also returns the
// group key (the shared part alone, and its share of the traffic as the
// table learned it from the sketches' group counts), the tokens a chat
// turn adds after its last assistant message, and the anchor's prefixes
// for the sketch; Blocks returns the whole prompt's chained chunk hashes
// for the tree-based policies.
//
// # What is validated
//
// The scanner checks what it reads: the body is a JSON object; "model" is a
// string, null or absent; the prompt or "messages" is present and well
// typed; every message up to the first user message is an object with a
// string "role" and a string, array-of-parts or null "content"; text parts
// have string text; the token ids it reads are integers in [0, 2^32);
// "tools" is an array.
// Everything else (later messages, other fields, trailing bytes, whether
// brackets match in skipped values) is skipped without validation and left
// to the upstream. Duplicate members: the last wins, as in Python's json
// (vLLM's and SGLang's parser) and encoding/json; an ill-typed member that
// a later one replaces is no error. A UTF-8 byte order mark opening the
// body is skipped, as Python skips it.
package prefix
