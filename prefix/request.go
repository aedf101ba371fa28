package prefix

// parse reads the top-level object of body for route (not RouteOther).
// Duplicate members: the last one wins, as in Python's json, which vLLM
// and SGLang parse bodies with (and encoding/json): a later member of a
// name the key reads is read again and replaces what the earlier one set,
// and an error in an earlier one's value counts only if no later one
// replaces it. With a Common table, or when marks is not nil
// (Keyer.Prefixes), the anchor records its chunk prefixes into marks.
func (r *request) parse(route Route, body []byte, cfg *Config, marks []uint64) error {
	r.body, r.route, r.cfg, r.newBytes = body, route, cfg, -1
	if cfg.Common != nil && marks == nil {
		marks = r.markBuf[:0]
	}
	r.marks = marks
	r.toolsT.init(cfg.MaxChars)
	r.startSource()
	s := newScanner(body)
	if s.peek() != '{' {
		return errNotObject
	}
	s.i++
	for n := 0; ; {
		key, ok, err := s.member(&n)
		if err == nil && ok {
			err = r.field(&s, key)
		}
		if err != nil {
			// A pending error stands before the syntax error: report the
			// first one in the body, as a parse that stopped there would.
			return r.pending(err)
		}
		if !ok {
			break
		}
	}
	switch err := r.pending(nil); {
	case err != nil:
		return err
	case r.source:
		return nil
	case route == RouteChat:
		return errMsgsMissing
	case route == RouteCompletions:
		return errPromptMissing
	}
	return errInputMissing
}

// The members whose values the key reads and may find ill-typed, indexing
// request.errs.
const (
	memberModel = iota
	memberTools
	memberSource // messages, prompt or input
	numMembers
)

// memberErr is the error in a member's value, and where the value starts.
type memberErr struct {
	err error
	at  int
}

// pending returns the first error in the body among the members' errors,
// or else err.
func (r *request) pending(err error) error {
	first := -1
	for i, e := range r.errs {
		if e.err != nil && (first < 0 || e.at < r.errs[first].at) {
			first = i
		}
	}
	if first < 0 {
		return err
	}
	return r.errs[first].err
}

// startSource resets what a prompt source (messages, prompt, input)
// hashes, for its first member or a later duplicate that replaces it.
func (r *request) startSource() {
	cfg := r.cfg
	window := cfg.window(r.route)
	r.newBytes = -1
	r.preamble.init(cfg.MaxChars)
	switch {
	case cfg.Common != nil:
		n := chunks(cfg.SharedChars) + chunks(window)
		r.anchor.init(n * ChunkChars)
		r.anchor.mark(r.marks, n)
	case r.marks != nil: // without a table the key reads the first window only
		r.anchor.init(window)
		r.anchor.mark(r.marks, chunks(window))
	default:
		r.anchor.init(window)
	}
}

// field consumes one top-level member's value. A value the key reads and
// finds ill-typed or malformed is noted in r.errs and skipped (a later
// member of its name may replace it); only a body whose brackets and
// strings do not let it be skipped stops the scan.
func (r *request) field(s *scanner, key []byte) error {
	at := s.i
	m, err := -1, error(nil)
	switch {
	case keyIs(key, "model"):
		// A null model is no model: vLLM (model: Optional[str] = None)
		// and SGLang serve their default model for either, so neither is
		// an error, and the key hashes it as "" (see modelSum).
		m, r.model = memberModel, 0
		switch {
		case s.isNull():
		case s.b[s.i] != '"':
			err = errModelType
		default:
			r.model = s.i
			err = s.skip()
		}
	case keyIs(key, "lora_path"):
		// SGLang selects a LoRA adapter per request with lora_path instead
		// of (or besides) the model name; a non-string is left to SGLang,
		// and an empty string names no adapter (as SessionKey takes "").
		r.lora = 0
		if s.b[s.i] == '"' && s.i+1 < len(s.b) && s.b[s.i+1] != '"' {
			r.lora = s.i
		}
		return s.skip()
	case r.route == RouteChat && keyIs(key, "messages"):
		m, r.source, r.sourcePos = memberSource, true, s.i
		r.startSource()
		err = r.messages(s)
	case r.route == RouteChat && keyIs(key, "tools"):
		m, r.tools = memberTools, false
		r.toolsT.init(r.cfg.MaxChars)
		switch {
		case s.isNull():
		case s.b[s.i] != '[':
			err = errTools
		// Chat templates render tools under "{% if tools %}", so an empty
		// array prompts the model exactly as null or no tools do: key it
		// like them.
		case s.emptyArray():
		default:
			r.tools, r.toolsPos = true, s.i
			err = r.toolsT.tokens(s)
		}
	case r.route == RouteCompletions && keyIs(key, "prompt"),
		r.route == RouteEmbeddings && keyIs(key, "input"):
		m, r.source, r.sourcePos = memberSource, true, s.i
		r.startSource()
		err = r.anchor.prompt(s)
	default:
		return s.skip()
	}
	r.errs[m] = memberErr{}
	if err != nil {
		r.errs[m] = memberErr{err, at}
		s.i = at
		return s.skip()
	}
	return nil
}

// sniff picks the route a RouteOther body looks like, from its top-level
// member names: messages, then prompt, then input.
func sniff(body []byte) Route {
	s := newScanner(body)
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
