package upstream

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDepartedEndpointFinishesItsTries: an endpoint that leaves the set
// while a try holds it keeps its alive context and is still probed; a
// refused probe (its server stopped listening, as uvicorn does on SIGTERM
// while it finishes what it has) ends nothing; probes that get no answer
// at all (its host gone) end it; the last release forgets it.
func TestDepartedEndpointFinishesItsTries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := newFakeNet()
		s := newTestSet(t, fastHealth(), fn)
		_ = s.SetSource("static", []string{"http://a:1", "http://b:1"})
		alive, release := s.Hold("http://a:1")
		_ = s.SetSource("static", []string{"http://b:1"})
		if alive.Err() != nil {
			t.Fatal("leaving the set ended a held endpoint's context")
		}
		fn.set("a:1", true)
		for range 5 {
			s.ProbeAll(context.Background())
		}
		if alive.Err() != nil {
			t.Fatal("refused probes of a departed endpoint ended its context")
		}
		fn.set("a:1", false)
		fn.setHang("a:1", true)
		for range 3 {
			s.ProbeAll(context.Background())
		}
		if alive.Err() == nil {
			t.Fatal("a departed endpoint that answers nothing kept its context")
		}
		release()
		other, release2 := s.Hold("http://b:1")
		_ = s.SetSource("static", nil)
		if other.Err() != nil {
			t.Fatal("b's context ended while held")
		}
		release2()
		if other.Err() == nil || len(s.Health()) != 0 {
			t.Fatalf("the last release did not forget b: %v", s.Health())
		}
		if ctx, _ := s.Hold("http://b:1"); ctx.Err() == nil {
			t.Fatal("a departed endpoint can be held")
		}
	})
}

// TestReturningEndpointStartsAfresh: an endpoint leaves discovery while a
// try holds it, and its probes then get no answer, so the tries there are
// abandoned; when it is discovered again it starts afresh, as any endpoint
// that leaves and comes back does. Until stop 40 the rebuild that ended its
// alive context had already kept its check (it was still held then), so
// its "silent" count outlived its departure: routed healthy again, every
// try to it was abandoned at once until its next probe.
func TestReturningEndpointStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := newFakeNet()
		s := newTestSet(t, fastHealth(), fn)
		_ = s.SetSource("dns", []string{"http://a:1", "http://b:1"})
		_, release := s.Hold("http://a:1")
		_ = s.SetSource("dns", []string{"http://b:1"}) // a leaves; a try still waits there
		fn.setHang("a:1", true)
		for range fastHealth().FailureThreshold {
			s.ProbeAll(context.Background()) // no answer: its tries are abandoned
		}
		release()
		fn.setHang("a:1", false)                                     // restarted, it answers
		_ = s.SetSource("dns", []string{"http://a:1", "http://b:1"}) // and is discovered again
		if e, ok := s.Snapshot().Get("http://a:1"); !ok || !e.Healthy {
			t.Fatalf("a not routed healthy: %+v", e)
		}
		ctx, rel := s.Hold("http://a:1")
		defer rel()
		if ctx.Err() != nil {
			t.Fatal("a is routed healthy again, but a try there is abandoned at once")
		}
	})
}

// TestDepartedEndpointStaysForgottenInTheMetrics: an endpoint that left
// the set (its series forgotten, as the router does on every departure)
// while its last tries finish there is not ejected when they fail: it
// takes no request anyway, and its ejection or a capped one would bring
// its series back for good, one for each pod a churning fleet deletes
// while it serves.
func TestDepartedEndpointStaysForgottenInTheMetrics(t *testing.T) {
	for _, capped := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		met := NewMetrics(reg)
		cfg := fastHealth()
		cfg.MaxEjectionPercent = 20 // one of the three
		s := newTestSet(t, cfg, newFakeNet(), func(o *Options) { o.Metrics = met })
		_ = s.SetSource("static", []string{"http://a:1", "http://b:1", "http://c:1"})
		if capped { // b takes the cap's one slot
			for range cfg.FailureThreshold {
				s.ObserveFailure("http://b:1", errors.New("connection refused"))
			}
		}
		_, release := s.Hold("http://a:1")
		_ = s.SetSource("static", []string{"http://b:1", "http://c:1"}) // a leaves
		met.ForgetEndpoint("http://a:1")
		for req := range uint64(cfg.FailureThreshold) { // its last tries fail
			s.ObserveFailure("http://a:1", errors.New("connection reset"))
			s.ObserveServerError("http://a:1", req, 502)
		}
		release()
		if got := seriesOf(t, reg, "http://a:1"); len(got) > 0 {
			t.Errorf("capped %v: the departed endpoint's failed tries brought back %v", capped, got)
		}
		if capped && len(seriesOf(t, reg, "http://b:1")) == 0 {
			t.Fatal("b was not ejected")
		}
	}
}

// seriesOf names the metrics of reg that have a series of endpoint.
func seriesOf(t *testing.T, reg *prometheus.Registry, endpoint string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "endpoint" && l.GetValue() == endpoint {
					out = append(out, mf.GetName())
				}
			}
		}
	}
	return out
}
