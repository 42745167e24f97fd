package python

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
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

// stubReplyPy runs the shipped stub's execute on a batch of two for a
// numpy model.py with two outputs, and prints the reply it would send.
const stubReplyPy = `
import json, os, sys, tempfile
import tritonbuild_stub as stub
d = tempfile.mkdtemp()
path = os.path.join(d, "model.py")
with open(path, "w") as f:
    f.write("""
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT__0", x * 2),
                pb_utils.Tensor("N", np.array(x.size, dtype=np.int64))]))
        return out
""")
r, w = os.pipe()
shm = os.memfd_create("reply")
os.ftruncate(shm, 1 << 16)
s = stub.Stub(stub.Channel(r, w), stub.Shm(shm))
assert s.initialize({"poll_us": 0, "shm": 1 << 16, "model_file": path, "args": {}}) == {"ok": True}
os.pwrite(shm, bytes(40), 0)
req = {"in": [["IN", "FP32", [1, 10], 0, 40]], "out": ["OUTPUT__0", "N"]}
reply = s.execute({"op": "exec", "seq": 7, "shm": 1 << 16, "out": 4096, "cx": 2048, "poll": False, "reqs": [req, req]})
sys.stdout.write(reply if isinstance(reply, str) else json.dumps(reply))
`

// The Go side's scanner takes what the shipped stub really writes, not only
// the reply written out above: if the stub's layout drifted, decoding
// would fall back to encoding/json silently, right but slower.
func TestDecodeExecReplyScansTheStubsReply(t *testing.T) {
	requirePython(t)
	stubDir, _ := filepath.Abs("stub")
	cmd := exec.Command(systemPython, "-c", stubReplyPy)
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+stubDir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running the stub's execute: %v\n%s", err, out)
	}
	var rep execReply
	if s := (replyScanner{b: out}); !s.execReply(&rep) {
		t.Fatalf("the scanner refused the stub's reply %s", out)
	}
	var want execReply
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("the stub's reply %s is not JSON: %v", out, err)
	}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("scanned %+v, encoding/json reads %+v", rep, want)
	}
	if rep.Seq != 7 || len(rep.Resps) != 2 || len(rep.Resps[1].Out) != 2 || rep.Resps[1].Out[1].Name != "N" {
		t.Errorf("scanned %+v from %s", rep, out)
	}
}
