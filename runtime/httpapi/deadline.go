package httpapi

import (
	"net"
	"sync"
	"time"
)

// lazyListener hands out connections whose read deadlines reach the socket
// only when a read needs them.
//
// net/http moves a connection's read deadline several times per request
// (the idle timeout before the next request, the header timeout, none
// once the headers are in, a past one to stop its background read), and
// the body's pacing adds two more. Each move of a socket deadline adds,
// changes or deletes a runtime timer, and adding one that is earlier than
// what the network poller sleeps for wakes the poller's thread, usually
// on the other core. For a small request all of it is read in one go with
// the headers, so most of those deadlines govern no read at all. A
// deadline only ever matters to a read, so holding it until the next read
// starts, or applying it at once when a read is waiting, keeps every
// bound while the socket sees only the deadline each read runs under.
//
// It also bounds the connections open at once, as netutil.LimitListener
// does: a connection of that listener does not pass CloseWrite on, which
// net/http needs (see lazyConn.CloseWrite).
type lazyListener struct {
	net.Listener
	slots chan struct{} // one per open connection; nil: no bound
	done  chan struct{} // closed with the listener: stops a wait for a slot
	once  sync.Once
}

func (l *lazyListener) Accept() (net.Conn, error) {
	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			// Closed: the listener's own Accept returns its error at once.
			for {
				c, err := l.Listener.Accept()
				if err != nil {
					return nil, err
				}
				_ = c.Close()
			}
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	return &lazyConn{Conn: c, l: l}, nil
}

func (l *lazyListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// release frees a connection's slot.
func (l *lazyListener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

// lazyConn is a connection whose read deadline is applied to the socket
// when a read starts, or at once if a read is in progress (net/http stops
// its background read that way). Write deadlines go through unchanged.
type lazyConn struct {
	net.Conn
	l       *lazyListener // nil when the connection holds no slot
	closed  sync.Once
	mu      sync.Mutex
	reading int       // reads in progress
	want    time.Time // the read deadline last asked for
	set     time.Time // the one the socket has
}

func (c *lazyConn) Close() error {
	err := c.Conn.Close()
	if c.l != nil {
		c.closed.Do(c.l.release)
	}
	return err
}

// CloseWrite half-closes the socket. net/http does so before it closes a
// connection whose request body it will not read (a body over the size
// limit, say): the client reads the answer and then the end of the
// stream, instead of a reset when the unread bytes meet the close.
// Without it on the connection net/http hands its handlers, that case
// ended in ECONNRESET for clients that read after sending.
func (c *lazyConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// apply gives the socket the wanted deadline; c.mu is held.
func (c *lazyConn) apply() error {
	if c.want.Equal(c.set) {
		return nil
	}
	if err := c.Conn.SetReadDeadline(c.want); err != nil {
		return err
	}
	c.set = c.want
	return nil
}

func (c *lazyConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if err := c.apply(); err != nil {
		// The read would not be bounded; a closed socket says so here.
		c.mu.Unlock()
		return 0, err
	}
	c.reading++
	c.mu.Unlock()
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.reading--
	c.mu.Unlock()
	return n, err
}

func (c *lazyConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = t
	if c.reading == 0 {
		return nil
	}
	return c.apply()
}

func (c *lazyConn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}
