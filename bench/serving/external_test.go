package main

import (
	"fmt"
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
	if done != 100 || res.throughput != 9068.20 {
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

// TestH2loadPercentiles reads h2load's --log-file as nghttp2-client 1.52
// writes it (start in microseconds since the epoch, status, microseconds
// to the end of the response) and refuses a log that is not one or does
// not hold the requests the report counts.
func TestH2loadPercentiles(t *testing.T) {
	var log strings.Builder
	for i := range 200 {
		// 1..100 us, then 1001..1100 us: p50 is the 101st smallest, p99
		// the 199th.
		us := i%100 + 1 + 1000*(i/100)
		fmt.Fprintf(&log, "%d\t200\t%d\n", 1796615941964079+10*i, us)
	}
	p50, p99, err := h2loadPercentiles(strings.NewReader(log.String()), 200)
	if err != nil {
		t.Fatal(err)
	}
	if p50 != 1001*time.Microsecond || p99 != 1099*time.Microsecond {
		t.Errorf("p50 %v, p99 %v; want 1.001ms and 1.099ms", p50, p99)
	}
	for _, c := range []struct {
		name, log string
		done      int
		want      string
	}{
		{"fewer logged", "1796615941964079\t200\t11693\n", 2, "1 requests logged, the report counts 2 done"},
		{"more logged", "1796615941964079\t200\t11693\n1796615941964080\t200\t11693\n", 1, "more than the 1 requests"},
		{"empty", "", 0, "0 requests logged"},
		{"two columns", "1796615941964079\t200\n", 1, "line 1"},
		{"not a number", "1796615941964079\t200\t1.5ms\n", 1, "the third column is not a time"},
	} {
		if _, _, err := h2loadPercentiles(strings.NewReader(c.log), c.done); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// wrkLatency is wrk 4's --latency report of a short run.
const wrkLatency = `Running 1s test @ http://127.0.0.1:18089/index.html
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.05ms    2.26ms  11.78ms   60.43%
    Req/Sec   313.18    179.57   820.00     90.91%
  Latency Distribution
     50%    3.60ms
     75%    4.07ms
     90%    5.35ms
     99%    9.85ms
  343 requests in 1.10s, 62.64KB read
Requests/sec:    310.79
Transfer/sec:     56.75KB
`

func TestWrkResult(t *testing.T) {
	res, n, err := wrkResult([]byte(wrkLatency))
	if err != nil {
		t.Fatal(err)
	}
	if n != 343 || res.p50 != 3600*time.Microsecond || res.p99 != 9850*time.Microsecond || res.throughput != 310.79 {
		t.Errorf("got %d requests, %+v", n, res)
	}
	bad := strings.Replace(wrkLatency, "Requests/sec:", "  Non-2xx or 3xx responses: 3\nRequests/sec:", 1)
	if _, _, err := wrkResult([]byte(bad)); err == nil || !strings.Contains(err.Error(), "non-2xx") {
		t.Errorf("non-2xx answers: %v", err)
	}
	if _, _, err := wrkResult([]byte(strings.Replace(wrkLatency, "     99%    9.85ms\n", "", 1))); err == nil {
		t.Error("a report without its 99% line was read")
	}
}
