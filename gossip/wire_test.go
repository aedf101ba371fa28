package gossip

import (
	"github.com/prefixring/prefixring/gossip/core"
	"reflect"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	e := core.NewEntry("node-1", "10.0.0.1:7946", 1700000000000000000, 42, t0,
		[]string{"http://a:8000", "http://b:8000", "http://c:8000"},
		map[string]int64{"http://a:8000": 3, "http://c:8000": 300, "http://d:8000": 2}, map[string]bool{"http://b:8000": true})
	if len(e.Endpoints) != 4 || e.Listed[3] || !e.Listed[0] || e.Counts[3] != 2 {
		t.Fatalf("an endpoint with leases but not discovered: %+v", e)
	}
	m, err := Decode(EncodeFull(e))
	if err != nil || !reflect.DeepEqual(m.Entries, []core.Entry{e}) {
		t.Fatalf("full: %v %+v", err, m)
	}
	m, err = Decode(EncodeState([]core.Entry{e, {Node: "x", Left: true, Endpoints: []string{}, Counts: []int64{}, Down: []bool{}}}))
	if err != nil || len(m.Entries) != 2 || !reflect.DeepEqual(m.Entries[0], e) {
		t.Fatalf("state: %v %+v", err, m)
	}
	m, err = Decode(EncodeDelta(e))
	if err != nil {
		t.Fatal(err)
	}
	if m.Expand(core.NewEntryTable()) {
		t.Fatal("delta expanded without a known endpoint list")
	}
	s := core.NewEntryTable()
	s.Merge(e)
	if !m.Expand(s) || !reflect.DeepEqual(m.Entries[0], e) {
		t.Fatalf("delta: %+v", m.Entries[0])
	}
}

// TestDeltaFitsOnePacket: a delta for 500 endpoints with counts under 64
// fits memberlist's 1400-byte UDP budget with room for its own framing and
// encryption (about 60 bytes).
func TestDeltaFitsOnePacket(t *testing.T) {
	eps := make([]string, 500)
	counts := map[string]int64{}
	for i := range eps {
		eps[i] = "http://10.1." + string(rune('a'+i/26%26)) + string(rune('a'+i%26)) + ".9:8000"
		counts[eps[i]] = 63
	}
	e := core.NewEntry("prefixring-7f9c4d8b6-xk2lp", "10.244.12.34:7946", 1<<62, 1<<20, t0, eps, counts, nil)
	if n := len(EncodeDelta(e)); n > 1300 {
		t.Fatalf("delta is %d bytes", n)
	}
}

func FuzzDecode(f *testing.F) {
	e := core.NewEntry("n", "a", 1, 2, t0, []string{"x", "y"}, map[string]int64{"x": 1}, map[string]bool{"y": true})
	f.Add(EncodeFull(e))
	f.Add(EncodeDelta(e))
	f.Add(EncodeState([]core.Entry{e, e}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		for _, e := range m.Entries {
			if len(e.Counts) != len(e.Down) || (m.Kind != kindDelta && len(e.Endpoints) != len(e.Counts)) {
				t.Fatalf("inconsistent entry %+v", e)
			}
		}
	})
}
