// ratio.mjs measures how far the router's token estimate (body bytes / 4)
// departs from a real Llama 3 BPE tokenizer's count (llama3-tokenizer-js,
// Llama 3's 128k vocabulary), by text kind. Run from the repository root:
//
//	(cd scripts/tokenratio && npm ci && node ratio.mjs)
//
// Samples: samples/ (written for this measurement: prose, JSON bodies,
// Chinese, Russian) and the repository's own Go and Markdown files (code,
// technical prose), each cut into 2000-byte pieces. It prints a markdown
// table and, last, the per-kind ratios as a Go literal for
// sim/eval/tokens.go.
import fs from 'node:fs'
import path from 'node:path'
import llama3Tokenizer from 'llama3-tokenizer-js'

const root = path.resolve(import.meta.dirname, '../..')
const here = import.meta.dirname
const kinds = { prose: [], code: [], json: [], zh: [], ru: [] }

function pieces(text, size = 2000) {
  const out = []
  const buf = Buffer.from(text, 'utf8')
  for (let i = 0; i + size / 2 <= buf.length; i += size) {
    // Cut on a character boundary.
    out.push(buf.subarray(i, Math.min(i + size, buf.length)).toString('utf8').replace(/\uFFFD/g, ''))
  }
  return out.length ? out : [text]
}

for (const f of fs.readdirSync(path.join(here, 'samples')).sort()) {
  const kind = f.split('-')[0]
  kinds[kind].push(fs.readFileSync(path.join(here, 'samples', f), 'utf8'))
}
// Code: the router's own Go files.
for (const f of ['ring/pick.go', 'ring/balancer.go', 'proxy/proxy.go', 'prefix/keyer.go', 'sim/engine/scheduler.go']) {
  const p = path.join(root, f)
  if (fs.existsSync(p)) kinds.code.push(...pieces(fs.readFileSync(p, 'utf8')).slice(0, 4))
}
// Technical prose: the README (Markdown).
const readme = path.join(root, 'README.md')
if (fs.existsSync(readme)) kinds.prose.push(...pieces(fs.readFileSync(readme, 'utf8')).slice(0, 6))

const rows = []
const literal = {}
for (const [kind, texts] of Object.entries(kinds)) {
  const ratios = texts.map(t => (Buffer.byteLength(t, 'utf8') / 4) / llama3Tokenizer.encode(t, { bos: false, eos: false }).length)
  ratios.sort((a, b) => a - b)
  const bytes = texts.reduce((s, t) => s + Buffer.byteLength(t, 'utf8'), 0)
  const toks = texts.reduce((s, t) => s + llama3Tokenizer.encode(t, { bos: false, eos: false }).length, 0)
  const med = ratios[Math.floor(ratios.length / 2)]
  rows.push(`| ${kind} | ${texts.length} | ${bytes} | ${toks} | ${(bytes / toks).toFixed(2)} | ${ratios[0].toFixed(2)} | ${med.toFixed(2)} | ${ratios[ratios.length - 1].toFixed(2)} |`)
  literal[kind] = ratios.map(r => Number(r.toFixed(3)))
}
console.log('| kind | samples | bytes | tokens | bytes/token | (bytes/4)/tokens min | median | max |')
console.log('|---|---|---|---|---|---|---|---|')
console.log(rows.join('\n'))
console.log()
for (const [k, v] of Object.entries(literal)) console.log(`"${k}": {${v.join(', ')}},`)
