package python

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxFrame bounds the JSON part of one control frame. It carries names,
// shapes and offsets, never tensor bytes, so anything near this size is a
// protocol fault.
const maxFrame = 64 << 20

// maxPayload bounds the binary part of one frame: the tensors of a BLS
// request or response, or of one response of a decoupled model, which
// travel through the pipe rather than the shared region (the region holds
// the batch in flight). Execute's own inputs and outputs never use it.
const maxPayload = 1 << 30

// errTimeout reports that the stub did not answer within the allowed time.
var errTimeout = errors.New("timed out")

// channel carries control frames over two pipes: a 4-byte little-endian
// JSON length, a 4-byte payload length, the JSON object, then the payload
// (usually empty). Reads honour a deadline and a context without a
// helper goroutine: the pipes are registered with Go's poller, so a read
// deadline interrupts a blocked read. Partial frames survive an interrupted
// read, so a frame that arrives late can still be read and discarded.
type channel struct {
	w *os.File // server -> stub
	r *os.File // stub -> server

	buf        []byte // unread bytes are buf[start:end]
	start, end int

	wmu  sync.Mutex // one writer at a time: Execute, and replies to the stub's calls
	wbuf []byte

	// expect counts the exec replies the server waits for; reads poll
	// (see poll) only while it is positive, so an idle stub costs no
	// polling. Execute adds one per batch sent, the reader takes one off
	// per reply received (gotReply).
	expect atomic.Int32

	mu  sync.Mutex // guards gen against a late context callback
	gen uint64

	// poll is how long a read polls before parking (see KeyPollMicros);
	// raw reaches the pipe's descriptor for that.
	poll    time.Duration
	raw     syscall.RawConn
	budget  *spinBudget // shared with the backend's other channels; nil: no limit
	backoff pollBackoff // the reader's: whether it polls after meeting contention
	window  pollWindow  // the reader's: how long its next poll lasts

	// bell holds both sides' counts of bytes written (doorbell.go): a
	// poll watches the stub's count and reads the pipe only once it moved
	// past got, the bytes read so far. got belongs to the reader.
	bell *doorbell
	got  uint64

	// afterReply is set by the reader once it has a reply: the next batch
	// usually follows within the scheduler's turnaround, and its frame is
	// sent while the reader already waits, so that wait polls too (one
	// window, see pollWindow) even though expect is back at zero.
	afterReply bool
	// polling is set while this channel's reader holds a spin-budget slot,
	// so that its own stub's permission to poll does not count it: the
	// stub polls after its reply, when its reader is waiting for the next
	// one rather than competing with a computing stub.
	polling atomic.Bool
}

func newChannel(w, r *os.File, bell *doorbell) *channel {
	return &channel{w: w, r: r, buf: make([]byte, 64<<10), bell: bell}
}

// send writes one frame without payload with a single write call. body
// must not already include the length prefix.
func (c *channel) send(body []byte) error { return c.sendPayload(body, nil) }

// sendPayload writes one frame: body, then payload.
func (c *channel) sendPayload(body, payload []byte) error {
	if len(payload) > maxPayload {
		return fmt.Errorf("a %d-byte frame payload is over the limit of %d bytes", len(payload), maxPayload)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = binary.LittleEndian.AppendUint32(c.wbuf[:0], uint32(len(body)))
	c.wbuf = binary.LittleEndian.AppendUint32(c.wbuf, uint32(len(payload)))
	c.wbuf = append(c.wbuf, body...)
	if len(payload) <= 64<<10 {
		c.wbuf = append(c.wbuf, payload...)
		payload = nil
	}
	// Each write is counted once it is in the pipe: the stub reads only
	// what the count promises, so counting before the write could send it
	// into a read that finds nothing.
	n, err := c.w.Write(c.wbuf)
	c.bell.count(bellToStub).Add(uint64(n))
	if err != nil || len(payload) == 0 {
		return err
	}
	n, err = c.w.Write(payload)
	c.bell.count(bellToStub).Add(uint64(n))
	return err
}

// recv returns the next frame's JSON; its payload, if any, is dropped
// (see recvPayload). The returned slice is valid until the next recv. It fails with errTimeout when deadline (if not zero) passes, with
// ctx's error when ctx ends first, and with io.EOF when the stub closed its
// end (it exited).
func (c *channel) recv(ctx context.Context, deadline time.Time) ([]byte, error) {
	frame, _, err := c.recvPayload(ctx, deadline)
	return frame, err
}

// recvPayload is recv that also returns the frame's payload, a fresh slice
// the caller owns (nil when empty).
func (c *channel) recvPayload(ctx context.Context, deadline time.Time) ([]byte, []byte, error) {
	if err := c.r.SetReadDeadline(deadline); err != nil {
		return nil, nil, fmt.Errorf("setting read deadline: %w", err)
	}
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gen == gen {
			_ = c.r.SetReadDeadline(time.Unix(1, 0)) // a pipe without deadlines is closed by the stub's death instead
		}
	})
	frame, payload, err := c.readFrame()
	stop()
	c.mu.Lock()
	c.gen++ // disarm a callback that may still be running
	c.mu.Unlock()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, errTimeout
	}
	return frame, payload, err
}

// setPoll makes reads poll for up to d before parking; 0 turns it off.
func (c *channel) setPoll(d time.Duration) error {
	if d > 0 && c.raw == nil {
		raw, err := c.r.SyscallConn()
		if err != nil {
			return fmt.Errorf("polling the stub's pipe: %w", err)
		}
		c.raw = raw
	}
	c.poll = d
	return nil
}

// read is c.r.Read, polling first when c.poll is set, and counts what it
// read in c.got.
func (c *channel) read(p []byte) (int, error) {
	n, err := c.pollRead(p)
	c.got += uint64(n)
	return n, err
}

// pollRead is c.r.Read, polling first when c.poll is set. Parking a
// goroutine on an empty pipe lets its CPU go idle, and on the VMs this
// runs on an idle CPU takes ~25 us to wake: more than a one-row execute
// costs. A poll watches the stub's count on the doorbell page and tries
// the pipe only once that count says bytes are there: a read(2) that
// finds nothing is a kernel entry, which on these VMs costs more than
// the memory load. Polling yields to runnable goroutines between
// attempts, only a read granted by the spin budget polls at all, and a
// poll that finds its CPU taken by other work stops and backs off
// (pollFor, pollBackoff), so it spends CPU time nothing else wants; past
// c.poll it parks as usual, with the read deadline in force.
func (c *channel) pollRead(p []byte) (int, error) {
	after := c.afterReply
	c.afterReply = false
	if c.poll <= 0 || (c.expect.Load() <= 0 && !after) || !c.backoff.allow() {
		return c.r.Read(p)
	}
	if !c.budget.acquire() {
		return c.r.Read(p)
	}
	c.polling.Store(true)
	// The slot is held while the read polls and given back before it
	// parks: a parked read returns only when its next frame comes, for an
	// idle instance maybe never, and a slot kept that long took a core
	// from the budget. With one client's load on one instance of four,
	// neither that instance's stub nor its reader was then let poll, and
	// every request paid two wake-ups (docs/performance.md,
	// "Twenty-second machine").
	held := true
	unhold := func() {
		if held {
			held = false
			c.polling.Store(false)
			c.budget.release()
		}
	}
	defer unhold()
	var n int
	var rerr error
	polled := false
	start := time.Now()
	defer func() { c.window.observe(time.Since(start), c.poll) }()
	err := c.raw.Read(func(fd uintptr) bool {
		try := func() bool {
			for {
				n, rerr = syscall.Read(int(fd), p)
				if rerr != syscall.EINTR {
					return rerr != syscall.EAGAIN
				}
			}
		}
		if polled { // woken by the poller after the poll gave up
			return try()
		}
		polled = true
		// Nothing counted that is not read yet: nothing to try.
		ready := func() bool { return c.bell.count(bellToServer).Load() > c.got && try() }
		o := pollFor(c.window.next(c.poll), time.Now, runtime.Gosched, ready)
		c.backoff.observe(o)
		if o == pollAtOnce || o == pollGot {
			return true
		}
		unhold() // polling is over; the read may park
		// The poller is edge-triggered and forgot any edge from before
		// this read began: only a read(2) that finds the pipe empty makes
		// sure the next bytes wake it. Bytes written before the stub's
		// count moved (the stub lost its CPU in between) would otherwise
		// wait for the next frame.
		return try()
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, &os.PathError{Op: "read", Path: c.r.Name(), Err: rerr}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// gotReply counts off one awaited reply. Only the reader calls it, so the
// check and the decrement cannot race with another decrement; replies to
// frames nobody counted (init, finalize) leave the count at zero.
func (c *channel) gotReply() {
	if c.expect.Load() > 0 {
		c.expect.Add(-1)
		c.afterReply = true
	}
}

func (c *channel) readFrame() ([]byte, []byte, error) {
	for {
		if avail := c.end - c.start; avail >= 8 {
			n := int(binary.LittleEndian.Uint32(c.buf[c.start:]))
			pl := int(binary.LittleEndian.Uint32(c.buf[c.start+4:]))
			if n > maxFrame {
				return nil, nil, fmt.Errorf("stub sent a %d-byte control frame (limit %d)", n, maxFrame)
			}
			if pl > maxPayload {
				return nil, nil, fmt.Errorf("stub sent a %d-byte frame payload (limit %d)", pl, maxPayload)
			}
			if avail >= 8+n {
				frame := c.buf[c.start+8 : c.start+8+n]
				if pl == 0 {
					c.start += 8 + n
					return frame, nil, nil
				}
				// The payload is read straight into a slice of its own;
				// the frame stays valid in buf until the next read.
				payload := make([]byte, pl)
				got := copy(payload, c.buf[c.start+8+n:c.end])
				c.start += 8 + n + got
				for got < pl {
					k, err := c.read(payload[got:])
					got += k
					if err != nil {
						if errors.Is(err, io.EOF) {
							return nil, nil, io.ErrUnexpectedEOF
						}
						return nil, nil, err
					}
				}
				return frame, payload, nil
			}
			if need := 8 + n; need > len(c.buf) {
				grown := make([]byte, need)
				c.end = copy(grown, c.buf[c.start:c.end])
				c.start, c.buf = 0, grown
			}
		}
		if c.start > 0 && c.end == len(c.buf) || c.start == c.end {
			c.end = copy(c.buf, c.buf[c.start:c.end])
			c.start = 0
		}
		n, err := c.read(c.buf[c.end:])
		c.end += n
		if err != nil {
			if errors.Is(err, io.EOF) && c.end-c.start > 0 {
				return nil, nil, io.ErrUnexpectedEOF
			}
			return nil, nil, err
		}
	}
}

func (c *channel) close() {
	c.w.Close()
	c.r.Close()
}
