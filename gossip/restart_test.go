package gossip

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/gossip/core"
)

// TestRestartAfterItsEntryWasForgottenCounts: replica b crashes; a forgets
// its entry after ForgetAfter; b's new process starts at the same
// incarnation as its predecessor and, since no peer holds the old entry
// any more, never hears one of its name to supersede. Its entries must
// still count at once. Until stop 40 a refused them until the forgotten
// record expired, another ForgetAfter: a replica restarted 1 to 2 minutes
// after a crash counted nowhere for up to a minute.
func TestRestartAfterItsEntryWasForgottenCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addrs := map[string]string{"a": "10.0.0.1:7946", "b": "10.0.0.2:7946"}
		a := offlineNode(t, "a", addrs["a"], core.ViewOverlay, addrs)
		b := offlineNode(t, "b", addrs["b"], core.ViewOverlay, addrs)
		for i := range 20 { // b's first process publishes a while
			l := hold(t, b, uint64(i))
			defer l.Release()
			time.Sleep(b.cfg.Interval)
			b.publish(time.Now(), false)
			a.receive(encodeFull(b.last))
		}
		if _, ok := a.view.Table().Get("b"); !ok {
			t.Fatal("a never held b's entry")
		}
		time.Sleep(a.cfg.ForgetAfter + 2*time.Second) // b crashed
		a.publish(time.Now(), false)
		if _, ok := a.view.Table().Get("b"); ok {
			t.Fatal("b's entry was not forgotten")
		}
		// b's new process, at the same address, joins: a's push/pull
		// holds no entry of b.
		b2 := offlineNode(t, "b", addrs["b"], core.ViewOverlay, addrs)
		b2.receive(encodeEnvelope("a", a.view.Table().Entries()))
		l := hold(t, b2, 1)
		defer l.Release()
		time.Sleep(time.Second)
		b2.publish(time.Now(), false)
		a.receive(encodeFull(b2.last))
		a.publish(time.Now(), false)
		got, ok := a.view.Table().Get("b")
		if !ok || got.Incarnation != b2.last.Incarnation || got.Version != b2.last.Version {
			t.Fatalf("after b's restart a holds %+v (held %v); b published incarnation %d version %d",
				got, ok, b2.last.Incarnation, b2.last.Version)
		}
		if n := a.Loads().Remote().Total(); n != 1 {
			t.Fatalf("a counts %d of the restarted b's load, want 1", n)
		}
	})
}
