package python

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The usual reply, as the stub writes it for a batch of two.
const usualReply = `{"seq":3,"resps":[{"out":[{"n":"OUTPUT__0","t":"FP32","s":[1, 5],"o":576,"b":20},` +
	`{"n":"S","t":"INT64","s":[],"o":640,"b":8}]},{"out":[]}],"shm":65536}`

func TestDecodeExecReplyMatchesEncodingJSON(t *testing.T) {
	frames := []string{
		usualReply,
		`{"seq":1,"resps":[],"shm":4096}`,
		`{"seq":12345678901234,"resps":[{"out":[{"n":"a","t":"BYTES","s":[2,3,0],"o":0,"b":0}]}],"shm":8192}`,
		// Left to encoding/json: escapes, parameters, errors, decoupled,
		// rescheduled and batch-level errors, other spacing.
		`{"seq":3,"resps":[{"out":[{"n":"o\"\u00e9","t":"FP32","s":[1],"o":0,"b":4}]}],"shm":4096}`,
		`{"seq":3,"resps":[{"out":[{"n":"o","t":"FP32","s":[1],"o":0,"b":4}],"params":{"k":1}}],"shm":4096}`,
		`{"seq":3,"resps":[{"err":"bad","code":3},{"rs":true},{"none":true}],"shm":4096}`,
		`{"seq":3,"err":"execute raised","shm":4096}`,
		`{"seq": 3, "resps": [], "shm": 4096}`,
		`{"seq":3,"resps":[{"out":[{"n":"o","t":"FP32","s":[1],"o":0,"b":4}]}],"shm":4096,"x":1}`,
	}
	for _, f := range frames {
		var want, got execReply
		if err := json.Unmarshal([]byte(f), &want); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := decodeExecReply([]byte(f), &got); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", f, got, want)
		}
	}
}

func TestDecodeExecReplyScansTheUsualReply(t *testing.T) {
	var rep execReply
	if s := (replyScanner{b: []byte(usualReply)}); !s.execReply(&rep) {
		t.Fatalf("the scanner refused the stub's usual reply %s", usualReply)
	}
	if rep.Seq != 3 || rep.Shm != 65536 || len(rep.Resps) != 2 || len(rep.Resps[0].Out) != 2 ||
		rep.Resps[0].Out[0].Off != 576 || rep.Resps[0].Out[1].Name != "S" {
		t.Errorf("scanned %+v", rep)
	}
}

func TestDecodeExecReplyRejectsBrokenFrames(t *testing.T) {
	// Every cut of a valid reply is an error, as encoding/json says.
	for n := 1; n < len(usualReply); n++ {
		var rep execReply
		if err := decodeExecReply([]byte(usualReply[:n]), &rep); err == nil {
			t.Fatalf("a reply cut after %d bytes decoded: %q", n, usualReply[:n])
		}
	}
	var rep execReply
	if err := decodeExecReply([]byte(strings.Replace(usualReply, "576", "5x6", 1)), &rep); err == nil {
		t.Fatal("a malformed offset decoded")
	}
}

func BenchmarkDecodeExecReply(b *testing.B) {
	frame := []byte(`{"seq":3,"resps":[` + strings.Repeat(`{"out":[{"n":"OUTPUT__0","t":"FP32","s":[1, 5],"o":576,"b":20}]},`, 7) +
		`{"out":[{"n":"OUTPUT__0","t":"FP32","s":[1, 5],"o":1024,"b":20}]}],"shm":65536}`)
	for _, c := range []struct {
		name   string
		decode func([]byte, *execReply) error
	}{
		{"scanner", decodeExecReply},
		{"encoding-json", func(f []byte, r *execReply) error { return json.Unmarshal(f, r) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var rep execReply
				if err := c.decode(frame, &rep); err != nil || len(rep.Resps) != 8 {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzDecodeExecReply: whatever the scanner accepts, encoding/json reads
// the same way, and what encoding/json refuses is refused.
func FuzzDecodeExecReply(f *testing.F) {
	f.Add([]byte(usualReply))
	f.Add([]byte(`{"seq":1,"resps":[],"shm":4096}`))
	f.Add([]byte(`{"seq":3,"resps":[{"out":[{"n":"a","t":"BYTES","s":[2,3,0],"o":0,"b":0}]}],"shm":8192}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		var want, got execReply
		werr := json.Unmarshal(frame, &want)
		gerr := decodeExecReply(frame, &got)
		if werr != nil {
			if gerr == nil {
				t.Fatalf("%q decoded, encoding/json: %v", frame, werr)
			}
			return
		}
		if gerr != nil {
			t.Fatalf("%q: %v, encoding/json read it", frame, gerr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", frame, got, want)
		}
	})
}
