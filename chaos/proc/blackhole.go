package proc

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prefixring/prefixring/chaos"
)

// preambleLoad sends chaos.PreambleBody conversations over groups
// documents from clients clients to the replicas at urls for d.
func preambleLoad(c *Cluster, urls []string, d time.Duration, clients, groups int) func() []chaos.Outcome {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	cl := chaos.NewClient(urls, tr, c.Crashes)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	done := make(chan struct{})
	go func() { cl.Preamble(ctx, clients, groups, 200*time.Millisecond); close(done) }()
	return func() []chaos.Outcome {
		<-done
		cancel()
		tr.CloseIdleConnections()
		return cl.Outcomes()
	}
}

// blackHole: replica 2's host goes silent under load (every packet into
// and out of its namespace dropped: no reset, no refusal). New shared
// prompts then arrive at the survivors and workers are registered there.
// A member that does not answer must delay no send to the others: the
// survivors key requests alike and route each new worker within 2 s.
func blackHole(ctx context.Context, c *Cluster, r *Row) error {
	before := load(c, 8*time.Second, 12, 100*time.Millisecond, 0)()
	end, err := c.BlackHole(2)
	if err != nil {
		return err
	}
	defer end()
	dead := time.Now()
	survivors := []string{c.URL(0), c.URL(1)}
	// New shared preambles (documents at the top of the first user
	// message, longer than a chunk): the survivors' sketches learn them
	// and their tables change, which changes how these bodies key, while
	// the dead member is still listed.
	wait := preambleLoad(c, survivors, 15*time.Second, 8, 6)
	var bodies [][]byte
	for g := range 6 {
		for conv := range 4 {
			bodies = append(bodies, chaos.PreambleBody(g, 1000+conv))
		}
	}
	keysAt := func() map[int]string {
		out := map[int]string{}
		for k, b := range bodies {
			out[k], _ = c.Key(0, b)
		}
		return out
	}
	first := keysAt()
	var st chaos.Stretches // Sample calls one function at a time and stop waits for it
	stop := chaos.Sample(200*time.Millisecond, func() { st.Observe(time.Now(), c.KeysAgree(bodies)) })
	var took []float64
	for k := range 3 {
		at, url := k%2, c.EngineURL(c.cfg.Initial+k) // r0, r1, r0
		code, err := c.Workers(at, http.MethodPost, url)
		if err != nil {
			stop()
			return err
		}
		expect(r, code == http.StatusAccepted, "registering %s at r%d: %d", url, at, code)
		d, err := Wait(ctx, 15*time.Second, func() bool { return c.Routed(url, true) })
		expect(r, err == nil, "%s not routed by every survivor within 15 s", url)
		took = append(took, d.Seconds())
	}
	pause(ctx, time.Until(dead.Add(15*time.Second)))
	stop()
	st.Finish(time.Now())
	// The measure means something only if the tables moved meanwhile: the
	// new prompts' shared prefixes learned, so their keys changed.
	changed := 0
	for k, key := range keysAt() {
		if key != first[k] {
			changed++
		}
	}
	r.Figures["keys_changed"] = fmt.Sprintf("%d/%d", changed, len(bodies))
	outs := wait()
	basic(r, append(before, outs...), 0)
	expect(r, r.Tally.OK == r.Tally.Requests, "%d of %d ok", r.Tally.OK, r.Tally.Requests)
	longest := st.Longest()
	expect(r, longest <= 2*time.Second, "the survivors keyed requests differently for %v", longest)
	expect(r, slices.Max(took) <= 2, "new workers routed by every survivor after %v s", took)
	if v, err := c.View(0); err == nil {
		r.Figures["r0_members_after"] = len(v.Members)
	}
	r.Figures["key_disagreements"], r.Figures["key_disagree_max_s"], r.Figures["worker_routed_max_s"] = len(st.Spans), longest.Seconds(), slices.Max(took)
	settle(ctx, c, r)
	return nil
}
