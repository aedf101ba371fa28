package prefix

import (
	"encoding/binary"
	"math"

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
	var r request
	if route == RouteOther {
		if route = sniff(body); route == RouteOther {
			return 0, false, nil
		}
		if err := r.parse(route, body, &k.cfg, 0); err != nil {
			return 0, false, nil
		}
		return r.sum(), true, nil
	}
	if err := r.parse(route, body, &k.cfg, 0); err != nil {
		return 0, false, err
	}
	return r.sum(), true, nil
}

// Prefixes appends to dst the hashes of the body's anchor prefixes (the
// first user message of a chat, the prompt of a completion) at every
// ChunkChars, up to depth of them, for counting in a Tally. The hashes are
// the ones Key looks up in Config.Common.
func (k *Keyer) Prefixes(route Route, body []byte, depth int, dst []uint64) ([]uint64, error) {
	if route == RouteOther {
		route = sniff(body)
		if route == RouteOther {
			return dst, nil
		}
	}
	var r request
	r.anchor.obs = dst
	if err := r.parse(route, body, &k.cfg, max(depth, 1)); err != nil {
		return dst, err
	}
	return r.anchor.obs, nil
}

// SessionKey is the affinity key of a request that carries a session id
// (the X-Session-ID header): the client has told us which requests belong
// together, which beats any guess from the body. The model is part of the
// key because one session may switch models and each keeps its own cache.
func SessionKey(model, session string) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString("session")
	d.Write([]byte{sepMessage})
	d.WriteString(model)
	d.Write([]byte{sepMessage})
	d.WriteString(session)
	return d.Sum64()
}

// request is the state of one Key call. It lives on the caller's stack.
type request struct {
	body   []byte
	route  Route
	model  int // offset of the model string's opening quote; 0 = absent
	lora   int // same, for SGLang's "lora_path"
	source bool
	tools  bool // a tools array was hashed
	// first-wins bookkeeping for members whose first value may be ignored
	loraSeen, toolsSeen bool
	toolsT              text
	preamble            text
	anchor              text
}

// sum combines the part hashes. Each part is a fixed 8 bytes, so the
// combination needs no separators.
func (r *request) sum() uint64 {
	var b [1 + 5*8]byte
	b[0] = r.route.tag()
	binary.LittleEndian.PutUint64(b[1:], r.whole(r.model))
	binary.LittleEndian.PutUint64(b[9:], r.whole(r.lora))
	if r.tools {
		binary.LittleEndian.PutUint64(b[17:], r.toolsT.sum())
	}
	if r.route == RouteChat {
		binary.LittleEndian.PutUint64(b[25:], r.preamble.sum())
	}
	binary.LittleEndian.PutUint64(b[33:], r.anchor.sum())
	return xxhash.Sum64(b[:])
}

// whole hashes a whole string field (model names are never cut: two
// adapters whose names share a long prefix are still different models).
func (r *request) whole(pos int) uint64 {
	if pos == 0 {
		return 0
	}
	var t text
	t.init(math.MaxInt, nil)
	s := scanner{b: r.body, i: pos}
	_ = t.str(&s) // already scanned once by parse
	return t.sum()
}
