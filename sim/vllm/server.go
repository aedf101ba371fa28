package vllm

import (
	"context"
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

// submit queues a request on the engine.
func (s *Server) submit(tokens []uint32, maxTokens int) (*stream, error) {
	st := &stream{notify: make(chan struct{}, 1)}
	st.req.Prompt = engine.PromptOf(s.cfg.Engine.BlockSize, tokens)
	st.req.MaxTokens = maxTokens
	s.mu.Lock()
	s.nextID++
	st.req.ID = s.nextID
	err := s.eng.Add(&st.req, s.now())
	if err == nil {
		s.streams[st.req.ID] = st
		s.m.gauges(s.eng)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.poke()
	return st, nil
}

// abort withdraws a request whose client went away.
func (s *Server) abort(st *stream) {
	s.mu.Lock()
	if !st.done.Load() {
		s.eng.Abort(&st.req)
		delete(s.streams, st.req.ID)
	}
	s.mu.Unlock()
	s.poke() // an idle engine drops the request at its next Begin
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
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{}))
	}
	// The catch-all below would answer a known path's other methods 404;
	// vLLM's router (FastAPI) answers them 405 with an Allow header and
	// FastAPI's default error body. A GET route also takes HEAD, in both.
	for path, allow := range map[string]string{
		"/v1/completions":      "POST",
		"/v1/chat/completions": "POST",
		"/v1/models":           "GET, HEAD",
		"/health":              "GET, HEAD",
		"/admin/faults":        "GET, HEAD, POST, PUT",
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			io.WriteString(w, `{"detail":"Method Not Allowed"}`)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("Not Found"))
	})
	return mux
}
