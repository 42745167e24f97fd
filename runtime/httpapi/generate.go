package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/repository"
	"github.com/tritonbuild/tritonbuild/runtime/status"
	"github.com/tritonbuild/tritonbuild/runtime/tracing"
)

// Triton's generate extension: POST .../generate answers one JSON object,
// .../generate_stream answers server-sent events, one "data:" event per
// response. The request is a flat JSON object: a member named like one of
// the model's inputs becomes that input (a string, number or boolean is
// one element, an array its elements, shaped from the input's dims as
// generateInput says), any other member is a request parameter (a
// string, a boolean or a number), and "parameters" holds more members of
// either kind. A member "id" is also the request's id, which the answer
// echoes. Every output of a response is a member of the answer: one
// element as a value, more as a flat array.

// generate serves .../generate and .../generate_stream.
func (s *Server) generate(stream bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// A traced request answers through tw; the trace's methods do
		// nothing on the nil trace of an untraced one.
		var tr *tracing.Trace
		tw := s.sample(w, r, r.PathValue("model"), start)
		if tw != nil {
			defer tw.end()
			w, tr = tw, tw.tr
		}
		m, err := s.model(r)
		if err != nil {
			writeError(w, err)
			return
		}
		bp, err := s.readBody(w, r, start)
		tr.Activity("HTTP_RECV_END", time.Now())
		if err != nil {
			m.Scheduler.RecordFailure(start)
			writeError(w, err)
			return
		}
		defer s.putBuf(bp)
		req, err := generateRequest(*bp, m)
		if err != nil {
			m.Scheduler.RecordFailure(start)
			writeError(w, err)
			return
		}
		if tw != nil {
			tw.model(m)
			tw.decoded(req)
		}
		version := int64(-1)
		if r.PathValue("version") != "" {
			version = m.Version
		}
		switch {
		case stream:
			s.generateStream(w, r, m, version, req, start)
			tr.RequestEnd(nil)
		case m.Decoupled():
			s.generateDecoupled(w, r, m, version, req, start)
			tr.RequestEnd(nil)
		default:
			m, resp, err := s.mgr.Infer(r.Context(), m, version, req, start)
			if tw != nil {
				tw.model(m)
			}
			tr.RequestEnd(resp)
			if err != nil {
				writeError(w, err)
				return
			}
			writeGenerated(w, m, req.ID, resp)
		}
	}
}

// generateDecoupled answers .../generate for a decoupled model, which
// must send exactly one response: the endpoint carries one. Otherwise
// the answer is Triton's (http_server.cc, GenerateRequestClass): its
// status is set by the first response, as Triton starts its reply then
// (200 when the model sent none, or its first one renders; that one's
// error code when not), and its body is Triton's error for the count,
// whatever the responses held.
func (s *Server) generateDecoupled(w http.ResponseWriter, r *http.Request, m *repository.Model, version int64, req *backend.Request, start time.Time) {
	var first, got *backend.Response
	n := 0
	_, err := s.mgr.InferStream(r.Context(), m, version, req, start, func(resp *backend.Response, _ bool) error {
		if resp == nil {
			return nil
		}
		n++
		if first == nil {
			first = resp
		}
		got = resp
		return nil
	})
	switch {
	case err != nil:
		writeError(w, err)
	case n != 1:
		code := http.StatusOK
		if first != nil {
			ferr := first.Err
			if ferr == nil {
				_, ferr = generatedJSON(m, req.ID, first)
			}
			if ferr != nil {
				code = status.HTTPStatus(ferr)
			}
		}
		writeErrorText(w, code, "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses")
	case got.Err != nil:
		writeError(w, got.Err)
	default:
		writeGenerated(w, m, req.ID, got)
	}
}

// generateStream answers .../generate_stream: every response as one
// event, an error response as an error event. As in Triton, the first
// event sets the status (an error's own, 200 otherwise), so that an error
// after it leaves the status 200; errors before the request runs answer a
// JSON error as usual.
func (s *Server) generateStream(w http.ResponseWriter, r *http.Request, m *repository.Model, version int64, req *backend.Request, start time.Time) {
	started := false
	flusher, _ := w.(http.Flusher)
	event := func(code int, data []byte) {
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "text/event-stream; charset=utf-8")
			h.Set("Cache-Control", "no-cache")
			w.WriteHeader(code)
		}
		_, _ = w.Write([]byte("data: "))
		_, _ = w.Write(data)
		_, _ = w.Write([]byte("\n\n"))
		if flusher != nil {
			flusher.Flush()
		}
	}
	errEvent := func(err error) {
		event(status.HTTPStatus(err), append(append([]byte(`{"error":`), appendJSONString(nil, []byte(status.Message(err)))...), '}'))
	}
	if !m.Decoupled() {
		// Triton refuses a request that fails its validation before the
		// request runs (TRITONSERVER_ServerInferAsync fails), a JSON
		// error; an error the run ends in (the model's, a queue timeout)
		// comes back as the response, which the stream sends as its
		// first event under the error's status. Validating here first
		// tells the two apart; the scheduler's own refusals (a full
		// queue, a model unloading) are then events too.
		if err := m.Validate(req); err != nil {
			m.Scheduler.RecordFailure(start)
			writeError(w, err)
			return
		}
		m, resp, err := s.mgr.Infer(r.Context(), m, version, req, start)
		if err != nil {
			if r.Context().Err() == nil {
				errEvent(err)
			}
			return
		}
		b, err := generatedJSON(m, req.ID, resp)
		if err != nil {
			// The response could not be rendered (an FP16 output, say):
			// Triton answers it in the stream, as its first event.
			errEvent(err)
			return
		}
		event(http.StatusOK, b)
		return
	}
	_, err := s.mgr.InferStream(r.Context(), m, version, req, start, func(resp *backend.Response, _ bool) error {
		switch {
		case resp == nil:
		case resp.Err != nil:
			errEvent(resp.Err)
		default:
			b, err := generatedJSON(m, req.ID, resp)
			if err != nil {
				errEvent(err)
				return nil
			}
			event(http.StatusOK, b)
		}
		return nil
	})
	if err != nil && r.Context().Err() == nil {
		if !started {
			writeError(w, err)
			return
		}
		errEvent(err)
	}
}

func writeGenerated(w http.ResponseWriter, m *repository.Model, id string, resp *backend.Response) {
	b, err := generatedJSON(m, id, resp)
	if err != nil {
		writeError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// generatedJSON renders one response of the generate extension to the
// request with id: as Triton's GenerateRequestClass::FinalizeResponse
// does, the id is a member when the request has one.
func generatedJSON(m *repository.Model, id string, resp *backend.Response) ([]byte, error) {
	b := []byte{'{'}
	if id != "" {
		b = append(b, `"id":`...)
		b = appendJSONString(b, []byte(id))
		b = append(b, ',')
	}
	b = append(b, `"model_name":`...)
	b = appendJSONString(b, []byte(m.Name))
	b = append(b, `,"model_version":"`...)
	b = strconv.AppendInt(b, m.Version, 10)
	b = append(b, '"')
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		if err := refuseJSONOutput(t); err != nil {
			return nil, err
		}
		b = append(b, ',')
		b = appendJSONString(b, []byte(t.Name))
		b = append(b, ':')
		mark := len(b)
		var ok bool
		if b, ok = appendData(b, t); !ok {
			return nil, backend.Errorf(backend.Internal, "output '%s' of model '%s' has malformed %s data", t.Name, m.Name, t.DataType)
		}
		if t.NumElements() == 1 {
			// One element is rendered as the value itself: drop the brackets.
			copy(b[mark:], b[mark+1:len(b)-1])
			b = b[:len(b)-2]
		}
	}
	return append(b, '}'), nil
}

// generateRequest builds the inference request of a generate body as
// Triton's conversion does (http_server.cc, ConvertGenerateRequest with
// its schema of one nested keyword, "parameters"): the members in
// document order, each named like one of the model's inputs becoming
// that input and any other a request parameter (ExactMappingInput); the
// members of "parameters" likewise, so that an input may be given there
// too, with errors behind "Converting keyword: 'parameters'".
func generateRequest(body []byte, m *repository.Model) (*backend.Request, error) {
	var top json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "failed to parse the generate request JSON: %w", err)
	}
	req := &backend.Request{}
	// Triton sets the request id from the member "id" first
	// (ParseJsonTritonRequestID, before the conversion): its errors
	// carry the id, and its response echoes it. The member is then
	// converted like any other, a parameter (or the input of that name).
	if top[0] == '{' {
		var id json.RawMessage
		_ = eachMember(top, func(name string, raw json.RawMessage) error {
			if name == "id" && id == nil {
				id = raw // the first, as Triton's JSON library finds it
			}
			return nil
		})
		if id != nil {
			if id[0] != '"' {
				return nil, badID()
			}
			if err := json.Unmarshal(id, &req.ID); err != nil {
				return nil, backend.Errorf(backend.InvalidArg, "failed to parse the generate request JSON: %w", err)
			}
		}
	}
	params := map[string]any{}
	exact := func(name string, raw json.RawMessage) error {
		spec, ok := m.Input(name)
		if !ok {
			p, err := generateParameter(name, raw)
			if err != nil {
				return err
			}
			params[name] = p
			return nil
		}
		t, err := generateInput(name, raw, spec, m.Spec.MaxBatchSize > 0)
		if err != nil {
			return err
		}
		req.Inputs = append(req.Inputs, t)
		return nil
	}
	if err := eachMember(top, func(name string, raw json.RawMessage) error {
		if name != "parameters" {
			return exact(name, raw)
		}
		if _, ok := m.Input(name); ok {
			return backend.Errorf(backend.InvalidArg, "Keyword 'parameters' for nested schema also given as input tensor name")
		}
		if raw[0] != '{' {
			// Triton's JSON library (MemberAsObject), an INTERNAL error.
			return backend.Errorf(backend.Internal, "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object")
		}
		if err := eachMember(raw, exact); err != nil {
			return backend.Errorf(status.Code(err), "Converting keyword: 'parameters': %w", err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(params) > 0 {
		seq, err := repository.SequenceParameters(params)
		if err != nil {
			return nil, err
		}
		req.Sequence = seq
		req.Parameters = generateParameters(params)
	}
	return req, nil
}

// eachMember calls fn with each member of raw, valid JSON, in document
// order. A value that is not an object is refused with Triton's JSON
// library's words (Members), an INTERNAL error.
func eachMember(raw json.RawMessage, fn func(name string, value json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return backend.Errorf(backend.Internal, "attempt to get members for non-object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return backend.Errorf(backend.InvalidArg, "failed to parse the generate request JSON: %w", err)
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return backend.Errorf(backend.InvalidArg, "failed to parse the generate request JSON: %w", err)
		}
		if err := fn(name, value); err != nil {
			return err
		}
	}
	return nil
}

// generateParameter is the request parameter a generate member that
// names no input becomes: a string, a boolean or a number; any other
// value is refused as Triton refuses it.
func generateParameter(name string, raw json.RawMessage) (any, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, backend.Errorf(backend.InvalidArg, "failed to parse the generate request JSON: %w", err)
	}
	p := backend.JSONParameter(v)
	if p == nil {
		return nil, invalidParameter(name)
	}
	return p, nil
}

// generateInput is the input tensor a generate member names, shaped as
// Triton's ExactMappingInput shapes it: a member carries no shape, only a
// count of elements (an array's length, or 1 for a lone value), which
// fills the input's shape in the model's metadata (a batching model's
// with its -1 batch dimension first). From the innermost dimension out,
// each fixed one must divide the count and takes its share; then the
// innermost variable one takes what remains and any other variable one
// (the batch dimension among them) is 1. A count that does not fit is
// 400 "The schema can not convert input 'X' to tensor with proper shape".
// The elements are then read as /infer reads "data", against the
// array's length: nested arrays are flattened, so more elements than the
// length are Triton's shape mismatch.
func generateInput(name string, raw json.RawMessage, spec *backend.TensorSpec, batching bool) (backend.Tensor, error) {
	count := int64(1)
	if raw[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return backend.Tensor{}, backend.Errorf(backend.InvalidArg, "failed to parse the generate request JSON: %w", err)
		}
		count = int64(len(elems))
	}
	shape := make([]int64, 0, len(spec.Dims)+1)
	if batching {
		shape = append(shape, -1)
	}
	shape = append(shape, spec.Dims...)
	unfit := backend.Errorf(backend.InvalidArg, "The schema can not convert input '%s' to tensor with proper shape", name)
	rest := count
	for i := len(shape) - 1; i >= 0; i-- {
		if d := shape[i]; d != -1 {
			// A 0 dimension is refused at load; Triton would divide by it.
			if d <= 0 || rest%d != 0 {
				return backend.Tensor{}, unfit
			}
			rest /= d
		}
	}
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == -1 {
			shape[i], rest = rest, 1
		}
	}
	if rest != 1 {
		return backend.Tensor{}, unfit
	}
	data, err := decodeData(raw, spec.DataType, count, name)
	if err != nil {
		return backend.Tensor{}, err
	}
	return backend.Tensor{Name: name, DataType: spec.DataType, Shape: shape, Data: data}, nil
}

// generateParameters are the parameters of a generate request for the
// model. Triton's generate conversion (http_server.cc, ExactMappingInput)
// applies none of them: priority, timeout and the rest reach the model as
// they are, and the request keeps the model's default priority and
// timeout. Only the sequence ones are left out, which this server applies
// so that stateful models are served over generate too.
func generateParameters(all map[string]any) map[string]any {
	for _, k := range []string{"sequence_id", "sequence_start", "sequence_end"} {
		delete(all, k)
	}
	if len(all) == 0 {
		return nil
	}
	return all
}
