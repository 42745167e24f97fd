package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestTritonBooleanFlags: the spellings Triton's command lines use parse
// as Triton parses them, including the field report's --log-info.
func TestTritonBooleanFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want func(*config) bool
	}{
		{[]string{"--log-info"}, func(c *config) bool { return c.logInfo }},
		{[]string{"--log-info", "false"}, func(c *config) bool { return !c.logInfo }},
		{[]string{"--log-info=off"}, func(c *config) bool { return !c.logInfo }},
		{[]string{"--log-warning", "0", "--log-error=OFF"}, func(c *config) bool { return !c.logWarning && !c.logError }},
		{[]string{"--strict-model-config", "false", "--allow-grpc", "on"}, func(c *config) bool { return !c.strictModelConfig && c.allowGRPC }},
		{[]string{"--disable-auto-complete-config"}, func(c *config) bool { return c.strictModelConfig }},
		{[]string{"--log-verbose=true"}, func(c *config) bool { return c.logVerbose == 1 }},
		{[]string{"--log-verbose", "3", "--log-format", "ISO8601"}, func(c *config) bool { return c.logVerbose == 3 && c.logFormat == "ISO8601" }},
		{[]string{"--allow-cpu-metrics=false", "--allow-gpu-metrics", "false"}, func(c *config) bool { return !c.allowCPUMetrics && !c.allowGPUMetrics }},
		{[]string{"--model-load-thread-count=8", "--buffer-manager-thread-count", "2", "--backend-directory=/opt/tritonserver/backends"},
			func(c *config) bool {
				return c.modelLoadThreads == 8 && c.bufferThreads == 2 && c.backendDirectory != ""
			}},
		{[]string{"--model-namespacing=false"}, func(c *config) bool { return true }},
		{[]string{"--grpc-infer-response-compression-level=HIGH"}, func(c *config) bool { return c.grpcCompression == "HIGH" }},
		{[]string{"--grpc-max-connection-age=60000", "--grpc-max-connection-age-grace", "5000"}, func(c *config) bool {
			return c.grpcLimits.MaxConnectionAge == time.Minute && c.grpcLimits.MaxConnectionAgeGrace == 5*time.Second
		}},
		{[]string{"--grpc-http2-max-ping-strikes=2", "--grpc-http2-max-pings-without-data=0", "--grpc-infer-thread-count=4",
			"--grpc-max-response-pool-size=16", "--enable-peer-access=false"}, func(c *config) bool { return c.grpcLimits.MaxConnectionAge == 0 }},
	} {
		c, err := parseFlags(append([]string{"--model-repository=/m"}, tc.args...), io.Discard)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if !tc.want(c) {
			t.Errorf("%v: parsed %+v", tc.args, c)
		}
	}
	for flagName, why := range map[string]string{
		"--cache-config=redis,host=localhost":         "cache implementation \"redis\" is not available",
		"--cache-config=local,size=lots":              "local cache size must be a number of bytes",
		"--cache-config=local,bytes=1":                "unknown local cache setting \"bytes\"",
		"--model-namespacing=true":                    "--model-namespacing=true is not supported",
		"--grpc-use-ssl=true":                         "--grpc-use-ssl is not supported: TLS",
		"--model-config-name=h100":                    "--model-config-name is not supported: custom configuration names",
		"--grpc-http2-max-ping-strikes=0":             "--grpc-http2-max-ping-strikes=0 is not supported: the GRPC transport of this server tolerates exactly 2 ping strikes",
		"--grpc-max-connection-age=-1":                "--grpc-max-connection-age and --grpc-max-connection-age-grace must not be negative",
		"--rate-limit=sometimes":                      "--rate-limit must be execution_count or off",
		"--rate-limit-resource=R:1":                   "--rate-limit-resource needs --rate-limit=execution_count",
		"--grpc-infer-response-compression-level=max": "invalid argument for --grpc-infer-response-compression-level",
	} {
		_, err := parseFlags([]string{"--model-repository=/m", flagName}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want %q", flagName, err, why)
		}
	}
}

// TestLoggingExtension drives /v2/logging and LogSettings on the running
// program as Triton's documentation describes them, and checks that the
// log itself follows.
func TestLoggingExtension(t *testing.T) {
	root := t.TempDir()
	writeFakeModel(t, root, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServe(t, ctx, root, "--model-control-mode=explicit", "--log-verbose", "0", "--log-warning", "false")
	base := "http://" + s.addrs["HTTPService"]

	resp, err := http.Get(base + "/v2/logging")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"log_file":"","log_info":true,"log_warning":false,"log_error":true,"log_verbose_level":0,"log_format":"default"}`; string(body) != want {
		t.Errorf("GET /v2/logging: %s, want %s", body, want)
	}
	// The documentation's own example request.
	code, got := post(t, base+"/v2/logging", `{"log_verbose_level":1}`)
	if want := `{"log_file":"","log_info":true,"log_warning":false,"log_error":true,"log_verbose_level":1,"log_format":"default"}`; code != 200 || got != want {
		t.Errorf("POST log_verbose_level: %d %s", code, got)
	}
	code, got = post(t, base+"/v2/logging", `{"log_warnings":true,"log_format":"ISO8601"}`)
	var st map[string]any
	if err := json.Unmarshal([]byte(got), &st); code != 200 || err != nil || st["log_warning"] != true || st["log_format"] != "ISO8601" {
		t.Errorf("POST log_warnings/log_format: %d %s", code, got)
	}
	if code, got := post(t, base+"/v2/logging", `{"log_file":"/tmp/elsewhere.log"}`); code != 501 || !strings.Contains(got, "log file location can not be updated through network protocol") {
		t.Errorf("changing log_file: %d %s", code, got)
	}
	if code, got := post(t, base+"/v2/logging", `{"log_info":"yes"}`); code != 400 || !strings.Contains(got, "log_info") {
		t.Errorf("log_info of the wrong type: %d %s", code, got)
	}
	if code, got := post(t, base+"/v2/logging", `{"log_colour":true}`); code != 400 || !strings.Contains(got, "unknown log setting 'log_colour'") {
		t.Errorf("unknown setting: %d %s", code, got)
	}

	// The new format applies to the next line the server writes.
	post(t, base+"/v2/repository/models/a/load", "")
	iso := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ \S+\] model version ready model=a version=1$`)
	if !waitFor(func() bool { return iso.MatchString(s.logs.String()) }) {
		t.Errorf("no ISO8601 load line in:\n%s", s.logs.String())
	}

	conn, err := grpc.NewClient(s.addrs["GRPCInferenceService"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	gr, err := client.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_info":          {ParameterChoice: &pb.LogSettingsRequest_SettingValue_BoolParam{BoolParam: false}},
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_Uint32Param{Uint32Param: 2}},
		"log_format":        {ParameterChoice: &pb.LogSettingsRequest_SettingValue_StringParam{StringParam: "default"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	gs := gr.GetSettings()
	if gs["log_info"].GetBoolParam() || gs["log_verbose_level"].GetUint32Param() != 2 || gs["log_format"].GetStringParam() != "default" ||
		!gs["log_warning"].GetBoolParam() || !gs["log_error"].GetBoolParam() || gs["log_file"].GetStringParam() != "" {
		t.Errorf("LogSettings answer: %v", gs)
	}
	_, err = client.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_info": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_Uint32Param{Uint32Param: 1}},
	}})
	if grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("log_info as uint32: %v", err)
	}
	_, err = client.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_file": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_StringParam{StringParam: "x"}},
	}})
	if grpcstatus.Code(err) != codes.Unimplemented {
		t.Errorf("log_file over gRPC: %v", err)
	}
	// What gRPC changed, HTTP reports: one log behind both frontends.
	resp, err = http.Get(base + "/v2/logging")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"log_info":false`) || !strings.Contains(string(body), `"log_verbose_level":2`) {
		t.Errorf("HTTP after gRPC update: %s", body)
	}
	cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}

func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
