package proc

import (
	"net/http"
	"slices"
	"testing"
)

// metricSum adds every sample of one metric, whatever its labels, and
// nothing of a metric whose name only begins the same.
func TestMetricSum(t *testing.T) {
	text := []byte(`# HELP vllm:request_success_total Count.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="length",model_name="m"} 3
vllm:request_success_total{finished_reason="stop",model_name="m"} 4.5
vllm:request_success_total_extra 100
prefixring_ejections_total{endpoint="a",reason="probe"} 2
prefixring_ejections_total 1
`)
	if got := metricSum(text, "vllm:request_success_total"); got != 7.5 {
		t.Errorf("success: %v", got)
	}
	if got := metricSum(text, "prefixring_ejections_total"); got != 3 {
		t.Errorf("ejections: %v", got)
	}
	if got := metricSum(text, "absent"); got != 0 {
		t.Errorf("absent: %v", got)
	}
}

// The book alternates adds and removes per worker, keeps a worker whose
// remove found it not yet registered (404), and refuses other answers.
func TestWorkerBook(t *testing.T) {
	b := newWorkerBook()
	if m := b.method("a"); m != http.MethodPost {
		t.Fatal(m)
	}
	for _, step := range []struct {
		url, method string
		code        int
	}{{"a", "POST", 202}, {"b", "POST", 202}, {"a", "DELETE", 202}, {"b", "DELETE", 404}} {
		if err := b.record(step.url, step.method, step.code); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.members(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("members %v", got)
	}
	if b.method("b") != http.MethodDelete || b.method("a") != http.MethodPost {
		t.Fatal("next methods")
	}
	if err := b.record("c", "POST", 409); err == nil {
		t.Fatal("a 409 accepted")
	}
	if b.codes[202] != 3 || b.codes[404] != 1 || b.codes[409] != 1 {
		t.Fatalf("codes %v", b.codes)
	}
}
