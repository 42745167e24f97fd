package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/internal/frontendtest"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
)

// fuzzModel loads the identity model (BYTES, INT32, BOOL, FP64, UINT8 and
// INT64 inputs) so that decoded requests can also go through validation.
func fuzzModel(f *testing.F) *repository.Model {
	m, err := frontendtest.NewRepo(f, map[string]string{"ident": frontendtest.Ident}).Manager.Get("ident", 2) // the latest of versions 1 and 2
	if err != nil {
		f.Fatal(err)
	}
	return m
}

// FuzzDecodeRequest feeds arbitrary bodies (JSON alone, or JSON plus a
// binary tail split at hdrLen) to the decoder and the validator: they must
// return errors, never panic, and accepted requests must be consistent.
func FuzzDecodeRequest(f *testing.F) {
	m := fuzzModel(f)
	jsonSeeds := []string{
		`{"inputs":[{"name":"S","shape":[2],"datatype":"BYTES","data":["a","b"]},{"name":"I","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,4]]},{"name":"B","shape":[2],"datatype":"BOOL","data":[true,false]}]}`,
		`{"id":"x","parameters":{"binary_data_output":true},"inputs":[{"name":"D","shape":[1],"datatype":"FP64","data":[1e308]}],"outputs":[{"name":"D_OUT","parameters":{"binary_data":false}}]}`,
		`{"inputs":[{"name":"I","shape":[2,2],"datatype":"INT32","data":[1,2,3,"\u0000"]}]}`,
		`{"inputs":[{"name":"S","shape":[-1],"datatype":"BYTES","data":[]}]}`,
		`{"inputs":[{"name":"I","shape":[4611686018427387904,4],"datatype":"INT32","data":[1]}]}`,
		`{`,
	}
	jsonSeeds = append(jsonSeeds, `{"id":"req-1","inputs":[{"name":"I","shape":[1,4],"datatype":"INT32","data":[1,2,3,4]}]}`)
	for _, s := range jsonSeeds {
		f.Add([]byte(s), -1)
	}
	s := []byte{2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0}
	hdr := `{"inputs":[{"name":"S","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":10}},{"name":"I","shape":[2,2],"datatype":"INT32","parameters":{"binary_data_size":16}},{"name":"B","shape":[2],"datatype":"BOOL","data":[true,true]}]}`
	body := append([]byte(hdr), s...)
	body = append(body, make([]byte, 16)...)
	f.Add(body, len(hdr))
	f.Add(body[:len(body)-3], len(hdr))
	d := binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.NaN()))
	hdr2 := `{"inputs":[{"name":"D","shape":[1],"datatype":"FP64","parameters":{"binary_data_size":8}}]}`
	f.Add(append([]byte(hdr2), d...), len(hdr2))

	f.Fuzz(func(t *testing.T, body []byte, hdrLen int) {
		h := ""
		if hdrLen >= 0 {
			h = strconv.Itoa(hdrLen)
		}
		req, parsed, err := decodeRequest(body, h, m, nil)
		if err != nil {
			if be := (*backend.Error)(nil); !errors.As(err, &be) {
				t.Fatalf("decode error is not a *backend.Error: %T %v", err, err)
			}
			return
		}
		if parsed == nil || len(req.Inputs) != len(parsed.Inputs) || req.ID != parsed.ID {
			t.Fatalf("inconsistent decode")
		}
		if err := m.Validate(req); err != nil {
			return
		}
		// A valid request's tensors can be rendered back as JSON.
		for i := range req.Inputs {
			if _, ok := appendData(nil, &req.Inputs[i]); !ok {
				t.Fatalf("validated input %s does not render", req.Inputs[i].Name)
			}
		}
	})
}

// FuzzDecodeData targets the JSON data scanner alone.
func FuzzDecodeData(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[[1.5,-2e3],[3,4]]`, `["a","\u00e9\"",""]`, `[true,false]`, `[1,,2]`, `[[[]]]`, `["unterminated`, `[1e999]`} {
		f.Add([]byte(s), uint8(0), int64(3))
	}
	types := []backend.DataType{backend.FP32, backend.FP64, backend.Int8, backend.Int64, backend.Uint16, backend.Uint64, backend.Bool, backend.Bytes, backend.FP16}
	f.Fuzz(func(t *testing.T, raw []byte, ti uint8, n int64) {
		dt := types[int(ti)%len(types)]
		out, err := decodeData(raw, dt, n, "x")
		if err != nil {
			return
		}
		tensor := backend.Tensor{Name: "x", DataType: dt, Shape: []int64{n}, Data: out}
		if dt != backend.Bytes && int64(len(out)) != n*int64(dt.Size()) {
			t.Fatalf("decoded %d bytes for %d elements of %s", len(out), n, dt)
		}
		if _, ok := appendData(nil, &tensor); !ok {
			t.Fatalf("decoded data does not render")
		}
	})
}

// FuzzHeaderMatchesEncodingJSON checks the hand-written header scanner
// against encoding/json: it must reject what encoding/json rejects, and
// where both accept, decode the same values. (Cases where encoding/json is
// knowingly different are left out of the comparison: its case-insensitive
// member names, repeated members, and invalid UTF-8.)
func FuzzHeaderMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"a\"b","parameters":{"binary_data_output":true,"x":[1,{"y":null}]},"inputs":[{"name":"I","shape":[2,3],"datatype":"FP32","parameters":{"binary_data_size":24}},{"name":"J","shape":[],"datatype":"BYTES","data":["x",["y"]]}],"outputs":[{"name":"O","parameters":{"binary_data":false,"classification":3}}]}`,
		`{"inputs":[{"name":"I","shape":[1.5],"datatype":"FP32","data":[1]}]}`,
		`{"inputs":[{"name":"I","shape":[-0],"data":[1e5,-2.5E-3]}]}`,
		`{"id":"\u00e9\ud83d\ude00"}`,
		`{"inputs":[{"name":"I","data":[01]}]}`,
		`{"unknown":{"a":[true,false,null,"s",-1.0e+2]}} `,
		`{"inputs":[]}x`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	keys := []string{`"id"`, `"parameters"`, `"binary_data_output"`, `"inputs"`, `"outputs"`, `"name"`, `"shape"`, `"datatype"`, `"binary_data_size"`, `"data"`, `"binary_data"`, `"classification"`}
	f.Fuzz(func(t *testing.T, b []byte) {
		var mine, ref inferRequest
		errMine := parseHeader(b, &mine, []backend.TensorSpec{{Name: "I"}}) // "I" interned
		errRef := json.Unmarshal(b, &ref)
		if errMine == nil && errRef != nil {
			var ute *json.UnmarshalTypeError
			if !errors.As(errRef, &ute) || !utf8.Valid(b) {
				t.Fatalf("accepted %q, encoding/json says %v", b, errRef)
			}
			// Type mismatches in members the scanner skips are fine.
			return
		}
		if errMine != nil || errRef != nil || !utf8.Valid(b) {
			return
		}
		lower := bytes.ToLower(b)
		for _, k := range keys {
			if bytes.Count(lower, []byte(k)) != bytes.Count(b, []byte(k)) {
				return
			}
		}
		if bytes.Count(b, []byte(`"inputs"`)) > 1 || bytes.Count(b, []byte(`"outputs"`)) > 1 || bytes.Count(b, []byte(`"shape"`)) > bytes.Count(b, []byte(`"name"`)) {
			return
		}
		// An empty array and an absent one mean the same to decodeRequest.
		for _, r := range []*inferRequest{&mine, &ref} {
			if len(r.Inputs) == 0 {
				r.Inputs = nil
			}
			if len(r.Outputs) == 0 {
				r.Outputs = nil
			}
		}
		a, _ := json.Marshal(mine)
		r, _ := json.Marshal(ref)
		if !bytes.Equal(a, r) {
			t.Fatalf("decoded differently:\nmine %s\nref  %s\ninput %q", a, r, b)
		}
	})
}
