package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// wrkCase is one HTTP target for wrk: a POST of body with headers.
type wrkCase struct {
	name, url string
	body      []byte
	header    map[string]string
}

// luaString quotes b as a Lua string literal (decimal escapes for every
// byte outside printable ASCII, so binary tensors survive).
func luaString(b []byte) string {
	var s strings.Builder
	s.WriteByte('"')
	for _, c := range b {
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			s.WriteByte(c)
		} else {
			fmt.Fprintf(&s, "\\%03d", c)
		}
	}
	s.WriteByte('"')
	return s.String()
}

// wrkScript writes the Lua script that makes wrk send c's request.
func wrkScript(dir string, c wrkCase) (string, error) {
	var s strings.Builder
	s.WriteString("wrk.method = \"POST\"\n")
	fmt.Fprintf(&s, "wrk.body = %s\n", luaString(c.body))
	s.WriteString("wrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n")
	for k, v := range c.header {
		fmt.Fprintf(&s, "wrk.headers[%q] = %q\n", k, v)
	}
	// Count non-200 answers: wrk reports them as "Non-2xx" and the case
	// fails rather than measuring error responses.
	p := filepath.Join(dir, c.name+".lua")
	return p, os.WriteFile(p, []byte(s.String()), 0o644)
}

var (
	wrkP50   = regexp.MustCompile(`(?m)^\s+50%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkP99   = regexp.MustCompile(`(?m)^\s+99%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkRate  = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	wrkCount = regexp.MustCompile(`(?m)^\s+([0-9]+) requests in `)
	wrkBad   = regexp.MustCompile(`(?m)^\s+(Non-2xx or 3xx responses|Socket errors):`)
)

// clientRun is one run of an outside load generator: what it printed and
// the CPU time it and this process (every server but the FastAPI peer)
// used meanwhile.
type clientRun struct {
	out                  []byte
	clientCPU, serverCPU time.Duration
	// serverCSW and serverICSW are this process's voluntary and
	// involuntary context switches meanwhile.
	serverCSW, serverICSW int64
}

// runClient runs a load generator to its end.
func runClient(name string, args ...string) (clientRun, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cpu0, csw0, icsw0 := processCPU()
	out, err := cmd.Output()
	cpu1, csw1, icsw1 := processCPU()
	r := clientRun{out: out, serverCPU: cpu1 - cpu0, serverCSW: csw1 - csw0, serverICSW: icsw1 - icsw0}
	if err != nil {
		return r, fmt.Errorf("%s: %w\n%s%s", filepath.Base(name), err, out, stderr.Bytes())
	}
	r.clientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

// perRequest divides a run's CPU times by the requests it completed.
func (r clientRun) perRequest(res *result, n int) {
	if n > 0 {
		res.cpu, res.clientCPU = r.serverCPU/time.Duration(n), r.clientCPU/time.Duration(n)
		res.csw, res.icsw = float64(r.serverCSW)/float64(n), float64(r.serverICSW)/float64(n)
	}
}

// clientThreads is the load generators' thread count at concurrency conc:
// one per core of this 2-core machine, never more than connections.
func clientThreads(conc int) string { return strconv.Itoa(min(conc, 2)) }

// durationSeconds is d in whole seconds (at least 1), as wrk and h2load
// take it.
func durationSeconds(d time.Duration) string { return strconv.Itoa(max(int(d.Seconds()), 1)) }

// runWrk drives c with wrk at concurrency conc for d and returns p50, p99
// and throughput.
func runWrk(wrk, dir string, c wrkCase, conc int, d time.Duration) (result, error) {
	script, err := wrkScript(dir, c)
	if err != nil {
		return result{}, err
	}
	run, err := runClient(wrk, "-t"+clientThreads(conc), "-c"+strconv.Itoa(conc),
		"-d"+durationSeconds(d)+"s", "--latency", "-s", script, c.url)
	if err != nil {
		return result{}, fmt.Errorf("wrk %s: %w", c.name, err)
	}
	res, count, err := wrkResult(run.out)
	if err != nil {
		return result{}, fmt.Errorf("wrk %s: %w", c.name, err)
	}
	run.perRequest(&res, count)
	return res, nil
}

// wrkResult reads wrk's --latency report: p50, p99, throughput and the
// requests completed. A run with errors or non-2xx answers fails.
func wrkResult(out []byte) (result, int, error) {
	if wrkBad.Match(out) {
		return result{}, 0, fmt.Errorf("errors or non-2xx answers:\n%s", out)
	}
	m, m99, r, n := wrkP50.FindSubmatch(out), wrkP99.FindSubmatch(out), wrkRate.FindSubmatch(out), wrkCount.FindSubmatch(out)
	if m == nil || m99 == nil || r == nil || n == nil {
		return result{}, 0, fmt.Errorf("unexpected output:\n%s", out)
	}
	rate, _ := strconv.ParseFloat(string(r[1]), 64)
	count, _ := strconv.Atoi(string(n[1]))
	return result{p50: clientTime(m), p99: clientTime(m99), throughput: rate}, count, nil
}

// clientTime is a time a load generator printed: a number, then the unit
// (us, ms or s), as the first two groups of match.
func clientTime(match [][]byte) time.Duration {
	v, _ := strconv.ParseFloat(string(match[1]), 64)
	unit := map[string]float64{"us": 1e3, "ms": 1e6, "s": 1e9}[string(match[2])]
	return time.Duration(v * unit)
}

// runGhz drives ModelInfer on addr with ghz at concurrency conc for d, as
// light as ghz can be made: the request pre-serialized (-B) rather than
// JSON turned into a dynamic message, no call-template processing (which
// otherwise runs for every call and doubles ghz's CPU per request), and
// one connection per worker, as wrk and h2load have. Every call still goes
// through ghz's dynamic-message stub and its per-call result channel; its
// CPU per request is reported beside the server's.
func runGhz(ghz, protoDir, dir, addr string, req *pb.ModelInferRequest, conc int, d time.Duration) (result, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return result{}, err
	}
	df := filepath.Join(dir, "ghz-"+req.ModelName+".bin")
	if err := os.WriteFile(df, data, 0o644); err != nil {
		return result{}, err
	}
	run, err := runClient(ghz, "--insecure", "--proto", filepath.Join(protoDir, "grpc_service.proto"), "-i", protoDir,
		"--call", "inference.GRPCInferenceService/ModelInfer", "-B", df,
		"--disable-template-functions", "--disable-template-data",
		"-c", strconv.Itoa(conc), "--connections", strconv.Itoa(conc),
		"-z", d.String(), "-O", "json", addr)
	if err != nil {
		return result{}, err
	}
	var rep struct {
		Count          int            `json:"count"`
		Rps            float64        `json:"rps"`
		StatusCodeDist map[string]int `json:"statusCodeDistribution"`
		Latencies      []struct {
			Percentage int   `json:"percentage"`
			Latency    int64 `json:"latency"`
		} `json:"latencyDistribution"`
	}
	if err := json.Unmarshal(run.out, &rep); err != nil {
		return result{}, fmt.Errorf("ghz output: %w", err)
	}
	// Calls still in flight when the duration ends are cut off (at most
	// one per worker); anything beyond that is a failure.
	bad := 0
	for code, n := range rep.StatusCodeDist {
		if code != "OK" {
			bad += n
		}
	}
	if bad > conc {
		return result{}, fmt.Errorf("ghz: %d calls failed: %v", bad, rep.StatusCodeDist)
	}
	res := result{throughput: rep.Rps}
	for _, l := range rep.Latencies {
		switch l.Percentage {
		case 50:
			res.p50 = time.Duration(l.Latency)
		case 99:
			res.p99 = time.Duration(l.Latency)
		}
	}
	run.perRequest(&res, rep.Count)
	return res, nil
}

// h2Case is one target for h2load: a POST of body with headers, over
// HTTP/1.1 (h1) or HTTP/2 without upgrade (h2c, gRPC's transport).
type h2Case struct {
	name, url string
	body      []byte
	header    map[string]string
	h1        bool
	// streams is the requests each connection keeps in flight (HTTP/2
	// only); 0 means one.
	streams int
	// minBody is the least body a successful answer carries: gRPC answers
	// an error with a 200 and no message, so a client-side status count
	// cannot tell success.
	minBody int
}

// grpcCase is ModelInfer with req as an h2load target on addr: the
// message framed as gRPC frames it (a zero compression flag and a
// big-endian length), the headers a gRPC client sends.
func grpcCase(name, addr string, req *pb.ModelInferRequest, streams int) (h2Case, error) {
	msg, err := proto.Marshal(req)
	if err != nil {
		return h2Case{}, err
	}
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	return h2Case{
		name: name, url: "http://" + addr + "/inference.GRPCInferenceService/ModelInfer",
		body:    append(body, msg...),
		header:  map[string]string{"content-type": "application/grpc", "te": "trailers"},
		streams: streams,
		// The frame header and one output's raw contents.
		minBody: 5 + 4*outputs,
	}, nil
}

var (
	h2Done = regexp.MustCompile(`(?m)^requests: \d+ total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2Rate = regexp.MustCompile(`(?m)^finished in [0-9.]+m?s, ([0-9.]+) req/s`)
	h2Data = regexp.MustCompile(`(?m)^traffic: .*\((\d+)\) data`)
)

// runH2load drives c with h2load at concurrency conc (conc/streams
// connections) for d. served is the model's count of successful requests
// on the server: h2load counts a 2xx as success, which a gRPC error also
// is, so the run fails unless the server served at least as many requests
// as h2load saw succeed and every answer carried a response body. (The
// count can also take in requests of the previous client still in flight
// when it ended, at most its concurrency: a bound, not an exact match.)
// h2load's report has no percentiles: they come from its log of every
// request (--log-file).
func runH2load(h2load, dir string, c h2Case, conc int, d time.Duration, served func() uint64) (result, error) {
	streams := max(c.streams, 1)
	conns := max(conc/streams, 1)
	df := filepath.Join(dir, "h2load-"+c.name+".body")
	if err := os.WriteFile(df, c.body, 0o644); err != nil {
		return result{}, err
	}
	lf := filepath.Join(dir, "h2load-"+c.name+".log")
	defer os.Remove(lf)
	args := []string{"-t" + clientThreads(conns), "-c" + strconv.Itoa(conns), "-m" + strconv.Itoa(streams),
		"-D" + durationSeconds(d), "-d", df, "--log-file=" + lf}
	if c.h1 {
		args = append(args, "--h1")
	}
	for _, k := range slices.Sorted(maps.Keys(c.header)) {
		args = append(args, "-H", k+": "+c.header[k])
	}
	before := served()
	run, err := runClient(h2load, append(args, c.url)...)
	after := served()
	if err != nil {
		return result{}, fmt.Errorf("h2load %s: %w", c.name, err)
	}
	res, done, err := h2loadResult(run.out, after-before, c.minBody)
	if err != nil {
		return result{}, fmt.Errorf("h2load %s: %w", c.name, err)
	}
	log, err := os.Open(lf)
	if err != nil {
		return result{}, fmt.Errorf("h2load %s: its request log: %w", c.name, err)
	}
	defer log.Close()
	if res.p50, res.p99, err = h2loadPercentiles(log, done); err != nil {
		return result{}, fmt.Errorf("h2load %s: its request log %s: %w", c.name, lf, err)
	}
	run.perRequest(&res, done)
	return res, nil
}

// h2loadPercentiles reads h2load's --log-file (per request: start time
// in microseconds since the epoch, HTTP status, microseconds until the
// end of the response, tab-separated) and returns the p50 and p99 of the
// last column. The log must hold done requests, the count of the report.
func h2loadPercentiles(log io.Reader, done int) (p50, p99 time.Duration, err error) {
	times := make([]time.Duration, 0, done)
	sc := bufio.NewScanner(log)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 3 {
			return 0, 0, fmt.Errorf("line %d: %q: want at least three tab-separated columns", line, sc.Text())
		}
		v, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || v < 0 {
			return 0, 0, fmt.Errorf("line %d: %q: the third column is not a time in microseconds", line, sc.Text())
		}
		if len(times) == done {
			return 0, 0, fmt.Errorf("more than the %d requests the report counts done are logged", done)
		}
		times = append(times, time.Duration(v)*time.Microsecond)
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if len(times) != done || done == 0 {
		return 0, 0, fmt.Errorf("%d requests logged, the report counts %d done", len(times), done)
	}
	slices.Sort(times)
	return times[len(times)/2], times[len(times)*99/100], nil
}

// h2loadResult reads h2load's report of a run during which the server
// served requests successfully (see runH2load) and returns its throughput
// and the requests it completed.
func h2loadResult(out []byte, served uint64, minBody int) (result, int, error) {
	m, r, b := h2Done.FindSubmatch(out), h2Rate.FindSubmatch(out), h2Data.FindSubmatch(out)
	if m == nil || r == nil || b == nil {
		return result{}, 0, fmt.Errorf("unexpected output:\n%s", out)
	}
	n := make([]int, 6)
	for i := range n {
		n[i], _ = strconv.Atoi(string(m[i+1]))
	}
	started, done, ok, bad := n[0], n[1], n[2], n[3]+n[4]+n[5]
	data, _ := strconv.Atoi(string(b[1]))
	switch {
	case ok == 0 || bad > 0 || ok < done:
		return result{}, 0, fmt.Errorf("%d of %d requests failed:\n%s", done-ok, done, out)
	case served < uint64(ok):
		return result{}, 0, fmt.Errorf("the server served %d requests, h2load counts %d succeeded of %d started:\n%s", served, ok, started, out)
	case data < ok*minBody:
		return result{}, 0, fmt.Errorf("%d bytes of response bodies for %d requests (at least %d each):\n%s", data, ok, minBody, out)
	}
	rate, _ := strconv.ParseFloat(string(r[1]), 64)
	return result{throughput: rate}, done, nil
}

// startFastAPI runs the FastAPI + uvicorn peer on model and waits until
// it answers; stop ends it.
func startFastAPI(python, script, model string) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(python, script, model, strconv.Itoa(port))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting the FastAPI peer: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	url = fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return url, stop, nil
		}
		if cmd.ProcessState != nil {
			break
		}
	}
	stop()
	return "", nil, fmt.Errorf("the FastAPI peer did not start:\n%s", logs.Bytes())
}

// servers are what the outside clients drive: the floor, tritonserver's
// HTTP and gRPC frontends (served counts a model's successful requests),
// and the model.pt the FastAPI peer loads.
type servers struct {
	floor, triton string
	grpc          *grpcBench
	served        func(model string) uint64
	fastAPIModel  string
}

// external measures the same servers with outside load generators
// (separate processes): wrk for HTTP against the floor; h2load, one client
// for both gRPC (h2c) and HTTP binary (HTTP/1.1, as Triton serves it), over
// the same connections with one request in flight on each, which is what
// the gRPC goal compares; ghz, the gRPC client the issue names, whose
// figure is printed beside it with its CPU per request; and the FastAPI +
// uvicorn peer under wrk.
func external(o options, dir string, srv servers, jsonBody, binBody []byte, binHdr map[string]string) ([]goal, error) {
	for _, tool := range []string{o.wrk, o.h2load} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found (-wrk, -h2load, or -external=false): %w", tool, err)
		}
	}
	selected := func(name string) bool { return o.cases == nil || o.cases[name] }
	infer := func(m string) string { return srv.triton + "/v2/models/" + m + "/infer" }
	wrkCases := func(c int) []wrkCase {
		m := o.modelFor(c)
		// Compared cases next to each other, as in the in-process rounds.
		cs := []wrkCase{
			{name: "floor-json", url: srv.floor, body: jsonBody},
			{name: "triton-json", url: infer(m), body: jsonBody},
		}
		if c == 1 {
			cs = append(cs, wrkCase{name: "floor+fwd-json", url: srv.floor + "/forward1", body: jsonBody})
		}
		cs = append(cs, wrkCase{name: "floor-bin", url: srv.floor, body: binBody, header: binHdr},
			wrkCase{name: "triton-bin", url: infer(m), body: binBody, header: binHdr})
		if c == 1 {
			cs = append(cs, wrkCase{name: "floor+fwd-bin", url: srv.floor + "/forward1", body: binBody, header: binHdr})
		}
		return slices.DeleteFunc(cs, func(wc wrkCase) bool { return !selected(wc.name) })
	}
	h2Cases := func(c int) ([]h2Case, error) {
		m := o.modelFor(c)
		var cs []h2Case
		if selected("triton-bin") {
			cs = append(cs, h2Case{name: "triton-bin", url: infer(m), body: binBody, header: binHdr, h1: true, minBody: 4 * outputs})
		}
		if selected("triton-json-gzip") {
			// A client that accepts gzip, as Go's net/http client does by
			// default (wrk and h2load otherwise send no Accept-Encoding):
			// the answer is compressed, so its body is only known to be a
			// gzip member (header and trailer: 18 bytes).
			cs = append(cs, h2Case{name: "triton-json-gzip", url: infer(m), body: jsonBody, h1: true, minBody: 18,
				header: map[string]string{"Content-Type": "application/json", "Accept-Encoding": "gzip"}})
		}
		if !selected("triton-grpc") {
			return cs, nil
		}
		g, err := grpcCase("triton-grpc", srv.grpc.addr, srv.grpc.reqs[m], 1)
		if err != nil {
			return nil, err
		}
		cs = append(cs, g)
		if c > grpcConns {
			// How gRPC clients load a server: a few connections, many
			// streams on each (the in-process case's layout). Printed, not
			// a goal: HTTP/1.1 has nothing to compare it with.
			mux, err := grpcCase("triton-grpc-mux", srv.grpc.addr, srv.grpc.reqs[m], c/grpcConns)
			if err != nil {
				return nil, err
			}
			cs = append(cs, mux)
		}
		return cs, nil
	}
	var fastURL string
	if o.fastapi != "" && o.backend == "pytorch" && selected("fastapi-json") { // the peer serves model.pt
		var stop func()
		var err error
		fastURL, stop, err = startFastAPI(o.python, o.fastapi, srv.fastAPIModel)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	haveGhz := selected("triton-grpc")
	if _, err := os.Stat(o.ghz); haveGhz && err != nil {
		fmt.Printf("ghz not found at %s (make ghz): no ghz figures\n", o.ghz)
		haveGhz = false
	}
	res := map[string]map[int][]result{}
	add := func(name string, c int, r result) {
		if res[name] == nil {
			res[name] = map[int][]result{}
		}
		res[name][c] = append(res[name][c], r)
	}
	for r := 0; r < o.rounds; r++ {
		for _, c := range o.conc {
			wcs := wrkCases(c)
			hcs, err := h2Cases(c)
			if err != nil {
				return nil, err
			}
			wcs, hcs = inRoundOrder(wcs, r), inRoundOrder(hcs, r)
			for _, wc := range wcs {
				x, err := runWrk(o.wrk, dir, wc, c, o.duration)
				if err != nil {
					return nil, err
				}
				add("wrk "+wc.name, c, x)
			}
			for _, hc := range hcs {
				m := o.modelFor(c)
				x, err := runH2load(o.h2load, dir, hc, c, o.duration, func() uint64 { return srv.served(m) })
				if err != nil {
					return nil, err
				}
				add("h2load "+hc.name, c, x)
			}
			if haveGhz {
				x, err := runGhz(o.ghz, "runtime/modelconfig", dir, srv.grpc.addr, srv.grpc.reqs[o.modelFor(c)], c, o.duration)
				if err != nil {
					return nil, err
				}
				add("ghz triton-grpc", c, x)
			}
			if fastURL != "" {
				x, err := runWrk(o.wrk, dir, wrkCase{name: "fastapi-json", url: fastURL + "/v2/models/simple_linear/infer", body: jsonBody}, c, o.duration)
				if err != nil {
					return nil, err
				}
				add("wrk fastapi-json", c, x)
			}
		}
	}
	fmt.Printf("\noutside load generators, medians of %d rounds: wrk -t1/2 (Lua script); h2load -t1/2, HTTP binary over HTTP/1.1 and gRPC over h2c,\n", o.rounds)
	fmt.Printf("one connection per client with one request in flight (-mux: %d connections, conc/%d streams each; percentiles from its --log-file);\n", grpcConns, grpcConns)
	fmt.Printf("ghz -B (pre-serialized request), no call templates, one connection per worker. Server CPU: this process's (FastAPI: not counted)\n")
	fmt.Printf("%-24s %5s %10s %10s %12s %12s %12s %18s\n", "case", "conc", "p50 us", "p99 us", "req/s", "client us/req", "server us/req", "server csw/req v+i")
	med := map[string]map[int]result{}
	for _, n := range slices.Sorted(maps.Keys(res)) {
		med[n] = map[int]result{}
		for _, c := range o.conc {
			if len(res[n][c]) == 0 {
				continue
			}
			m := median(res[n][c])
			med[n][c] = m
			server, csw := fmt.Sprintf("%.1f", us(m.cpu)), fmt.Sprintf("%.2f+%.2f", m.csw, m.icsw)
			if strings.HasSuffix(n, "fastapi-json") {
				server, csw = "-", "-"
			}
			p99 := "-"
			if m.p99 > 0 {
				p99 = fmt.Sprintf("%.1f", us(m.p99))
			}
			fmt.Printf("%-24s %5d %10.1f %10s %12.0f %12.1f %12s %18s\n", n, c, us(m.p50), p99, m.throughput, us(m.clientCPU), server, csw)
		}
	}
	var goals []goal
	maxConc := slices.Max(o.conc)
	for _, kind := range []string{"json", "bin"} {
		if tr, ok := res["wrk triton-"+kind][1]; ok {
			over := paired(tr, res["wrk floor+fwd-"+kind][1], p50Over)
			fmt.Printf("wrk conc 1 %s: p50 over floor+fwd %+.1f us\n", kind, over)
			goals = append(goals, goal{name: "c=1 " + kind + " p50 over floor+compute", client: "wrk", measured: over, limit: 20, atMost: true, unit: "us"})
		}
	}
	if maxConc > 1 {
		tb := res["wrk triton-bin"][maxConc]
		wr := paired(tb, res["wrk floor-bin"][maxConc], throughputRatio)
		fmt.Printf("wrk conc %d bin: throughput triton/floor %.2f\n", maxConc, wr)
		goals = append(goals, goal{name: fmt.Sprintf("c=%d binary throughput / floor", maxConc), client: "wrk", measured: wr, limit: 0.75})
		hg, hb := res["h2load triton-grpc"][maxConc], res["h2load triton-bin"][maxConc]
		ratio := paired(hg, hb, throughputRatio)
		if len(hg) > 0 && len(hb) > 0 {
			g, b := med["h2load triton-grpc"][maxConc], med["h2load triton-bin"][maxConc]
			fmt.Printf("h2load conc %d: throughput gRPC/HTTP binary %.2f; server CPU per request gRPC %.1f us, HTTP binary %.1f us (%.2fx); h2load's own %.1f / %.1f us\n",
				maxConc, ratio, us(g.cpu), us(b.cpu), paired(hg, hb, cpuRatio), us(g.clientCPU), us(b.clientCPU))
		}
		goals = append(goals, goal{name: fmt.Sprintf("c=%d gRPC / HTTP binary throughput", maxConc), client: "h2load, both", measured: ratio, limit: 1})
		if g, ok := res["ghz triton-grpc"][maxConc]; ok && len(tb) > 0 {
			gm, wm := med["ghz triton-grpc"][maxConc], med["wrk triton-bin"][maxConc]
			// Not a goal: it compares the clients as much as the servers
			// (ghz spends several times wrk's CPU per request, on the same
			// two cores as the server).
			fmt.Printf("ghz vs wrk, conc %d: throughput gRPC (ghz) / HTTP binary (wrk) %.2f; CPU per request ghz %.1f us (server %.1f), wrk %.1f us (server %.1f)\n",
				maxConc, paired(g, tb, throughputRatio), us(gm.clientCPU), us(gm.cpu), us(wm.clientCPU), us(wm.cpu))
		}
	}
	for _, c := range o.conc {
		if f, ok := med["wrk fastapi-json"][c]; ok {
			t := med["wrk triton-json"][c]
			fmt.Printf("FastAPI peer, conc %d, JSON: %.0f req/s, p50 %.1f us; tritonserver JSON %.0f req/s (%.1fx), p50 %.1f us (%.1fx lower)\n",
				c, f.throughput, us(f.p50), t.throughput, t.throughput/f.throughput, us(t.p50), float64(f.p50)/float64(max(t.p50, 1)))
		}
	}
	return goals, nil
}
