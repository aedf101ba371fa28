package workload

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prefixring/prefixring/sim/engine"
)

// TraceBlockSize is the number of tokens behind one Mooncake hash_id.
const TraceBlockSize = 512

// Request is one timed request of a workload. Its prompt is given either as
// trace blocks (HashIDs, each standing for TraceBlockSize fixed tokens, the
// last one cut to InputLen) or as explicit Tokens.
type Request struct {
	Arrival   time.Duration
	InputLen  int
	OutputLen int
	HashIDs   []uint64
	Tokens    []uint32
	// Joint, with Tokens, is the prompt and its answer tokenized as one
	// text, as the follow-up turn that carries both will be: the engine
	// caches the answer's full blocks under their hashes, as vLLM caches
	// generated blocks (engine.PromptThenOutput). nil: no text to
	// tokenize the answer with (a trace's, a token-level workload's);
	// EnginePrompt then hashes the answer's own tokens after the prompt's.
	Joint []uint32
}

// AppendTokens appends the first n tokens of the prompt to dst (all of them
// if n <= 0). Keyers use it to render a request as a token-id body.
func (r *Request) AppendTokens(dst []uint32, n int) []uint32 {
	if n <= 0 || n > r.InputLen {
		n = r.InputLen
	}
	if r.HashIDs == nil {
		return append(dst, r.Tokens[:n]...)
	}
	for _, id := range r.HashIDs {
		if n <= 0 {
			break
		}
		k := min(n, TraceBlockSize)
		dst = engine.TraceBlockTokens(dst, id, k)
		n -= k
	}
	return dst
}

// EnginePrompt is the prompt as the engine gets it: the prompt's blocks
// and its answer's after them, which the engine caches as it generates
// them, as vLLM caches generated blocks. With Joint the answer's blocks
// are the joint text's. Without it they chain the answer's own tokens
// (SimAnswer's, as sim/vllm hashes the answer to a prompt of token ids)
// after the prompt's: no later prompt carries them, but a preempted
// request resumes after those still cached, as in vLLM. c is scratch,
// reset first.
func (r *Request) EnginePrompt(c *engine.Chain) engine.Prompt {
	if r.Joint != nil {
		return engine.PromptThenOutput(c.BlockSize(), r.Tokens, r.Joint)
	}
	c.Reset()
	r.AppendTo(c)
	n := c.Len()
	c.Append(engine.Tokenize(SimAnswer(r.OutputLen))...)
	p := c.Prompt()
	p.Len = n
	return p
}

// AppendTo feeds the whole prompt into a chain, block by block.
func (r *Request) AppendTo(c *engine.Chain) {
	if r.HashIDs == nil {
		c.Append(r.Tokens...)
		return
	}
	left := r.InputLen
	for _, id := range r.HashIDs {
		if left <= 0 {
			break
		}
		k := min(left, TraceBlockSize)
		c.AppendTraceBlock(id, k)
		left -= k
	}
}

// KeyFunc maps a request to its affinity key; keyed == false asks the picker
// for the least loaded endpoint. The policy study plugs the production keyer
// in here (render the request with AppendTokens, call prefix.Keyer).
type KeyFunc func(r *Request) (key uint64, keyed bool)

// PrefixKey hashes the first n prompt tokens with xxhash: a simple stand-in
// for the production keyer.
func PrefixKey(n int) KeyFunc {
	return func(r *Request) (uint64, bool) {
		toks := r.AppendTokens(make([]uint32, 0, n), n)
		buf := make([]byte, 4*len(toks))
		for i, t := range toks {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		return xxhash.Sum64(buf), len(toks) > 0
	}
}

type mooncakeLine struct {
	Timestamp    int64    `json:"timestamp"` // milliseconds
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// LoadMooncake reads a Mooncake trace (JSON lines of timestamp in ms,
// input_length, output_length and hash_ids of chained 512-token blocks).
// Blocks the hash_ids do not cover get ids of their own, unique to the line.
func LoadMooncake(rd io.Reader) ([]Request, error) {
	var out []Request
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if m.InputLength <= 0 || m.Timestamp < 0 || m.OutputLength < 0 {
			return nil, fmt.Errorf("trace line %d: bad lengths or timestamp", line)
		}
		for len(m.HashIDs)*TraceBlockSize < m.InputLength {
			m.HashIDs = append(m.HashIDs, 1<<62|uint64(line)<<16|uint64(len(m.HashIDs)))
		}
		out = append(out, Request{
			Arrival:   time.Duration(m.Timestamp) * time.Millisecond,
			InputLen:  m.InputLength,
			OutputLen: max(m.OutputLength, 1),
			HashIDs:   m.HashIDs,
		})
	}
	return out, sc.Err()
}
