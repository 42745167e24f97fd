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
	"syscall"
	"time"
)

// maxFrame bounds one control frame. Frames carry names, shapes and offsets,
// never tensor bytes, so anything near this size is a protocol fault.
const maxFrame = 64 << 20

// errTimeout reports that the stub did not answer within the allowed time.
var errTimeout = errors.New("timed out")

// channel carries control frames (4-byte little-endian length, then a JSON
// object) over two pipes. Reads honour a deadline and a context without a
// helper goroutine: the pipes are registered with Go's poller, so a read
// deadline interrupts a blocked read. Partial frames survive an interrupted
// read, so a frame that arrives late can still be read and discarded.
type channel struct {
	w *os.File // server -> stub
	r *os.File // stub -> server

	buf        []byte // unread bytes are buf[start:end]
	start, end int
	wbuf       []byte

	mu  sync.Mutex // guards gen against a late context callback
	gen uint64

	// poll is how long a read polls the pipe before parking (see
	// KeyPollMicros); raw reaches the pipe's descriptor for that.
	poll   time.Duration
	raw    syscall.RawConn
	budget *spinBudget // shared with the backend's other channels; nil: no limit
}

func newChannel(w, r *os.File) *channel {
	return &channel{w: w, r: r, buf: make([]byte, 64<<10)}
}

// send writes one frame with a single write call. body must not already
// include the length prefix.
func (c *channel) send(body []byte) error {
	c.wbuf = binary.LittleEndian.AppendUint32(c.wbuf[:0], uint32(len(body)))
	c.wbuf = append(c.wbuf, body...)
	_, err := c.w.Write(c.wbuf)
	return err
}

// recv returns the next frame. The returned slice is valid until the next
// recv. It fails with errTimeout when deadline (if not zero) passes, with
// ctx's error when ctx ends first, and with io.EOF when the stub closed its
// end (it exited).
func (c *channel) recv(ctx context.Context, deadline time.Time) ([]byte, error) {
	if err := c.r.SetReadDeadline(deadline); err != nil {
		return nil, fmt.Errorf("setting read deadline: %w", err)
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
	frame, err := c.readFrame()
	stop()
	c.mu.Lock()
	c.gen++ // disarm a callback that may still be running
	c.mu.Unlock()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errTimeout
	}
	return frame, err
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

// read is c.r.Read, polling first when c.poll is set. Parking a goroutine
// on an empty pipe lets its CPU go idle, and on the VMs this runs on an idle
// CPU takes ~25 us to wake: more than a one-row execute costs. Polling
// yields to runnable goroutines between attempts, and only a read granted
// by the spin budget polls at all, so it spends CPU time nothing else
// wants; past c.poll it parks as usual, with the read deadline in force.
func (c *channel) read(p []byte) (int, error) {
	if c.poll <= 0 || !c.budget.acquire() {
		return c.r.Read(p)
	}
	defer c.budget.release()
	var n int
	var rerr error
	until := time.Now().Add(c.poll)
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			switch {
			case rerr == syscall.EINTR:
				continue
			case rerr != syscall.EAGAIN:
				return true
			case !time.Now().Before(until):
				return false
			}
			runtime.Gosched()
		}
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

func (c *channel) readFrame() ([]byte, error) {
	for {
		if avail := c.end - c.start; avail >= 4 {
			n := int(binary.LittleEndian.Uint32(c.buf[c.start:]))
			if n > maxFrame {
				return nil, fmt.Errorf("stub sent a %d-byte control frame (limit %d)", n, maxFrame)
			}
			if avail >= 4+n {
				frame := c.buf[c.start+4 : c.start+4+n]
				c.start += 4 + n
				return frame, nil
			}
			if need := 4 + n; need > len(c.buf) {
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
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

func (c *channel) close() {
	c.w.Close()
	c.r.Close()
}
