package prefix

// MaxBlocks bounds Keyer.Blocks: a prompt longer than MaxBlocks·ChunkChars
// characters (1M) is matched on that much of it.
const MaxBlocks = 4096

// Blocks returns in dst (its contents replaced) the chained hashes of the
// whole prompt, in the order an engine reads it: the model and SGLang's
// lora_path (when a non-empty string), then for a chat the tools and every message
// (role and text), for a completion the prompt (the first of a batch). There is one hash per ChunkChars units,
// each the hash of everything up to that point, and last the hash of all
// of it when it ends between two boundaries; at most MaxBlocks. Two
// prompts share their first k blocks exactly when they share their first
// k·ChunkChars units: the approximate radix tree of the cache-aware
// policies matches on them. Messages after the first user message are
// read leniently: hashing stops at the first one that is not a message.
// Errors are Key's.
func (k *Keyer) Blocks(route Route, body []byte, dst []uint64) ([]uint64, error) {
	lax := route == RouteOther
	if lax {
		if route = sniff(body); route == RouteOther {
			return dst[:0], nil
		}
	}
	r := newRequest()
	defer r.free()
	if err := r.parse(route, body, &k.cfg, nil); err != nil {
		if lax {
			return dst[:0], nil
		}
		return dst[:0], err
	}
	if dst == nil {
		dst = make([]uint64, 0, 64)
	}
	var t text
	t.init(MaxBlocks * ChunkChars)
	t.mark(dst[:0], MaxBlocks)
	s := scanner{b: body, i: r.model}
	if r.model != 0 {
		// Without a model the stream starts as model "" does: nothing
		// before the separator.
		_ = t.str(&s) // already checked by parse
	}
	t.sep(sepMessage)
	if r.lora != 0 {
		// SGLang's per-request adapter keeps a cache of its own, like a
		// model name; Key hashes it too. Without one the stream is as it
		// was, so blocks of requests without lora_path do not change.
		s.i = r.lora
		_ = t.str(&s)
		t.sep(sepMessage)
	}
	if r.tools {
		s.i = r.toolsPos
		_ = t.tokens(&s)
		t.sep(sepMessage)
	}
	s.i = r.sourcePos
	if route == RouteChat {
		t.allMessages(&s)
	} else {
		_ = t.prompt(&s)
	}
	return t.prefixes(), nil
}

// allMessages hashes every message of the array at s.i, each as role and
// content between separators, until the budget runs out or a message is
// malformed.
func (t *text) allMessages(s *scanner) {
	if s.b[s.i] != '[' {
		return
	}
	s.i++
	for n := 0; !t.full(); {
		ok, err := s.element(&n)
		if err != nil || !ok || s.b[s.i] != '{' {
			return
		}
		role, content, err := fields(s)
		if err != nil {
			return
		}
		end := s.i
		t.sep(sepMessage)
		rs := scanner{b: s.b, i: role}
		if t.str(&rs) != nil {
			return
		}
		t.sep(sepRole)
		if t.content(s, content) != nil {
			return
		}
		s.i = end
	}
}
