package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestCompatPageListsEveryFlag keeps docs/triton-compat.md true: every
// flag the server defines or refuses has a row.
func TestCompatPageListsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/triton-compat.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(doc)
	var names []string
	for name := range refusedFlags {
		names = append(names, name)
	}
	for name := range helpFlags(t) {
		names = append(names, name)
	}
	for _, n := range names {
		if !hasFlagRow(page, n) {
			t.Errorf("docs/triton-compat.md has no row for --%s", n)
		}
	}
}

// hasFlagRow reports whether page names --name in code, alone or as the
// first of a row's flags ("`--name`", "`--name, ...", "`--name <value>").
func hasFlagRow(page, name string) bool {
	p := "`--" + name
	return strings.Contains(page, p+"`") || strings.Contains(page, p+",") || strings.Contains(page, p+" ")
}

// helpFlags returns every flag of --help with its default as the flag
// package prints it ("" when it prints none, then the type's zero value).
func helpFlags(t *testing.T) map[string]string {
	t.Helper()
	out := &strings.Builder{}
	_, _ = parseFlags([]string{"--help"}, out)
	flags := map[string]string{}
	lines := strings.Split(out.String(), "\n")
	defRE := regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "-") || strings.HasPrefix(line, "    ") {
			continue
		}
		def := map[string]string{"int": "0", "uint": "0", "int64": "0", "float": "0", "string": ""}[strings.Join(f[1:], "")]
		if len(f) == 1 {
			def = "false" // a boolean
		}
		if i+1 < len(lines) {
			if m := defRE.FindStringSubmatch(strings.TrimSpace(lines[i+1])); m != nil {
				def = m[1]
			}
		}
		flags[strings.TrimLeft(f[0], "-")] = def
	}
	if len(flags) < 60 {
		t.Fatalf("found only %d flags in --help", len(flags))
	}
	return flags
}

// TestSecurityPageFlags keeps docs/security.md true: every flag it names
// exists (or is one the server refuses by name), and every row of its
// limits table states the flag's real default.
func TestSecurityPageFlags(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := helpFlags(t)
	for _, m := range regexp.MustCompile("--([a-z][a-z0-9-]*)").FindAllStringSubmatch(string(doc), -1) {
		if _, ok := flags[m[1]]; !ok {
			if _, refused := refusedFlags[m[1]]; !refused {
				t.Errorf("docs/security.md names --%s, which the server does not define", m[1])
			}
		}
	}
	rows := 0
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| `([^`]*)`").FindAllStringSubmatch(string(doc), -1) {
		rows++
		if def, ok := flags[m[1]]; ok && def != m[2] {
			t.Errorf("docs/security.md: --%s defaults to %q, the page says %q", m[1], def, m[2])
		}
	}
	if rows < 15 {
		t.Errorf("found only %d rows in the limits table", rows)
	}
}

// tritonFlags are the options of Triton's tritonserver
// (src/command_line_parser.cc, with --allow-client-shm and
// --http-max-input-size of later releases). Each must be defined here or
// refused by name, and have a row on docs/triton-compat.md.
var tritonFlags = []string{
	"id", "exit-timeout-secs", "model-store", "model-repository", "exit-on-error", "disable-auto-complete-config",
	"strict-readiness", "model-control-mode", "repository-poll-secs", "load-model", "model-config-name",
	"model-load-thread-count", "model-load-retry-count", "model-namespacing", "enable-peer-access",
	"allow-http", "http-address", "http-port", "reuse-http-port", "http-header-forward-pattern", "http-thread-count",
	"http-restricted-api", "http-max-input-size",
	"allow-grpc", "grpc-address", "grpc-port", "reuse-grpc-port", "grpc-header-forward-pattern", "grpc-infer-thread-count",
	"grpc-infer-allocation-pool-size", "grpc-max-response-pool-size", "grpc-use-ssl", "grpc-use-ssl-mutual",
	"grpc-server-cert", "grpc-server-key", "grpc-root-cert", "grpc-infer-response-compression-level",
	"grpc-keepalive-time", "grpc-keepalive-timeout", "grpc-keepalive-permit-without-calls",
	"grpc-http2-max-pings-without-data", "grpc-http2-min-recv-ping-interval-without-data", "grpc-http2-max-ping-strikes",
	"grpc-max-connection-age", "grpc-max-connection-age-grace", "grpc-restricted-protocol", "allow-client-shm",
	"log-verbose", "log-info", "log-warning", "log-error", "log-format", "log-file",
	"allow-sagemaker", "sagemaker-port", "sagemaker-safe-port-range", "sagemaker-thread-count",
	"allow-vertex-ai", "vertex-ai-port", "vertex-ai-thread-count", "vertex-ai-default-model",
	"allow-metrics", "allow-gpu-metrics", "allow-cpu-metrics", "metrics-address", "metrics-port", "metrics-interval-ms", "metrics-config",
	"trace-config", "trace-file", "trace-level", "trace-rate", "trace-count", "trace-log-frequency",
	"cache-config", "cache-directory", "response-cache-byte-size", "rate-limit", "rate-limit-resource",
	"pinned-memory-pool-byte-size", "cuda-memory-pool-byte-size", "cuda-virtual-address-size",
	"min-supported-compute-capability", "buffer-manager-thread-count", "host-policy", "model-load-gpu-limit",
	"backend-directory", "backend-config", "repoagent-directory", "strict-model-config",
}

// TestCompatPageCoversTriton keeps docs/triton-compat.md true against
// Triton's interface: every Triton flag is defined or refused by name and
// has a row (none ends in "flag provided but not defined"); every RPC of
// the service has a row; every endpoint of Triton's protocol documents is
// routed by the running server (not the catch-all "no such endpoint")
// and has its row.
func TestCompatPageCoversTriton(t *testing.T) {
	doc, err := os.ReadFile("../../docs/triton-compat.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(doc)
	defined := helpFlags(t)
	for _, name := range tritonFlags {
		_, ok := defined[name]
		if _, refused := refusedFlags[name]; !ok && !refused {
			t.Errorf("Triton's --%s is neither defined nor refused by name", name)
		}
		if !hasFlagRow(page, name) {
			t.Errorf("docs/triton-compat.md has no row for Triton's --%s", name)
		}
	}

	var rpcs []string
	for _, m := range pb.GRPCInferenceService_ServiceDesc.Methods {
		rpcs = append(rpcs, m.MethodName)
	}
	for _, s := range pb.GRPCInferenceService_ServiceDesc.Streams {
		rpcs = append(rpcs, s.StreamName)
	}
	if len(rpcs) < 20 {
		t.Fatalf("only %d RPCs in the service description", len(rpcs))
	}
	for _, name := range rpcs {
		if !regexp.MustCompile("(?m)^\\| [^|]*`" + name + "`").MatchString(page) {
			t.Errorf("docs/triton-compat.md has no row naming the RPC %s", name)
		}
	}

	root := t.TempDir()
	writeFakeModel(t, root, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--model-control-mode=explicit", "--load-model=a")
	base := "http://" + s.addrs["HTTPService"]
	// Each endpoint with a path to try and the row that documents it.
	for _, ep := range []struct{ method, path, row string }{
		{"GET", "/v2/health/live", "`GET /v2/health/live`"},
		{"GET", "/v2/health/ready", "`GET /v2/health/ready`"},
		{"GET", "/v2", "`GET /v2`"},
		{"GET", "/v2/models/a", "`GET /v2/models/M[/versions/V]`"},
		{"GET", "/v2/models/a/versions/1", "`GET /v2/models/M[/versions/V]`"},
		{"GET", "/v2/models/a/ready", "`.../ready`"},
		{"GET", "/v2/models/a/versions/1/config", "`.../config`"},
		{"POST", "/v2/models/a/infer", "`POST /v2/models/M[/versions/V]/infer`"},
		{"POST", "/v2/models/a/versions/1/infer", "`POST /v2/models/M[/versions/V]/infer`"},
		{"POST", "/v2/models/a/generate", "`POST /v2/models/M[/versions/V]/generate`"},
		{"POST", "/v2/models/a/generate_stream", "`.../generate_stream`"},
		{"GET", "/v2/models/stats", "`GET /v2/models[/M[/versions/V]]/stats`"},
		{"GET", "/v2/models/a/versions/1/stats", "`GET /v2/models[/M[/versions/V]]/stats`"},
		{"POST", "/v2/repository/index", "`POST /v2/repository/index`"},
		{"POST", "/v2/repository/models/a/load", "`POST /v2/repository/models/M/load`"},
		{"POST", "/v2/repository/models/nope/unload", "`.../unload`"},
		{"GET", "/v2/systemsharedmemory/status", "`GET /v2/systemsharedmemory[/region/R]/status`"},
		{"GET", "/v2/systemsharedmemory/region/r/status", "`GET /v2/systemsharedmemory[/region/R]/status`"},
		{"POST", "/v2/systemsharedmemory/region/r/register", "`POST /v2/systemsharedmemory/region/R/register`"},
		{"POST", "/v2/systemsharedmemory/unregister", "`POST /v2/systemsharedmemory[/region/R]/unregister`"},
		{"POST", "/v2/systemsharedmemory/region/r/unregister", "`POST /v2/systemsharedmemory[/region/R]/unregister`"},
		{"GET", "/v2/cudasharedmemory/status", "`GET /v2/cudasharedmemory[/region/R]/status`"},
		{"GET", "/v2/cudasharedmemory/region/r/status", "`GET /v2/cudasharedmemory[/region/R]/status`"},
		{"POST", "/v2/cudasharedmemory/region/r/register", "`POST /v2/cudasharedmemory/region/R/register`"},
		{"POST", "/v2/cudasharedmemory/unregister", "`POST /v2/cudasharedmemory[/region/R]/unregister`"},
		{"POST", "/v2/cudasharedmemory/region/r/unregister", "`POST /v2/cudasharedmemory[/region/R]/unregister`"},
		{"GET", "/v2/trace/setting", "`GET/POST /v2/trace/setting`"},
		{"POST", "/v2/trace/setting", "`GET/POST /v2/trace/setting`"},
		{"GET", "/v2/models/a/trace/setting", "`GET/POST /v2/models/M/trace/setting`"},
		{"POST", "/v2/models/a/trace/setting", "`GET/POST /v2/models/M/trace/setting`"},
		{"GET", "/v2/logging", "`GET/POST /v2/logging`"},
		{"POST", "/v2/logging", "`GET/POST /v2/logging`"},
	} {
		if !regexp.MustCompile("(?m)^\\| [^|]*" + regexp.QuoteMeta(ep.row)).MatchString(page) {
			t.Errorf("docs/triton-compat.md has no row %s for %s %s", ep.row, ep.method, ep.path)
		}
		req, _ := http.NewRequest(ep.method, base+ep.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "no such endpoint") || resp.StatusCode == http.StatusMethodNotAllowed {
			t.Errorf("%s %s is not routed: %d %s", ep.method, ep.path, resp.StatusCode, b)
		}
	}
	// The check above can fail: an endpoint Triton lacks is not routed.
	if code, body := post(t, base+"/v2/models/a/explain", "{}"); code != 404 || !strings.Contains(body, "no such endpoint") {
		t.Errorf("an unknown endpoint: %d %s", code, body)
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}
