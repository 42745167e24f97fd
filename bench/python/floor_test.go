package main

import (
	"testing"
	"time"
)

func TestBestBatch(t *testing.T) {
	for _, c := range []struct{ conc, max, want int }{
		{1, 32, 1}, {2, 32, 1}, {16, 32, 8}, {17, 32, 8}, {128, 32, 32}, {16, 4, 4},
	} {
		if got := bestBatch(c.conc, c.max); got != c.want {
			t.Errorf("bestBatch(%d, %d) = %d, want %d", c.conc, c.max, got, c.want)
		}
	}
}

func TestFloorLatency(t *testing.T) {
	us := time.Microsecond
	// 16 clients, batches of 8 taking 96 us in the loop (12 us a request),
	// 10 us of server CPU a request, 2 cores: 16 * 22 / 2 = 176 us.
	if got := floorLatency(16, 8, 96*us, 10*us, 5*us, 2); got != 176*us {
		t.Errorf("throughput-bound floor = %v, want 176us", got)
	}
	// One client: the batch's own loop plus the pytorch p50 is the bound.
	if got := floorLatency(1, 1, 14*us, 10*us, 7*us, 2); got != 21*us {
		t.Errorf("latency-bound floor = %v, want 21us", got)
	}
	// A core count of 0 (unknown) counts as one.
	if got := floorLatency(4, 1, 10*us, 10*us, 0, 0); got != 80*us {
		t.Errorf("floor with no cores = %v, want 80us", got)
	}
}
