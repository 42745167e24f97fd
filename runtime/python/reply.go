package python

import (
	"bytes"
	"encoding/json"
)

// decodeExecReply reads the stub's reply to an exec frame into rep. The
// usual reply, every response with outputs and nothing else, is text the
// stub writes itself in one fixed layout (Stub.execute in
// tritonbuild_stub.py); scanning that layout costs a fraction of what
// encoding/json's reflection does (14-22 us per batch of 8 on the test
// machine), and it lies on the path between one batch and the next. Any
// other reply (errors, parameters, decoupled or rescheduled requests,
// names that need escapes) goes to encoding/json, which gives the same
// result for the layout the scanner accepts.
func decodeExecReply(frame []byte, rep *execReply) error {
	s := replyScanner{b: frame}
	if s.execReply(rep) {
		return nil
	}
	*rep = execReply{}
	return json.Unmarshal(frame, rep)
}

// replyScanner reads the stub's fixed reply layout; each method reports
// whether the text at the cursor matched, and a false anywhere sends the
// frame to encoding/json.
type replyScanner struct {
	b []byte
	i int
	// The strings read last: a batch's responses repeat the same output
	// names and types, which then cost no allocation after the first.
	seen [2]string
}

func (s *replyScanner) lit(l string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(l)) {
		return false
	}
	s.i += len(l)
	return true
}

// num reads a non-negative integer of at most 18 digits (no overflow),
// without a leading zero, which JSON does not allow.
func (s *replyScanner) num() (int64, bool) {
	var n int64
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' && s.i-start < 18 {
		n = n*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	return n, s.i > start && (s.b[start] != '0' || s.i == start+1)
}

// str reads a string of printable ASCII without escapes: what
// encode_basestring_ascii writes for such a string, and what
// encoding/json decodes to the same bytes.
func (s *replyScanner) str() (string, bool) {
	if !s.lit(`"`) {
		return "", false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			for _, v := range s.seen {
				if v == string(raw) {
					return v, true
				}
			}
			v := string(raw)
			s.seen[1], s.seen[0] = s.seen[0], v
			return v, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", false
		}
		s.i++
	}
	return "", false
}

// tensor reads {"n":NAME,"t":TYPE,"s":[D, D],"o":OFF,"b":LEN}.
func (s *replyScanner) tensor(t *wireTensor) bool {
	var ok bool
	if !s.lit(`{"n":`) {
		return false
	}
	if t.Name, ok = s.str(); !ok || !s.lit(`,"t":`) {
		return false
	}
	if t.Type, ok = s.str(); !ok || !s.lit(`,"s":[`) {
		return false
	}
	t.Shape = []int64{}
	for !s.lit("]") {
		if len(t.Shape) > 0 && !s.lit(",") {
			return false
		}
		s.lit(" ") // Python's str of a list puts one after each comma
		d, ok := s.num()
		if !ok {
			return false
		}
		t.Shape = append(t.Shape, d)
	}
	if !s.lit(`,"o":`) {
		return false
	}
	off, ok := s.num()
	if !ok || !s.lit(`,"b":`) {
		return false
	}
	n, ok := s.num()
	if !ok || !s.lit("}") {
		return false
	}
	t.Off, t.Len = int(off), int(n)
	return true
}

// execReply reads {"seq":N,"resps":[{"out":[TENSOR,...]},...],"shm":N}.
func (s *replyScanner) execReply(rep *execReply) bool {
	if !s.lit(`{"seq":`) {
		return false
	}
	seq, ok := s.num()
	if !ok || !s.lit(`,"resps":[`) {
		return false
	}
	rep.Seq = uint64(seq)
	rep.Resps = []execResp{}
	for !s.lit("]") {
		if len(rep.Resps) > 0 && !s.lit(",") {
			return false
		}
		if !s.lit(`{"out":[`) {
			return false
		}
		r := execResp{Out: []wireTensor{}}
		for !s.lit("]") {
			if len(r.Out) > 0 && !s.lit(",") {
				return false
			}
			var t wireTensor
			if !s.tensor(&t) {
				return false
			}
			r.Out = append(r.Out, t)
		}
		if !s.lit("}") {
			return false
		}
		rep.Resps = append(rep.Resps, r)
	}
	if !s.lit(`,"shm":`) {
		return false
	}
	shm, ok := s.num()
	if !ok || !s.lit("}") || s.i != len(s.b) {
		return false
	}
	rep.Shm = int(shm)
	return true
}
