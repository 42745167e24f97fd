package access

import (
	"errors"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func TestRules(t *testing.T) {
	r := Rules{}
	if err := r.Add("http-restricted-api", "model-repository,shared-memory:admin-key=s3cret"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"model-repository:x=y", "nope:x=y", "inference", "inference:=v", ":k=v"} {
		if err := r.Add("http-restricted-api", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	hdr := map[string][]string{}
	get := func(k string) []string { return hdr[k] }
	if err := r.Check(Inference, "API", "", get); err != nil {
		t.Errorf("an open API refused: %v", err)
	}
	err := r.Check(ModelRepository, "API", "", get)
	var be *backend.Error
	if !strings.Contains(err.Error(), "This API is restricted, expecting header 'admin-key'") || !asForbidden(err, &be) {
		t.Errorf("restricted without the header: %v", err)
	}
	hdr["admin-key"] = []string{"wrong"}
	if r.Check(ModelRepository, "API", "", get) == nil {
		t.Error("a wrong value let through")
	}
	hdr["triton-grpc-protocol-admin-key"] = []string{"s3cret"}
	if err := r.Check(SharedMemory, "protocol", "triton-grpc-protocol-", get); err != nil {
		t.Errorf("the right header refused: %v", err)
	}
}

func asForbidden(err error, be **backend.Error) bool {
	return errors.As(err, be) && (*be).Code == backend.Forbidden
}
