package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

func writeConfig(t *testing.T, root, name, cfg string, versions ...string) {
	t.Helper()
	for _, v := range versions {
		if err := os.MkdirAll(filepath.Join(root, name, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSIGTERMDuringLongLoad is issue 17's case 4 (SIGTERM had no effect
// while a long load held startup): the signal (the serve context ending)
// stops a load in progress, no further model starts loading, and serve
// returns promptly with an error.
func TestSIGTERMDuringLongLoad(t *testing.T) {
	root := t.TempDir()
	slow := strings.Replace(slowModel, `"fake_delay_us"`, `"fake_load_delay_us"`, 1)
	slow = strings.Replace(slow, `"300000"`, `"600000000"`, 1) // ten minutes
	writeConfig(t, root, "a_slow", slow, "1")
	writeConfig(t, root, "b_next", slowModel, "1")
	cfg, err := parseFlags([]string{"--model-repository", root, "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	log, err := newLog(cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- serve(ctx, cfg, log, fakeBackends()) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "context canceled") {
			t.Errorf("serve after a signal during the load: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still loading 10 s after the signal:\n%s", logs)
	}
	if strings.Contains(logs.String(), "model=b_next") && strings.Contains(logs.String(), "model version ready") {
		t.Errorf("a model loaded after the signal:\n%s", logs)
	}
}

func fakeBackends() map[string]backend.Backend {
	return map[string]backend.Backend{"fake": fake.New()}
}
