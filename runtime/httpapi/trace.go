package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// traceSetting serves GET and POST /v2[/models/{model}]/trace/setting
// (Triton's trace extension). Values are strings, trace_level an array of
// strings; null clears a setting.
func (s *Server) traceSetting(w http.ResponseWriter, r *http.Request) {
	t := s.opts.Tracing
	if t == nil {
		writeError(w, backend.Errorf(backend.Unavailable, "the server does not support tracing"))
		return
	}
	model := r.PathValue("model")
	if model != "" {
		if _, err := s.mgr.Resolve(model, ""); err != nil {
			writeError(w, backend.Errorf(backend.InvalidArg, "Request for unknown model : %s", model))
			return
		}
	}
	if r.Method == http.MethodPost {
		body, err := s.readAll(w, r, maxControlBody)
		if err != nil {
			writeError(w, err)
			return
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(body, &members); err != nil {
			writeError(w, backend.Errorf(backend.InvalidArg, "failed to parse the trace settings JSON: %v", err))
			return
		}
		upd := make(map[string][]string, len(members))
		for k, raw := range members {
			var one string
			var many []string
			switch {
			case string(raw) == "null":
				upd[k] = nil
			case json.Unmarshal(raw, &one) == nil:
				upd[k] = []string{one}
			case json.Unmarshal(raw, &many) == nil:
				upd[k] = append([]string{}, many...)
				if len(many) == 0 {
					upd[k] = nil
				}
			default:
				writeError(w, backend.Errorf(backend.InvalidArg, "trace setting '%s' must be a string, an array of strings or null", k))
				return
			}
		}
		if err := t.Update(model, upd); err != nil {
			writeError(w, err)
			return
		}
	}
	out := map[string]any{}
	for k, v := range t.Settings(model) {
		if k == "trace_level" {
			out[k] = v
		} else {
			out[k] = v[0]
		}
	}
	writeJSON(w, out)
}
