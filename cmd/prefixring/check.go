package main

import (
	"fmt"
	"math"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/ring"
)

// A flagRange is the values a numeric flag may take. The commands check
// their flags' ranges by name before the configurations they fill are
// validated: those errors name fields in words ("DNS interval 0s"),
// while an operator typed a flag. The configurations' checks stay, for
// library users, and TestFlagErrorsNameTheFlag finds any range the two
// disagree on.
type flagRange struct {
	flag string
	ok   func(float64) bool
	want string
}

func atLeast(flag string, min float64) flagRange {
	return flagRange{flag, func(v float64) bool { return v >= min && !math.IsInf(v, 1) }, fmt.Sprintf("at least %v", min)}
}

func positive(flag string) flagRange {
	return flagRange{flag, func(v float64) bool { return v > 0 }, "positive"}
}

func within(flag string, lo, hi float64) flagRange {
	return flagRange{flag, func(v float64) bool { return v >= lo && v <= hi }, fmt.Sprintf("between %v and %v", lo, hi)}
}

// checkRanges reports the first flag whose value is out of its range.
// NaN is out of every range.
func checkRanges(c *cli.Context, ranges ...flagRange) error {
	for _, r := range ranges {
		var v float64
		switch x := c.Value(r.flag).(type) {
		case int:
			v = float64(x)
		case int64:
			v = float64(x)
		case float64:
			v = x
		case time.Duration:
			v = float64(x)
		default:
			panic("checkRanges: --" + r.flag + " is not numeric")
		}
		if !r.ok(v) {
			return fmt.Errorf("--%s %v must be %s", r.flag, c.Value(r.flag), r.want)
		}
	}
	return nil
}

// kvLoadFactorRange is --kv-load-factor's, serve's and eval's: 0 is the
// default.
func kvLoadFactorRange() flagRange {
	return flagRange{"kv-load-factor", func(v float64) bool { return v == 0 || v >= 1 && v <= ring.MaxLoadFactor },
		fmt.Sprintf("0 (the default) or between 1 and %v", ring.MaxLoadFactor)}
}

// paceThresholdRange is --pace-threshold's range, serve's and eval's: 0
// (off) or what ring.PaceConfig takes.
func paceThresholdRange() flagRange {
	return flagRange{"pace-threshold", func(v float64) bool { return v == 0 || v >= 1.5 && v <= ring.MaxLoadFactor },
		fmt.Sprintf("0 (off) or between 1.5 and %v", ring.MaxLoadFactor)}
}
