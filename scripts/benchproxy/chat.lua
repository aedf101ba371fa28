-- wrk script of scripts/bench-proxy.sh: POSTs OpenAI chat requests of a
-- given size to /v1/chat/completions, rotating through 64 bodies whose
-- prompts differ in their first words, so the affinity keys (prefixring's
-- prompt prefix, HAProxy's first body bytes) differ and the requests spread
-- over the upstreams. Usage: wrk ... -s chat.lua URL -- BODY_BYTES
--
-- At the end it prints one line for the script to parse:
-- RESULT rps=... p50_us=... p90_us=... p99_us=... requests=... errors=...

local nbodies = 64
local requests = {}
local n = 0

-- body returns chat request i, exactly size bytes long (at least ~300).
local function body(i, size)
  local head = string.format(
    '{"model":"bench-model","max_tokens":16,"messages":[' ..
    '{"role":"system","content":"You are a concise assistant. Answer in one sentence."},' ..
    '{"role":"user","content":"Conversation %02d of the benchmark: summarise the following notes. ', i)
  local tail = '"}]}'
  local words = { "prefix ", "cache ", "token ", "ring ", "router ", "prompt ", "endpoint ", "load " }
  local parts, len, w = { head }, #head + #tail, i
  while len < size do
    local word = words[w % #words + 1]
    if len + #word > size then word = string.rep("x", size - len) end
    parts[#parts + 1] = word
    len = len + #word
    w = w + 1
  end
  parts[#parts + 1] = tail
  return table.concat(parts)
end

function init(args)
  local size = tonumber(args[1] or "2048")
  local headers = { ["Content-Type"] = "application/json" }
  for i = 1, nbodies do
    requests[i] = wrk.format("POST", "/v1/chat/completions", headers, body(i, size))
  end
end

function request()
  n = n % nbodies + 1
  return requests[n]
end

function done(summary, latency, _)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT rps=%.0f p50_us=%d p90_us=%d p99_us=%d requests=%d errors=%d\n",
    summary.requests / secs, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), summary.requests,
    e.connect + e.read + e.write + e.timeout + e.status))
end
