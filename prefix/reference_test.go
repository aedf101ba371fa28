package prefix

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// This file is a slow, obviously-correct implementation of the key, written
// from the specification in doc.go on top of encoding/json. The fuzz tests
// check that the scanner agrees with it on every body encoding/json accepts.

// member and object keep members in order, duplicates included:
// map[string]any would lose the order of tool definitions. Of duplicate
// members get returns the last, as Python's json (vLLM's and SGLang's
// parser) and encoding/json keep it.
type member struct {
	key string
	val any
}
type object []member

func (o object) get(name string) (any, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == name {
			return o[i].val, true
		}
	}
	return nil, false
}

func decodeTree(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		var o object
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeTree(d)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err := d.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for d.More() {
			v, err := decodeTree(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token()
		return a, err
	}
	return tok, nil
}

// refStream is a unit stream with the budget rules of text.
type refStream struct {
	units [][]byte
	cost  []int
}

func (r *refStream) runes(s string) {
	for _, c := range s {
		r.units = append(r.units, []byte(string(c)))
		r.cost = append(r.cost, 1)
	}
}
func (r *refStream) sep(c byte) { r.units = append(r.units, []byte{c}); r.cost = append(r.cost, 1) }
func (r *refStream) token(v uint32) {
	r.units = append(r.units, binary.LittleEndian.AppendUint32(nil, v))
	r.cost = append(r.cost, 4)
}

// hash applies the budget: units are taken while fewer than window have
// been taken. With a common table, units are taken while fewer than
// (chunks(shared) + chunks(window)) chunks have been, the hash of the
// prefix is noted each time a multiple of ChunkChars is reached, and the
// result is the prefix noted chunks(window) marks after the deepest of the
// first chunks(shared) marks found in common, or the hash of all that was
// taken if the stream ended first.
func (r *refStream) hash(window, shared int, common *Common) (uint64, error) {
	limit, maxMarks := window, 0
	if common != nil {
		maxMarks = chunks(shared) + chunks(window)
		limit = maxMarks * ChunkChars
	}
	var buf []byte
	var marks []uint64
	n, next := 0, ChunkChars
	for i, u := range r.units {
		if n >= limit {
			break
		}
		if u == nil {
			return 0, errRef
		}
		buf = append(buf, u...)
		n += r.cost[i]
		if common != nil && len(marks) < maxMarks && n >= next {
			marks = append(marks, xxhash.Sum64(buf))
			next += ChunkChars
		}
	}
	if common == nil {
		return xxhash.Sum64(buf), nil
	}
	deepest := 0
	for i := 0; i < len(marks) && i < chunks(shared); i++ {
		if common.has(marks[i]) {
			deepest = i + 1
		}
	}
	if end := deepest + chunks(window); end <= len(marks) {
		return marks[end-1], nil
	}
	return xxhash.Sum64(buf), nil
}

var errRef = errors.New("reference: invalid")

// refTokens appends every token id; an invalid one becomes a nil unit,
// which is an error only if the budget reaches it.
func refTokens(a []any, st *refStream) {
	for _, v := range a {
		num, _ := v.(json.Number)
		u, err := strconv.ParseUint(string(num), 10, 32)
		if err != nil || bytes.ContainsAny([]byte(num), "+-.eE") {
			st.units = append(st.units, nil)
			st.cost = append(st.cost, 4)
			continue
		}
		st.token(uint32(u))
	}
}

func refPrompt(v any, st *refStream) error {
	switch p := v.(type) {
	case string:
		st.runes(p)
		return nil
	case []any:
		if len(p) == 0 {
			return errRef
		}
		switch f := p[0].(type) {
		case string:
			st.runes(f)
			return nil
		case []any:
			refTokens(f, st)
			return nil
		}
		refTokens(p, st)
		return nil
	}
	return errRef
}

func refContent(v any, st *refStream) error {
	switch c := v.(type) {
	case nil:
		return nil
	case string:
		st.runes(c)
		return nil
	case []any:
		texts := 0
		for _, p := range c {
			part, ok := p.(object)
			if !ok {
				return errRef
			}
			typ, _ := part.get("type")
			if typ != "text" {
				continue
			}
			txt, ok := part.get("text")
			s, isStr := txt.(string)
			if !ok || !isStr {
				return errRef
			}
			if texts++; texts > 1 {
				st.sep(sepPart)
			}
			st.runes(s)
		}
		return nil
	}
	return errRef
}

func refTools(v any, st *refStream) {
	switch x := v.(type) {
	case object:
		st.sep('{')
		for _, m := range x {
			refTools(m.key, st)
			refTools(m.val, st)
		}
		st.sep('}')
	case []any:
		st.sep('[')
		for _, e := range x {
			refTools(e, st)
		}
		st.sep(']')
	case string:
		st.sep(sepMessage)
		st.runes(x)
		st.sep(sepRole)
	default:
		st.sep(sepPart)
		var lit string
		switch y := x.(type) {
		case json.Number:
			lit = string(y)
		case bool:
			lit = strconv.FormatBool(y)
		case nil:
			lit = "null"
		}
		for i := 0; i < len(lit); i++ {
			st.sep(lit[i])
		}
	}
}

// refKey is the reference Key. valid is false when encoding/json rejects
// the body (the scanner is then only required not to panic).
func refKey(cfg Config, route Route, body []byte) (key uint64, ok, valid bool, err error) {
	// A UTF-8 byte order mark may open the body: Python's json.loads reads
	// bytes that start with one.
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	if !json.Valid(body) {
		return 0, false, false, nil
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	tree, err := decodeTree(d)
	if err != nil && err != io.EOF {
		return 0, false, false, nil
	}
	top, isObj := tree.(object)
	if route == RouteOther {
		if !isObj {
			return 0, false, true, nil
		}
		for _, m := range top {
			if m.key == "messages" {
				route = RouteChat
				break
			}
			if m.key == "prompt" {
				route = RouteCompletions
			}
			if m.key == "input" && route == RouteOther {
				route = RouteEmbeddings
			}
		}
		if route == RouteOther {
			return 0, false, true, nil
		}
		key, _, _, err := refKey(cfg, route, body)
		return key, err == nil, true, nil
	}
	if !isObj {
		return 0, false, true, errRef
	}
	key, err = refTop(cfg, route, top)
	return key, err == nil, true, err
}

func refTop(cfg Config, route Route, top object) (uint64, error) {
	var b [1 + 5*8]byte
	b[0] = route.tag()
	// A missing or null model is the engine's default model: keyed as "".
	model, _ := top.get("model")
	ms, isStr := model.(string)
	if model != nil && !isStr {
		return 0, errRef
	}
	binary.LittleEndian.PutUint64(b[1:], xxhash.Sum64String(ms))
	if v, _ := top.get("lora_path"); v != nil {
		if lora, isStr := v.(string); isStr && lora != "" {
			binary.LittleEndian.PutUint64(b[9:], xxhash.Sum64String(lora))
		}
	}
	var anchor refStream
	switch route {
	case RouteChat:
		if tools, ok := top.get("tools"); ok && tools != nil {
			arr, isArr := tools.([]any)
			if !isArr {
				return 0, errRef
			}
			// An empty array renders like no tools (docs/prefix-key.md).
			if len(arr) > 0 {
				var st refStream
				refTools(tools, &st)
				h, _ := st.hash(cfg.MaxChars, 0, nil)
				binary.LittleEndian.PutUint64(b[17:], h)
			}
		}
		msgs, ok := top.get("messages")
		list, isArr := msgs.([]any)
		if !ok || !isArr || len(list) == 0 {
			return 0, errRef
		}
		var pre refStream
		for _, m := range list {
			msg, isObj := m.(object)
			if !isObj {
				return 0, errRef
			}
			role, ok := msg.get("role")
			rs, isStr := role.(string)
			if !ok || !isStr {
				return 0, errRef
			}
			content, _ := msg.get("content")
			if rs == "user" {
				if err := refContent(content, &anchor); err != nil {
					return 0, err
				}
				break
			}
			pre.sep(sepMessage)
			pre.runes(rs)
			pre.sep(sepRole)
			if err := refContent(content, &pre); err != nil {
				return 0, err
			}
		}
		h, _ := pre.hash(cfg.MaxChars, 0, nil)
		binary.LittleEndian.PutUint64(b[25:], h)
	default:
		name := "prompt"
		if route == RouteEmbeddings {
			name = "input"
		}
		p, ok := top.get(name)
		if !ok {
			return 0, errRef
		}
		if err := refPrompt(p, &anchor); err != nil {
			return 0, err
		}
	}
	h, err := anchor.hash(cfg.window(route), cfg.SharedChars, cfg.Common)
	if err != nil {
		return 0, err
	}
	binary.LittleEndian.PutUint64(b[33:], h)
	return xxhash.Sum64(b[:]), nil
}
