package python

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Instance is one loaded model instance: a stub process plus its shared
// memory. Execute calls are serialized (the scheduler never overlaps them
// on one instance; the mutex also covers restarts and Close).
type Instance struct {
	spec        *backend.ModelSpec
	idx         int
	set         settings
	env         *execEnv
	environ     []string
	script      string
	modelFile   string
	log         *slog.Logger // with the model, version and instance
	verbose     bool
	outputNames []string

	// unloading ends when Close starts, so that a restart stuck in a slow
	// initialize does not hold Close (and the mutex) for its full timeout.
	unloading context.Context
	unload    context.CancelFunc

	mu       sync.Mutex
	shm      *shmRegion
	proc     *stubProc // nil while (re)starting or after a failure
	seq      uint64
	closed   bool
	restarts int

	msg  []byte      // reused control frame buffer
	spin *spinBudget // the backend's; nil: poll without limit

	// sched is the backend's policy of stubs on auto; running is the
	// latest stub started, which it switches and whose CPU ExecCPU reads
	// (read without mu, which a running batch holds).
	sched   *stubSched
	running atomic.Pointer[stubProc]

	// unhealthy is why the instance cannot serve (its stub is gone and the
	// last restart failed), nil while it can. Readiness reads it without
	// mu, which a running batch holds.
	unhealthy atomic.Pointer[error]
	// retry is the pending background restart after a failed one, and
	// backoff its delay, doubled per failure up to maxRestartBackoff, so
	// that an instance whose model is fixed serves again (and readiness
	// recovers) without waiting for a request. Both under mu.
	retry   *time.Timer
	backoff time.Duration
	senders senderTable // decoupled requests the stub may still answer
	server  func() Server
	metrics *CustomMetrics
}

// Restart backoff after a failed restart: the first retry comes after
// minRestartBackoff, each further one after twice the previous delay, at
// most maxRestartBackoff.
const (
	minRestartBackoff = time.Second
	maxRestartBackoff = 30 * time.Second
)

var _ backend.Instance = (*Instance)(nil)

// Healthy returns nil while the instance can serve, and why not once its
// stub is gone and restarting it failed (scheduler.HealthReporter: the
// model is then not ready). It turns nil again when a retry succeeds.
func (in *Instance) Healthy() error {
	if p := in.unhealthy.Load(); p != nil {
		return *p
	}
	return nil
}

// Restarts reports how many times the stub was restarted after a crash,
// hang or timeout.
func (in *Instance) Restarts() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.restarts
}

// ExecCPU returns the CPU time and run-queue wait of the thread that runs
// the running stub's executes, its main thread (scheduler.CPUMeter); ok
// is false under execute-concurrency=all, before a stub started, and
// where the kernel keeps no schedstats.
func (in *Instance) ExecCPU() (run, wait time.Duration, ok bool) {
	if !in.set.concentrate {
		return 0, 0, false
	}
	p := in.running.Load()
	if p == nil {
		return 0, 0, false
	}
	return p.execCPU()
}

// PID returns the running stub's process id, or 0 when none runs.
func (in *Instance) PID() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc == nil || !in.proc.alive() {
		return 0
	}
	return in.proc.pid
}

type initReply struct {
	OK     bool            `json:"ok"`
	Err    string          `json:"err"`
	Config json.RawMessage `json:"config"`
}

// warnSched logs a scheduling policy the stub could not be switched to:
// it keeps the one it had, which costs speed, not answers.
func (in *Instance) warnSched(err error) { in.log.Warn(err.Error()) }

// start launches a stub and initializes the model in it. Callers hold mu
// (or own the Instance exclusively, during load).
func (in *Instance) start(ctx context.Context) error {
	logLim := newLogLimit(in.set.logBytesPerSec)
	batch := in.set.schedBatch
	if in.set.schedAuto {
		batch = in.sched.autoBatch()
	}
	policy := in.spec.InstancePolicy(in.idx)
	cpus := policy.CPUs
	proc, _, err := startStub(ctx, stubLaunch{
		interpreter: in.env.Interpreter,
		script:      in.script,
		dir:         in.spec.VersionDir,
		env:         in.environ,
		shm:         in.shm,
		stdout:      &lineLogger{log: in.log, limit: logLim},
		stderr:      &lineLogger{log: in.log, limit: logLim},
		timeout:     in.set.stubTimeout,
		memoryBytes: in.set.memoryBytes,
		schedBatch:  batch,
		cpus:        cpus,
		numaNodes:   policy.NUMANodes,
	})
	if err != nil {
		return fmt.Errorf("python stub with %s: %w", in.env.Interpreter, err)
	}
	in.running.Store(proc)
	in.spin.addCPUs(cpus)
	if in.set.schedAuto {
		in.sched.settle(proc, batch, in.warnSched)
	}
	body, err := json.Marshal(map[string]any{
		"op":         "init",
		"model_file": in.modelFile,
		"args":       initArgs(in.spec, in.idx),
		"shm":        in.shm.size(),
		"verbose":    in.verbose,
		"poll_us":    in.set.poll.Microseconds(),
	})
	if err != nil {
		proc.kill()
		return fmt.Errorf("encoding init frame: %w", err)
	}
	proc.ch.budget = in.spin
	if err := proc.ch.setPoll(in.set.poll); err != nil {
		proc.kill()
		return err
	}
	proc.startReader(newCallHandler(in, proc).handle)
	if err := proc.ch.send(body); err != nil {
		return proc.failure("initializing", 0, err)
	}
	var deadline time.Time
	if in.set.initializeTimeout > 0 {
		deadline = time.Now().Add(in.set.initializeTimeout)
	}
	frame, err := proc.await(ctx, deadline)
	if err != nil {
		return proc.failure("initializing the model", in.set.initializeTimeout, err)
	}
	var rep initReply
	if err := json.Unmarshal(frame, &rep); err != nil {
		proc.kill()
		return fmt.Errorf("stub sent an unreadable init reply %q: %w", truncate(frame, 200), err)
	}
	if !rep.OK {
		proc.kill()
		return fmt.Errorf("%s", rep.Err)
	}
	in.proc = proc
	go in.watch(proc)
	return nil
}

// watch restarts the stub in the background when it ends while idle
// (killed from outside, out of memory), so that a stub that cannot come
// back shows in readiness without waiting for a request to find it. A
// stub that fails during a batch, or is stopped by Close, is no longer
// in.proc by the time watch holds mu.
func (in *Instance) watch(proc *stubProc) {
	select {
	case <-proc.exited:
	case <-in.unloading.Done():
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || in.proc != proc {
		return
	}
	in.log.Warn("python stub ended while idle; restarting it", "pid", proc.pid, "status", proc.exitStatus(0))
	proc.kill()
	in.proc = nil
	in.restartSoon()
}

// ensureRunning (re)starts the stub when the previous one is gone. Called
// with mu held.
func (in *Instance) ensureRunning(ctx context.Context) error {
	if in.proc != nil && in.proc.alive() {
		return nil
	}
	if in.proc != nil {
		// Died while idle (killed from outside, out of memory): report it
		// in the log, not to the next caller.
		in.log.Warn("python stub ended while idle; restarting it", "pid", in.proc.pid, "status", in.proc.exitStatus(0))
		in.proc.kill()
		in.proc = nil
	}
	in.restarts++
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(in.unloading, cancel)
	defer stop()
	if err := in.start(ctx); err != nil {
		err = backend.Errorf(backend.Unavailable, "python model %q instance %d: restarting the stub failed: %w", in.spec.Name, in.idx, err)
		switch {
		case in.unloading.Err() != nil:
		case errors.Is(ctx.Err(), context.Canceled):
			// The request that restarted it gave up: no verdict on the
			// model, but the stub still has to come back.
			in.retryLater()
		default:
			in.unhealthy.Store(&err)
			in.retryLater()
		}
		return err
	}
	if in.unhealthy.Swap(nil) != nil {
		in.log.Info("python stub restarted; the instance serves again", "restarts", in.restarts)
	}
	in.backoff = 0
	return nil
}

// retryLater schedules the next background restart after a failed one.
// Called with mu held.
func (in *Instance) retryLater() {
	if in.closed || in.retry != nil {
		return
	}
	in.backoff = min(max(2*in.backoff, minRestartBackoff), maxRestartBackoff)
	in.retry = time.AfterFunc(in.backoff, func() {
		in.mu.Lock()
		in.retry = nil
		in.mu.Unlock()
		in.restartNow()
	})
}

// restartSoon restarts a failed stub in the background so that the next
// request does not pay for the interpreter start; if the next request comes
// first, ensureRunning does the same work and this becomes a no-op.
func (in *Instance) restartSoon() { go in.restartNow() }

// restartNow starts the stub unless it runs or the instance is closed. A
// failure is logged and marks the instance unhealthy (ensureRunning).
func (in *Instance) restartNow() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || in.proc != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), in.set.stubTimeout+in.set.initializeTimeout)
	defer cancel()
	if err := in.ensureRunning(ctx); err != nil {
		in.log.Error("restarting the python stub", "err", err)
	}
}

// wireTensor describes one tensor in the shared region.
type wireTensor struct {
	Name  string  `json:"n"`
	Type  string  `json:"t"`
	Shape []int64 `json:"s"`
	Off   int     `json:"o"`
	Len   int     `json:"b"`
}

type execReply struct {
	Seq   uint64     `json:"seq"`
	Shm   int        `json:"shm"`
	Err   string     `json:"err"`
	Resps []execResp `json:"resps"`
}

type execResp struct {
	Err    string                 `json:"err"`
	Code   *int                   `json:"code"`
	Out    []wireTensor           `json:"out"`
	Params backend.JSONParameters `json:"params"`
	None   bool                   `json:"none"` // decoupled: execute returned no response for it
	// Resched: the model released the request with RESCHEDULE.
	Resched bool `json:"rs"`
}

// Execute runs the requests as one call of model.py's execute.
func (in *Instance) Execute(ctx context.Context, reqs []*backend.Request) ([]*backend.Response, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, backend.Errorf(backend.Unavailable, "python model %q instance %d is unloaded", in.spec.Name, in.idx)
	}
	// A caller that already gave up gets its answer without costing the
	// stub a batch.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resps := make([]*backend.Response, len(reqs))
	// Lay the inputs out: offsets first, so the region grows at most once.
	sent := make([]int, 0, len(reqs)) // indexes of requests that go to the stub
	for i, r := range reqs {
		if err := checkRequest(r); err != nil {
			resps[i] = &backend.Response{Err: err}
			continue
		}
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return resps, nil
	}
	extra, err := in.batchInputs(reqs, sent)
	if err != nil {
		for _, i := range sent {
			resps[i] = &backend.Response{Err: err}
		}
		return resps, nil
	}
	// What the stub gets for sent[k]: the request's inputs, followed by
	// its batch-input pieces when the model has batch inputs.
	inputsOf := func(k int) []backend.Tensor {
		if extra != nil {
			return extra[k]
		}
		return reqs[sent[k]].Inputs
	}
	end := 0
	for k := range sent {
		ins := inputsOf(k)
		for j := range ins {
			end = alignUp(end) + len(ins[j].Data)
		}
	}
	if err := in.ensureRunning(ctx); err != nil {
		return nil, err
	}
	if err := in.awaitLate(ctx); err != nil {
		return nil, err
	}
	// After the inputs, a byte per request that the server sets when its
	// client gives up, for request.is_cancelled(); the outputs follow.
	cancelOff := alignUp(end)
	outOff := alignUp(cancelOff + len(sent))
	if err := in.shm.ensure(outOff); err != nil {
		return nil, backend.Errorf(backend.Internal, "python model %q: %w", in.spec.Name, err)
	}
	clear(in.shm.buf[cancelOff : cancelOff+len(sent)])
	in.seq++
	msg := in.msg[:0]
	msg = append(msg, `{"op":"exec","seq":`...)
	msg = strconv.AppendUint(msg, in.seq, 10)
	msg = append(msg, `,"shm":`...)
	msg = strconv.AppendInt(msg, int64(in.shm.size()), 10)
	msg = append(msg, `,"out":`...)
	msg = strconv.AppendInt(msg, int64(outOff), 10)
	msg = append(msg, `,"cx":`...)
	msg = strconv.AppendInt(msg, int64(cancelOff), 10)
	// Whether the stub polls for its next batch after answering this one
	// is decided per batch by the spin budget.
	stubPoll, done := in.spin.startBatch(in.proc.ch.polling.Load())
	defer done()
	msg = append(msg, `,"poll":`...)
	msg = strconv.AppendBool(msg, stubPoll)
	msg = append(msg, `,"reqs":[`...)
	off := 0
	for k, i := range sent {
		r := reqs[i]
		if k > 0 {
			msg = append(msg, ',')
		}
		msg = append(msg, `{"in":[`...)
		ins := inputsOf(k)
		for j := range ins {
			t := &ins[j]
			off = alignUp(off)
			copy(in.shm.buf[off:], t.Data)
			if j > 0 {
				msg = append(msg, ',')
			}
			msg = append(msg, '[')
			msg = appendJSONString(msg, t.Name)
			msg = append(msg, ',', '"')
			msg = append(msg, t.DataType...)
			msg = append(msg, '"', ',', '[')
			for d, n := range t.Shape {
				if d > 0 {
					msg = append(msg, ',')
				}
				msg = strconv.AppendInt(msg, n, 10)
			}
			msg = append(msg, ']', ',')
			msg = strconv.AppendInt(msg, int64(off), 10)
			msg = append(msg, ',')
			msg = strconv.AppendInt(msg, int64(len(t.Data)), 10)
			msg = append(msg, ']')
			off += len(t.Data)
		}
		msg = append(msg, `],"out":[`...)
		names := r.Outputs
		if len(names) == 0 {
			names = in.outputNames
		}
		for j, n := range names {
			if j > 0 {
				msg = append(msg, ',')
			}
			msg = appendJSONString(msg, n)
		}
		msg = append(msg, ']')
		if r.ID != "" {
			msg = append(msg, `,"id":`...)
			msg = appendJSONString(msg, r.ID)
		}
		if len(r.Parameters) > 0 {
			if p, err := json.Marshal(r.Parameters); err == nil {
				msg = append(msg, `,"p":`...)
				msg = append(msg, p...)
			}
		}
		if r.Sender != nil {
			msg = append(msg, `,"rk":`...)
			msg = strconv.AppendUint(msg, in.senders.add(r.Sender), 10)
		}
		msg = append(msg, '}')
	}
	msg = append(msg, "]}"...)
	in.msg = msg

	flags := watchCancel(reqs, sent, in.shm.buf[cancelOff:cancelOff+len(sent)])
	rep, err := in.roundTrip(ctx, msg)
	flags.stop()
	if err != nil {
		in.senders.dropBatch(reqs)
		return nil, err
	}
	if err := in.shm.follow(rep.Shm); err != nil {
		return nil, backend.Errorf(backend.Internal, "python model %q: %w", in.spec.Name, err)
	}
	if rep.Err != "" {
		// execute raised (or returned something unusable): the whole
		// batch fails with the model's message.
		e := backend.Errorf(backend.Internal, "%s", rep.Err)
		if reqs[0].Sender != nil {
			// The scheduler ends the requests still open with it.
			in.senders.dropBatch(reqs)
			return nil, e
		}
		for _, i := range sent {
			resps[i] = &backend.Response{Err: e}
		}
		return resps, nil
	}
	if len(rep.Resps) != len(sent) {
		return nil, backend.Errorf(backend.Internal, "python model %q: stub answered %d responses for %d requests",
			in.spec.Name, len(rep.Resps), len(sent))
	}
	for k, i := range sent {
		rr := rep.Resps[k]
		if rr.Resched {
			resps[i] = &backend.Response{Reschedule: true}
			continue
		}
		if rr.None {
			continue // a decoupled model answers through the sender
		}
		if rr.Err != "" || rr.Code != nil {
			resps[i] = &backend.Response{Err: &backend.Error{Code: tritonErrorCode(rr.Code), Msg: rr.Err}}
			continue
		}
		resps[i] = in.collect(reqs[i], rr.Out, in.shm.buf)
		if resps[i].Err == nil && len(rr.Params) > 0 {
			resps[i].Parameters = rr.Params
		}
	}
	return resps, nil
}

// roundTrip sends one exec frame and reads its reply, handling a dead,
// hung or interrupted stub. Called with mu held.
func (in *Instance) roundTrip(ctx context.Context, msg []byte) (*execReply, error) {
	proc := in.proc
	// The reader counts the reply off when it arrives (startReader), not
	// this function once it has it: the reader goes back to the pipe at
	// once, and would otherwise poll for a reply that is not coming.
	proc.ch.expect.Add(1)
	if err := proc.ch.send(msg); err != nil {
		return nil, in.stubFailed(proc, "receiving a batch", err)
	}
	var deadline time.Time
	if in.set.executeTimeout > 0 {
		deadline = time.Now().Add(in.set.executeTimeout)
	}
	for {
		frame, err := proc.await(ctx, deadline)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				// The caller gave up; the stub keeps working on the batch,
				// and the next Execute waits for its reply (awaitLate).
				proc.late, proc.lateBy = in.seq, deadline
				return nil, fmt.Errorf("python model %q instance %d: %w", in.spec.Name, in.idx, err)
			}
			return nil, in.stubFailed(proc, "running execute", err)
		}
		rep := new(execReply)
		if err := decodeExecReply(frame, rep); err != nil {
			return nil, in.stubFailed(proc, "running execute", fmt.Errorf("unreadable reply %q: %w", truncate(frame, 200), err))
		}
		if rep.Seq < in.seq {
			continue // reply to a batch whose caller went away
		}
		return rep, nil
	}
}

// awaitLate waits, before a batch is laid out, for the reply to a batch
// whose caller gave up while the stub ran it. The stub still writes that
// batch's outputs where its frame said, which is where the next batch's
// inputs go (the region is laid out from its start for every batch), so
// without the wait a larger next batch reached the model with inputs
// overwritten. The wait costs the next batch nothing the stub's
// one-batch-at-a-time order does not already: the stub cannot start it
// sooner. A stub that fails or passes the abandoned batch's execute
// timeout meanwhile is restarted, and the next batch goes to the new one.
// ctx ending first leaves the batch outstanding. Called with mu held and
// the stub running.
func (in *Instance) awaitLate(ctx context.Context) error {
	for in.proc.late != 0 {
		proc := in.proc
		frame, err := proc.await(ctx, proc.lateBy)
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return fmt.Errorf("python model %q instance %d: %w", in.spec.Name, in.idx, err)
		}
		var rep execReply
		if err == nil {
			if derr := decodeExecReply(frame, &rep); derr != nil {
				err = fmt.Errorf("unreadable reply %q: %w", truncate(frame, 200), derr)
			}
		}
		if err != nil {
			in.log.Warn("python stub failed running a batch whose caller had given up", "err", in.stubFailed(proc, "running execute", err))
			if err := in.ensureRunning(ctx); err != nil {
				return err
			}
			continue
		}
		if rep.Seq < proc.late {
			continue // an earlier abandoned batch's
		}
		proc.late, proc.lateBy = 0, time.Time{}
		// Outputs written before the reply may have grown the region.
		if err := in.shm.follow(rep.Shm); err != nil {
			return backend.Errorf(backend.Internal, "python model %q: %w", in.spec.Name, err)
		}
	}
	return nil
}

// stubFailed kills what is left of the stub, schedules a restart and
// returns the error for the batch. Called with mu held.
func (in *Instance) stubFailed(proc *stubProc, what string, err error) error {
	var timeout time.Duration
	if errors.Is(err, errTimeout) {
		timeout = in.set.executeTimeout
	}
	desc := proc.failure(what, timeout, err)
	proc.kill()
	in.proc = nil
	in.restartSoon()
	in.log.Warn("python stub failed; restarting it", "err", desc)
	return backend.Errorf(backend.Internal, "python model %q instance %d: %w; the stub is being restarted",
		in.spec.Name, in.idx, desc)
}

// collect copies one response's outputs out of the shared region; the
// region is reused by the next batch. An output keeps the data type the
// model gave it even where the config declares another: Triton's python
// backend passes it through too (python_backend's bls_decoupled example
// returns an int64 SUM declared TYPE_INT32, and its clients read it).
func (in *Instance) collect(req *backend.Request, outs []wireTensor, buf []byte) *backend.Response {
	resp := &backend.Response{Outputs: make([]backend.Tensor, 0, len(outs))}
	fail := func(format string, args ...any) *backend.Response {
		return &backend.Response{Err: backend.Errorf(backend.Internal, "python model %q: "+format, append([]any{in.spec.Name}, args...)...)}
	}
	for _, o := range outs {
		dt := backend.DataType(o.Type)
		if !dt.Valid() {
			return fail("output %q has unknown data type %q", o.Name, o.Type)
		}
		if o.Off < 0 || o.Len < 0 || o.Off+o.Len > len(buf) {
			return fail("output %q lies outside its buffer (%d+%d > %d)", o.Name, o.Off, o.Len, len(buf))
		}
		t := backend.Tensor{Name: o.Name, DataType: dt, Shape: o.Shape}
		if dt != backend.Bytes && int64(o.Len) != t.NumElements()*int64(dt.Size()) {
			return fail("output %q: %d bytes for shape %v of %s", o.Name, o.Len, o.Shape, dt)
		}
		t.Data = make([]byte, o.Len)
		copy(t.Data, buf[o.Off:o.Off+o.Len])
		resp.Outputs = append(resp.Outputs, t)
	}
	names := req.Outputs
	if len(names) == 0 {
		names = in.outputNames
	}
	for _, n := range names {
		found := false
		for i := range resp.Outputs {
			if resp.Outputs[i].Name == n {
				found = true
				break
			}
		}
		if !found {
			return fail("execute returned no output %q for a request that asked for it", n)
		}
	}
	return resp
}

// batchInputs returns, when the model has batch inputs, the inputs of each
// request in sent (by its index there) followed by its piece of every
// batch input (backend.BatchInput.Pieces), the batch being the requests
// sent together; model.py reads them with get_input_tensor_by_name like
// any input. nil when the model has none.
func (in *Instance) batchInputs(reqs []*backend.Request, sent []int) ([][]backend.Tensor, error) {
	if len(in.spec.BatchInputs) == 0 {
		return nil, nil
	}
	batch := make([]*backend.Request, len(sent))
	for k, i := range sent {
		batch[k] = reqs[i]
	}
	extra := make([][]backend.Tensor, len(sent))
	for k, r := range batch {
		extra[k] = slices.Clip(r.Inputs) // appends below copy, leaving the request's own slice alone
	}
	for b := range in.spec.BatchInputs {
		bi := &in.spec.BatchInputs[b]
		pieces, err := bi.Pieces(batch, in.spec.MaxBatchSize > 0)
		if err != nil {
			return nil, backend.Errorf(backend.InvalidArg, "python model %q: %w", in.spec.Name, err)
		}
		for k := range batch {
			for _, name := range bi.Targets {
				t := pieces[k]
				t.Name = name
				extra[k] = append(extra[k], t)
			}
		}
	}
	return extra, nil
}

// checkRequest rejects what numpy could not represent, so that a bad
// request fails alone instead of taking the batch down in the stub.
func checkRequest(r *backend.Request) error {
	for i := range r.Inputs {
		t := &r.Inputs[i]
		switch {
		case !t.DataType.Valid():
			return backend.Errorf(backend.InvalidArg, "input %q: unknown data type %q", t.Name, t.DataType)
		case t.DataType == backend.Bytes:
			if err := checkBytes(t); err != nil {
				return err
			}
		default:
			if want := t.NumElements() * int64(t.DataType.Size()); int64(len(t.Data)) != want {
				return backend.Errorf(backend.InvalidArg, "input %q: %d bytes for shape %v of %s (want %d)",
					t.Name, len(t.Data), t.Shape, t.DataType, want)
			}
		}
		for _, d := range t.Shape {
			if d < 0 {
				return backend.Errorf(backend.InvalidArg, "input %q: negative dimension in shape %v", t.Name, t.Shape)
			}
		}
	}
	return nil
}

// checkBytes verifies the length-prefixed BYTES encoding and element count.
func checkBytes(t *backend.Tensor) error {
	var n int64
	data := t.Data
	for len(data) > 0 {
		if len(data) < 4 {
			return backend.Errorf(backend.InvalidArg, "input %q: BYTES data ends inside an element length", t.Name)
		}
		l := binary.LittleEndian.Uint32(data)
		if uint64(len(data)-4) < uint64(l) {
			return backend.Errorf(backend.InvalidArg, "input %q: BYTES element %d claims %d bytes, %d remain", t.Name, n, l, len(data)-4)
		}
		data = data[4+int(l):]
		n++
	}
	if n != t.NumElements() {
		return backend.Errorf(backend.InvalidArg, "input %q: %d BYTES elements for shape %v", t.Name, n, t.Shape)
	}
	return nil
}

// tritonErrorCode maps pb_utils.TritonError codes to backend codes, so
// that clients see the HTTP status and gRPC code Triton gives each
// (TritonError's default is INTERNAL).
func tritonErrorCode(code *int) backend.Code {
	if code == nil {
		return backend.Internal
	}
	switch *code {
	case 0:
		return backend.Unknown
	case 7:
		return backend.Cancelled
	case 2:
		return backend.NotFound
	case 3:
		return backend.InvalidArg
	case 4:
		return backend.Unavailable
	case 5:
		return backend.Unsupported
	case 6:
		return backend.AlreadyExists
	}
	return backend.Internal
}

// cancelFlags sets a request's byte in the shared region when its client
// gives up while execute runs; stop ends that before the region can be
// remapped.
type cancelFlags struct {
	mu      sync.Mutex
	flags   []byte
	stopped bool
	stops   []func() bool
}

// watchCancel watches the contexts of the sent requests; flags[k] is the
// byte of reqs[sent[k]].
func watchCancel(reqs []*backend.Request, sent []int, flags []byte) *cancelFlags {
	c := &cancelFlags{flags: flags}
	for k, i := range sent {
		ctx := reqs[i].Ctx
		if ctx == nil || ctx.Done() == nil {
			continue
		}
		c.stops = append(c.stops, context.AfterFunc(ctx, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.stopped {
				c.flags[k] = 1
			}
		}))
	}
	return c
}

func (c *cancelFlags) stop() {
	for _, s := range c.stops {
		s()
	}
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
}

// appendJSONString appends s as a JSON string; names are almost always
// plain ASCII, which skips the general encoder.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Close runs model.py's finalize, stops the stub and releases the shared
// memory. It returns finalize's error, if any.
func (in *Instance) Close() error {
	in.unload()
	defer in.sched.leave(in, in.spec, in.warnSched) // last: once the stub is gone
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil
	}
	in.closed = true
	defer in.env.Release() // last: after the stub is gone
	if in.retry != nil {
		in.retry.Stop()
		in.retry = nil
	}
	defer func() { _ = in.shm.close() }() // the region is ours alone; a failed unmap or unlink leaks nothing the next start reuses
	proc := in.proc
	in.proc = nil
	if proc == nil || !proc.alive() {
		if proc != nil {
			proc.kill()
		}
		return nil
	}
	defer proc.kill()
	if err := proc.ch.send([]byte(`{"op":"fini"}`)); err != nil {
		return fmt.Errorf("python model %q instance %d: finalize: %w", in.spec.Name, in.idx, err)
	}
	deadline := time.Now().Add(in.set.stubTimeout)
	for {
		frame, err := proc.await(context.Background(), deadline)
		if err != nil {
			return fmt.Errorf("python model %q instance %d: finalize: %w", in.spec.Name, in.idx, proc.failure("finalizing", in.set.stubTimeout, err))
		}
		var rep struct {
			Seq *uint64 `json:"seq"`
			Err string  `json:"err"`
		}
		if err := json.Unmarshal(frame, &rep); err != nil {
			return fmt.Errorf("python model %q instance %d: finalize: unreadable reply %q", in.spec.Name, in.idx, truncate(frame, 200))
		}
		if rep.Seq != nil {
			continue // late reply to an abandoned batch
		}
		// Give the stub a moment to exit by itself before kill.
		select {
		case <-proc.exited:
		case <-time.After(in.set.stubTimeout):
		}
		if rep.Err != "" {
			return fmt.Errorf("python model %q instance %d: %s", in.spec.Name, in.idx, rep.Err)
		}
		return nil
	}
}
