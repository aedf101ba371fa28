package prefix

// The chat key is built from three separately budgeted parts, each cut to
// MaxChars: the tool definitions, the preamble (every message before the
// first user message, with its role), and the anchor (the first user
// message). Later messages are never read, so turn N of a conversation has
// the key of turn 1, and a shared system prompt of any length cannot hide
// the user message that tells two conversations apart.

// messages hashes the preamble and the anchor and skips every message after
// the first user message without looking at it.
func (r *request) messages(s *scanner) error {
	if s.b[s.i] != '[' {
		return errMsgsType
	}
	s.i++
	n := 0
	for {
		ok, err := s.element(&n)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		user, err := r.message(s)
		if err != nil {
			return err
		}
		if user {
			rest := s.i
			if err := s.skipNested(1); err != nil {
				return err
			}
			r.newBytes = newBytes(s.b[:s.i], rest)
			return nil
		}
	}
	if n == 0 {
		return errMsgsEmpty
	}
	return nil
}

// message reads one message object. Its members may come in any order, so
// it notes where role and content are and hashes content afterwards.
func (r *request) message(s *scanner) (user bool, err error) {
	role, content, err := fields(s)
	if err != nil {
		return false, err
	}
	end := s.i
	defer func() { s.i = end }()
	rs := scanner{b: s.b, i: role}
	if keyIs(s.b[role+1:stringEnd(s.b, role+1)], "user") {
		return true, r.anchor.content(s, content)
	}
	t := &r.preamble
	t.sep(sepMessage)
	if err := t.str(&rs); err != nil {
		return false, err
	}
	t.sep(sepRole)
	return false, t.content(s, content)
}

// fields reads the message object at s.i (its '{') and returns the offsets
// of its role (a string) and content (0: absent), with s.i after it. Of
// duplicate members the last counts, as in Python's json.
func fields(s *scanner) (role, content int, err error) {
	if s.b[s.i] != '{' {
		return 0, 0, errMsgType
	}
	s.i++
	for n := 0; ; {
		key, ok, err := s.member(&n)
		if err != nil {
			return 0, 0, err
		}
		if !ok {
			break
		}
		switch {
		case keyIs(key, "role"):
			role = s.i
		case keyIs(key, "content"):
			content = s.i
		}
		if err := s.skip(); err != nil {
			return 0, 0, err
		}
	}
	if role == 0 || s.b[role] != '"' {
		return 0, 0, errRole
	}
	return role, content, nil
}

// content hashes a message's content found at pos (0: absent, same as
// null): a string, or the text of its "text" parts joined by sepPart.
func (t *text) content(s *scanner, pos int) error {
	if pos == 0 {
		return nil
	}
	s.i = pos
	switch s.b[pos] {
	case '"':
		return t.str(s)
	case '[':
	default:
		if s.isNull() {
			return nil
		}
		return errContent
	}
	s.i++
	texts := 0
	for n := 0; ; {
		ok, err := s.element(&n)
		if err != nil || !ok {
			return err
		}
		text, err := textPart(s)
		if err != nil {
			return err
		}
		if text == 0 {
			continue
		}
		if texts++; texts > 1 {
			t.sep(sepPart)
		}
		end := s.i
		s.i = text
		if err := t.str(s); err != nil {
			return err
		}
		s.i = end
	}
}

// textPart reads one content part and returns the offset of its text if it
// is a text part, 0 otherwise (images, audio: not keyed). Of duplicate
// members the last counts.
func textPart(s *scanner) (text int, err error) {
	if s.b[s.i] != '{' {
		return 0, errPart
	}
	s.i++
	isText := false
	for n := 0; ; {
		key, ok, err := s.member(&n)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		switch {
		case keyIs(key, "type"):
			isText = false
			if s.b[s.i] == '"' {
				end := stringEnd(s.b, s.i+1)
				isText = end > 0 && keyIs(s.b[s.i+1:end], "text")
			}
		case keyIs(key, "text"):
			text = 0
			if s.b[s.i] == '"' {
				text = s.i
			}
		}
		if err := s.skip(); err != nil {
			return 0, err
		}
	}
	if !isText {
		return 0, nil
	}
	if text == 0 {
		return 0, errPartText
	}
	return text, nil
}

// tokens hashes the tool definitions as a stream of JSON tokens: brackets
// as themselves, strings between sepMessage and sepRole, literals after
// sepPart. Commas, colons and white space are dropped, so formatting does
// not change the key; member order does, because chat templates render the
// definitions with json.dumps in the order given.
func (t *text) tokens(s *scanner) error {
	start := s.i
	for depth := 0; ; {
		switch c := s.peek(); c {
		case 0:
			return errSyntax
		case '{', '[':
			t.sep(c)
			s.i++
			depth++
		case '}', ']':
			t.sep(c)
			s.i++
			if depth--; depth == 0 {
				return nil
			}
		case ',', ':':
			s.i++
		case '"':
			t.sep(sepMessage)
			if err := t.str(s); err != nil {
				return err
			}
			t.sep(sepRole)
		default:
			lit := s.literal()
			if len(lit) == 0 {
				return errSyntax
			}
			t.sep(sepPart)
			t.lit(lit)
		}
		if t.full() {
			s.i = start
			return s.skip()
		}
	}
}

// newBytes returns how many bytes of the messages array that ends b (with
// its closing bracket) follow the last assistant message at or after i: the
// turn's new messages, which the conversation's earlier turns did not
// send. It returns -1 when there is no assistant message there, or when the
// messages there are not what it expects (they are not validated).
func newBytes(b []byte, i int) int {
	s := scanner{b: b, i: i}
	after := -1
	for n := 1; ; {
		ok, err := s.element(&n)
		if err != nil {
			return -1
		}
		if !ok {
			break
		}
		if s.peek() != '{' {
			return -1
		}
		s.i++
		assistant := false
		for m := 0; ; {
			key, ok, err := s.member(&m)
			if err != nil {
				return -1
			}
			if !ok {
				break
			}
			if keyIs(key, "role") && s.b[s.i] == '"' {
				end := stringEnd(s.b, s.i+1)
				assistant = end > 0 && keyIs(s.b[s.i+1:end], "assistant")
			}
			if err := s.skip(); err != nil {
				return -1
			}
		}
		if assistant {
			after = s.i
		}
	}
	if after < 0 {
		return -1
	}
	return len(b) - 1 - after
}
