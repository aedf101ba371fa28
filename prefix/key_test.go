package prefix

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func repeat(s string, n int) string { return strings.Repeat(s, n) }

func repeatTok(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i * 7)
	}
	return strings.Join(ids, ",")
}

// keyCase: bodies with the same label must share a key and bodies with
// different labels must not; err names the wanted error; a RouteOther case
// with label "" wants ok=false.
type keyCase struct {
	name  string
	route Route
	body  string
	label string
	err   *Error
}

const sys = `{"role":"system","content":"You are terse."}`

func keyCases() []keyCase {
	return []keyCase{
		// chat: invariance
		{"chat", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat model last", RouteChat, `{"messages":[` + sys + `,{"role":"user","content":"hi there"}],"model":"m"}`, "chatA", nil},
		{"chat whitespace", RouteChat, "{ \"model\" : \"m\" ,\n\t\"messages\" : [ {\"role\" : \"system\", \"content\":\"You are terse.\"} ,\r\n {\"role\":\"user\",\"content\":\"hi there\"} ] }", "chatA", nil},
		{"chat escapes", RouteChat, `{"m\u006fdel":"\u006d","messages":[{"role":"sys\u0074em","content":"You are terse\u002e"},{"role":"user","content":"hi\u0020there"}]}`, "chatA", nil},
		{"chat member order", RouteChat, `{"model":"m","messages":[{"content":"You are terse.","role":"system"},{"content":"hi there","role":"user"}]}`, "chatA", nil},
		{"chat sampling fields", RouteChat, `{"temperature":0.2,"max_tokens":9,"stream":true,"user":"u1","n":2,"model":"m","seed":1,"messages":[` + sys + `,{"role":"user","content":"hi there","name":null}],"stop":["x"]}`, "chatA", nil},
		{"chat text part", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":[{"type":"text","text":"hi there"}]}]}`, "chatA", nil},
		{"chat part member order and image", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:x"}},{"text":"hi there","type":"text"}]}]}`, "chatA", nil},
		{"chat turn 2", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"},{"role":"assistant","content":"Hello."},{"role":"user","content":"more"}]}`, "chatA", nil},
		{"chat turn 3 with tool call", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"},{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},{"role":"tool","content":"42"},{"role":"user","content":5}]}`, "chatA", nil},
		// Duplicate members: the last wins, as in Python's json (vLLM's and
		// SGLang's parser) and encoding/json, at every level the key reads;
		// an earlier ill-typed duplicate is no error.
		{"chat duplicate model last wins", RouteChat, `{"model":"other","model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate model null first", RouteChat, `{"model":null,"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate messages", RouteChat, `{"model":"m","messages":[{"role":"user","content":"other"}],"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate messages ill-typed first", RouteChat, `{"model":"m","messages":5,"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate messages bad message first", RouteChat, `{"model":"m","messages":[{"role":7}],"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate tools last null", RouteChat, `{"model":"m","tools":[{"type":"function"}],"tools":null,"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate tools ill-typed first", RouteChat, `{"model":"m","tools":5,"tools":[],"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate lora_path last null", RouteChat, `{"model":"m","lora_path":"sql","lora_path":null,"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate role", RouteChat, `{"model":"m","messages":[{"role":"user","role":"system","content":"You are terse."},{"role":7,"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate content", RouteChat, `{"model":"m","messages":[{"role":"system","content":"other","content":"You are terse."},{"role":"user","content":5,"content":"hi there"}]}`, "chatA", nil},
		{"chat duplicate part type and text", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":[{"type":"text","type":"image_url","text":"other"},{"type":"text","text":3,"text":"hi there"}]}]}`, "chatA", nil},
		{"prompt duplicate", RouteCompletions, `{"model":"m","prompt":7,"prompt":"hello"}`, "p1", nil},
		{"chat duplicate model ill-typed last", RouteChat, `{"model":"m","model":7,"messages":[{"role":"user","content":"hi"}]}`, "", errModelType},
		// A missing or null model is no error: vLLM's request models
		// declare model Optional[str] = None and serve their default (first
		// served) model for it, as for "" (SGLang defaults a missing one).
		// It keys as model "": the prompt still tells requests apart.
		{"chat no model", RouteChat, `{"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatNoModel", nil},
		{"chat model null", RouteChat, `{"model":null,"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatNoModel", nil},
		{"chat model empty", RouteChat, `{"messages":[` + sys + `,{"role":"user","content":"hi there"}],"model":""}`, "chatNoModel", nil},
		{"chat duplicate model null last", RouteChat, `{"model":"m","model":null,"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatNoModel", nil},
		{"chat no model other user", RouteChat, `{"messages":[` + sys + `,{"role":"user","content":"hi there!"}]}`, "chatNoModelB", nil},
		{"prompt no model", RouteCompletions, `{"prompt":"hello"}`, "p1NoModel", nil},
		{"prompt model null", RouteCompletions, `{"prompt":"hello","model":null}`, "p1NoModel", nil},
		{"other no model", RouteOther, `{"prompt":"hello"}`, "p1NoModel", nil},
		{"embeddings no model", RouteEmbeddings, `{"input":"hello"}`, "e1NoModel", nil},
		{"embeddings model null", RouteEmbeddings, `{"model" : null ,"input":"hello"}`, "e1NoModel", nil},
		{"chat duplicate messages ill-typed last", RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"messages":5}`, "", errMsgsType},
		// A UTF-8 byte order mark before the object: Python's json.loads
		// reads bytes that start with one (vLLM and SGLang accept them).
		{"chat byte order mark", RouteChat, "\xef\xbb\xbf" + `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"other route byte order mark", RouteOther, "\xef\xbb\xbf" + `{"model":"m","prompt":"hello"}`, "p1", nil},
		{"byte order mark after space", RouteChat, " \xef\xbb\xbf" + `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "", errNotObject},
		{"chat tools null", RouteChat, `{"model":"m","tools":null,"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		// Chat templates test "{% if tools %}", so an empty tools array
		// renders like no tools at all and must key like none.
		{"chat tools empty", RouteChat, `{"model":"m","tools":[],"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat tools empty spaced", RouteChat, `{"model":"m","tools": [ ` + "\n" + ` ] ,"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		// chat: what must change the key
		{"chat other user", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there!"}]}`, "chatB", nil},
		{"chat other system", RouteChat, `{"model":"m","messages":[{"role":"system","content":"You are verbose."},{"role":"user","content":"hi there"}]}`, "chatC", nil},
		{"chat developer role", RouteChat, `{"model":"m","messages":[{"role":"developer","content":"You are terse."},{"role":"user","content":"hi there"}]}`, "chatD", nil},
		{"chat no system", RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi there"}]}`, "chatE", nil},
		{"chat two parts", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}]}`, "chatF", nil},
		{"chat other model", RouteChat, `{"model":"m2","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatG", nil},
		{"chat lora model name", RouteChat, `{"model":"m:sql-adapter","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatH", nil},
		// An empty lora_path names no adapter: it keys like none, as the
		// session key (SessionKey) takes "" for none.
		{"chat sglang lora_path empty", RouteChat, `{"model":"m","lora_path":"","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		{"chat sglang lora_path", RouteChat, `{"model":"m","lora_path":"sql","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatI", nil},
		{"chat tools", RouteChat, `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"n":1,"ok":true}}}],"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatJ", nil},
		{"chat tools whitespace", RouteChat, `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"}], "tools" : [ { "type" : "function" , "function" : { "name":"\u0066", "parameters" : {"n" : 1 , "ok" : true} } } ]}`, "chatJ", nil},
		{"chat tools member order", RouteChat, `{"model":"m","tools":[{"function":{"name":"f","parameters":{"n":1,"ok":true}},"type":"function"}],"messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatK", nil},
		// completions and embeddings
		{"prompt", RouteCompletions, `{"model":"m","prompt":"hello"}`, "p1", nil},
		{"prompt list", RouteCompletions, `{"prompt":["hello"],"model":"m","max_tokens":3}`, "p1", nil},
		{"prompt batch keys first", RouteCompletions, `{"model":"m","prompt":["hello","world"]}`, "p1", nil},
		{"prompt escaped", RouteCompletions, `{"model":"m","prompt":"h\u0065llo","echo":false}`, "p1", nil},
		{"other route sniffs prompt", RouteOther, `{"model":"m","prompt":"hello"}`, "p1", nil},
		{"prompt other", RouteCompletions, `{"model":"m","prompt":"hellO"}`, "p2", nil},
		{"prompt as chat", RouteChat, `{"model":"m","messages":[{"role":"user","content":"hello"}]}`, "p3", nil},
		{"tokens", RouteCompletions, `{"model":"m","prompt":[1,2,3]}`, "t1", nil},
		{"token lists", RouteCompletions, `{"model":"m","prompt":[[1,2,3],[4]]}`, "t1", nil},
		{"tokens other", RouteCompletions, `{"model":"m","prompt":[1,2,4]}`, "t2", nil},
		{"embeddings", RouteEmbeddings, `{"model":"m","input":"hello","encoding_format":"float"}`, "e1", nil},
		{"embeddings list", RouteEmbeddings, `{"model":"m","input":["hello","x"]}`, "e1", nil},
		{"other route sniffs input", RouteOther, `{"input":"hello","model":"m"}`, "e1", nil},
		{"other route sniffs messages", RouteOther, `{"model":"m","messages":[` + sys + `,{"role":"user","content":"hi there"}]}`, "chatA", nil},
		// RouteOther never fails
		{"other nothing to key", RouteOther, `{"model":"m"}`, "", nil},
		{"other not json", RouteOther, `GET me`, "", nil},
		{"other empty", RouteOther, ``, "", nil},
		{"other bad messages", RouteOther, `{"model":"m","messages":5}`, "", nil},
		// errors
		{"not an object", RouteChat, `[1]`, "", errNotObject},
		{"empty body", RouteCompletions, ``, "", errNotObject},
		{"truncated", RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi`, "", errSyntax},
		{"missing colon", RouteCompletions, `{"model" "m"}`, "", errSyntax},
		{"bad escape in prompt", RouteCompletions, `{"model":"m","prompt":"a\qb"}`, "", errSyntax},
		{"model not a string", RouteCompletions, `{"model":7,"prompt":"hi"}`, "", errModelType},
		{"model an object", RouteChat, `{"model":{"name":"m"},"messages":[{"role":"user","content":"hi"}]}`, "", errModelType},
		{"model an array", RouteCompletions, `{"model":["m"],"prompt":"hi"}`, "", errModelType},
		{"model a bool", RouteEmbeddings, `{"model":true,"input":"hi"}`, "", errModelType},
		{"model a misspelt null", RouteCompletions, `{"model":nul,"prompt":"hi"}`, "", errModelType},
		{"model null then a number", RouteCompletions, `{"model":null,"model":0,"prompt":"hi"}`, "", errModelType},
		{"no model and no prompt", RouteCompletions, `{}`, "", errPromptMissing},
		{"no model and no messages", RouteChat, `{"model":null}`, "", errMsgsMissing},
		{"missing prompt", RouteCompletions, `{"model":"m"}`, "", errPromptMissing},
		{"missing input", RouteEmbeddings, `{"model":"m","prompt":"x"}`, "", errInputMissing},
		{"prompt a number", RouteCompletions, `{"model":"m","prompt":5}`, "", errPromptType},
		{"prompt null", RouteCompletions, `{"model":"m","prompt":null}`, "", errPromptType},
		{"prompt empty list", RouteCompletions, `{"model":"m","prompt":[]}`, "", errPromptEmpty},
		{"token not integer", RouteCompletions, `{"model":"m","prompt":[1,2.5]}`, "", errTokenID},
		{"token negative", RouteCompletions, `{"model":"m","prompt":[[-1]]}`, "", errTokenID},
		{"token too big", RouteCompletions, `{"model":"m","prompt":[4294967296]}`, "", errTokenID},
		{"token list of objects", RouteCompletions, `{"model":"m","prompt":[{}]}`, "", errTokenID},
		{"missing messages", RouteChat, `{"model":"m","prompt":"x"}`, "", errMsgsMissing},
		{"messages not array", RouteChat, `{"model":"m","messages":{"role":"user"}}`, "", errMsgsType},
		{"messages empty", RouteChat, `{"model":"m","messages":[]}`, "", errMsgsEmpty},
		{"message not object", RouteChat, `{"model":"m","messages":["hi"]}`, "", errMsgType},
		{"role missing", RouteChat, `{"model":"m","messages":[{"content":"hi"}]}`, "", errRole},
		{"role not string", RouteChat, `{"model":"m","messages":[{"role":1,"content":"hi"}]}`, "", errRole},
		{"content a number", RouteChat, `{"model":"m","messages":[{"role":"user","content":1}]}`, "", errContent},
		{"content an object", RouteChat, `{"model":"m","messages":[{"role":"system","content":{}}]}`, "", errContent},
		{"part not object", RouteChat, `{"model":"m","messages":[{"role":"user","content":["hi"]}]}`, "", errPart},
		{"text part without text", RouteChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":3}]}]}`, "", errPartText},
		{"tools not array", RouteChat, `{"model":"m","tools":{},"messages":[{"role":"user","content":"hi"}]}`, "", errTools},
	}
}

func TestKeyCases(t *testing.T) {
	k, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	byLabel := map[string]uint64{}
	labelOf := map[uint64]string{}
	for _, tc := range keyCases() {
		key, ok, err := k.Key(tc.route, []byte(tc.body))
		switch {
		case tc.err != nil:
			if err != tc.err || !errors.Is(err, ErrInvalidBody) || ok {
				t.Errorf("%s: got ok=%v err=%v, want %v", tc.name, ok, err, tc.err)
			}
			continue
		case err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
			continue
		case tc.label == "":
			if ok {
				t.Errorf("%s: ok=true, want false", tc.name)
			}
			continue
		case !ok:
			t.Errorf("%s: ok=false", tc.name)
			continue
		}
		if want, seen := byLabel[tc.label]; seen && want != key {
			t.Errorf("%s: key %x differs from the other %q cases (%x)", tc.name, key, tc.label, want)
		}
		if other, seen := labelOf[key]; seen && other != tc.label {
			t.Errorf("%s: key collides with label %q", tc.name, other)
		}
		byLabel[tc.label], labelOf[key] = key, tc.label
	}
}

// TestReferenceCases runs the table through the encoding/json reference
// too, under every fuzz configuration.
func TestReferenceCases(t *testing.T) {
	for _, cfg := range fuzzConfigs() {
		k, _ := New(cfg)
		for _, tc := range keyCases() {
			want, wantOK, valid, wantErr := refKey(cfg, tc.route, []byte(tc.body))
			if !valid {
				continue
			}
			got, gotOK, gotErr := k.Key(tc.route, []byte(tc.body))
			if got != want || gotOK != wantOK || (gotErr == nil) != (wantErr == nil) {
				t.Errorf("MaxChars=%d %s: got %x %v %v, reference %x %v %v", cfg.MaxChars, tc.name, got, gotOK, gotErr, want, wantOK, wantErr)
			}
		}
	}
}
