package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// promqlKeywords are PromQL words that are not metrics: keywords, and the
// aggregation operators, which "by (...)" may separate from their "(".
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "offset": true, "bool": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// groupingKeywords are followed by a parenthesised list of label names.
var groupingKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

func isNameStart(r byte) bool { return r == '_' || r == ':' || unicode.IsLetter(rune(r)) }
func isNameChar(r byte) bool  { return isNameStart(r) || unicode.IsDigit(rune(r)) }

// skipQuoted returns the index after the string literal starting at i.
func skipQuoted(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%q: unterminated string", s)
}

// skipPast returns the index after the close byte that balances the open
// byte at i, stepping over string literals.
func skipPast(s string, i int, open, close byte) (int, error) {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			k, err := skipQuoted(s, j)
			if err != nil {
				return 0, err
			}
			j = k - 1
		case open:
			depth++
		case close:
			if depth--; depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("%q: unbalanced %c", s, open)
}

// metricNames returns the metric names a PromQL expression reads: the
// names that are not functions (followed by "("), keywords, label names
// (inside {} or a by/without/on/ignoring list), strings, numbers or
// durations (inside []). Enough PromQL for dashboards, not a parser.
func metricNames(expr string) ([]string, error) {
	var names []string
	depth := 0 // parentheses open
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipQuoted(expr, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, err := skipPast(expr, i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipPast(expr, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i + 1
			for j < len(expr) && (isNameChar(expr[j]) || expr[j] == '.' ||
				((expr[j] == '-' || expr[j] == '+') && (expr[j-1] == 'e' || expr[j-1] == 'E'))) {
				j++
			}
			i = j
		case c == '$':
			return nil, fmt.Errorf("%q: a variable outside a label matcher or range", expr)
		case isNameStart(c):
			j := i
			for j < len(expr) && isNameChar(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			call := k < len(expr) && expr[k] == '('
			switch {
			case groupingKeywords[strings.ToLower(word)] && call:
				end, err := skipPast(expr, k, '(', ')')
				if err != nil {
					return nil, err
				}
				j = end
			case promqlKeywords[strings.ToLower(word)], call:
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			switch c {
			case '(':
				depth++
			case ')':
				if depth--; depth < 0 {
					return nil, fmt.Errorf("%q: unbalanced )", expr)
				}
			}
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%q: unbalanced (", expr)
	}
	return names, nil
}

// labelValuesRe reads Grafana's label_values(metric, label) and
// label_values(label) variable queries.
var labelValuesRe = regexp.MustCompile(`^\s*label_values\(\s*(?:([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*,\s*)?[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// variableMetricNames returns the metric a Grafana variable query reads.
func variableMetricNames(q string) ([]string, error) {
	if m := labelValuesRe.FindStringSubmatch(q); m != nil {
		if m[1] == "" {
			return nil, nil
		}
		return []string{m[1]}, nil
	}
	if v, ok := strings.CutPrefix(strings.TrimSpace(q), "query_result("); ok {
		return metricNames(strings.TrimSuffix(strings.TrimSpace(v), ")"))
	}
	return nil, fmt.Errorf("variable query %q: neither label_values nor query_result", q)
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (decision) (rate(prefixring_requests_total{namespace="$namespace",decision=~"a|b}"}[$__rate_interval]))`: {"prefixring_requests_total"},
		`histogram_quantile(0.95, sum by (le, endpoint) (rate(x_bucket[5m])))`:                                           {"x_bucket"},
		`sum(rate(vllm:prefix_cache_hits_total[1m])) / sum(rate(vllm:prefix_cache_queries_total[1m]))`:                   {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
		`a / on (instance) group_left (pod) b offset 5m > bool 1e-9`:                                                     {"a", "b"},
		`clamp_min(count(up == 1) without (job), 2.5e+3)`:                                                                {"up"},
		`sum(foo) by (bar)`: {"foo"},
	} {
		got, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
		} else if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", expr, got, want)
		}
	}
	for _, bad := range []string{`rate(x{a="b}[5m])`, `sum(x[5m]`, `rate($metric[5m])`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	for q, want := range map[string][]string{
		"label_values(prefixring_requests_total, namespace)": {"prefixring_requests_total"},
		`label_values(up{job="x"}, instance)`:                {"up"},
		"label_values(namespace)":                            nil,
	} {
		got, err := variableMetricNames(q)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: got %q (%v), want %q", q, got, err, want)
		}
	}
}
