package vllm

import (
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// rolled is the fault decision for one request.
type rolled struct {
	Faults
	err, hang, close bool
}

// roll draws this request's faults from the current knobs.
func (s *Server) roll() rolled {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := rolled{Faults: s.faults}
	f.err = f.ErrorRate > 0 && s.dice.Float64() < f.ErrorRate
	f.hang = f.HangRate > 0 && s.dice.Float64() < f.HangRate
	f.close = f.CloseRate > 0 && s.dice.Float64() < f.CloseRate
	return f
}

// SetFaults changes the fault knobs for requests that arrive from now on.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
	return nil
}

// Faults returns the current fault knobs.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// faultsWire is the admin endpoint's JSON: the knobs, latency as a Go
// duration string ("250ms").
type faultsWire struct {
	Faults
	Latency string `json:"latency"`
}

func (s *Server) serveGetFaults(w http.ResponseWriter, r *http.Request) {
	f := s.Faults()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(faultsWire{Faults: f, Latency: f.Latency.String()})
}

// servePutFaults replaces the knobs; fields left out are set to zero.
func (s *Server) servePutFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
	if err != nil {
		writeError(w, badRequest(err.Error()))
		return
	}
	var in faultsWire
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, badRequest("invalid JSON body: "+err.Error()))
		return
	}
	f := in.Faults
	if in.Latency != "" {
		if f.Latency, err = time.ParseDuration(in.Latency); err != nil {
			writeError(w, badRequest("latency: "+err.Error()))
			return
		}
	}
	if err := s.SetFaults(f); err != nil {
		writeError(w, badRequest(err.Error()))
		return
	}
	s.serveGetFaults(w, r)
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(modelList{Object: "list", Data: []modelCard{{
		ID: s.cfg.Model, Object: "model", Created: s.epoch.Unix(), OwnedBy: "vllm",
		Root: s.cfg.Model, MaxModelLen: s.cfg.Engine.MaxModelLen,
	}}})
}
