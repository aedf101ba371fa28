package upstream

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"
)

// FileSource reads endpoints from a file, one per line, in --endpoints'
// syntax (a URL, host:port, or label=url); blank lines and lines starting
// with '#' are skipped, and so is anything after " #" on a line. It is for
// configuration management (Ansible, Puppet, a ConfigMap) that writes the
// fleet to disk.
type FileSource struct {
	Path string
	// ReadFile reads the file; nil is os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// Reread, when it receives, makes Watch read the file at once rather
	// than at its next tick (SIGHUP); nil: ticks only.
	Reread <-chan struct{}
}

// ParseEndpointsFile returns the entries of an endpoints file, checked with
// [ParseEndpoint]. An error names the line.
func ParseEndpointsFile(b []byte) ([]string, error) {
	var out []string
	for i, line := range bytes.Split(b, []byte("\n")) {
		s := string(line)
		if j := strings.Index(s, " #"); j >= 0 {
			s = s[:j]
		}
		s = strings.TrimSpace(s)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if _, _, err := ParseEndpoint(s); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Load reads and parses the file once.
func (f FileSource) Load() ([]string, error) {
	read := f.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	b, err := read(f.Path)
	if err != nil {
		return nil, err
	}
	eps, err := ParseEndpointsFile(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return eps, nil
}

// Watch reads the file every interval until ctx ends and sets the source
// "file" whenever its endpoints change. A file that cannot be read, does
// not parse or lists nothing keeps the last good set (a config tool
// rewriting the file, or a typo, must not empty the fleet), logged once per
// distinct problem.
func (f FileSource) Watch(ctx context.Context, interval time.Duration, set Sink, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last []string
	lastProblem := ""
	for {
		eps, err := f.Load()
		problem := ""
		switch {
		case err != nil:
			problem = err.Error()
		case len(eps) == 0:
			problem = "the file lists no endpoint"
		case !slices.Equal(eps, last):
			if err := set.SetSource("file", eps); err != nil {
				problem = err.Error()
			} else {
				last = eps
				log.Info("endpoints file read", "path", f.Path, "endpoints", len(eps))
			}
		}
		if problem != "" && problem != lastProblem {
			log.Warn("endpoints file not applied; keeping the last set", "path", f.Path, "problem", problem)
		}
		lastProblem = problem
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.Reread:
		}
	}
}
