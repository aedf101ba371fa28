package vllm

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is one simulated vLLM server.
type Server struct {
	cfg     Config
	m       *metrics
	gather  prometheus.Gatherer
	epoch   time.Time
	wake    chan struct{}
	stopped chan struct{}
	stop    sync.Once

	mu      sync.Mutex // guards everything below, and the engine's requests
	eng     *engine.Engine
	streams map[uint64]*stream
	nextID  uint64
	faults  Faults
	dice    *rand.Rand
	lag     LagStats

	idMu sync.Mutex // guards ids, apart from the engine's lock
	ids  *rand.Rand
}

// stream is one request as its handler sees it. The engine goroutine
// publishes progress through the atomics and pokes notify; the handler reads
// the engine.Request's results only after done is set.
type stream struct {
	req      engine.Request
	notify   chan struct{}
	produced atomic.Int64
	done     atomic.Bool
	last     time.Duration // engine goroutine only: time of the last token
}

// LagStats measures how far the engine goroutine falls behind its own
// clock: a step due to end at t is applied at t+lag.
type LagStats struct {
	Steps int64
	Max   time.Duration
	Total time.Duration
	Late  int64 // steps applied more than a millisecond late
}

// Mean is the average lag per step.
func (l LagStats) Mean() time.Duration {
	if l.Steps == 0 {
		return 0
	}
	return l.Total / time.Duration(l.Steps)
}

// New returns a server whose metrics register on reg (and are served from
// gather at /metrics; pass the same *prometheus.Registry as both, or nil
// gather to serve no metrics).
func New(cfg Config, reg prometheus.Registerer, gather prometheus.Gatherer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	eng, err := engine.New(cfg.Engine)
	if err != nil {
		return nil, err
	}
	m := newMetrics(reg, cfg.Model, cfg.Engine.MaxModelLen, cfg.Engine.MaxNumBatchedTokens)
	cacheConfigInfo(reg, cfg.Engine)
	return &Server{
		cfg:     cfg,
		m:       m,
		gather:  gather,
		epoch:   time.Now(),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		eng:     eng,
		streams: map[uint64]*stream{},
		faults:  cfg.Faults,
		dice:    rand.New(rand.NewPCG(cfg.Seed, 0x7072656669787269)),
		ids:     rand.New(rand.NewPCG(cfg.Seed, 0x782d726571756573)),
	}, nil
}

// now is the engine clock: time since the server was made.
func (s *Server) now() time.Duration { return time.Since(s.epoch) }

// Run drives the engine until ctx is done, then releases hanging requests.
func (s *Server) Run(ctx context.Context) {
	defer s.stop.Do(func() { close(s.stopped) })
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		s.mu.Lock()
		end, ok := s.eng.Begin(s.now())
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		timer.Reset(time.Until(s.epoch.Add(end)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		s.endStep(end)
	}
}

// endStep applies the step due at end and tells handlers of their tokens.
func (s *Server) endStep(end time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	lag := max(now-end, 0)
	s.lag.Steps++
	s.lag.Total += lag
	s.lag.Max = max(s.lag.Max, lag)
	if lag > time.Millisecond {
		s.lag.Late++
	}
	s.m.lag.Observe(lag.Seconds())
	res := s.eng.End(now)
	for _, r := range res.Tokens {
		st := s.streams[r.ID]
		if st == nil {
			continue
		}
		if r.Output == 1 {
			s.m.ttft.Observe(r.TTFT().Seconds())
		} else {
			s.m.itl.Observe((now - st.last).Seconds())
		}
		st.last = now
		st.produced.Store(int64(r.Output))
		if r.Done {
			st.done.Store(true)
			delete(s.streams, r.ID)
		}
		select {
		case st.notify <- struct{}{}:
		default:
		}
	}
	s.m.step(res)
	s.m.gauges(s.eng)
}

// Lag reports the engine goroutine's lag behind its clock so far.
func (s *Server) Lag() LagStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lag
}

// submit queues n engine requests for one prompt, as vLLM v1 queues a
// request with n > 1 as n child requests: they arrive together, and each
// after the first finds the prompt's blocks that the first's prefill
// registered in the prefix cache. Their streams share one notify channel,
// so a handler waits on all its choices at once. joint is the prompt and
// its answer tokenized as one text (parsed.joint): each child caches the
// answer's full blocks as it generates them.
func (s *Server) submit(tokens, joint []uint32, maxTokens, n int, skipCache bool) ([]*stream, error) {
	notify := make(chan struct{}, 1)
	prompt := engine.PromptThenOutput(s.cfg.Engine.BlockSize, tokens, joint)
	sts := make([]*stream, n)
	s.mu.Lock()
	now := s.now()
	for i := range sts {
		st := &stream{notify: notify}
		st.req.Prompt, st.req.MaxTokens, st.req.SkipPrefixCache = prompt, maxTokens, skipCache
		s.nextID++
		st.req.ID = s.nextID
		if err := s.eng.Add(&st.req, now); err != nil {
			// Children are alike: the first fails, or none does.
			s.mu.Unlock()
			return nil, err
		}
		s.streams[st.req.ID] = st
		sts[i] = st
	}
	s.m.gauges(s.eng)
	s.mu.Unlock()
	s.poke()
	return sts, nil
}

// abort withdraws the requests of a client that went away.
func (s *Server) abort(sts []*stream) {
	s.mu.Lock()
	for _, st := range sts {
		if !st.done.Load() {
			s.eng.Abort(&st.req)
			delete(s.streams, st.req.ID)
		}
	}
	s.mu.Unlock()
	s.poke() // an idle engine drops the requests at its next Begin
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Busy reports whether the engine holds any request.
func (s *Server) Busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eng.Busy()
}

// Handler serves the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true) })
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /admin/faults", s.serveGetFaults)
	mux.HandleFunc("PUT /admin/faults", s.servePutFaults)
	mux.HandleFunc("POST /admin/faults", s.servePutFaults)
	if s.gather != nil {
		// vLLM mounts prometheus_client's ASGI app at /metrics, which
		// serves the scrape whatever the method.
		mux.Handle("/metrics", promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{}))
	}
	// The catch-all below would answer a known path's other methods 404;
	// vLLM's router (FastAPI) answers them 405 with an Allow header and
	// FastAPI's default error body.
	wrongMethod := func(allow string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			io.WriteString(w, `{"detail":"Method Not Allowed"}`)
		}
	}
	for path, allow := range map[string]string{
		"/v1/completions":      "POST",
		"/v1/chat/completions": "POST",
		"/v1/models":           "GET",
		"/health":              "GET",
		"/admin/faults":        "GET, HEAD, POST, PUT", // the simulator's own; net/http's GET takes HEAD
	} {
		mux.HandleFunc(path, wrongMethod(allow))
	}
	// net/http's GET pattern also takes HEAD; FastAPI's APIRoute does not.
	for _, path := range []string{"/v1/models", "/health"} {
		mux.HandleFunc("HEAD "+path, wrongMethod("GET"))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("Not Found"))
	})
	return s.withRequestID(mux)
}

// withRequestID answers every request with an X-Request-Id, as vLLM does
// with --enable-request-id-headers: the client's, so it can tell its
// answer is its own, else a fresh one. serveGenerate names its response
// by the same id.
func (s *Server) withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" {
			id = s.newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		h.ServeHTTP(w, r)
	})
}

// newRequestID draws an id shaped like vLLM's (uuid.uuid4().hex: 32 hex
// digits, version 4, RFC 4122 variant) from the server's seed, so that a
// replayed run names its requests alike.
func (s *Server) newRequestID() string {
	s.idMu.Lock()
	hi, lo := s.ids.Uint64(), s.ids.Uint64()
	s.idMu.Unlock()
	hi = hi&^(0xf<<12) | 0x4<<12
	lo = lo&^(0x3<<62) | 0x2<<62
	return fmt.Sprintf("%016x%016x", hi, lo)
}
