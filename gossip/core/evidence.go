package core

import "slices"

// WithRequestEvidence returns e with what its replica's requests say of
// each endpoint it lists: failing, the endpoints it holds out because they
// failed its requests (of those it sees down); served, those that answered
// its requests lately (of those it sees up). A slice with no true element
// is nil, as the codec decodes it. e itself is unchanged: entries are
// immutable.
func (e Entry) WithRequestEvidence(failing, served map[string]bool) Entry {
	f, s := make([]bool, len(e.Endpoints)), make([]bool, len(e.Endpoints))
	for i, id := range e.Endpoints {
		if !e.listed(i) {
			continue
		}
		down := i < len(e.Down) && e.Down[i]
		f[i] = down && failing[id]
		s[i] = !down && served[id]
	}
	e.Failing, e.Served = noneNil(f), noneNil(s)
	return e
}

// noneNil returns bits, or nil when none is set.
func noneNil(bits []bool) []bool {
	if slices.Contains(bits, true) {
		return bits
	}
	return nil
}

func (e Entry) failing(i int) bool { return i < len(e.Failing) && e.Failing[i] && e.Down[i] }
func (e Entry) served(i int) bool  { return i < len(e.Served) && e.Served[i] && !e.Down[i] }

// evidenceBits packs Failing and Served into one bit per endpoint, for the
// codec: Failing of a down endpoint, Served of an up one.
func evidenceBits(e Entry) []bool {
	if e.Failing == nil && e.Served == nil {
		return nil
	}
	bits := make([]bool, len(e.Endpoints))
	for i := range bits {
		bits[i] = e.failing(i) || e.served(i)
	}
	return bits
}

// splitEvidence unpacks what evidenceBits packed.
func splitEvidence(down, bits []bool) (failing, served []bool) {
	failing, served = make([]bool, len(bits)), make([]bool, len(bits))
	for i, b := range bits {
		failing[i], served[i] = b && down[i], b && !down[i]
	}
	return noneNil(failing), noneNil(served)
}
