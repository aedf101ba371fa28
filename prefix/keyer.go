package prefix

import (
	"bytes"
	"encoding/binary"
	"math"
	"sync"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Keyer computes affinity keys. It holds only its Config, so one Keyer is
// safe for concurrent use by any number of goroutines.
type Keyer struct {
	cfg Config
}

// New returns a Keyer for a valid cfg.
func New(cfg Config) (*Keyer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Keyer{cfg: cfg}, nil
}

// Key returns the affinity key of a request body sent to route.
//
// For the three known routes a body Key cannot key is an error matching
// ErrInvalidBody, and ok is true otherwise. For RouteOther Key keys the body
// like the route its fields suggest ("messages": chat, "prompt":
// completions, "input": embeddings) and returns ok=false, never an error,
// when it finds no usable prompt: the caller then balances by load alone.
func (k *Keyer) Key(route Route, body []byte) (key uint64, ok bool, err error) {
	r := newRequest()
	defer r.free()
	if route == RouteOther {
		if route = sniff(body); route == RouteOther {
			return 0, false, nil
		}
		if err := r.parse(route, body, &k.cfg, nil); err != nil {
			return 0, false, nil
		}
		return r.sum(&k.cfg), true, nil
	}
	if err := r.parse(route, body, &k.cfg, nil); err != nil {
		return 0, false, err
	}
	return r.sum(&k.cfg), true, nil
}

// Key is what Keyer.Request reads from a body.
type Key struct {
	// Hash is the affinity key, as Keyer.Key returns it; Keyed is false
	// when a body sent to RouteOther has no prompt to key.
	Hash  uint64
	Keyed bool
	// Group is the key of the prompt's shared part alone: the model, tools
	// and preamble of a chat with the shared prefix of its first user
	// message; the model and the shared prefix of a completion's prompt
	// (its first chunk when none is known). The prefix-key policy keys on it.
	Group uint64
	// GroupShare is the group key's share of the cluster's requests, as the
	// table (Config.Common) learned it; 0 when unknown.
	GroupShare float64
	// EarlyShare says GroupShare is an early one, counted over fewer
	// requests than a settled share (see [Shares]).
	EarlyShare bool
	// SharedChars is how much of the prompt the group key covers, in
	// characters: a chat's tools and preamble as read, and the anchor's
	// shared prefix; a completion's shared prefix.
	SharedChars int
	// NewBytes is, for a chat whose messages include an assistant message,
	// the bytes of the messages after the last one: what this turn adds to
	// a conversation whose earlier turns its server holds. -1 otherwise.
	NewBytes int
	// Prefixes are the anchor's chunk prefixes (see Keyer.Prefixes), when
	// Request was given a buffer for them.
	Prefixes []uint64
}

// Request reads everything the router needs from a body in one pass: the
// key, the group key, the new bytes of a chat turn, and, when prefixes is
// not nil, the anchor's chunk prefixes into it (its contents replaced) for
// a Sketch. Errors are Key's.
func (k *Keyer) Request(route Route, body []byte, prefixes []uint64) (Key, error) {
	lax := route == RouteOther
	if lax {
		if route = sniff(body); route == RouteOther {
			return Key{NewBytes: -1}, nil
		}
	}
	r := newRequest()
	defer r.free()
	if prefixes != nil {
		prefixes = prefixes[:0]
	}
	if err := r.parse(route, body, &k.cfg, prefixes); err != nil {
		if lax {
			return Key{NewBytes: -1}, nil
		}
		return Key{NewBytes: -1}, err
	}
	key := Key{Hash: r.sum(&k.cfg), Keyed: true, Group: r.group(&k.cfg), NewBytes: r.newBytes}
	if k.cfg.Common != nil {
		key.SharedChars = r.shared(&k.cfg) * ChunkChars
		key.GroupShare = k.cfg.Common.Share(key.Group)
		key.EarlyShare = key.GroupShare > 0 && k.cfg.Common.EarlyShares()
	}
	if route == RouteChat {
		key.SharedChars += r.toolsT.n + r.preamble.n
	}
	if prefixes != nil {
		key.Prefixes = r.anchor.prefixes()
	}
	return key, nil
}

// prefixes returns the marks, with the hash of the whole text after them
// when it ends between two chunk boundaries.
func (t *text) prefixes() []uint64 {
	if !t.full() && t.n > len(t.marks)*ChunkChars {
		t.marks = append(t.marks, t.sum())
	}
	return t.marks
}

// Prefixes returns in dst (its contents replaced) the hashes of the body's
// anchor prefixes (the first user message of a chat, the prompt of a
// completion) at every ChunkChars, as far as Key reads them: the hashes
// Key looks up in Config.Common, for a Sketch to count. When the anchor
// ends between two chunk boundaries, the hash of all of it comes last: it
// is how the last prefix was continued.
func (k *Keyer) Prefixes(route Route, body []byte, dst []uint64) ([]uint64, error) {
	if route == RouteOther {
		route = sniff(body)
		if route == RouteOther {
			return dst[:0], nil
		}
	}
	r := newRequest()
	defer r.free()
	if dst == nil {
		dst = make([]uint64, 0, 16)
	}
	if err := r.parse(route, body, &k.cfg, dst[:0]); err != nil {
		return dst[:0], err
	}
	return r.anchor.prefixes(), nil
}

// SessionKey is the affinity key of a request that carries a session id
// (the X-Session-ID header): the client has told us which requests belong
// together, which beats any guess from the body. The model and SGLang's
// lora_path are part of the key because one session may switch models or
// adapters and each keeps its own cache. A lora "" (none) adds nothing,
// so sessions without an adapter keep their keys.
func SessionKey(model, lora, session string) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString("session")
	d.Write([]byte{sepMessage})
	d.WriteString(model)
	d.Write([]byte{sepMessage})
	if lora != "" {
		d.WriteString(lora)
		d.Write([]byte{sepRole})
	}
	d.WriteString(session)
	return d.Sum64()
}

// ModelAndLora returns the body's model and SGLang's lora_path: their
// top-level members (the last of duplicates, as Key reads them), decoded
// as encoding/json would, each "" when the body is not an object or the
// member is not a string (the keyer leaves a non-string lora_path to
// SGLang). It validates nothing else and decodes nothing else (skipping
// other members as Key does, quote to quote), so the session path can key
// by model without parsing the body for a prompt key. It reads every
// top-level member, since of duplicates the last wins; a body that cannot
// be skipped to its end gives what was read.
func ModelAndLora(body []byte) (model, lora string) {
	s := newScanner(body)
	if s.peek() != '{' {
		return "", ""
	}
	s.i++
	for n := 0; ; {
		key, ok, err := s.member(&n)
		if err != nil || !ok {
			return model, lora
		}
		var dst *string
		switch {
		case keyIs(key, "model"):
			dst = &model
		case keyIs(key, "lora_path"):
			dst = &lora
		}
		if dst != nil {
			*dst = ""
			if s.b[s.i] == '"' {
				end := stringEnd(s.b, s.i+1)
				if end < 0 {
					return model, lora
				}
				*dst = decodeString(s.b[s.i+1 : end])
			}
		}
		if s.skip() != nil {
			return model, lora
		}
	}
}

// decodeString decodes the content of a JSON string (between its quotes)
// as encoding/json does: escapes decoded, invalid UTF-8 as U+FFFD; "" when
// an escape is malformed.
func decodeString(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw)
	}
	out, ok := appendUnescaped(make([]byte, 0, len(raw)), raw, -1)
	if !ok {
		return ""
	}
	if utf8.Valid(out) {
		return string(out)
	}
	// Invalid bytes came from raw as they were (escapes decode to whole
	// runes): each becomes U+FFFD, as encoding/json makes it.
	valid := make([]byte, 0, len(out)+8)
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRune(out[i:])
		valid, i = utf8.AppendRune(valid, r), i+size
	}
	return string(valid)
}

// requests recycles request states. A request is 2.7 KB, and with a
// Common table its anchor records marks into its own markBuf, a pointer
// into itself that keeps it off the caller's stack: without the pool every
// Key would allocate it (measured: 1 allocation of 2688 B per call).
var requests = sync.Pool{New: func() any { return new(request) }}

func newRequest() *request { return requests.Get().(*request) }

// free zeroes r, dropping its reference to the body, and recycles it.
func (r *request) free() {
	*r = request{}
	requests.Put(r)
}

// request is the state of one Key call, from the requests pool.
type request struct {
	body   []byte
	route  Route
	model  int // offset of the model string's opening quote; 0 = absent or null
	lora   int // same, for SGLang's "lora_path"
	cfg    *Config
	source bool // a prompt source (messages, prompt, input) was seen
	tools  bool // a tools array was hashed
	// errs are the errors of the last member of each name the key reads:
	// an earlier duplicate's is replaced (the last member wins).
	errs      [numMembers]memberErr
	toolsT    text
	preamble  text
	anchor    text
	marks     []uint64 // where the anchor records its chunk prefixes; nil: nowhere
	markBuf   [160]uint64
	newBytes  int // chat: bytes of the messages after the last assistant message; -1: none
	sourcePos int // offset of the messages or prompt value
	toolsPos  int // offset of the tools array, if tools
}

// anchorSum is the anchor's hash: with marks (a Common table), the hash of
// its prefix through the window that follows the deepest shared prefix
// within SharedChars (through its end if it is shorter); without, the hash
// of its first window.
func (r *request) anchorSum(cfg *Config) uint64 {
	t := &r.anchor
	if cfg.Common == nil {
		return t.sum()
	}
	if end := r.shared(cfg) + chunks(cfg.window(r.route)); end <= len(t.marks) {
		return t.marks[end-1]
	}
	return t.sum()
}

// shared returns how many of the anchor's chunks are its shared prefix:
// the deepest of its first SharedChars chunk prefixes in cfg.Common.
func (r *request) shared(cfg *Config) int {
	n := 0
	t := &r.anchor
	for i, h := range t.marks[:min(len(t.marks), chunks(cfg.SharedChars))] {
		if cfg.Common.has(h) {
			n = i + 1
		}
	}
	return n
}

// group is the key of the prompt's shared part alone: the model, the
// tools, the preamble and the anchor's shared prefix; for a completion
// with no known shared prefix, its first chunk.
func (r *request) group(cfg *Config) uint64 {
	var g uint64
	switch t := &r.anchor; {
	case cfg.Common != nil && r.shared(cfg) > 0:
		g = t.marks[r.shared(cfg)-1]
	case r.route == RouteChat:
	case len(t.marks) > 0:
		g = t.marks[0]
	default:
		g = t.sum()
	}
	return r.combine(cfg, g)
}

// sum combines the part hashes. Each part is a fixed 8 bytes, so the
// combination needs no separators.
func (r *request) sum(cfg *Config) uint64 { return r.combine(cfg, r.anchorSum(cfg)) }

// combine hashes the route, the model, the adapter, the tools, the
// preamble (chat) and anchor, the anchor's hash.
func (r *request) combine(cfg *Config, anchor uint64) uint64 {
	var b [1 + 5*8]byte
	b[0] = r.route.tag()
	binary.LittleEndian.PutUint64(b[1:], r.modelSum())
	binary.LittleEndian.PutUint64(b[9:], r.whole(r.lora))
	if r.tools {
		binary.LittleEndian.PutUint64(b[17:], r.toolsT.sum())
	}
	if r.route == RouteChat {
		binary.LittleEndian.PutUint64(b[25:], r.preamble.sum())
	}
	binary.LittleEndian.PutUint64(b[33:], anchor)
	return xxhash.Sum64(b[:])
}

// emptySum is the hash of "", as text.sum gives it.
var emptySum = xxhash.Sum64(nil)

// modelSum hashes the model name whole. A missing or null model hashes as
// "", the name that also selects the engine's default model: the three
// are one model to vLLM, so they share a key.
func (r *request) modelSum() uint64 {
	if r.model == 0 {
		return emptySum
	}
	return r.whole(r.model)
}

// whole hashes a whole string field (model names are never cut: two
// adapters whose names share a long prefix are still different models).
func (r *request) whole(pos int) uint64 {
	if pos == 0 {
		return 0
	}
	var t text
	t.init(math.MaxInt)
	s := scanner{b: r.body, i: pos}
	_ = t.str(&s) // already scanned once by parse
	return t.sum()
}

// Config returns the keyer's configuration.
func (k *Keyer) Config() Config { return k.cfg }
