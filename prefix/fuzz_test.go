package prefix

import (
	"errors"
	"testing"
)

// fuzzConfigs are the configurations every fuzz input is keyed under: a
// tiny window so that budgets run out inside strings, escapes, parts and
// token lists; the default; and a small window with a Common table, so the
// adaptive path is compared with the reference too.
func fuzzConfigs() []Config {
	k, _ := New(Config{MaxChars: ChunkChars})
	// Common prefixes of a few plausible anchors: the seeds share them.
	var hs []uint64
	for _, b := range []string{
		`{"model":"m","prompt":"` + repeat("abcd", 200) + `"}`,
		`{"model":"m","prompt":[` + repeatTok(200) + `]}`,
	} {
		hs, _ = k.Prefixes(RouteCompletions, []byte(b), 2, hs)
	}
	return []Config{
		{MaxChars: 7},
		DefaultConfig(),
		{MaxChars: ChunkChars, Common: NewCommon(hs)},
	}
}

func addSeeds(f *testing.F) {
	for _, tc := range keyCases() {
		f.Add(uint8(tc.route), []byte(tc.body))
	}
	f.Add(uint8(RouteCompletions), []byte(`{"model":"m","prompt":"`+repeat("abcd", 300)+`"}`))
	f.Add(uint8(RouteCompletions), []byte(`{"model":"m","prompt":[`+repeatTok(300)+`]}`))
}

// FuzzKey: Key never panics, is deterministic, returns only *Error errors,
// and reads at most its budget of each part.
func FuzzKey(f *testing.F) {
	addSeeds(f)
	cfgs := fuzzConfigs()
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := Route(route % 4)
		for _, cfg := range cfgs {
			k, _ := New(cfg)
			k1, ok1, err1 := k.Key(r, body)
			k2, ok2, err2 := k.Key(r, body)
			if k1 != k2 || ok1 != ok2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("not deterministic: %x %v %v / %x %v %v", k1, ok1, err1, k2, ok2, err2)
			}
			if err1 != nil && (!errors.Is(err1, ErrInvalidBody) || ok1 || r == RouteOther) {
				t.Fatalf("bad error contract: ok=%v err=%v route=%v", ok1, err1, r)
			}
			if err1 == nil && r != RouteOther && !ok1 {
				t.Fatalf("known route not ok without error")
			}
			var req request
			if route := sniffIf(r, body); route != RouteOther && req.parse(route, body, &cfg, 0) == nil {
				// Bounded work: no part reads more than its window, except
				// the anchor, which may add one window per common chunk.
				if req.toolsT.n > cfg.MaxChars+0 || req.preamble.n > cfg.MaxChars {
					t.Fatalf("read past budget: tools %d preamble %d", req.toolsT.n, req.preamble.n)
				}
				if req.anchor.n > req.anchor.limit+3 {
					t.Fatalf("anchor read %d > limit %d", req.anchor.n, req.anchor.limit)
				}
			}
		}
	})
}

func sniffIf(r Route, body []byte) Route {
	if r == RouteOther {
		return sniff(body)
	}
	return r
}

// FuzzReference: on every body encoding/json accepts, Key agrees with the
// encoding/json reference implementation (key, ok, and error or not).
func FuzzReference(f *testing.F) {
	addSeeds(f)
	cfgs := fuzzConfigs()
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := Route(route % 4)
		for _, cfg := range cfgs {
			want, wantOK, valid, wantErr := refKey(cfg, r, body)
			if !valid {
				continue
			}
			k, _ := New(cfg)
			got, gotOK, gotErr := k.Key(r, body)
			if (gotErr == nil) != (wantErr == nil) || gotOK != wantOK || got != want {
				t.Fatalf("MaxChars=%d common=%d route=%v\n got %x %v %v\nwant %x %v %v",
					cfg.MaxChars, cfg.Common.Len(), r, got, gotOK, gotErr, want, wantOK, wantErr)
			}
		}
	})
}
