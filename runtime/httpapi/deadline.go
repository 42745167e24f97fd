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
type lazyListener struct{ net.Listener }

func (l lazyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lazyConn{Conn: c}, nil
}

// lazyConn is a connection whose read deadline is applied to the socket
// when a read starts, or at once if a read is in progress (net/http stops
// its background read that way). Write deadlines go through unchanged.
type lazyConn struct {
	net.Conn
	mu      sync.Mutex
	reading int       // reads in progress
	want    time.Time // the read deadline last asked for
	set     time.Time // the one the socket has
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
