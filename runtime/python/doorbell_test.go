package python

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"
)

// pipeChannel is a channel as startStub builds one, with the test playing
// the stub: it reads what the channel sends from toStub and writes the
// stub's frames into fromStub.
func pipeChannel(t *testing.T) (c *channel, toStub, fromStub *os.File) {
	t.Helper()
	bell, bellFile, err := newDoorbell()
	if err != nil {
		t.Fatal(err)
	}
	bellFile.Close()
	toStubR, toStubW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromStubR, fromStubW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c = newChannel(toStubW, fromStubR, bell)
	t.Cleanup(func() {
		c.close()
		toStubR.Close()
		fromStubW.Close()
	})
	return c, toStubR, fromStubW
}

// frame is one stub frame without payload, as the stub writes it.
func frame(body string) []byte {
	b := []byte{byte(len(body)), 0, 0, 0, 0, 0, 0, 0}
	return append(b, body...)
}

func TestDoorbellCountsEveryByteSent(t *testing.T) {
	c, toStub, _ := pipeChannel(t)
	big := make([]byte, 70<<10) // over what goes out with the frame in one write
	want := uint64(8+len(`{"op":"exec"}`)) + uint64(8+2+len(big))
	// The pipe holds less than the big payload: its write returns only
	// once the stub has read the rest.
	done := make(chan int64)
	go func() {
		n, _ := ioCopyN(toStub, int64(want))
		done <- n
	}()
	if err := c.send([]byte(`{"op":"exec"}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.sendPayload([]byte(`{}`), big); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != int64(want) {
		t.Fatalf("the stub's pipe got %d bytes, want %d", n, want)
	}
	if got := c.bell.count(bellToStub).Load(); got != want {
		t.Fatalf("the doorbell counts %d bytes sent, the pipe got %d", got, want)
	}
}

// ioCopyN reads exactly n bytes from f and throws them away.
func ioCopyN(f *os.File, n int64) (int64, error) {
	buf := make([]byte, 32<<10)
	var got int64
	for got < n {
		k, err := f.Read(buf[:min(int64(len(buf)), n-got)])
		got += int64(k)
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// A poll reads the pipe only once the stub's count says bytes are there,
// and counts what it read.
func TestPollReadsWhatTheDoorbellCounts(t *testing.T) {
	c, _, fromStub := pipeChannel(t)
	if err := c.setPoll(time.Second); err != nil {
		t.Fatal(err)
	}
	c.expect.Add(1)
	f := frame(`{"seq":1}`)
	go func() {
		if _, err := fromStub.Write(f); err == nil {
			c.bell.count(bellToServer).Add(uint64(len(f)))
		}
	}()
	got, err := c.recv(context.Background(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"seq":1}` {
		t.Fatalf("read %q", got)
	}
	if c.got != uint64(len(f)) {
		t.Fatalf("the reader counts %d bytes read, want %d", c.got, len(f))
	}
}

// Bytes in the pipe that the stub has not counted yet (it lost its CPU
// between its write and its count) still arrive when the poll gives up:
// the poller is edge-triggered, so the poll must end with a read that
// finds the pipe empty before it parks, or such bytes would wait for the
// next frame (here: forever).
func TestPollFindsBytesTheDoorbellMissed(t *testing.T) {
	c, _, fromStub := pipeChannel(t)
	if err := c.setPoll(200 * time.Microsecond); err != nil {
		t.Fatal(err)
	}
	c.expect.Add(1)
	if _, err := fromStub.Write(frame(`{"seq":2}`)); err != nil {
		t.Fatal(err)
	}
	// Not synchronisation: a pause in which the runtime's poller sees the
	// pipe's edge and forgets it before the read begins, the case that
	// used to hang. The test passes however long it is.
	time.Sleep(20 * time.Millisecond)
	got, err := c.recv(context.Background(), time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatalf("uncounted bytes were not read: %v", err)
	}
	if string(got) != `{"seq":2}` {
		t.Fatalf("read %q", got)
	}
}

// The reader takes an awaited reply off expect itself, so it stops polling
// as soon as the reply is in: frames nobody counted leave expect alone.
func TestGotReplyStopsAtZero(t *testing.T) {
	var c channel
	c.gotReply()
	if n := c.expect.Load(); n != 0 {
		t.Fatalf("a reply nobody waited for made expect %d", n)
	}
	c.expect.Add(2)
	c.gotReply()
	if n := c.expect.Load(); n != 1 {
		t.Fatalf("expect %d after one of two replies, want 1", n)
	}
}

// The stub's process can write anything into the doorbell page (model.py
// runs there). A count that runs ahead of the pipe costs polling, never a
// frame: the poll's tries find the pipe empty, it parks when its window
// ends, and the frame arrives when it is written.
func TestPollSurvivesAGarbageCount(t *testing.T) {
	c, _, fromStub := pipeChannel(t)
	if err := c.setPoll(200 * time.Microsecond); err != nil {
		t.Fatal(err)
	}
	c.expect.Add(1)
	c.bell.count(bellToServer).Store(1 << 62)
	go func() {
		// Later than the poll window, whenever the scheduler runs this.
		time.Sleep(5 * time.Millisecond)
		_, _ = fromStub.Write(frame(`{"seq":3}`))
	}()
	got, err := c.recv(context.Background(), time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatalf("a garbage count lost the frame: %v", err)
	}
	if string(got) != `{"seq":3}` {
		t.Fatalf("read %q", got)
	}
}

// A read holds its spin-budget slot while it polls, not once the poll
// gave up and the read parked: an idle instance's reader would otherwise
// keep a core of the budget until its next frame, and the busy
// instance's stub and reader were then refused polling.
func TestParkedReadGivesBackItsSpinSlot(t *testing.T) {
	c, _, fromStub := pipeChannel(t)
	c.budget = newSpinBudget(2)
	// A window long enough to see the poll hold its slot.
	if err := c.setPoll(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c.expect.Add(1)
	got := make(chan error, 1)
	go func() {
		_, err := c.recv(context.Background(), time.Now().Add(time.Minute))
		got <- err
	}()
	// The read polls, holding a slot. A busy machine may cut the poll
	// short (pollGap) before this looks; a slot kept past the poll is
	// still seen below.
	for start := time.Now(); time.Since(start) < time.Second; runtime.Gosched() {
		if c.polling.Load() {
			// polling is set after the slot is taken and cleared before
			// it is given back.
			if n := c.budget.spinning.Load(); n != 1 && c.polling.Load() {
				t.Fatalf("a polling read holds %d spin slots, want 1", n)
			}
			break
		}
	}
	// Past its window the read parks.
	deadline := time.Now().Add(5 * time.Second)
	for c.budget.spinning.Load() != 0 || c.polling.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("a read parked past its %v poll still holds a spin slot (spinning %d)", c.poll, c.budget.spinning.Load())
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-got:
		t.Fatalf("the read ended with no frame sent: %v", err)
	default:
	}
	// Both other slots are free for the busy instances meanwhile.
	for k := range 2 {
		if !c.budget.acquire() {
			t.Fatalf("the budget of 2 refused poll %d while one read was parked", k+1)
		}
	}
	c.budget.release()
	c.budget.release()
	f := frame(`{"seq":3}`)
	if _, err := fromStub.Write(f); err != nil {
		t.Fatal(err)
	}
	c.bell.count(bellToServer).Add(uint64(len(f)))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := c.budget.spinning.Load(); n != 0 {
		t.Fatalf("spinning %d after the read ended, want 0 (a slot given back twice or kept)", n)
	}
}
