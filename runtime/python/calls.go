package python

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Server is what model.py reaches through pb_utils besides its own
// requests: inference on the other models of the server (BLS,
// InferenceRequest.exec) and the model loading API (pb_utils.load_model,
// unload_model, is_model_ready). cmd/tritonserver provides it over the
// repository; without one those calls fail with a clear error.
type Server interface {
	// Infer runs req on the model (version -1: the highest ready one).
	Infer(ctx context.Context, model string, version int64, req *backend.Request) (*backend.Response, error)
	// InferStream runs req on a decoupled model, calling fn with each
	// response, final set on the last.
	InferStream(ctx context.Context, model string, version int64, req *backend.Request, fn func(*backend.Response, bool) error) error
	// ModelReady reports whether the model (version -1: any) is ready.
	ModelReady(model string, version int64) bool
	// LoadModel loads or reloads a model, with an optional config override
	// (Triton's JSON form) and override files (paths inside the model
	// directory, "1/model.py", to contents); UnloadModel unloads it (with
	// dependents, an ensemble's composing models too: unload_dependents).
	// Both fail outside explicit model control mode, as in Triton.
	LoadModel(ctx context.Context, model string, config []byte, files map[string][]byte) error
	UnloadModel(ctx context.Context, model string, dependents bool) error
}

// SetServer gives the backend the server its models reach through BLS and
// the model loading API. It may be called once the repository exists,
// before or after models loaded.
func (b *Backend) SetServer(s Server) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.server = s
}

func (b *Backend) currentServer() Server {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.server
}

// SupportsDecoupled: python models may use the decoupled transaction
// policy (InferenceResponseSender).
func (b *Backend) SupportsDecoupled() bool { return true }

// PlacesInstances reports that a python model may run under a host policy
// (ModelSpec.InstancePolicies): each stub confines its threads to its
// instance's CPUs as it starts, and starts with its memory bound to the
// policy's NUMA node, as Triton's stub inherits the affinity and memory
// policy Triton sets on the thread that creates the instance.
func (b *Backend) PlacesInstances() bool { return true }

var _ backend.CPUPlacer = (*Backend)(nil)

// senderTable maps the keys the stub knows decoupled requests by to their
// senders. Entries go when the final response is sent, when the batch
// fails, or when the stub ends.
type senderTable struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]backend.Sender
	keys map[backend.Sender]uint64
}

func (t *senderTable) add(s backend.Sender) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]backend.Sender{}
		t.keys = map[backend.Sender]uint64{}
	}
	if k, ok := t.keys[s]; ok {
		// A rescheduled request executes again with the same sender: it
		// keeps its key, so the table holds one entry per open request.
		return k
	}
	t.next++
	t.m[t.next] = s
	t.keys[s] = t.next
	return t.next
}

func (t *senderTable) get(k uint64) backend.Sender {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[k]
}

func (t *senderTable) remove(k uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.m[k]; ok {
		delete(t.keys, s)
		delete(t.m, k)
	}
}

// dropBatch forgets the senders of a batch that failed as a whole (the
// scheduler ends those requests).
func (t *senderTable) dropBatch(reqs []*backend.Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range reqs {
		if k, ok := t.keys[r.Sender]; ok && r.Sender != nil {
			delete(t.m, k)
			delete(t.keys, r.Sender)
		}
	}
}

// endAll finishes every request still open with err (the stub is gone).
func (t *senderTable) endAll(err error) {
	t.mu.Lock()
	open := t.m
	t.m, t.keys = nil, nil
	t.mu.Unlock()
	for _, s := range open {
		_ = s.Send(&backend.Response{Err: err}, true)
	}
}

// callMsg is a frame the stub sends on its own initiative.
type callMsg struct {
	Op string `json:"op"`
	ID uint64 `json:"id"`

	// "resp": one response of a decoupled request (rk), tensors in the
	// payload.
	RK     uint64                 `json:"rk"`
	Final  bool                   `json:"final"`
	Empty  bool                   `json:"empty"`
	Err    string                 `json:"err"`
	Code   *int                   `json:"code"`
	Out    []wireTensor           `json:"out"`
	Params backend.JSONParameters `json:"params"`

	// "bls": an inference request on another model, inputs in the payload.
	Model     string       `json:"model"`
	Version   int64        `json:"version"`
	In        []wireTensor `json:"in"`
	Outputs   []string     `json:"outputs"`
	ReqID     string       `json:"req_id"`
	TimeoutUS int64        `json:"timeout"`
	Decoupled bool         `json:"decoupled"`

	// "call": a server function (model control, custom metrics).
	Fn   string          `json:"fn"`
	Args json.RawMessage `json:"args"`
}

// callHandler serves one stub process's calls. Each call runs on a
// goroutine of its own, so the reader keeps reading; the stub waits for
// each call's answer, which bounds them by its threads.
type callHandler struct {
	in   *Instance
	proc *stubProc
	ctx  context.Context // ends with the stub
}

func newCallHandler(in *Instance, proc *stubProc) *callHandler {
	ctx, cancel := context.WithCancel(context.Background())
	h := &callHandler{in: in, proc: proc, ctx: ctx}
	go func() {
		<-proc.readDone
		cancel()
		if in.metrics != nil {
			in.metrics.release(h)
		}
		in.senders.endAll(backend.Errorf(backend.Internal, "python model %q instance %d: the stub ended before the request received its final response", in.spec.Name, in.idx))
	}()
	return h
}

func (h *callHandler) handle(frame, payload []byte) {
	msg := new(callMsg)
	if err := json.Unmarshal(frame, msg); err != nil {
		h.in.log.Error("python stub sent an unreadable call", "frame", truncate(frame, 200), "err", err)
		return
	}
	switch msg.Op {
	case "resp":
		go h.response(msg, payload)
	case "bls":
		go h.bls(msg, payload)
	case "call":
		go h.call(msg)
	default:
		h.reply(map[string]any{"op": "ret", "id": msg.ID, "err": "unknown call " + strconv.Quote(msg.Op)}, nil)
	}
}

func (h *callHandler) reply(v any, payload []byte) {
	body, err := json.Marshal(v)
	if err == nil {
		err = h.proc.ch.sendPayload(body, payload)
	}
	if err != nil && h.ctx.Err() == nil {
		h.in.log.Warn("answering a python stub's call", "err", err)
	}
}

// tensors turns wire descriptions of payload bytes into tensors (views of
// payload, which the caller owns).
func tensors(specs []wireTensor, payload []byte) ([]backend.Tensor, error) {
	out := make([]backend.Tensor, 0, len(specs))
	for _, w := range specs {
		dt := backend.DataType(w.Type)
		if !dt.Valid() {
			return nil, fmt.Errorf("tensor %q has unknown data type %q", w.Name, w.Type)
		}
		if w.Off < 0 || w.Len < 0 || w.Off+w.Len > len(payload) {
			return nil, fmt.Errorf("tensor %q lies outside its frame (%d+%d > %d)", w.Name, w.Off, w.Len, len(payload))
		}
		t := backend.Tensor{Name: w.Name, DataType: dt, Shape: w.Shape, Data: payload[w.Off : w.Off+w.Len : w.Off+w.Len]}
		if dt != backend.Bytes && int64(w.Len) != t.NumElements()*int64(dt.Size()) {
			return nil, fmt.Errorf("tensor %q: %d bytes for shape %v of %s", w.Name, w.Len, w.Shape, dt)
		}
		out = append(out, t)
	}
	return out, nil
}

// response delivers one response of a decoupled request and acknowledges
// it once the sender took it: Send blocks while the client is behind, so
// the model's send() does too, which bounds what a fast model can queue.
func (h *callHandler) response(msg *callMsg, payload []byte) {
	ack := map[string]any{"op": "ack", "id": msg.ID}
	defer func() { h.reply(ack, nil) }()
	sender := h.in.senders.get(msg.RK)
	if sender == nil {
		ack["err"] = "Unable to send response. Response sender has been closed."
		return
	}
	var resp *backend.Response
	switch {
	case msg.Err != "" || msg.Code != nil:
		resp = &backend.Response{Err: &backend.Error{Code: tritonErrorCode(msg.Code), Msg: msg.Err}}
	case !msg.Empty:
		resp = h.in.collect(&backend.Request{Outputs: []string{}}, msg.Out, payload)
		if resp.Err == nil && len(msg.Params) > 0 {
			resp.Parameters = msg.Params
		}
	}
	if resp == nil && !msg.Final {
		ack["err"] = "a response that is not final must not be empty"
		return
	}
	if msg.Final {
		h.in.senders.remove(msg.RK)
	}
	if err := sender.Send(resp, msg.Final); err != nil {
		ack["err"] = err.Error()
		h.in.senders.remove(msg.RK)
	}
	if sender.Cancelled() {
		ack["cancelled"] = true
	}
}

// bls runs an InferenceRequest.exec of the model on another model and
// sends the responses back ("blsr" frames, the last one final).
func (h *callHandler) bls(msg *callMsg, payload []byte) {
	fail := func(code backend.Code, err error) {
		h.reply(map[string]any{"op": "blsr", "id": msg.ID, "final": true, "err": err.Error(), "code": tritonCode(code)}, nil)
	}
	srv := h.in.server()
	if srv == nil {
		fail(backend.Unavailable, fmt.Errorf("BLS requests need the server: this backend was started without one"))
		return
	}
	inputs, err := tensors(msg.In, payload)
	if err != nil {
		fail(backend.InvalidArg, err)
		return
	}
	req := &backend.Request{ID: msg.ReqID, Inputs: inputs, Outputs: msg.Outputs, Parameters: msg.Params}
	ctx := h.ctx
	if msg.TimeoutUS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(msg.TimeoutUS)*time.Microsecond)
		defer cancel()
	}
	version := msg.Version
	if version == 0 {
		version = -1
	}
	send := func(resp *backend.Response, final bool) error {
		rep := map[string]any{"op": "blsr", "id": msg.ID, "final": final}
		var data []byte
		if resp == nil {
			rep["empty"] = true
		} else if resp.Err != nil {
			rep["err"] = resp.Err.Error()
			rep["code"] = tritonCode(codeOf(resp.Err))
		} else {
			var outs []wireTensor
			for _, t := range resp.Outputs {
				outs = append(outs, wireTensor{Name: t.Name, Type: string(t.DataType), Shape: t.Shape, Off: len(data), Len: len(t.Data)})
				data = append(data, t.Data...)
			}
			rep["out"] = outs
			if len(resp.Parameters) > 0 {
				rep["params"] = resp.Parameters
			}
		}
		body, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		return h.proc.ch.sendPayload(body, data)
	}
	if msg.Decoupled {
		finished := false
		err := srv.InferStream(ctx, msg.Model, version, req, func(resp *backend.Response, final bool) error {
			finished = final
			return send(resp, final)
		})
		if err != nil && !finished {
			fail(codeOf(err), err)
		}
		return
	}
	resp, err := srv.Infer(ctx, msg.Model, version, req)
	if err != nil {
		fail(codeOf(err), err)
		return
	}
	if err := send(resp, true); err != nil {
		fail(backend.Internal, err)
	}
}

// call runs a server function for pb_utils: model control and custom
// metrics.
func (h *callHandler) call(msg *callMsg) {
	value, err := h.in.serverCall(h.ctx, h, msg.Fn, msg.Args)
	rep := map[string]any{"op": "ret", "id": msg.ID, "value": value}
	if err != nil {
		rep["err"] = err.Error()
		rep["code"] = tritonCode(codeOf(err))
	}
	h.reply(rep, nil)
}

// serverCall runs fn for the stub owner (its metric references are its own).
func (in *Instance) serverCall(ctx context.Context, owner any, fn string, args json.RawMessage) (any, error) {
	var a struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Config  string `json:"config"`
		// Dependents is unload_model's unload_dependents.
		Dependents bool `json:"unload_dependents"`
		// Files are load_model's override files: "file:<path>" to base64.
		Files map[string]string `json:"files"`
	}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, backend.Errorf(backend.InvalidArg, "%s: bad arguments: %w", fn, err)
		}
	}
	switch fn {
	case "is_model_ready", "load_model", "unload_model":
		srv := in.server()
		if srv == nil {
			return nil, backend.Errorf(backend.Unavailable, "pb_utils.%s needs the server: this backend was started without one", fn)
		}
		switch fn {
		case "is_model_ready":
			v := int64(-1)
			if a.Version != "" {
				n, err := strconv.ParseInt(a.Version, 10, 64)
				if err != nil {
					return nil, backend.Errorf(backend.InvalidArg, "is_model_ready: model_version %q is not a number", a.Version)
				}
				v = n
			}
			return srv.ModelReady(a.Name, v), nil
		case "load_model":
			var cfg []byte
			if a.Config != "" {
				cfg = []byte(a.Config)
			}
			files, err := overrideFiles(a.Files)
			if err != nil {
				return nil, err
			}
			return nil, srv.LoadModel(ctx, a.Name, cfg, files)
		default:
			return nil, srv.UnloadModel(ctx, a.Name, a.Dependents)
		}
	}
	if in.metrics != nil {
		if v, ok, err := in.metrics.call(owner, fn, args); ok {
			return v, err
		}
	}
	return nil, backend.Errorf(backend.Unsupported, "pb_utils call %q is not supported by this server", fn)
}

// overrideFiles decodes load_model's files, keyed as Triton keys them
// ("file:1/model.py").
func overrideFiles(in map[string]string) (map[string][]byte, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string][]byte, len(in))
	for k, v := range in {
		path, ok := strings.CutPrefix(k, "file:")
		if !ok {
			return nil, backend.Errorf(backend.InvalidArg, "load_model: files key %q must have the form 'file:<version>/<name>'", k)
		}
		data, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, backend.Errorf(backend.InvalidArg, "load_model: the content of %q is not readable: %v", k, err)
		}
		out[path] = data
	}
	return out, nil
}

func codeOf(err error) backend.Code {
	var be *backend.Error
	if errors.As(err, &be) {
		return be.Code
	}
	return backend.Internal
}

// tritonCode maps a backend code to pb_utils.TritonError's codes (the
// inverse of tritonErrorCode).
func tritonCode(c backend.Code) int {
	switch c {
	case backend.NotFound:
		return 2
	case backend.InvalidArg, backend.TooLarge:
		return 3
	case backend.Unavailable:
		return 4
	case backend.Unsupported:
		return 5
	case backend.AlreadyExists:
		return 6
	}
	return 1
}
