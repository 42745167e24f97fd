package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

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
	wrkP50  = regexp.MustCompile(`(?m)^\s+50%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkRate = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	wrkBad  = regexp.MustCompile(`(?m)^\s+(Non-2xx or 3xx responses|Socket errors):`)
)

// runWrk drives c with wrk at concurrency conc for d and returns p50 and
// throughput.
func runWrk(wrk, dir string, c wrkCase, conc int, d time.Duration) (result, error) {
	script, err := wrkScript(dir, c)
	if err != nil {
		return result{}, err
	}
	threads := min(conc, 2)
	out, err := exec.Command(wrk, "-t"+strconv.Itoa(threads), "-c"+strconv.Itoa(conc),
		"-d"+strconv.Itoa(max(int(d.Seconds()), 1))+"s", "--latency", "-s", script, c.url).CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("wrk %s: %w\n%s", c.name, err, out)
	}
	if wrkBad.Match(out) {
		return result{}, fmt.Errorf("wrk %s: errors or non-2xx answers:\n%s", c.name, out)
	}
	m, r := wrkP50.FindSubmatch(out), wrkRate.FindSubmatch(out)
	if m == nil || r == nil {
		return result{}, fmt.Errorf("wrk %s: unexpected output:\n%s", c.name, out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	unit := map[string]float64{"us": 1e3, "ms": 1e6, "s": 1e9}[string(m[2])]
	rate, _ := strconv.ParseFloat(string(r[1]), 64)
	return result{p50: time.Duration(v * unit), throughput: rate}, nil
}

// runGhz drives ModelInfer on addr with ghz at concurrency conc for d,
// the request as protojson, over at most 4 connections (as the in-process
// gRPC case).
func runGhz(ghz, protoDir, dir, addr string, req *pb.ModelInferRequest, conc int, d time.Duration) (result, error) {
	data, err := protojson.Marshal(req)
	if err != nil {
		return result{}, err
	}
	df := filepath.Join(dir, "ghz-"+req.ModelName+".json")
	if err := os.WriteFile(df, data, 0o644); err != nil {
		return result{}, err
	}
	args := []string{"--insecure", "--proto", filepath.Join(protoDir, "grpc_service.proto"), "-i", protoDir,
		"--call", "inference.GRPCInferenceService/ModelInfer", "-D", df,
		"-c", strconv.Itoa(conc), "--connections", strconv.Itoa(min(conc, grpcConns)),
		"-z", d.String(), "-O", "json", addr}
	var stderr bytes.Buffer
	cmd := exec.Command(ghz, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("ghz: %w\n%s%s", err, out, stderr.Bytes())
	}
	var rep struct {
		Rps            float64        `json:"rps"`
		StatusCodeDist map[string]int `json:"statusCodeDistribution"`
		Latencies      []struct {
			Percentage int   `json:"percentage"`
			Latency    int64 `json:"latency"`
		} `json:"latencyDistribution"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
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
		if l.Percentage == 50 {
			res.p50 = time.Duration(l.Latency)
		}
	}
	return res, nil
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
