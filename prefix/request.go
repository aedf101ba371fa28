package prefix

// parse reads the top-level object of body for route (not RouteOther).
// Duplicate members: the first one wins, and later ones are skipped (the
// upstream may pick another; routing on it then costs one cache miss, not
// correctness). With a Common table, or when marks is not nil
// (Keyer.Prefixes), the anchor records its chunk prefixes into marks.
func (r *request) parse(route Route, body []byte, cfg *Config, marks []uint64) error {
	r.body, r.route, r.newBytes = body, route, -1
	r.toolsT.init(cfg.MaxChars)
	r.preamble.init(cfg.MaxChars)
	window := cfg.window(route)
	switch {
	case cfg.Common != nil:
		if marks == nil {
			marks = r.markBuf[:0]
		}
		n := chunks(cfg.SharedChars) + chunks(window)
		r.anchor.init(n * ChunkChars)
		r.anchor.mark(marks, n)
	case marks != nil: // without a table the key reads the first window only
		r.anchor.init(window)
		r.anchor.mark(marks, chunks(window))
	default:
		r.anchor.init(window)
	}
	s := scanner{b: body}
	if s.peek() != '{' {
		return errNotObject
	}
	s.i++
	for n := 0; ; {
		key, ok, err := s.member(&n)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if err := r.field(&s, key); err != nil {
			return err
		}
	}
	switch {
	case r.model == 0:
		return errModelMissing
	case r.source:
		return nil
	case route == RouteChat:
		return errMsgsMissing
	case route == RouteCompletions:
		return errPromptMissing
	}
	return errInputMissing
}

// field consumes one top-level member's value.
func (r *request) field(s *scanner, key []byte) error {
	switch {
	case r.model == 0 && keyIs(key, "model"):
		if s.b[s.i] != '"' {
			return errModelType
		}
		r.model = s.i
	case !r.loraSeen && keyIs(key, "lora_path"):
		r.loraSeen = true
		// SGLang selects a LoRA adapter per request with lora_path instead
		// of (or besides) the model name; a non-string is left to SGLang.
		if s.b[s.i] == '"' {
			r.lora = s.i
		}
	case r.route == RouteChat && !r.source && keyIs(key, "messages"):
		r.source = true
		r.sourcePos = s.i
		return r.messages(s)
	case r.route == RouteChat && !r.toolsSeen && keyIs(key, "tools"):
		r.toolsSeen = true
		if s.isNull() {
			return nil
		}
		if s.b[s.i] != '[' {
			return errTools
		}
		// Chat templates render tools under "{% if tools %}", so an empty
		// array prompts the model exactly as null or no tools do: key it
		// like them.
		if s.emptyArray() {
			return nil
		}
		r.tools, r.toolsPos = true, s.i
		return r.toolsT.tokens(s)
	case r.route == RouteCompletions && !r.source && keyIs(key, "prompt"),
		r.route == RouteEmbeddings && !r.source && keyIs(key, "input"):
		r.source = true
		r.sourcePos = s.i
		return r.anchor.prompt(s)
	}
	return s.skip()
}

// sniff picks the route a RouteOther body looks like, from its top-level
// member names: messages, then prompt, then input.
func sniff(body []byte) Route {
	s := scanner{b: body}
	if s.peek() != '{' {
		return RouteOther
	}
	s.i++
	found := RouteOther
	for n := 0; ; {
		key, ok, err := s.member(&n)
		if err != nil || !ok {
			return found
		}
		switch {
		case keyIs(key, "messages"):
			return RouteChat
		case keyIs(key, "prompt"):
			found = RouteCompletions
		case keyIs(key, "input") && found == RouteOther:
			found = RouteEmbeddings
		}
		if s.skip() != nil {
			return found
		}
	}
}

// prompt hashes a completions prompt or an embeddings input: a string, an
// array of strings (a batch: the first prompt is keyed), an array of token
// ids, or an array of token-id arrays (the first is keyed). Only the part
// that is read is validated.
func (t *text) prompt(s *scanner) error {
	switch s.b[s.i] {
	case '"':
		return t.str(s)
	case '[':
	default:
		return errPromptType
	}
	s.i++
	switch s.peek() {
	case ']':
		return errPromptEmpty
	case '"':
		if err := t.str(s); err != nil {
			return err
		}
	case '[':
		s.i++
		if err := t.tokenIDs(s); err != nil {
			return err
		}
	default:
		return t.tokenIDs(s)
	}
	return s.skipNested(1)
}

// tokenIDs hashes the token ids of an array whose '[' is consumed, up to the
// budget, and skips the rest.
func (t *text) tokenIDs(s *scanner) error {
	for n := 0; ; {
		if t.full() {
			return s.skipNested(1)
		}
		ok, err := s.element(&n)
		if err != nil || !ok {
			return err
		}
		v, ok := tokenID(s.literal())
		if !ok {
			return errTokenID
		}
		t.token(v)
	}
}

// tokenID parses a JSON integer in [0, 2^32).
func tokenID(lit []byte) (uint32, bool) {
	if len(lit) == 0 || len(lit) > 10 {
		return 0, false
	}
	var v uint64
	for _, c := range lit {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return uint32(v), v <= 1<<32-1
}
