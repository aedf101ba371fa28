package proc

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prefixring/prefixring/chaos"
)

// The scenarios of an operator's day (issue 19): a rolling update of the
// engines, a prompt every engine fails, a stranger without the gossip key,
// workers registered and removed under load, a replica's host that goes
// silent.

// rollingSetup gives every request a long prefill: 5 s before the engine
// starts on it, past the replicas' 3 s retry budget, so a try abandoned on
// an engine that left the set could not be replayed.
func rollingSetup(cfg *Config) {
	cfg.EngineArgs = append(cfg.EngineArgs, "--latency", "5s")
	cfg.ReplicaArgs = append(cfg.ReplicaArgs, "--upstream-timeout", "30s", "--retry-timeout", "3s")
}

func rolling(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 40*time.Second, 16, 100*time.Millisecond, 3)
	pause(ctx, 6*time.Second)
	var drains []float64
	for i := range c.cfg.Engines {
		took, err := c.ReplaceEngine(ctx, i)
		if err != nil {
			r.Problems = append(r.Problems, err.Error())
			break
		}
		drains = append(drains, took.Seconds())
		pause(ctx, time.Second)
	}
	outs := wait()
	basic(r, outs, 0)
	expect(r, r.Tally.OK == r.Tally.Requests, "%d of %d requests failed in a rolling update", r.Tally.Requests-r.Tally.OK, r.Tally.Requests)
	streamed := 0
	for _, o := range outs {
		if o.Stream {
			streamed++
		}
	}
	expect(r, streamed > 0, "no streamed request")
	r.Figures["replaced"], r.Figures["streamed"] = len(drains), streamed
	if len(drains) > 0 {
		r.Figures["drain_max_s"] = slices.Max(drains)
	}
	settle(ctx, c, r)
	return nil
}

// poisonBody is a prompt every engine answers with 500.
const poisonMark = "POISON-PROMPT"

func poisonPrompt(ctx context.Context, c *Cluster, r *Row) error {
	for i := range c.cfg.Engines {
		if err := c.SetFaults(i, `{"poison":"`+poisonMark+`"}`); err != nil {
			return err
		}
	}
	wait := load(c, 25*time.Second, 12, 100*time.Millisecond, 5)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	cl := chaos.NewClient(c.URLs(), tr, c.Crashes)
	body := []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":8,"messages":[{"role":"user","content":"` + poisonMark + ` please"}]}`)
	statuses := map[int]int{}
	for i := 0; i < 100 && ctx.Err() == nil; i++ {
		for try := range 3 { // the OpenAI SDKs' default: 2 retries
			o := cl.Do(ctx, fmt.Sprintf("poison-%d-%d", i, try), body, false)
			statuses[o.Status]++
			pause(ctx, 50*time.Millisecond)
		}
	}
	outs := wait()
	basic(r, outs, 0)
	expect(r, r.Tally.OK == r.Tally.Requests, "other clients: %d of %d ok", r.Tally.OK, r.Tally.Requests)
	served := 0
	for code, n := range statuses {
		if code < 500 {
			served += n
		}
	}
	expect(r, served == 0, "the poison prompt was answered below 500: %v", statuses)
	ejections := 0.0
	for _, i := range c.Live() {
		n, err := c.Ejections(i)
		if err != nil {
			return err
		}
		ejections += n
		checks, err := c.Checks(i)
		if err != nil {
			return err
		}
		for _, e := range checks {
			expect(r, !e.Ejected, "r%d ejected %s for a prompt every engine fails", i, e.ID)
		}
	}
	expect(r, ejections == 0, "%v ejections", ejections)
	r.Figures["poison_calls"], r.Figures["poison_status"], r.Figures["ejections"] = len(cl.Outcomes()), fmt.Sprint(statuses), ejections
	settle(ctx, c, r)
	return nil
}

// inRing reports whether replica i's ring lists id at all.
func (c *Cluster) inRing(i int, id string) (bool, error) {
	var v struct {
		Endpoints []struct {
			ID string `json:"id"`
		} `json:"endpoints"`
	}
	if err := c.getJSON(c.Admin(i)+"/debug/ring", &v); err != nil {
		return false, err
	}
	return slices.ContainsFunc(v.Endpoints, func(e struct {
		ID string `json:"id"`
	}) bool {
		return e.ID == id
	}), nil
}

func keyless(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 20*time.Second, 12, 100*time.Millisecond, 5)
	pause(ctx, 2*time.Second)
	s, err := c.StartStranger()
	if err != nil {
		return err
	}
	worker := c.EngineURL(c.cfg.Engines - 1)
	code, err := c.call(http.MethodPost, s.Admin+"/workers", s.Token, strings.NewReader(`{"url":"`+worker+`","worker_type":"regular"}`))
	if err != nil {
		return err
	}
	expect(r, code == http.StatusAccepted, "the stranger's own workers API answered %d", code)
	// Two push/pull intervals (5 s each): far longer than a worker takes
	// to spread among members.
	pause(ctx, 12*time.Second)
	var strangerView ClusterView
	if err := c.getJSON(s.Admin+"/debug/cluster", &strangerView); err != nil {
		return err
	}
	r.Figures["stranger_members"] = len(strangerView.Members)
	expect(r, len(strangerView.Members) == 1, "the stranger sees %d members", len(strangerView.Members))
	for _, i := range c.Live() {
		v, err := c.View(i)
		if err != nil {
			return err
		}
		for _, m := range v.Members {
			expect(r, m.Name != "stranger", "r%d lists the stranger as a member", i)
		}
		expect(r, len(v.Members) == c.cfg.Replicas, "r%d sees %d members", i, len(v.Members))
		in, err := c.inRing(i, worker)
		if err != nil {
			return err
		}
		expect(r, !in, "r%d routes the stranger's worker", i)
	}
	outs := wait()
	basic(r, outs, 0)
	expect(r, r.Tally.OK == r.Tally.Requests, "%d of %d ok", r.Tally.OK, r.Tally.Requests)
	host := strings.TrimPrefix(worker, "http://")
	reached := 0
	for _, o := range outs {
		if o.Endpoint == host {
			reached++
		}
	}
	served, err := c.EngineServed(c.cfg.Engines - 1)
	if err != nil {
		return err
	}
	expect(r, reached == 0 && served == 0, "the stranger's worker got %d client requests (it served %v)", reached, served)
	r.Figures["worker_served"] = served
	settle(ctx, c, r)
	return nil
}

// workerBook keeps what a run of workers API calls should leave registered:
// each call adds the worker when it is out and removes it when it is in.
type workerBook struct {
	want  map[string]bool
	codes map[int]int
}

func newWorkerBook() *workerBook {
	return &workerBook{want: map[string]bool{}, codes: map[int]int{}}
}

// method is the next call for url.
func (b *workerBook) method(url string) string {
	if b.want[url] {
		return http.MethodDelete
	}
	return http.MethodPost
}

// record takes a call's answer. A DELETE answered 404 is the eventual
// consistency of the set (the add, made at another replica moments
// before, has not reached this one yet: the worker stays); any other
// answer but 202 is an error.
func (b *workerBook) record(url, method string, code int) error {
	b.codes[code]++
	switch {
	case code == http.StatusAccepted:
		b.want[url] = method == http.MethodPost
	case code == http.StatusNotFound && method == http.MethodDelete:
	default:
		return fmt.Errorf("%s %s: %d", method, url, code)
	}
	return nil
}

// members is the set the calls should leave, sorted.
func (b *workerBook) members() []string {
	var out []string
	for url, in := range b.want {
		if in {
			out = append(out, url)
		}
	}
	slices.Sort(out)
	return out
}

func workersChurn(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 25*time.Second, 12, 100*time.Millisecond, 5)
	const ops = 1000
	book, spare := newWorkerBook(), c.EngineURLs()[c.cfg.Initial:]
	for k := 0; k < ops && ctx.Err() == nil; k++ {
		url := spare[k%len(spare)]
		m := book.method(url)
		code, err := c.Workers(k%c.cfg.Replicas, m, url)
		if err != nil {
			return err
		}
		if err := book.record(url, m, code); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("call %d at r%d: %v", k, k%c.cfg.Replicas, err))
		}
		pause(ctx, 15*time.Millisecond)
	}
	outs := wait()
	basic(r, outs, 0)
	expect(r, r.Tally.OK == r.Tally.Requests, "%d of %d ok", r.Tally.OK, r.Tally.Requests)
	want := book.members()
	took, err := Wait(ctx, 10*time.Second, func() bool {
		for _, i := range c.Live() {
			if got, err := c.WorkerURLs(i); err != nil || !slices.Equal(sorted(got), want) {
				return false
			}
		}
		for _, w := range want {
			if !c.Routed(w, true) {
				return false
			}
		}
		return true
	})
	expect(r, err == nil, "the replicas' workers did not converge to %v within two push/pull intervals", want)
	expect(r, book.codes[http.StatusAccepted] >= ops*9/10, "answers to %d calls: %v", ops, book.codes)
	r.Figures["calls"], r.Figures["codes"], r.Figures["workers_at_end"], r.Figures["converged_after_s"] = ops, fmt.Sprint(book.codes), len(want), took.Seconds()
	settle(ctx, c, r)
	return nil
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
