package main

import (
	"strings"
	"testing"
	"time"
)

// h2load's report of 100 gRPC calls, as nghttp2-client 1.52 prints it; ok
// has each call's response message, failed the same calls answered with
// an error status (a 200, trailers only), which h2load counts as
// succeeded too.
const (
	h2loadOK = `finished in 2.00s, 9068.20 req/s, 1.19MB/s
requests: 100 total, 164 started, 100 done, 100 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 100 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 9.93KB (10170) total, 1.17KB (1200) headers (space savings 94.69%), 7.42KB (7600) data
                     min         max         mean         sd        +/- sd
time for request:      105us     88.29ms      6.95ms      7.32ms    85.92%
time for connect:       50us       472us       262us       118us    56.25%
`
	h2loadFailed = `finished in 2.00s, 50.00 req/s, 910B/s
requests: 100 total, 100 started, 100 done, 100 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 100 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 1.78KB (1820) total, 724B (724) headers (space savings 94.21%), 0B (0) data
                     min         max         mean         sd        +/- sd
time for request:      250us      1.20ms       400us       100us    80.00%
`
)

// TestH2loadResult: a run counts only when h2load saw no failure, the
// server served at least the calls h2load saw succeed, and every answer
// carried a message; error answers that h2load counts as successes fail
// the run.
func TestH2loadResult(t *testing.T) {
	res, done, err := h2loadResult([]byte(h2loadOK), 120, 25)
	if err != nil {
		t.Fatal(err)
	}
	if done != 100 || res.throughput != 9068.20 || res.p50 != 6950*time.Microsecond {
		t.Errorf("got %d done, %v", done, res)
	}
	for _, c := range []struct {
		name, out string
		served    uint64
		want      string
	}{
		{"error answers", h2loadFailed, 100, "bytes of response bodies"},
		{"fewer served than succeeded", h2loadOK, 99, "the server served 99"},
		{"failures", strings.Replace(h2loadOK, "100 succeeded, 0 failed", "90 succeeded, 10 failed", 1), 100, "10 of 100 requests failed"},
		{"no report", "connect: Connection refused\n", 0, "unexpected output"},
	} {
		if _, _, err := h2loadResult([]byte(c.out), c.served, 25); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
