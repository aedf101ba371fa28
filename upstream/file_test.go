package upstream

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type recordingSink struct {
	mu   sync.Mutex
	sets [][]string
}

func (r *recordingSink) SetSource(source string, raw []string) error {
	if source != "file" {
		return errors.New("wrong source " + source)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets = append(r.sets, slices.Clone(raw))
	return nil
}

func (r *recordingSink) got() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sets)
}

func TestParseEndpointsFile(t *testing.T) {
	eps, err := ParseEndpointsFile([]byte("# the fleet\n\nhttp://10.0.0.1:8000\n  10.0.0.2:8000   # rack 2\ngpu3=http://10.0.0.3:8000/v1\n"))
	if err != nil || !slices.Equal(eps, []string{"http://10.0.0.1:8000", "10.0.0.2:8000", "gpu3=http://10.0.0.3:8000/v1"}) {
		t.Fatalf("%q %v", eps, err)
	}
	if _, err := ParseEndpointsFile([]byte("http://10.0.0.1:8000\nftp://x:1\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v", err)
	}
}

// An endpoint's error, alone or on a file's line, never quotes a URL's
// credentials: the file is read on every tick and its errors are logged.
func TestEndpointErrorsHideCredentials(t *testing.T) {
	for _, line := range []string{
		"http://admin:s3cret@10.0.0.1:8000",
		"https://admin:s3cret@10.0.0.1:8000/v1",
		"admin:s3cret@10.0.0.1:8000",
		"gpu1=http://admin:s3cret@10.0.0.1:8000",
		"http://admin:s3cret@10.0.0.1:port",
		"http://admin:s3cret@[::1",
		"ftp://admin:s3cret@10.0.0.1:21",
		"http://admin:s3/cret@10.0.0.1:8000",
		"bad label!=http://admin:s3cret@10.0.0.1:8000",
	} {
		_, err := ParseEndpointsFile([]byte("http://10.0.0.2:8000\n" + line + "\n"))
		if err == nil {
			t.Fatalf("%q: accepted", line)
		}
		if !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "s3") {
			t.Errorf("%q: error %q must name line 2 and hide the password", line, err)
		}
		if _, _, err := ParseEndpoint(line); err == nil || strings.Contains(err.Error(), "s3") {
			t.Errorf("ParseEndpoint(%q): error %v must hide the password", line, err)
		}
	}
	// A password Go reads as a port, ended early by a '/' in it.
	if _, _, err := ParseEndpoint("http://admin:70000/s3cret@10.0.0.1:8000"); err == nil || strings.Contains(err.Error(), "70000") {
		t.Errorf("a numeric password read as a port: %v, want an error without it", err)
	}
}

// The watcher applies each new content once, and keeps the last good set
// through a missing file, a bad line and an empty file, warning once per
// problem.
func TestFileSourceWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		content, missing := "http://10.0.0.1:8000\n", false
		write := func(s string, gone bool) {
			mu.Lock()
			content, missing = s, gone
			mu.Unlock()
		}
		src := FileSource{Path: "/etc/prefixring/endpoints", ReadFile: func(string) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if missing {
				return nil, errors.New("no such file")
			}
			return []byte(content), nil
		}}
		var logs strings.Builder
		log := slog.New(slog.NewTextHandler(&logs, nil))
		sink := &recordingSink{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { src.Watch(ctx, time.Second, sink, log); close(done) }()

		step := func() { time.Sleep(time.Second); synctest.Wait() }
		synctest.Wait()
		step() // an unchanged file is not set again
		write("http://10.0.0.1:8000\nhttp://10.0.0.2:8000\n", false)
		step()
		write("", true)
		step()
		step()
		write("http://10.0.0.1:8000\nnot a url at all://\n", false)
		step()
		write("# nothing\n", false)
		step()
		write("http://10.0.0.3:8000\n", false)
		step()
		cancel()
		<-done

		want := [][]string{{"http://10.0.0.1:8000"}, {"http://10.0.0.1:8000", "http://10.0.0.2:8000"}, {"http://10.0.0.3:8000"}}
		if got := sink.got(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("sets %v, want %v", got, want)
		}
		if n := strings.Count(logs.String(), "keeping the last set"); n != 3 {
			t.Fatalf("%d warnings, want 3 (missing twice counts once, bad line, empty):\n%s", n, logs.String())
		}
	})
}
